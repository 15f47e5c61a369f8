"""Sub-commands of ``agentic-api`` that other installed packages provide, found through the
``agentic_api.commands`` entry-point group (``name = "module:typer_app"``).

The benchmark tool (``agentic_bench``, ``agentic-api bench``) is one: it ships in this
repository beside the server, but the server never imports it. A static import in cli.py
would load it, with its HTTP clients and chart library, into every ``agentic-api`` process
(uvicorn's spawned workers re-import the console script); through the entry point it is
loaded only when its name is on the command line (or ``--help`` lists the commands), and
the server runs the same without it installed.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points
from importlib.util import find_spec

import typer

# typer (pinned) vendors its own click: its group's methods take and return those types.
from typer import _click as click
from typer.core import TyperGroup

GROUP = "agentic_api.commands"


def installed() -> dict[str, EntryPoint]:
    """The sub-commands installed packages declare, by name: those whose package is there.
    (The server image installs this project's metadata, entry point included, but copies
    only the server's packages: without agentic_bench, there is no ``bench`` to offer.)"""
    return {
        entry.name: entry
        for entry in entry_points(group=GROUP)
        if find_spec(entry.module.partition(".")[0]) is not None
    }


class WithPluginCommands(TyperGroup):
    """The top-level command group: our own commands, then the installed ones (a name of
    ours wins over an installed one)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        own = super().list_commands(ctx)
        return own + sorted(name for name in installed() if name not in own)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            return command
        entry = installed().get(cmd_name)
        if entry is None:
            return None
        plugin = entry.load()
        if not isinstance(plugin, typer.Typer):
            raise TypeError(f"{entry.value} ({GROUP}: {cmd_name}) is not a typer.Typer")
        command = typer.main.get_command(plugin)
        command.name = cmd_name
        return command
