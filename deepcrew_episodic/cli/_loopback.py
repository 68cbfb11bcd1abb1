"""The checks every local HTTP server of the command shares (the viewer, the MCP server).

A server bound to a loopback address answers only requests whose ``Host`` names it: a page of
another site whose name was rebound to 127.0.0.1 (DNS rebinding) sends its own name. And a
secret is compared in constant time. Starlette-free (an ASGI scope is a dict), so that each
server can use them without the other's dependencies.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Mapping
from typing import Any

__all__ = ["host_allowed", "same_secret"]


def host_allowed(scope: Mapping[str, Any], host: str | None) -> bool:
    """Whether *host* (the Host header) names this server when the request came in on a
    loopback address (the ASGI ``server``: the connection's local address, so this holds for a
    server bound to every interface too): 127.0.0.1, localhost or [::1] with its port. A page
    of another site whose name was rebound to 127.0.0.1 sends its own name. Reached on another
    address, any Host is accepted (the token is the defence there)."""
    server = scope.get("server")
    if not server:
        return True
    bound, port = server[0], server[1]
    try:
        loopback = bound == "localhost" or ipaddress.ip_address(bound).is_loopback
    except ValueError:
        return True
    if not loopback:
        return True
    if host is None:
        return False
    allowed = {f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"}
    if port in (80, None):
        allowed |= {"127.0.0.1", "localhost", "[::1]"}
    return host.lower() in allowed


def same_secret(given: str, token: str) -> bool:
    """Whether *given* is *token*, compared in constant time (any text, lone surrogates
    included, is refused rather than raising)."""
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), token.encode())
