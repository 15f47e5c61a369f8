"""SQLite helpers for tests of what our drivers and stores do with it."""

from __future__ import annotations

import asyncio
import sqlite3
import threading


def database_file(url: str) -> str:
    return url.split(":///", 1)[1]


class WriteLockHolder:
    """Another process's writer, as far as SQLite can tell: holds the write lock on its
    own connection (in a thread) until released."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._taken = threading.Event()
        self._release = threading.Event()
        self._thread = threading.Thread(target=self._hold)

    def _hold(self) -> None:
        connection = sqlite3.connect(self._path, isolation_level=None)
        connection.execute("BEGIN IMMEDIATE")
        self._taken.set()
        self._release.wait(30)
        connection.execute("COMMIT")
        connection.close()

    def __enter__(self) -> WriteLockHolder:
        self._thread.start()
        self._taken.wait(5)
        return self

    def release(self) -> None:
        self._release.set()
        self._thread.join()

    def __exit__(self, *_exc: object) -> None:
        self.release()


class LoopTicks:
    """Counts ticks of the event loop (one per 10 ms it is free to run) while the block
    runs: a statement that blocked the loop instead of waiting beside it leaves few."""

    def __init__(self) -> None:
        self.ticks = 0
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(0.01)
            self.ticks += 1

    def __enter__(self) -> LoopTicks:
        self._task = asyncio.ensure_future(self._tick())
        return self

    def __exit__(self, *_exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
