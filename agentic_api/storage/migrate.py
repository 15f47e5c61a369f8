"""Run the alembic tree programmatically (the CLI and the embedded start-up use this), and
say whether a database's schema is the one this code was written for."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from functools import cache
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

import migrations

MIGRATIONS_DIR = Path(migrations.__file__).parent


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    # Percent signs in passwords would otherwise be read as interpolation.
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(url), revision)


def heads(url: str = "sqlite+aiosqlite:///unused.db") -> list[str]:
    return list(ScriptDirectory.from_config(alembic_config(url)).get_heads())


async def upgrade_async(url: str) -> None:
    # env.py drives its own event loop, so it runs in a worker thread.
    await asyncio.to_thread(upgrade, url)


class SchemaNotCurrent(Exception):
    """The database's schema is not this release's: never migrated, behind, or ``newer``
    (migrated by a later release). The message is one line that says what to do."""

    def __init__(self, message: str, *, newer: bool = False) -> None:
        super().__init__(message)
        self.newer = newer


@cache
def _known_revisions() -> frozenset[str]:
    script = ScriptDirectory.from_config(alembic_config("sqlite+aiosqlite:///unused.db"))
    return frozenset(revision.revision for revision in script.walk_revisions())


@cache
def _heads() -> frozenset[str]:
    return frozenset(heads())


def schema_problem(stored: Collection[str] | None) -> SchemaNotCurrent | None:
    """What is wrong with a database whose ``alembic_version`` holds ``stored`` (``None``:
    it has no such table), or ``None`` when it is at this code's head."""
    if not stored:
        return SchemaNotCurrent("the database has no schema yet: run `agentic-api migrate`")
    newer = sorted(set(stored) - _known_revisions())
    if newer:
        return SchemaNotCurrent(
            f"the database's schema (revision {', '.join(newer)}) is newer than this release "
            "knows: run the release that migrated it (or a later one)",
            newer=True,
        )
    if set(stored) != _heads():
        return SchemaNotCurrent(
            f"the database's schema (revision {', '.join(sorted(stored))}) is behind this "
            f"release's ({', '.join(sorted(_heads()))}): run `agentic-api migrate`"
        )
    return None


def require_current(stored: Collection[str] | None) -> None:
    problem = schema_problem(stored)
    if problem is not None:
        raise problem
