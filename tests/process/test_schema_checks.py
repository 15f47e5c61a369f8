"""Schema checks at start (issue 23): a database never migrated, behind this release's
migration head or ahead of it makes `serve`, `worker` and the administration commands
refuse in one line that says what to do, never a traceback; real CLI subprocesses on
both databases."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentic_api.storage.migrate import upgrade
from tests.support.databases import create_pg_database, drop_pg_database, sqlite_url
from tests.support.processes import CLI, process_env
from tests.support.sql import execute

# Each runs real `agentic-api` processes: seconds apiece.
pytestmark = pytest.mark.slow

# A revision no release of this code has (one written by a later release).
NEWER = "9999_from_a_later_release"
# A revision this release knows that is behind its head.
BEHIND = "0002"


@pytest.fixture
def empty_db(backend: str, tmp_path: Path) -> Iterator[str]:
    """A database nothing has migrated yet."""
    if backend == "sqlite":
        yield sqlite_url(tmp_path)
        return
    name, url = create_pg_database()
    yield url
    drop_pg_database(name)


def run_cli(
    db_url: str, data_dir: Path, *args: str, auto_migrate: bool = False
) -> subprocess.CompletedProcess[str]:
    env = process_env(db_url, "http://127.0.0.1:9", data_dir)
    env["AGENTIC_AUTO_MIGRATE"] = "true" if auto_migrate else "false"
    (data_dir / "tmp").mkdir(parents=True, exist_ok=True)
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=120)


COMMANDS = [("serve", "--port", "9"), ("worker",), ("tenant", "create", "acme"), ("tenant", "list")]


def assert_refused(result: subprocess.CompletedProcess[str], *words: str) -> None:
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and "Traceback" not in result.stderr
    for word in words:
        assert word in lines[0], lines[0]


def test_a_database_never_migrated_is_refused_in_one_line(empty_db: str, tmp_path: Path) -> None:
    for command in COMMANDS:
        assert_refused(run_cli(empty_db, tmp_path, *command), "no schema", "agentic-api migrate")
    assert run_cli(empty_db, tmp_path, "migrate").returncode == 0
    created = run_cli(empty_db, tmp_path, "tenant", "create", "acme")
    assert created.returncode == 0, created.stderr


def test_a_database_behind_this_release_is_refused_until_migrated(
    empty_db: str, tmp_path: Path
) -> None:
    upgrade(empty_db, BEHIND)
    for command in COMMANDS:
        assert_refused(run_cli(empty_db, tmp_path, *command), "behind", "agentic-api migrate")
    assert run_cli(empty_db, tmp_path, "migrate").returncode == 0
    assert run_cli(empty_db, tmp_path, "tenant", "list").returncode == 0


def test_a_database_ahead_of_this_release_is_refused_even_with_auto_migrate(
    empty_db: str, tmp_path: Path
) -> None:
    upgrade(empty_db)
    execute(empty_db, "UPDATE alembic_version SET version_num = :newer", newer=NEWER)
    # Even where start-up migrates: nothing migrates a database down by itself.
    for command in [*COMMANDS[:3], ("migrate",)]:
        result = run_cli(empty_db, tmp_path, *command, auto_migrate=True)
        assert_refused(result, "newer than this release knows", NEWER)
