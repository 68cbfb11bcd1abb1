"""How stored text is shown: nothing in it can hide, reorder or fake what the page says.

Jinja escapes HTML (autoescape is on for every template); on top of that every value a
template prints passes through :func:`shown` (the environment's ``finalize``): secrets are
redacted (a deepcrew-ai log or a memory with ``redact=False`` may hold some) and every hidden
character (control, format, bidi, zero-width, private-use: the library's one rule,
``is_hidden``) is spelled out as ``\\uXXXX``. So an episode cannot open a fake heading, run a
script, flip the direction of a line or hide a word from the person reading it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from markupsafe import Markup, escape

from .._unicode import is_hidden

__all__ = [
    "Multiline",
    "Plain",
    "Raw",
    "Verbatim",
    "make_attribute",
    "make_finalize",
    "quoted",
    "shown",
    "visible",
    "visible_markup",
]


_MARKER = re.compile(r"\[REDACTED:[a-z0-9-]*\]")
_QUOTING: list[Callable[[str], str]] = []


def quoted(text: str, limit: int) -> str:
    """A request's value as an error quotes it: on one line, redacted with the default rules,
    then cut to *limit* characters (never inside a marker): a cut secret is no longer
    recognisable, so the cut comes last."""
    if not _QUOTING:
        from .. import Redactor  # the package imports this module: its API is ready by now

        _QUOTING.append(Redactor().redact)
    flat = _QUOTING[0](" ".join(text.split()))
    if len(flat) <= limit:
        return flat
    end = max(0, limit - 1)
    for marker in _MARKER.finditer(flat, max(0, end - 64), end + 64):
        if marker.start() < end < marker.end():
            end = marker.start()
    return flat[:end].rstrip() + "…"


class Multiline(str):
    """Text whose line breaks and tabs are kept (shown in a ``white-space: pre-wrap`` box)."""

    __slots__ = ()


class Raw(str):
    """A value a form sends back or a URL built by the viewer: HTML-escaped, nothing else
    (an id with a hidden character must reach the server as stored)."""

    __slots__ = ()


class Verbatim(Multiline):
    """Text shown as it is, line breaks included: the recall block, whose bytes are what the
    agent receives (neutralised by ``render``). It is still redacted like every stored string:
    the viewer's redactor may know a secret (the store's password) that ``render``'s does not."""

    __slots__ = ()


class Plain(str):
    """A message the viewer writes itself (an error, the token page): made visible, never
    redacted (the redactor would cut text such as ``?token=...``)."""

    __slots__ = ()


def _escape_code(c: str) -> str:
    code = ord(c)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _hides(c: str, keep: str) -> bool:
    return c not in keep and (is_hidden(c) or c in "\u2028\u2029\x85")


def visible(text: str, *, keep: str = "") -> str:
    """*text* with every hidden character (see ``is_hidden``: control, format, bidi,
    zero-width, variation selectors, private-use) and every line break not in *keep* replaced
    by its ``\\uXXXX`` escape (``\\UXXXXXXXX`` beyond the BMP)."""
    if text.isascii() and text.isprintable():
        return text
    return "".join(_escape_code(c) if _hides(c, keep) else c for c in text)


def visible_markup(text: str, *, keep: str = "") -> Markup:
    """:func:`visible` as HTML: the text escaped, each ``\\uXXXX`` in a
    ``<span class="hidden-char">`` so that it can be told from the same six characters typed."""
    if text.isascii() and text.isprintable():
        return escape(text)
    out: list[str] = []
    plain: list[str] = []
    for c in text:
        if _hides(c, keep):
            out.append(escape("".join(plain)))
            plain.clear()
            out.append(Markup('<span class="hidden-char">%s</span>') % _escape_code(c))
        else:
            plain.append(c)
    out.append(escape("".join(plain)))
    return Markup("").join(out)


def make_finalize(redact: Callable[[str], str]) -> Callable[[Any], Any]:
    """The templates' ``finalize``: every printed string redacted and made visible."""

    def finalize(value: Any) -> Any:
        if value is None:
            return ""
        if isinstance(value, Markup):
            return value  # built by the viewer itself (the chart, a span), its data escaped
        if isinstance(value, Raw):
            return value
        if isinstance(value, Plain):
            return visible_markup(value)
        if isinstance(value, Multiline):
            return visible_markup(redact(value), keep="\n\t")
        if isinstance(value, str):
            return visible_markup(redact(value))
        return value

    return finalize


def make_attribute(redact: Callable[[str], str]) -> Callable[[Any], Markup]:
    """The templates' ``attribute`` filter, for every value printed inside an HTML attribute:
    escaped plain text with hidden characters spelled ``\\uXXXX`` and no markup (a ``<span>``
    inside ``title=`` or ``value=`` would show as text or change the value sent back). A
    :class:`Raw` value (a form field, a URL) is only escaped; any other string is redacted."""

    def attribute(value: Any) -> Markup:
        if value is None:
            return Markup("")
        if isinstance(value, Raw):
            return escape(str(value))
        if isinstance(value, Markup):
            value = value.unescape()
        if isinstance(value, Plain):
            return escape(visible(value))
        if isinstance(value, str):
            return escape(visible(redact(value)))
        return escape(str(value))

    return attribute


def shown(text: str, redact: Callable[[str], str]) -> str:
    """*text* as a template would print it (for tests and for text built outside one)."""
    return visible(redact(text))
