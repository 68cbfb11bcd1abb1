"""What a tool returns, made safe for the model that reads it.

Stored text comes from users, tools and models, and what a tool returns lands in a model's
context. So every stored string is redacted first (the server's redactor: the CLI's knows the
store URL's password too), then made one line of plain text: every line break and run of
whitespace becomes one space (no stored line can open a heading of its own), every hidden
character is dropped (the library's rule, :func:`~deepcrew_episodic._unicode.strip_hidden`),
``##`` runs shrink to ``#`` (and a leading ``#`` becomes U+FF03, its full-width look-alike),
``< >`` become U+2039 and U+203A as in the block (no fake chat-template tag such as
``</system>``, in a text or an id), and a long text is cut (after redaction: a cut must not
leave a piece of a secret no rule recognises). Error messages are redacted and their hidden
characters spelled out (``\\x1b``), so that the person reading a client's log sees them.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from .._unicode import escape_hidden, strip_hidden

__all__ = ["ERROR_CHARS", "Neutraliser"]

ERROR_CHARS = 500
_SPACE = re.compile(r"\s+")
_HASHES = re.compile(r"#{2,}")
# As the block's items have them (see _render): a stored "</system>" closes no tag.
_ANGLES = str.maketrans({"<": "\u2039", ">": "\u203a"})


class Neutraliser:
    """The one way stored text leaves the server (see the module's docstring)."""

    def __init__(self, redact: Callable[[str], str]) -> None:
        self.redact = redact

    def text(self, value: str, limit: int | None = None) -> str:
        """*value* redacted, on one line, with nothing hidden and no heading, cut at *limit*."""
        flat = _SPACE.sub(" ", strip_hidden(_SPACE.sub(" ", self.redact(value)))).strip()
        flat = _HASHES.sub("#", flat).translate(_ANGLES)
        if flat.startswith("#"):
            # A value a client shows as Markdown must not open a heading: U+FF03 looks alike.
            flat = "\uff03" + flat[1:]
        if limit is not None and len(flat) > limit:
            flat = flat[: limit - 1].rstrip() + "…"
        return flat

    def block(self, value: str) -> str:
        """The ``## Relevant past experience`` block (``render`` neutralised each item, so its
        lines are kept): redacted with this server's redactor, nothing hidden."""
        lines = [strip_hidden(line) for line in self.redact(value).split("\n")]
        return "\n".join(lines)

    def ident(self, value: str) -> str:
        """An episode id as shown: redacted, hidden characters spelled out, never cut (the
        tools that take an id back also accept this spelling of it)."""
        return escape_hidden(self.redact(value)).translate(_ANGLES)

    def message(self, value: str) -> str:
        """An error message: redacted, one visible line (hidden characters spelled out)."""
        # Backslashes kept: the library's messages quote values already escaped.
        flat = " ".join(escape_hidden(self.redact(value), keep="\\").split()).translate(_ANGLES)
        if len(flat) > ERROR_CHARS:
            flat = flat[: ERROR_CHARS - 1].rstrip() + "…"
        return flat
