"""``serve``: the local web viewer (``deepcrew_episodic.viewer``) over the store, with uvicorn.

It binds 127.0.0.1 unless told otherwise, and prints one line, before serving, with the URL and
a random access token (as Jupyter does): ``Serving <store> at http://127.0.0.1:<port>/?token=...``.
The store is named by its scrubbed label, never with its password. Read-only unless
``--allow-forget``. Ctrl-C stops it (exit status 0).
"""

from __future__ import annotations

import argparse
import ipaddress
import socket
import sys
from typing import TYPE_CHECKING

from .._unicode import escape_hidden
from ._errors import CliError
from ._output import OUTPUT, clean, note

if TYPE_CHECKING:
    from .. import EpisodicMemory

__all__ = ["DEFAULT_HOST", "SERVE_HELP", "add_serve_arguments", "bind", "cmd_serve", "port_number"]

SERVE_HELP = "a local web viewer: timeline, episodes, recall playground, overview"
DEFAULT_HOST = "127.0.0.1"


def port_number(text: str) -> int:
    value = text.strip()
    if not value.isascii() or not value.isdigit() or not 0 <= int(value) <= 65535:
        raise argparse.ArgumentTypeError(f"'{text[:20]}' is not a port (0 to 65535; 0: a free one)")
    return int(value)


def add_serve_arguments(sub: argparse.ArgumentParser) -> None:
    """The ``serve`` command's own options, on its sub-parser."""
    sub.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"the address to listen on (default {DEFAULT_HOST}: this machine only)",
    )
    sub.add_argument(
        "--port", type=port_number, default=0, metavar="N", help="the port (default 0: a free one)"
    )
    sub.add_argument("--open", action="store_true", help="open the viewer in a web browser")
    sub.add_argument(
        "--allow-forget",
        action="store_true",
        help="let the viewer delete episodes (behind a confirmation); read-only without it",
    )


async def cmd_serve(args: argparse.Namespace, memory: EpisodicMemory, label: str) -> int:
    """Serve the viewer until interrupted."""
    import secrets

    from .. import MissingDependencyError

    try:
        import uvicorn

        from ..viewer import create_app
    except ImportError as exc:  # MissingDependencyError is one too
        if isinstance(exc, MissingDependencyError):
            raise
        raise MissingDependencyError(
            f"serve needs the 'ui' extra ({exc.name} is missing): "
            f"pip install 'deepcrew-episodic[ui]'"
        ) from None
    token = secrets.token_urlsafe(32)
    app = create_app(memory, token=token, allow_forget=args.allow_forget, label=label, redact=clean)
    sock = bind(args.host, args.port)
    host, port = sock.getsockname()[:2]
    bound = ipaddress.ip_address(host)
    if bound.is_unspecified:
        # 0.0.0.0 or ::: every interface, this machine's loopback included; a browser
        # cannot open "http://0.0.0.0/" everywhere, so the URL names the loopback address.
        host = "127.0.0.1" if bound.version == 4 else "::1"
    shown_host = f"[{host}]" if ":" in host else host
    url = f"http://{shown_host}:{port}/?token={token}"
    # The one line a caller (a test, a script) reads: written whole and flushed before serving.
    # Not through out(): its scrubber rightly blanks any `?token=` in output, and this token
    # is the one secret the user must see. The label is already scrubbed; the rest is ours.
    OUTPUT.write(sys.stdout, f"Serving {escape_hidden(label)} at {url}\n")
    sys.stdout.flush()
    if not bound.is_loopback:
        note(
            f"listening on {args.host}: anyone who can reach it and has the token can read the "
            f"memory (the token travels in clear over http)"
        )
    if args.open:
        import webbrowser

        import anyio.to_thread

        await anyio.to_thread.run_sync(webbrowser.open, url)
    config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False)
    server = uvicorn.Server(config)
    try:
        await server.serve(sockets=[sock])
    except KeyboardInterrupt:
        pass  # uvicorn stops on Ctrl-C, then raises it again: stopping is this command's end
    finally:
        sock.close()
    return 0


def bind(host: str, port: int, command: str = "serve") -> socket.socket:
    """A listening socket on *host*:*port* (0: a free port), bound before the URL is printed
    so that the URL names the real port."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise CliError(f"{command}: cannot listen on '{host}': {exc.strerror}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise CliError(f"{command}: cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.setblocking(False)
    return sock
