"""The quickstart as the docs tests run it: the marked blocks of the README and of
docs/quickstart.md (which goes on where the README stops), ``serve.sh`` started as a reader
starts it, and each client block run in a shell that has sourced what ``serve.sh`` wrote
(as the reader's second terminal has).

A block is marked by an HTML comment on the line before its fence:
``<!-- quickstart: NAME [simulated-only] -->``. ``serve local`` is the way to start it;
``env`` is the block every other one runs after. Blocks run in reading order: the README's,
then docs/quickstart.md's.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
# The pages a reader follows, in order: every marked block in them is run by the tests.
QUICKSTART_PAGES = (README, REPO / "docs" / "quickstart.md")
_MARKED = re.compile(
    r"^<!-- quickstart: (?P<name>[\w -]+?)(?P<sim> simulated-only)? -->\n"
    r"```bash\n(?P<code>.*?)^```$",
    re.MULTILINE | re.DOTALL,
)


@dataclass(frozen=True)
class Block:
    name: str
    code: str
    simulated_only: bool


def marked_blocks(page: Path) -> dict[str, Block]:
    """The marked blocks of one page, in the order it shows them."""
    blocks: dict[str, Block] = {}
    for match in _MARKED.finditer(page.read_text()):
        name = match["name"]
        if name in blocks:
            raise AssertionError(f"two blocks of {page.name} are marked {name!r}")
        blocks[name] = Block(name, match["code"], match["sim"] is not None)
    return blocks


def quickstart_blocks(pages: tuple[Path, ...] = QUICKSTART_PAGES) -> dict[str, Block]:
    """Every marked block of ``pages``, in reading order; a name marked twice is an error."""
    blocks: dict[str, Block] = {}
    for page in pages:
        for name, block in marked_blocks(page).items():
            if name in blocks:
                raise AssertionError(f"the quickstart marks {name!r} twice ({page.name})")
            blocks[name] = block
    return blocks


def reader_env(home: Path, extra: Mapping[str, str] = {}) -> dict[str, str]:
    """A reader's environment with HOME elsewhere (``~`` in the README resolves under it),
    none of our settings or the SDKs' variables inherited, and the caches that make the
    second run fast kept where the real HOME has them."""
    real_home = Path.home()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AGENTIC_", "OPENAI", "ANTHROPIC", "CLAUDE", "CODEX"))
    }
    env.update(
        HOME=str(home),
        PIP_CACHE_DIR=os.environ.get("PIP_CACHE_DIR", str(real_home / ".cache" / "pip")),
        NPM_CONFIG_CACHE=os.environ.get("NPM_CONFIG_CACHE", str(real_home / ".npm")),
        AGENTIC_CODEX_PREFIX=str(real_home / ".cache" / "agentic-api" / "codex"),
        AGENTIC_CLAUDE_CODE_PREFIX=str(real_home / ".cache" / "agentic-api" / "claude-code"),
    )
    env.update(extra)
    return env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def refuses(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


@dataclass
class Served:
    process: subprocess.Popen[str]
    log: Path
    env: dict[str, str]

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def run(
        self, block: Block, setup: Block, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        """One block in a fresh shell of the reader's second terminal: ``setup`` first."""
        script = f"set -euo pipefail\n{setup.code}\n{block.code}"
        return subprocess.run(
            ["bash", "-c", script],
            cwd=REPO,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def interrupt(self, timeout: float = 90) -> int:
        """Ctrl-C as a terminal sends it: SIGINT to the whole foreground process group."""
        os.killpg(self.process.pid, signal.SIGINT)
        return self.process.wait(timeout=timeout)


@contextmanager
def serving(command: str, env: dict[str, str], log: Path, ready_timeout: float) -> Iterator[Served]:
    """``command`` (the README's serve block) started as a reader starts it, in a process
    group of its own (a terminal's foreground job); ready once it has printed its banner."""
    with log.open("w") as out:
        process = subprocess.Popen(
            ["bash", "-c", command],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
    served = Served(process, log, env)
    try:
        deadline = time.monotonic() + ready_timeout
        while "agentic-api is up on" not in served.output():
            if process.poll() is not None:
                raise AssertionError(
                    f"serve.sh exited with {process.returncode}:\n{served.output()[-4000:]}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"serve.sh not up after {ready_timeout} s:\n{served.output()[-4000:]}"
                )
            time.sleep(0.5)
        yield served
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGINT)
            try:
                process.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
