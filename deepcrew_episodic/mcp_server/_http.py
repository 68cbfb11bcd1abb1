"""The server over streamable HTTP: the SDK's ASGI app behind a token and a Host check.

Every request must carry ``Authorization: Bearer <token>`` (compared in constant time); one
without it, or with another token, gets a 401 that shows nothing. The Host rule is the
caller's (the CLI gives the viewer's: on a loopback address only 127.0.0.1, localhost or [::1]
with the port, against DNS rebinding); without one, the SDK's own localhost-only check applies.
A request a browser sends from a page of another site (its ``Origin`` is not this server's own,
or its ``Sec-Fetch-Site`` says cross-site) gets a 403 either way, as the MCP specification asks
(an MCP client that is not a browser sends neither header).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["PATH", "create_http_app"]

PATH = "/mcp"
MIN_TOKEN_CHARS = 16


def create_http_app(
    server: MCPServer,
    *,
    token: str,
    host_allowed: Callable[[Mapping[str, Any], str | None], bool] | None = None,
) -> ASGIApp:
    """*server* as an ASGI app (its endpoint at ``/mcp``) that answers only requests with
    ``Authorization: Bearer`` *token*, and, with *host_allowed* (``(scope, host) -> bool``),
    only those whose Host header it accepts.

    Example::

        app = create_http_app(create_server(memory), token=secrets.token_urlsafe(32))
        await uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=8765)).serve()
    """
    if not isinstance(token, str) or len(token) < MIN_TOKEN_CHARS:
        from .. import ConfigurationError

        raise ConfigurationError(f"token must be a string of at least {MIN_TOKEN_CHARS} characters")
    if not (token.isascii() and token.isprintable()) or token != token.strip():
        from .. import ConfigurationError

        # An HTTP client sends a header as ASCII (or Latin-1, never UTF-8): no request could
        # ever match such a token, and every one would get a 401 without saying why.
        raise ConfigurationError(
            "token must be printable ASCII without leading or trailing spaces (an HTTP header "
            "carries nothing else)"
        )
    security = (
        None  # the SDK's default: localhost names only
        if host_allowed is None
        else TransportSecuritySettings(enable_dns_rebinding_protection=False)
    )
    app = server.streamable_http_app(streamable_http_path=PATH, transport_security=security)
    return _Guard(app, token=token, host_allowed=host_allowed)


class _Guard:
    """The token and the Host check, around the whole app (lifespan passed through)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str,
        host_allowed: Callable[[Mapping[str, Any], str | None], bool] | None,
    ) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()
        self.host_allowed = host_allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)  # lifespan: starts the session manager
            return
        headers = Headers(scope=scope)
        if self.host_allowed is not None and not self.host_allowed(scope, headers.get("host")):
            # DNS rebinding: a page of another site whose name now resolves to 127.0.0.1.
            refusal = PlainTextResponse("The Host header does not name this server.", 421)
            await refusal(scope, receive, send)
            return
        if _cross_site(headers):
            refusal = PlainTextResponse("This MCP server does not answer other sites' pages.", 403)
            await refusal(scope, receive, send)
            return
        given = headers.get("authorization", "").encode("utf-8", "surrogateescape")
        if not hmac.compare_digest(given, self.expected):
            refusal = PlainTextResponse(
                "This MCP server needs its token: send 'Authorization: Bearer <token>' (the "
                "token deepcrew-episodic printed when it started).",
                401,
                headers={"WWW-Authenticate": 'Bearer realm="deepcrew-episodic"'},
            )
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _cross_site(headers: Headers) -> bool:
    """Whether a browser sent the request from a page of another origin (the viewer's rule):
    ``Sec-Fetch-Site`` other than same-origin or none, or an ``Origin`` that is not
    ``http://`` and the request's own Host. Beside the token, not instead of it: a page of
    another site can reach a loopback server by its own address, Host check passed."""
    site = headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return True
    origin = headers.get("origin")
    return origin is not None and origin.lower() != f"http://{headers.get('host', '')}".lower()
