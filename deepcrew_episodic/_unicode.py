"""Which characters may reach a prompt or a terminal, stated once.

Stored text comes from users, tools and models. Some characters in it are invisible to a person
reading a prompt or a terminal yet still read by a model or obeyed by a terminal: control
characters (ESC sequences clear a screen or forge a line), format characters (bidi overrides
reorder text, zero-width characters split a word or a secret), variation selectors and tag
characters (each can carry a hidden letter after a visible emoji), private-use and unassigned code
points (a later Unicode version or a font may give them any meaning), and the other default-ignorable
code points (Hangul fillers, Mongolian selectors, ...). :func:`is_hidden` names them all;
:func:`strip_hidden` drops them (what reaches a prompt), :func:`escape_hidden` spells them out
(what reaches a terminal, so that nothing is hidden from the person reading it either);
:func:`search_form` is text as a search compares it (what a person reads, whatever its spelling).
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["escape_hidden", "is_hidden", "search_form", "strip_hidden"]

# Unicode's Default_Ignorable_Code_Point property (DerivedCoreProperties.txt) minus what the
# categories below already cover: code points a renderer shows as nothing at all.
_IGNORABLE = (
    "\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e"
    "\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff"
    # Not default-ignorable, yet shown as nothing or as a blank box by most fonts: the Braille
    # blank and the object replacement character are used to hide text in plain sight.
    "\u2800\ufffc"
)
# Cc control, Cf format, Cs surrogate, Co private use, Cn unassigned.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn"})
_IGNORABLE_RE = re.compile(f"[{_IGNORABLE}]")


def is_hidden(char: str) -> bool:
    """Whether *char* (one code point) is invisible or acts on a terminal rather than showing."""
    return unicodedata.category(char) in _HIDDEN_CATEGORIES or bool(_IGNORABLE_RE.match(char))


def _plain(text: str) -> bool:
    # Printable ASCII is the common case and holds nothing hidden.
    return text.isascii() and text.isprintable()


def strip_hidden(text: str) -> str:
    """*text* without any hidden character (see :func:`is_hidden`)."""
    if _plain(text):
        return text
    return "".join(c for c in text if not is_hidden(c))


def escape_hidden(text: str, *, keep: str = "") -> str:
    """*text* with every hidden character, line break and backslash spelled out as a Python
    escape (``\\x1b``, ``\\n``, ``\\u200b``, ``\\\\``), so that it prints as one visible line and
    the escape can be told from the character. Characters in *keep* stay as they are."""
    if _plain(text) and "\\" not in text:
        return text
    out: list[str] = []
    for c in text:
        if c in keep:
            out.append(c)
        elif c == "\\":
            out.append("\\\\")
        elif is_hidden(c) or unicodedata.category(c) in ("Zl", "Zp") or c in "\n\r\t\x0b\x0c":
            out.append(c.encode("unicode_escape").decode("ascii"))
        else:
            out.append(c)
    return "".join(out)


def search_form(text: str) -> str:
    """*text* as a search (``containing=``, the viewer's search) compares it: as a person reads
    it, not as it is spelt. White space runs are one space, hidden characters are dropped (a
    zero-width space inside a name still shows the name), compatibility forms are folded (NFKC:
    a full-width or a decomposed letter is the letter) and case is folded."""
    flat = strip_hidden(" ".join(text.split()))
    if _plain(flat):
        return flat.casefold()
    # NFKC, case fold, NFKC again: case folding can leave a string that is not normalised.
    folded = _nfkc(flat).casefold()
    return _nfkc(folded)


def _nfkc(text: str) -> str:
    # The check is much cheaper than the normalisation, and most text is already normal.
    return text if unicodedata.is_normalized("NFKC", text) else unicodedata.normalize("NFKC", text)
