"""CPU time a local server has used, read from ``/proc`` (Linux).

A process's ``utime`` + ``stime`` in ``/proc/PID/stat`` cover all of its threads (a Rust
server's worker threads, our SQLite driver's thread). A server with worker processes
(``serve --workers N``) spends its CPU in children, so the live descendants are added,
and so are the children it has already reaped (``cutime`` + ``cstime``), so that a worker
exiting between two readings does not make the figure go down.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

PROC = Path("/proc")


class ProcessGone(Exception):
    """The process is not there (it exited, or this is not Linux)."""


@dataclass(frozen=True)
class Stat:
    pid: int
    ppid: int
    # Seconds of CPU, user + system, of the process's own threads.
    own: float
    # Seconds of CPU of the children it has waited for.
    reaped: float


def _ticks_per_second() -> int:
    return int(os.sysconf("SC_CLK_TCK"))


def read_stat(pid: int, proc: Path = PROC) -> Stat:
    try:
        text = (proc / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError) as exc:
        raise ProcessGone(f"no process {pid} (is it running, and is this Linux?)") from exc
    # The command name (field 2) sits in parentheses and may itself hold spaces or
    # parentheses: the fields after it start after the last ")".
    fields = text[text.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state): ppid is field 4, utime..cstime fields 14..17.
    ticks = _ticks_per_second()
    utime, stime, cutime, cstime = (int(v) for v in fields[11:15])
    return Stat(pid, int(fields[1]), (utime + stime) / ticks, (cutime + cstime) / ticks)


def _all_stats(proc: Path) -> Iterable[Stat]:
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                yield read_stat(int(entry.name), proc)
            except (ProcessGone, OSError, ValueError, IndexError):
                continue  # it exited while we looked, or is not ours to read


def tree_cpu_seconds(pid: int, proc: Path = PROC) -> float:
    """CPU seconds used so far by ``pid`` (all threads), its live descendants and the
    children each of them has reaped."""
    root = read_stat(pid, proc)
    children: dict[int, list[Stat]] = {}
    for stat in _all_stats(proc):
        children.setdefault(stat.ppid, []).append(stat)
    total = 0.0
    pending = [root]
    seen: set[int] = set()
    while pending:
        stat = pending.pop()
        if stat.pid in seen:
            continue
        seen.add(stat.pid)
        total += stat.own + stat.reaped
        pending += children.get(stat.pid, [])
    return total


@dataclass
class CpuMeter:
    """CPU seconds per name (a benchmark target), counted only between ``start`` and
    ``stop``: a target's own rounds, not the others' that run in between."""

    pids: Mapping[str, int]
    seconds: dict[str, float] = field(default_factory=dict)
    _started: dict[str, float] = field(default_factory=dict)

    def covers(self, name: str) -> bool:
        return name in self.pids

    def start(self, name: str) -> None:
        if name in self.pids:
            self._started[name] = tree_cpu_seconds(self.pids[name])

    def stop(self, name: str) -> float | None:
        """The CPU seconds since ``start``, also added to the name's total."""
        if name not in self.pids:
            return None
        used = tree_cpu_seconds(self.pids[name]) - self._started.pop(name)
        self.seconds[name] = self.seconds.get(name, 0.0) + used
        return used

    def total(self, name: str) -> float | None:
        return self.seconds.get(name) if name in self.pids else None
