"""``mcp``: the memory as an MCP server (``deepcrew_episodic.mcp_server``), over stdio or
streamable HTTP.

Over stdio (the default) an MCP client starts the command and speaks on its stdin and stdout:
nothing else is written to stdout. Over HTTP it binds 127.0.0.1 unless told otherwise and, as
``serve`` does, prints one line before serving with the URL and the access token, which every
request must carry as ``Authorization: Bearer <token>``: a random one, or
``$DEEPCREW_EPISODIC_MCP_TOKEN`` (for a client configured once). The store is named by its
scrubbed label. ``forget`` is offered only with ``--allow-forget``. Ctrl-C stops it.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import TYPE_CHECKING

from .._unicode import escape_hidden
from ._errors import UsageError
from ._loopback import host_allowed
from ._output import OUTPUT, SafeFormatter, clean, note
from ._serve import DEFAULT_HOST, bind, port_number

if TYPE_CHECKING:
    from .. import EpisodicMemory

__all__ = ["MCP_HELP", "TOKEN_ENV", "add_mcp_arguments", "check_mcp_usage", "cmd_mcp"]

MCP_HELP = (
    "serve the memory to MCP clients (Claude Code, Claude Desktop, ...): recall, record, "
    "grade, timeline"
)
TOKEN_ENV = "DEEPCREW_EPISODIC_MCP_TOKEN"
MIN_TOKEN_CHARS = 16


def add_mcp_arguments(sub: argparse.ArgumentParser) -> None:
    """The ``mcp`` command's own options, on its sub-parser."""
    sub.add_argument(
        "--transport",
        choices=("stdio", "http"),
        default="stdio",
        help="stdio (default: the client starts this command) or http (streamable HTTP)",
    )
    sub.add_argument(
        "--host",
        default=None,
        help=f"with --transport http: the address to listen on (default {DEFAULT_HOST}: this "
        f"machine only)",
    )
    sub.add_argument(
        "--port",
        type=port_number,
        default=None,
        metavar="N",
        help="with --transport http: the port (default 0: a free one)",
    )
    sub.add_argument(
        "--allow-forget",
        action="store_true",
        help="offer the 'forget' tool (deletes episodes for good); without it, it is refused",
    )


def check_mcp_usage(args: argparse.Namespace) -> None:
    if args.transport == "stdio" and (args.host is not None or args.port is not None):
        raise UsageError("mcp: --host and --port are for --transport http")
    if args.transport == "http":
        token = os.environ.get(TOKEN_ENV)
        if token is not None and len(token.strip()) < MIN_TOKEN_CHARS:
            raise UsageError(f"${TOKEN_ENV}: give a token of at least {MIN_TOKEN_CHARS} characters")
        if token is not None and not (token.isascii() and token.strip().isprintable()):
            # A client sends headers as ASCII: a server no request could ever authenticate to.
            raise UsageError(f"${TOKEN_ENV}: give a token of printable ASCII characters only")


async def cmd_mcp(args: argparse.Namespace, memory: EpisodicMemory, label: str) -> int:
    """Serve the MCP server until the client goes away (stdio) or until interrupted (http)."""
    from .. import MissingDependencyError

    try:
        from ..mcp_server import create_http_app, create_server

        if args.transport == "http":
            import uvicorn
    except ImportError as exc:  # MissingDependencyError is one too
        if isinstance(exc, MissingDependencyError):
            raise
        raise MissingDependencyError(
            f"mcp needs the 'mcp' extra ({exc.name} is missing): "
            f"pip install 'deepcrew-episodic[mcp]'"
        ) from None
    handler = _log_the_sdk()
    try:
        server = create_server(memory, allow_forget=args.allow_forget, redact=clean)
        if args.transport == "stdio":
            # stdout is the wire: the one line goes to stderr (the client's log).
            note(f"serving {label} to an MCP client over stdio")
            await server.run_stdio_async()
            return 0
        import secrets

        token = os.environ.get(TOKEN_ENV, "").strip() or secrets.token_urlsafe(32)
        app = create_http_app(server, token=token, host_allowed=host_allowed)
        sock = bind(args.host or DEFAULT_HOST, args.port or 0, "mcp")
        shown = _url(sock.getsockname()[:2])
        given = os.environ.get(TOKEN_ENV, "").strip()
        how = f"${TOKEN_ENV}" if given else token
        # Written whole and flushed before serving (a test, a script reads it). Not through
        # out(): the token is the one secret the user must see; the label is scrubbed.
        OUTPUT.write(
            sys.stdout,
            f"Serving {escape_hidden(label)} over MCP at {shown} (header: Authorization: "
            f"Bearer {how})\n",
        )
        sys.stdout.flush()
        if not _is_loopback(sock.getsockname()[0]):
            note(
                f"listening on {args.host}: anyone who can reach it and has the token can read "
                f"and write the memory (the token travels in clear over http)"
            )
        config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False)
        try:
            await uvicorn.Server(config).serve(sockets=[sock])
        except KeyboardInterrupt:
            pass  # uvicorn stops on Ctrl-C, then raises it again: stopping is this command's end
        finally:
            sock.close()
        return 0
    finally:
        logging.getLogger().removeHandler(handler)


def _log_the_sdk() -> logging.Handler:
    """The SDK's and uvicorn's warnings on stderr, one scrubbed line each like the library's
    (which has its own handler). Installed on the root logger before the SDK is configured,
    so that the SDK's own set-up (a rich handler at INFO) does not replace it."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(SafeFormatter())
    handler.setLevel(logging.WARNING)
    handler.addFilter(lambda record: not record.name.startswith("deepcrew_episodic"))
    logging.getLogger().addHandler(handler)
    return handler


def _is_loopback(host: str) -> bool:
    import ipaddress

    return ipaddress.ip_address(host).is_loopback


def _url(address: tuple[str, int]) -> str:
    import ipaddress

    host, port = address
    bound = ipaddress.ip_address(host)
    if bound.is_unspecified:
        # every interface, this machine's loopback included: the URL names the loopback
        host = "127.0.0.1" if bound.version == 4 else "::1"
    shown_host = f"[{host}]" if ":" in host else host
    return f"http://{shown_host}:{port}/mcp"
