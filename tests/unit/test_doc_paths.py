"""Every repository path the docs name exists: a newcomer following README.md, ARCHITECTURE.md,
CONTRIBUTING.md or a page under docs/ never meets a file that was moved or folded away (and
the README stays a front door, not a reference). Two kinds of mention are checked: a path in
backticks that starts at one of the repository's top folders (``agentic_api/turns/...``,
``tests/...``), and a relative link (``[text](deploy.md)``), resolved from the page that
holds it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOP_FOLDERS = (
    "agentic_api",
    "agentic_bench",
    "lineage",
    "migrations",
    "tests",
    "scripts",
    "docs",
    "docker",
    "deploy",
)
# A repository path inside a backticked span: it starts at a top folder, not in the middle
# of another path or a URL (``/v1/responses``, ``http://host/docs/x``).
_CODE_SPAN = re.compile(r"`([^`\n]+)`")
_REPO_PATH = re.compile(
    r"(?<![\w./:-])(?:" + "|".join(TOP_FOLDERS) + r")/[\w./*-]*[\w/*]",
)
# A Markdown link's target; absolute URLs and in-page anchors are not files.
_LINK = re.compile(r"\]\(([^)\s]+)\)")
# Placeholders a page writes for "a file of this shape", not a file: ``FOLDER/NAME.json``.
_PLACEHOLDER = re.compile(r"(^|/)[A-Z][A-Z_]*(\.\w+)?(/|$)")


def pages() -> list[Path]:
    top = [REPO / name for name in ("README.md", "ARCHITECTURE.md", "CONTRIBUTING.md")]
    return top + sorted((REPO / "docs").rglob("*.md"))


def named_paths(text: str, folder: Path) -> set[str]:
    """The repository paths a page in ``folder`` names, each relative to the repository's
    root (a glob such as ``tests/api/test_bench*.py`` stays a glob)."""
    named: set[str] = set()
    for span in _CODE_SPAN.findall(text):
        for path in _REPO_PATH.findall(span):
            if not _PLACEHOLDER.search(path):
                named.add(path.rstrip("/."))
    for target in _LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        file = target.split("#", 1)[0]
        if file:
            resolved = (folder / file).resolve()
            named.add(str(resolved.relative_to(REPO)) if resolved.is_relative_to(REPO) else file)
    return named


def exists(path: str) -> bool:
    if "*" in path:
        return any(REPO.glob(path))
    return (REPO / path).exists()


@pytest.mark.parametrize("page", pages(), ids=lambda page: str(page.relative_to(REPO)))
def test_every_path_a_page_names_exists(page: Path) -> None:
    named = named_paths(page.read_text(), page.parent)
    missing = sorted(path for path in named if not exists(path))
    assert not missing, f"{page.relative_to(REPO)} names paths that do not exist: {missing}"


def test_the_check_sees_paths_in_both_forms() -> None:
    text = (
        "Run `scripts/serve.sh --simulated` or `.venv/bin/python -m pytest tests/unit`; "
        "see [deploy](deploy.md#probes), [the compose file](../docker/compose.yaml), "
        "`docs/benchmarks/FOLDER/NAME.json`, [OpenAI](https://example.com/docs/x), "
        "`GET /v1/responses/{id}`, `tests/api/test_bench*.py` and "
        "`agentic_api/no_such_module.py`."
    )
    named = named_paths(text, REPO / "docs")
    assert named == {
        "scripts/serve.sh",
        "tests/unit",
        "docs/deploy.md",
        "docker/compose.yaml",
        "tests/api/test_bench*.py",
        "agentic_api/no_such_module.py",
    }
    assert {path for path in named if not exists(path)} == {"agentic_api/no_such_module.py"}


def test_the_readme_stays_a_front_door() -> None:
    # What it is, serve, test, a first request, where the rest lives: reference material
    # goes to docs/ (the README had grown to 984 lines).
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 200, len(lines)
