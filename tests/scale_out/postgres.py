"""A PostgreSQL cluster of the tier's own: ``initdb`` in a temporary folder, on a free port.

The machine's shared PostgreSQL (5432) serves other test runs and must never be restarted,
so the tier restarts this one instead. ``initdb`` and the server refuse to run as root:
under root every command runs as the ``postgres`` user, who owns the cluster's folder.
"""

from __future__ import annotations

import getpass
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.support.servers import free_port

SERVER_USER = "postgres"


def postgres_bin() -> Path:
    """The newest installed server's binaries (Debian: /usr/lib/postgresql/N/bin)."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]))
    if not found:
        raise RuntimeError("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin")
    return found[-1].parent


class OwnPostgres:
    """One cluster, trust auth on 127.0.0.1 only; ``restart`` crashes and recovers it."""

    def __init__(self) -> None:
        self.bin = postgres_bin()
        self.root = Path(tempfile.mkdtemp(prefix="scale-out-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = free_port()
        self._as_root = os.geteuid() == 0
        if self._as_root:
            shutil.chown(self.root, SERVER_USER, SERVER_USER)
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8")

    @property
    def admin_dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def url(self, database: str) -> str:
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} "
            # Three gateways, each with SQLAlchemy's pool and overflow plus the turn
            # store's own pool, and the load driver's checks.
            "-c max_connections=300"
        )
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start")

    def create_database(self, name: str) -> str:
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", name)
        return self.url(name)

    def restart(self) -> None:
        """``-m immediate``: every backend ends at once, nothing is flushed by a clean
        shutdown, and the next start runs crash recovery from the WAL, as after a host's
        database process died. Acknowledged commits must survive it."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        self.start()

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def _run(self, tool: str, *args: str) -> None:
        command = [str(self.bin / tool), *args]
        if self._as_root and getpass.getuser() != SERVER_USER:
            command = ["runuser", "-u", SERVER_USER, "--", *command]
        subprocess.run(command, check=True, capture_output=True, cwd=self.root)
