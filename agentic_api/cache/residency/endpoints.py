"""Where each replica publishes its KV events, and which side of the ZMQ socket binds.

vLLM binds its PUB socket for ``ipc://`` (and wildcard tcp) endpoints and *connects* for
a tcp endpoint with a host. So by default we connect to ``ipc://`` and bind
``tcp://host:port`` (the address vLLM was told to connect to). ``connect:`` or ``bind:``
in front of the address says it explicitly (a remote vLLM that binds ``tcp://*:p`` is
reached with ``connect:tcp://that-host:p``). Binding every interface is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

_SCHEMES = ("ipc://", "tcp://")
_WILDCARDS = ("*", "0.0.0.0", "[::]", "::")


class EndpointError(ValueError):
    """A KV-event endpoint that cannot be used as written."""


@dataclass(frozen=True)
class Endpoint:
    replica: str
    address: str
    mode: Literal["bind", "connect"]


def parse_endpoint(replica: str, spec: str) -> Endpoint:
    replica = replica.strip()
    spec = spec.strip()
    if not replica:
        raise EndpointError(f"KV-event endpoint {spec!r} has no replica name")
    mode: Literal["bind", "connect"] | None = None
    for prefix in ("bind:", "connect:"):
        if spec.startswith(prefix):
            mode = "bind" if prefix == "bind:" else "connect"
            spec = spec[len(prefix) :]
    if not spec.startswith(_SCHEMES):
        raise EndpointError(
            f"KV-event endpoint of {replica!r} must start with ipc:// or tcp://, got {spec!r}"
        )
    if mode is None:
        mode = "connect" if spec.startswith("ipc://") else "bind"
    if mode == "bind" and spec.startswith("tcp://"):
        host = spec[len("tcp://") :].rsplit(":", 1)[0]
        if host in _WILDCARDS:
            raise EndpointError(
                f"KV-event endpoint of {replica!r} would bind every interface ({spec}); "
                "bind a specific address such as tcp://127.0.0.1:PORT"
            )
    return Endpoint(replica=replica, address=spec, mode=mode)


def parse_endpoints(specs: dict[str, str]) -> list[Endpoint]:
    endpoints = [parse_endpoint(name, spec) for name, spec in specs.items()]
    addresses = [endpoint.address for endpoint in endpoints]
    if len(set(addresses)) != len(addresses):
        raise EndpointError("two replicas share one KV-event endpoint")
    return endpoints
