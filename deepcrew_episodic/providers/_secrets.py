"""The password of a store's URL, found in every spelling a message may carry it, and the URL
as it may be shown (the command line, ``open_provider``'s errors, the providers' ``repr``)."""

from __future__ import annotations

import re
from urllib.parse import unquote, unquote_plus, urlsplit

__all__ = ["_redacted", "_scrubbed", "_secrets"]

_SECRET_WORDS = ("password", "passwd", "pwd", "secret", "token")
_REDACTED = "***"


def _secrets(spec: str) -> set[str]:
    """The password of a URL: in its userinfo (read naively up to the last ``@`` as well, since
    an unencoded ``#``, ``/`` or ``?`` moves a parser's split) or in a secret-like query
    parameter, as written and decoded."""
    if "://" not in spec:
        return set()
    found: set[str] = set()
    userinfo = spec.partition("://")[2].rpartition("@")[0]
    if ":" in userinfo:
        found.add(userinfo.partition(":")[2])
    try:
        parts = urlsplit(spec)
        if parts.password:
            found.add(parts.password)
    except ValueError:
        pass
    for key, value in re.findall(r"[?&;#]([^=&;#?]*)=([^&;#]*)", spec):
        if any(word in unquote_plus(key).lower() for word in _SECRET_WORDS):
            found.add(value)
    forms = {f for s in found for f in (s, unquote(s), unquote_plus(s))}
    forms |= {repr(f)[1:-1] for f in forms}  # as a message quoting the URL with !r spells it
    return {f for f in forms if f}


def _scrubbed(text: str, spec: str) -> str:
    for secret in sorted(_secrets(spec), key=len, reverse=True):
        text = text.replace(secret, _REDACTED)
    return text


def _redacted(spec: str) -> str:
    """*spec* as it may be shown: a URL's password (and a user name's password) replaced."""
    return _scrubbed(spec, spec)
