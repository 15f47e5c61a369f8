"""The KV-event subscriber: one thread per process, one SUB socket per replica.

The thread does everything (receive, decode, apply to the tracker), so the event loop
only ever takes the tracker's lock for a snapshot. Queues are bounded by ZMQ's receive
high-water mark: past it messages are dropped, the next batch's sequence number shows the
gap and that replica's residency is dropped whole (``tracker.py``). A replica that is down
is retried by ZMQ itself (connect) or simply reconnects to us (bind); a bind that fails
(the address is taken) is retried every ``retry_seconds``. A socket monitor reports the
publisher going away, which drops its residency at once: a restarted engine starts empty.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import zmq
from zmq.utils.monitor import recv_monitor_message

from agentic_api.cache.residency.endpoints import Endpoint
from agentic_api.cache.residency.events import MalformedBatch, decode_frames
from agentic_api.cache.residency.tracker import ResidencyTracker
from agentic_api.log import get_logger

log = get_logger("agentic_api.cache.residency")

_POLL_MS = 200
# Messages handled per socket before looking at the others and at the stop flag.
_BURST = 256
_MONITORED = zmq.EVENT_CONNECTED | zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED


class KvEventSubscriber:
    def __init__(
        self,
        tracker: ResidencyTracker,
        endpoints: Sequence[Endpoint],
        *,
        queue_messages: int = 10_000,
        retry_seconds: float = 5.0,
    ) -> None:
        self.tracker = tracker
        self.endpoints = list(endpoints)
        self.queue_messages = queue_messages
        self.retry_seconds = retry_seconds
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # Endpoints whose failure was logged: retries stay quiet (with several `serve`
        # workers only one process can bind a tcp address, the others keep trying).
        self._warned: set[str] = set()
        # Set once every endpoint has been bound or connected (tests and start-up logs).
        self.ready = threading.Event()

    def start(self) -> None:
        if self._thread is not None or not self.endpoints:
            return
        self._thread = threading.Thread(target=self._run, name="kv-events", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    # -- the thread ---------------------------------------------------------------------

    def _run(self) -> None:
        context = zmq.Context()
        poller = zmq.Poller()
        sockets: dict[zmq.Socket[bytes], Endpoint] = {}
        monitors: dict[zmq.Socket[bytes], Endpoint] = {}
        pending = list(self.endpoints)
        next_try = 0.0
        try:
            while not self._stop.is_set():
                if pending and time.monotonic() >= next_try:
                    pending = self._open(context, poller, pending, sockets, monitors)
                    next_try = time.monotonic() + self.retry_seconds
                    if not pending:
                        self.ready.set()
                for socket, _flag in poller.poll(_POLL_MS):
                    if socket in sockets:
                        self._receive(socket, sockets[socket])
                    elif socket in monitors:
                        self._monitor(socket, monitors[socket])
        except Exception:  # the thread must not die silently; residency just stops
            log.exception("kv event subscriber stopped")
        finally:
            for socket in [*sockets, *monitors]:
                socket.close(linger=0)
            context.term()

    def _open(
        self,
        context: zmq.Context[zmq.Socket[bytes]],
        poller: zmq.Poller,
        pending: list[Endpoint],
        sockets: dict[zmq.Socket[bytes], Endpoint],
        monitors: dict[zmq.Socket[bytes], Endpoint],
    ) -> list[Endpoint]:
        still: list[Endpoint] = []
        for endpoint in pending:
            socket = context.socket(zmq.SUB)
            socket.setsockopt(zmq.RCVHWM, self.queue_messages)
            socket.setsockopt(zmq.LINGER, 0)
            socket.setsockopt(zmq.SUBSCRIBE, b"")
            monitor = socket.get_monitor_socket(_MONITORED)
            try:
                if endpoint.mode == "bind":
                    socket.bind(endpoint.address)
                else:
                    socket.connect(endpoint.address)
            except zmq.ZMQError as exc:
                if endpoint.replica not in self._warned:
                    self._warned.add(endpoint.replica)
                    log.warning(
                        "kv event endpoint unavailable, retrying",
                        replica=endpoint.replica,
                        endpoint=endpoint.address,
                        mode=endpoint.mode,
                        error=str(exc),
                    )
                socket.disable_monitor()
                monitor.close(linger=0)
                socket.close(linger=0)
                still.append(endpoint)
                continue
            sockets[socket] = endpoint
            monitors[monitor] = endpoint
            poller.register(socket, zmq.POLLIN)
            poller.register(monitor, zmq.POLLIN)
            log.info(
                "kv events subscribed",
                replica=endpoint.replica,
                endpoint=endpoint.address,
                mode=endpoint.mode,
            )
        return still

    def _receive(self, socket: zmq.Socket[bytes], endpoint: Endpoint) -> None:
        for _ in range(_BURST):
            try:
                frames = socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                batch = decode_frames(frames)
            except MalformedBatch as exc:
                log.warning("kv event batch unreadable", replica=endpoint.replica, error=str(exc))
                self.tracker.lost(endpoint.replica, "malformed")
                continue
            self.tracker.apply(endpoint.replica, batch)

    def _monitor(self, monitor: zmq.Socket[bytes], endpoint: Endpoint) -> None:
        while True:
            try:
                message = recv_monitor_message(monitor, zmq.NOBLOCK)
            except zmq.Again:
                return
            event = message["event"]
            if event in (zmq.EVENT_CONNECTED, zmq.EVENT_ACCEPTED):
                self.tracker.connected(endpoint.replica)
            elif event == zmq.EVENT_DISCONNECTED:
                log.info("kv event publisher went away", replica=endpoint.replica)
                self.tracker.lost(endpoint.replica, "disconnected")
