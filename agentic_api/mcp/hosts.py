"""Which MCP server URLs the gateway may call.

The gateway makes requests to URLs its clients chose, from inside the deployment's
network, so every URL is checked against the operator's allow-list before any
connection: loopback only when ``mcp_allow_loopback`` is on, other hosts only when
``mcp_allowed_hosts`` names them. Link-local and unspecified addresses (cloud metadata
endpoints live there) are refused even by ``*``; name them explicitly to allow them.
Matching is on the URL's host as written; resolution-time protection (DNS pointing an
allowed name at an internal address) belongs to the network policy.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from urllib.parse import urlsplit

from agentic_api.errors import InvalidRequest

_SCHEMES = frozenset({"http", "https"})
_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain"})


class HostNotAllowed(InvalidRequest):
    code = "mcp_server_not_allowed"


def check_server_url(
    url: str, *, allowed_hosts: Sequence[str], allow_loopback: bool, param: str
) -> None:
    """Raises ``HostNotAllowed`` (400) unless the gateway may call ``url``."""
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").rstrip(".").lower()
        parts.port  # noqa: B018 - a malformed port raises here
    except ValueError:
        raise HostNotAllowed(f"'{param}' is not a valid URL.", param=param) from None
    if parts.scheme not in _SCHEMES or not host:
        raise HostNotAllowed(f"'{param}' must be an http(s) URL with a host.", param=param)
    if parts.username is not None or parts.password is not None:
        # Credentials belong in `headers`, which are never stored; a URL is echoed.
        raise HostNotAllowed(
            f"'{param}' must not carry credentials; send them in 'headers'.", param=param
        )
    if _is_loopback(host):
        if allow_loopback:
            return
        raise HostNotAllowed(
            f"MCP server host '{host}' is a loopback address, which this server does not call.",
            param=param,
        )
    if not any(_matches(host, pattern) for pattern in allowed_hosts):
        raise HostNotAllowed(
            f"MCP server host '{host}' is not in this server's allow-list.", param=param
        )


def _is_loopback(host: str) -> bool:
    if host in _LOOPBACK_NAMES or host.endswith(".localhost"):
        return True
    address = _address(host)
    return address is not None and address.is_loopback


def _matches(host: str, pattern: str) -> bool:
    if pattern == host:
        return True
    if pattern == "*":
        address = _address(host)
        return address is None or not (address.is_link_local or address.is_unspecified)
    if pattern.startswith("*."):
        return host.endswith(pattern[1:]) and _address(host) is None
    return False


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address
