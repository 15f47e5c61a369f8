"""uvicorn's server with a main loop that sleeps until it is told to stop.

uvicorn's ``Server.main_loop`` sleeps 0.1 s between looks at whether it should exit, and
refreshes the ``Date`` header every tenth look: about 2 ms of CPU a second in a process
that has nothing to do (measured: docs/benchmarks/streaming/README.md at commit 6a12cfe,
"Idle"); even once a second, each wake of an idle process cost ~0.25 ms
(docs/benchmarks/overhead/README.md at commit 6a12cfe, stop 35). Here an exit signal
wakes the loop at once, so stopping is no slower, and the ``Date`` header is kept current
by the requests themselves (``http/protocol.py:keep_date_current``). The loop still looks
once a minute, in case anything sets ``should_exit`` without a signal. The request path
is uvicorn's.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import FrameType

import uvicorn

# A look at should_exit even without a wake-up (nothing of ours sets it without one).
_TICK_SECONDS = 60.0


class QuietServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._woken: asyncio.Event | None = None

    async def main_loop(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._woken = asyncio.Event()
        # (on_tick's counter 0: its once-a-second duties, the Date header among them.)
        should_exit = await self.on_tick(0)
        while not should_exit:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._woken.wait(), _TICK_SECONDS)
            should_exit = await self.on_tick(0)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        # A signal handler runs between two steps of the loop's own thread; waking the
        # loop through its self-pipe is what asyncio's own signal handling does.
        if self._loop is not None and self._woken is not None:
            self._loop.call_soon_threadsafe(self._woken.set)
