"""uvicorn's server with a main loop that wakes once a second rather than ten times.

uvicorn's ``Server.main_loop`` sleeps 0.1 s between looks at whether it should exit, and
refreshes the ``Date`` header every tenth look: about 2 ms of CPU a second in a process
that has nothing to do (measured: docs/benchmarks/streaming/README.md, "Idle"). Here the
loop waits a second (the ``Date`` header's own resolution) and an exit signal wakes it at
once, so stopping is no slower. The request path is uvicorn's, untouched.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import FrameType

import uvicorn

# uvicorn's on_tick refreshes the Date header on looks whose number is a multiple of 10.
_DATE_EVERY = 10
_TICK_SECONDS = 1.0


class QuietServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._woken: asyncio.Event | None = None

    async def main_loop(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._woken = asyncio.Event()
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + _DATE_EVERY) % 864000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._woken.wait(), _TICK_SECONDS)
            should_exit = await self.on_tick(counter)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        # A signal handler runs between two steps of the loop's own thread; waking the
        # loop through its self-pipe is what asyncio's own signal handling does.
        if self._loop is not None and self._woken is not None:
            self._loop.call_soon_threadsafe(self._woken.set)
