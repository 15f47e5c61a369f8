"""``agentic-api bench`` comes from the ``agentic_api.commands`` entry point: the server's
processes never import the benchmark tool, the CLI loads it only when it is named."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentic_api.cli import app
from agentic_api.plugin_commands import installed

# One fresh interpreter (a whole server import is seconds on a loaded machine): after each
# step it prints the agentic_bench modules imported so far, one line per step.
PROBE = """
import sys
from typer.testing import CliRunner

def bench_modules():
    print(" ".join(m for m in sys.modules if m.split(".")[0] == "agentic_bench") or "-")

import agentic_api.app, agentic_api.cli
bench_modules()
assert CliRunner().invoke(agentic_api.cli.app, ["tenant", "--help"]).exit_code == 0
bench_modules()
assert CliRunner().invoke(agentic_api.cli.app, ["bench", "--help"]).exit_code == 0
bench_modules()
"""


def test_bench_is_an_installed_entry_point() -> None:
    assert installed()["bench"].value == "agentic_bench.cli:bench_app"


def test_the_server_never_imports_the_bench_and_the_cli_only_once_it_is_named() -> None:
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", PROBE],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    after_import, after_own_command, after_bench = done.stdout.splitlines()
    assert after_import == "-"  # the app and the CLI loaded: no bench
    assert after_own_command == "-"  # one of our own commands run through the group: none
    assert "agentic_bench.cli" in after_bench.split()


def test_help_lists_bench_beside_our_own_commands() -> None:
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0, result.output
    for name in ("serve", "migrate", "tenant", "bench"):
        assert name in result.output
    result = CliRunner().invoke(app, ["bench", "--help"])
    assert result.exit_code == 0, result.output
    assert "bench [OPTIONS] COMMAND" in result.output
    assert "overhead" in result.output and "streaming" in result.output


def test_an_unknown_command_is_still_refused() -> None:
    result = CliRunner().invoke(app, ["no-such-command"])
    assert result.exit_code != 0
    assert "No such command" in result.output


def test_a_package_that_is_not_there_offers_no_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A distribution declaring two commands: one whose package exists, one whose package
    # was left out (as the server image leaves out agentic_bench).
    dist = tmp_path / "agentic_demo-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: agentic-demo\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[agentic_api.commands]\n"
        "demo = agentic_demo_plugin:demo_app\n"
        "ghost = agentic_ghost_plugin.cli:app\n"
    )
    (tmp_path / "agentic_demo_plugin.py").write_text(
        "import typer\n"
        "demo_app = typer.Typer(add_completion=False)\n"
        "@demo_app.command()\n"
        "def hello() -> None:\n"
        "    typer.echo('hello from demo')\n"
        "@demo_app.command()\n"
        "def other() -> None:\n"
        "    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "demo" in installed() and "ghost" not in installed()
    result = CliRunner().invoke(app, ["demo", "hello"])
    assert result.exit_code == 0, result.output
    assert result.output == "hello from demo\n"
    listing = CliRunner().invoke(app, ["--help"])
    assert listing.exit_code == 0 and "demo" in listing.output and "ghost" not in listing.output
    assert CliRunner().invoke(app, ["ghost"]).exit_code != 0
    sys.modules.pop("agentic_demo_plugin", None)
