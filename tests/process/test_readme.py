"""The quickstart (the README's, continued in docs/quickstart.md), run as written against
``./scripts/serve.sh --simulated``: every marked block of both pages, in reading order, in a
second "terminal" that has sourced what serve.sh wrote, then Ctrl-C.
(The same blocks against the local SmolLM2 model: tests/real_vllm/test_readme_quickstart.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from tests.support.readme import (
    QUICKSTART_PAGES,
    README,
    free_port,
    marked_blocks,
    quickstart_blocks,
    reader_env,
    refuses,
    serving,
)

SERVE_SIMULATED = "./scripts/serve.sh --simulated"


def test_readme_marks_every_quickstart_block() -> None:
    readme, continued = (list(marked_blocks(page)) for page in QUICKSTART_PAGES)
    # The README starts it and makes a first request; docs/quickstart.md goes on.
    assert readme == ["serve local", "env", "sdk", "continuation", "streaming"]
    assert continued == ["tool-call", "agents-sdk", "admin", "codex", "claude-code"]
    blocks = quickstart_blocks()
    assert list(blocks) == readme + continued
    assert blocks["serve local"].code.strip() == "./scripts/serve.sh"
    # The simulated way to start it is in the README as the docs test runs it.
    assert f"`{SERVE_SIMULATED}`" in README.read_text()
    assert {name for name, block in blocks.items() if block.simulated_only} == {
        "codex",
        "claude-code",
    }


# Starts serve.sh, the simulator, our server, Codex and Claude Code: a minute or more.
@pytest.mark.slow
def test_readme_quickstart_runs_as_written_against_the_simulator(tmp_path: Path) -> None:
    blocks = quickstart_blocks()
    port = free_port()
    # AGENTIC_PORT instead of --port: the command stays the README's, character for character.
    env = reader_env(tmp_path / "home", {"AGENTIC_PORT": str(port)})
    (tmp_path / "home").mkdir()
    with serving(SERVE_SIMULATED, env, tmp_path / "serve.log", ready_timeout=240) as served:
        banner = served.output()
        key_line = re.search(r"api key: (sk-agentic-\S+)", banner)
        assert key_line is not None, banner[-3000:]
        sim_port = int(re.findall(r"simulator on http://127\.0\.0\.1:(\d+)", banner)[0])
        setup = blocks["env"]
        outputs: dict[str, str] = {}
        for block in blocks.values():
            if block.name.startswith("serve"):
                continue
            result = served.run(block, setup)
            assert result.returncode == 0, (
                block.name,
                result.stdout[-3000:],
                result.stderr[-3000:],
            )
            outputs[block.name] = result.stdout
        check_outputs(outputs, model="sim-model", key=key_line[1])
        # What serve.sh wrote is what the blocks used: the key it printed works.
        status = httpx.get(
            f"http://127.0.0.1:{port}/v1/responses/resp_not_there",
            headers={"Authorization": f"Bearer {key_line[1]}"},
        ).status_code
        assert status == 404
        assert served.interrupt() == 130
    # Ctrl-C stopped the server and the simulator serve.sh started.
    assert refuses(port) and refuses(sim_port)
    assert "stopping the simulator" in served.output()


def check_outputs(outputs: dict[str, str], *, model: str, key: str) -> None:
    """What each block printed shows it did what the README says (not only exit 0)."""
    assert '{"status":"ok"}' in outputs["env"] and f'"id":"{model}"' in outputs["env"]
    cached = re.search(r"^cached tokens: (\d+)$", outputs["continuation"], re.MULTILINE)
    assert cached is not None and int(cached[1]) > 0, outputs["continuation"]
    assert "status: completed" in outputs["streaming"]
    assert re.search(r"^tool call: get_weather \{", outputs["tool-call"], re.MULTILINE)
    assert "tool said: ['18 degrees and cloudy']" in outputs["agents-sdk"]
    # The timeline: the continuation's two turns, the second an exact token-level reuse.
    turns = re.findall(
        r"^resp_\S+ input \d+ cached (\d+) \| token account: (\w+)", outputs["admin"], re.MULTILINE
    )
    assert [status for _, status in turns] == ["cold_start", "exact"], outputs["admin"]
    assert int(turns[1][0]) > 0
    for name, text in outputs.items():
        assert key not in text, f"the {name} block printed the API key"
