"""``deepcrew-episodic mcp``: an episodic memory as an MCP server, for coding agents and chat
apps (Claude Code, Claude Desktop, Cursor, ...).

Tools to recall past runs before a task (the ``## Relevant past experience`` block and the
items with their ids), record a run after it, grade a run when its real outcome is known, list
the timeline and, only when created with ``allow_forget=True``, forget. Everything a tool
returns is redacted and neutralised (one line per text, no hidden character, no heading).
See docs/mcp.md.

Needs ``pip install 'deepcrew-episodic[mcp]'`` (the official MCP SDK, 2.x).

Example::

    from deepcrew_episodic.mcp_server import create_server

    server = create_server(memory)
    await server.run_stdio_async()          # or, over HTTP with a token:
    app = create_http_app(server, token=secrets.token_urlsafe(32))
"""

from __future__ import annotations

import importlib.util

from .. import MissingDependencyError

INSTALL_HINT = "pip install 'deepcrew-episodic[mcp]'"

if importlib.util.find_spec("mcp") is None:
    raise MissingDependencyError(f"the MCP server needs the 'mcp' extra: {INSTALL_HINT}")

# Imported after the check, so that a missing extra gives the install hint, not an ImportError.
from ._http import PATH, create_http_app  # noqa: E402
from ._server import TOOLS, create_server  # noqa: E402

__all__ = ["INSTALL_HINT", "PATH", "TOOLS", "create_http_app", "create_server"]
