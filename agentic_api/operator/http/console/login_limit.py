"""Failed console logins, counted per client address and per key prefix over a sliding
window: past the limit, a login is answered 429 with ``Retry-After`` (even with the right
key, so a guesser learns nothing while limited) until the oldest counted failure leaves
the window.

Counted in this process: with several HTTP workers (or replicas) each counts its own, so
a client spread over them gets at most that many times the limit. The number of
addresses and prefixes tracked is bounded too (the least recently seen are forgotten):
a flood of made-up prefixes costs memory no more than the bound.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque

# Buckets (addresses and prefixes together) remembered at most.
MAX_TRACKED = 10_000


class LoginLimiter:
    def __init__(self, max_failures: int, window_seconds: float) -> None:
        self.max_failures = max_failures
        self.window_seconds = window_seconds
        self._failures: OrderedDict[tuple[str, str], deque[float]] = OrderedDict()

    def retry_after(self, address: str, prefix: str, now: float) -> int | None:
        """Seconds until a login from ``address`` for a key starting ``prefix`` may be
        tried again; None when it may be now."""
        waits = [self._wait(bucket, now) for bucket in (("address", address), ("prefix", prefix))]
        longest = max((wait for wait in waits if wait is not None), default=None)
        return None if longest is None else max(math.ceil(longest), 1)

    def failed(self, address: str, prefix: str, now: float) -> None:
        for bucket in (("address", address), ("prefix", prefix)):
            times = self._failures.pop(bucket, None) or deque()
            self._expire(times, now)
            times.append(now)
            self._failures[bucket] = times
        while len(self._failures) > MAX_TRACKED:
            self._failures.popitem(last=False)

    def succeeded(self, address: str) -> None:
        """A right key from this address: its earlier mistakes no longer count."""
        self._failures.pop(("address", address), None)

    def _wait(self, bucket: tuple[str, str], now: float) -> float | None:
        times = self._failures.get(bucket)
        if not times:
            return None
        self._expire(times, now)
        if len(times) < self.max_failures:
            return None
        # Free once enough of the oldest have left the window.
        return times[len(times) - self.max_failures] + self.window_seconds - now

    def _expire(self, times: deque[float], now: float) -> None:
        while times and times[0] <= now - self.window_seconds:
            times.popleft()
