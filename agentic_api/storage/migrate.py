"""Run the alembic tree programmatically (the CLI and the embedded start-up use this)."""

from __future__ import annotations

import asyncio
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
