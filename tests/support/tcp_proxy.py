"""A loopback TCP proxy in front of PostgreSQL, for faults the shared server must not
suffer: a restart (every connection cut, new ones refused for a while) and a reply lost
after the server acted on the request (replies held back, then the connections cut).
Everything the client and the server send passes through unchanged otherwise."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field


@dataclass
class _Pair:
    client: socket.socket
    server: socket.socket
    # Cleared while replies are held back: the server's bytes wait in the kernel.
    replies: threading.Event = field(default_factory=threading.Event)


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._pairs: list[_Pair] = []
        self._lock = threading.Lock()
        self._refusing = False
        self._holding = False
        self._closed = False
        threading.Thread(target=self._accept, name="tcp-proxy", daemon=True).start()

    def url_for(self, url: str) -> str:
        """A PostgreSQL URL of ``target`` rewritten to go through the proxy."""
        host, port = self._target
        return url.replace(f"@{host}:{port}/", f"@127.0.0.1:{self.port}/", 1)

    def cut(self) -> None:
        """Closes every connection through the proxy, as a server that went away would."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
            self._holding = False
        for pair in pairs:
            pair.replies.set()
            for end in (pair.client, pair.server):
                with suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)
                end.close()

    @contextmanager
    def refusing(self) -> Iterator[None]:
        """New connections are closed at once while inside (a server still down)."""
        self._refusing = True
        try:
            yield
        finally:
            self._refusing = False

    def hold_replies(self) -> None:
        """The server's bytes stop reaching the clients on the open connections (what
        the server did, it did; the client does not hear of it) until ``cut``."""
        with self._lock:
            self._holding = True
            for pair in self._pairs:
                pair.replies.clear()

    @property
    def connections(self) -> int:
        with self._lock:
            return len(self._pairs)

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        self.cut()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._refusing:
                client.close()
                continue
            try:
                server = socket.create_connection(self._target)
            except OSError:
                client.close()
                continue
            pair = _Pair(client, server)
            with self._lock:
                if not self._holding:
                    pair.replies.set()
                self._pairs.append(pair)
            threading.Thread(target=self._pump, args=(client, server, None), daemon=True).start()
            threading.Thread(
                target=self._pump, args=(server, client, pair.replies), daemon=True
            ).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket, gate: threading.Event | None) -> None:
        try:
            while True:
                if gate is not None:
                    gate.wait()
                data = source.recv(65536)
                if not data:
                    break
                if gate is not None and not gate.is_set():
                    # Held back after it was read: this reply is lost with the connection.
                    gate.wait()
                    return
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)
