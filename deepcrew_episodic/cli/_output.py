"""What reaches the terminal, made safe in one place.

Every line of human output is escaped (:func:`escape_hidden`: control, format and invisible
characters, line breaks), so stored text (ids included) can neither drive the terminal nor forge
a line; JSON output escapes the same characters as ``\\uXXXX``. Every stream (stdout, stderr,
JSON, exports, argparse's own messages, warnings) passes through :class:`Scrubber`, which removes
the secrets of every store URL the command was given: a password in any of its spellings, and
the user name that goes with it.

Stored text may hold secrets the store never redacted (a deepcrew-ai log, a memory opened with
``redact=False``): every stored string a listing prints goes through :func:`clean` (the store's
secrets and the default :class:`~deepcrew_episodic.Redactor`) before it is cut or escaped, since
a cut would leave a piece of a secret that no rule recognises. A line that still ends on a
piece of a store secret (a message cut elsewhere) loses that piece too. Also here: how an
episode is laid out on one line.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import re
import sys
import unicodedata
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from .._unicode import escape_hidden, is_hidden

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

    from .. import Episode, Grade, History, Redactor, Scored

PROG = "deepcrew-episodic"
REDACTED = "***"
# Generic redaction, whatever the URL: userinfo (user:password@ or token@) and a password
# given as a query parameter.
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)([^\s/@:]*)(:?)[^\s/@]*@")
_QUERY_SECRET = re.compile(
    r"(?i)([?&;][a-z_-]*(?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key)=)[^&\s]*?"
    r"(?=$|[&\s]|[:,;)'\"]\s|[:,;)'\"]$)"
)
_SECRET_KEYS = (
    "password",
    "passwd",
    "pwd",
    "secret",
    "token",
    "apikey",
    "api_key",
    "api-key",
    "access_key",
    "access-key",
)
# Some clients (litellm among them) put the traceback of the error they wrap into its message:
# a one-line report keeps what comes before it.
_TRACEBACK = re.compile(r"\s*Traceback \(most recent call last\):.*", re.DOTALL)
# A piece of a store secret this long, where a text was cut (end of a line, before or after an
# ellipsis), is removed too: a cut made before the scrubber ran leaves no whole secret to find.
MIN_FRAGMENT = 4
# Not part of a secret as shown: a hidden character or a line break inside one is skipped when
# looking for it (``S3cret\u200bPassw0rd`` still spells the password on a terminal).
_LINE_BREAKS = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")


# --- secrets ----------------------------------------------------------------------------------


def url_secrets(spec: str) -> set[str]:
    """The secrets in a store URL, as written and as a client would decode them: the
    password in the userinfo or in a ``?password=`` parameter (read both the way
    ``urllib`` and redis-py parse it and naively, up to the last ``@``, since an unencoded
    ``#``, ``/`` or ``?`` in a password changes how a parser splits the URL), and the user
    name that goes with a password."""
    if "://" not in spec:
        return set()
    from urllib.parse import unquote, unquote_plus, urlsplit

    raw: set[str] = set()
    users: set[str] = set()
    rest = spec.partition("://")[2]
    if "@" in rest:
        _user, colon, password = rest.rpartition("@")[0].partition(":")
        # Not when the "@" is in a "?password=" value (redis://h:1/0?password=a@b).
        if colon and password and not re.search(r"(?i)[?&;]\w*password=", password):
            raw.add(password)
    if not ambiguous_url(spec):
        # (An ambiguous URL is refused before any client reads it: see Settings.)
        try:
            parts = urlsplit(spec)
            if parts.password:
                raw.add(parts.password)
                users.add(parts.username or "")
        except ValueError:  # a malformed URL (an unclosed "[") is still scrubbed naively
            pass
    query_user = ""
    for key, value in re.findall(r"[?&;#]([^=&;#?]*)=([^&;]*)", spec):
        name = unquote_plus(key).lower()
        if any(word in name for word in _SECRET_KEYS):
            raw.add(value)
            raw.add(value.partition("#")[0])
        elif name == "username":
            query_user = value
    if query_user and raw:
        users.add(query_user)
    secrets: set[str] = set()
    for value in raw | users:
        # redis-py percent-decodes a query value that parse_qs already decoded: both, and more.
        secrets |= {value, unquote(value), unquote_plus(value), unquote(unquote_plus(value))}
    # "default" is Redis's built-in user name, and what an empty user name means: no secret.
    return {s for s in secrets if s and s != "default"}


def ambiguous_url(spec: str) -> bool:
    """Whether *spec* has a password followed by an unencoded ``#``, ``/`` or ``?`` before its
    last ``@``: every URL parser then ends the userinfo early and reads a piece of the
    password as the host, port or path (redis-py would send it to a host in an error)."""
    rest = spec.partition("://")[2]
    userinfo = rest.rpartition("@")[0]
    return (
        ":" in userinfo
        and any(c in userinfo for c in "#/?")
        and not re.search(r"(?i)[?&;]\w*password=", userinfo)
    )


def secret_forms(secret: str) -> set[str]:
    """Every spelling of *secret* an output could carry: raw, Unicode-normalised, percent-
    encoded (either case of hex, ``+`` or ``%20`` for a space), and escaped the ways a
    ``repr``, JSON or :func:`escape_hidden` spell it."""
    from urllib.parse import quote, quote_plus

    bases = {secret, unicodedata.normalize("NFC", secret), unicodedata.normalize("NFD", secret)}
    forms: set[str] = set()
    for text in bases:
        encoded = {quote(text, safe=""), quote(text), quote_plus(text, safe=""), quote_plus(text)}
        encoded |= {re.sub("%[0-9A-F]{2}", lambda m: m.group().lower(), e) for e in encoded}
        slashed = text.replace("\\", "\\\\")
        escaped = {
            repr(text)[1:-1],
            text.encode("unicode_escape").decode("ascii"),
            json.dumps(text)[1:-1],
            json.dumps(text, ensure_ascii=False)[1:-1],
            json_text(json.dumps(text, ensure_ascii=False))[1:-1],
            slashed.replace("'", "\\'"),
            slashed.replace('"', '\\"'),
        }
        forms |= {text} | encoded | escaped
    forms |= {escape_hidden(f) for f in forms}
    return {f for f in forms if f}


class Scrubber:
    """Removes every known spelling of the store's secrets from a text (see
    :func:`url_secrets` and :func:`secret_forms`), and with ``generic`` also any URL's userinfo
    and ``password=`` parameter. Counts what it removed from data."""

    def __init__(self) -> None:
        self._forms: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self._pieces: re.Pattern[str] | None = None
        self.removed_from_data = 0

    def learn(self, spec: str) -> None:
        for secret in url_secrets(spec):
            self._forms |= secret_forms(secret)
        if self._forms:
            # Longest first, so that no shorter form leaves a piece of a longer one behind.
            ordered = sorted(self._forms, key=lambda f: (-len(f), f))
            self._pattern = re.compile("|".join(map(re.escape, ordered)))
            heads = {f[:n] for f in ordered for n in range(MIN_FRAGMENT, len(f))}
            tails = {f[-n:] for f in ordered for n in range(MIN_FRAGMENT, len(f))}
            self._pieces = re.compile(
                "|".join(
                    [
                        f"(?:{_alternatives(heads)})(?=…|\\.\\.\\.|['\"]?\\)?$)",
                        f"(?:(?<=…)|(?<=\\.\\.\\.)|^)(?:{_alternatives(tails)})",
                    ]
                    if heads
                    else ["(?!)"]
                ),
                re.MULTILINE,
            )

    def known(self, text: str) -> tuple[str, int]:
        """*text* without any known spelling of a store secret, and how many were removed (a
        secret split by hidden characters or line breaks included)."""
        if self._pattern is None:
            return text, 0
        # Repeated: a removal can join two pieces into another spelling ("hun" "***" ...).
        total = 0
        while True:
            text, count = self._pattern.subn(REDACTED, text)
            if not count:
                text, count = self._split(text)
            total += count
            if not count:
                return text, total

    def _split(self, text: str) -> tuple[str, int]:
        """Secrets spelled with hidden characters or line breaks inside: found in the text
        without them, removed from the text with them."""
        assert self._pattern is not None
        if text.isascii() and text.isprintable():
            return text, 0
        kept = [i for i, c in enumerate(text) if not (c in _LINE_BREAKS or is_hidden(c))]
        if len(kept) == len(text):
            return text, 0
        visible = "".join(text[i] for i in kept)
        spans = [(kept[m.start()], kept[m.end() - 1] + 1) for m in self._pattern.finditer(visible)]
        for start, end in reversed(spans):
            text = text[:start] + REDACTED + text[end:]
        return text, len(spans)

    def pieces(self, text: str) -> str:
        """*text* without a piece of a store secret (``MIN_FRAGMENT`` characters or more) where
        a cut could have left one: at the end of a line or before an ellipsis (a head), at the
        start of a line or after an ellipsis (a tail)."""
        if self._pieces is None:
            return text
        return self._pieces.sub(REDACTED, text)

    def __call__(self, text: str, *, generic: bool = True) -> str:
        text = self.known(text)[0]
        if generic:
            text = _USERINFO.sub(_redact_userinfo, text)
            text = _QUERY_SECRET.sub(rf"\1{REDACTED}", text)
        return self.pieces(text)

    def data(self, value: Any) -> Any:
        """*value* (JSON-like) with the known secrets removed from every string in it."""
        if isinstance(value, str):
            text, count = self.known(value)
            self.removed_from_data += count
            return text
        if isinstance(value, dict):
            return {self.data(k): self.data(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.data(v) for v in value]
        return value


def _alternatives(texts: set[str]) -> str:
    return "|".join(map(re.escape, sorted(texts, key=lambda t: (-len(t), t))))


def _redact_userinfo(match: re.Match[str]) -> str:
    scheme, user, colon = match.groups()
    if not colon:
        return f"{scheme}{REDACTED}@"
    return f"{scheme}{REDACTED if user else ''}:{REDACTED}@"


class Output:
    """Where every byte the command prints goes through: escaped, scrubbed, and never failing
    on a character the stream cannot encode."""

    def __init__(self) -> None:
        self.scrub = Scrubber()

    def line(self, stream: SupportsWrite[str], text: str) -> None:
        """One line of human output: every hidden character spelled out, secrets removed."""
        safe = self.scrub(escape_hidden(self.scrub(text)))
        self.write(stream, safe + "\n")

    def text(self, stream: SupportsWrite[str], text: str) -> None:
        """Several lines of human output (argparse's help and messages)."""
        for piece in text.splitlines():
            self.line(stream, piece)

    def data(self, stream: SupportsWrite[str], text: str) -> None:
        """Machine output (JSON, JSONL), already escaped by :func:`to_json`."""
        text, count = self.scrub.known(text)
        self.scrub.removed_from_data += count
        self.write(stream, text)

    @staticmethod
    def write(stream: SupportsWrite[str], text: str) -> None:
        try:
            stream.write(text)
        except UnicodeEncodeError:
            # A stream that cannot carry a character (LANG=C, a Latin-1 terminal).
            encoding = getattr(stream, "encoding", None) or "ascii"
            stream.write(text.encode(encoding, "backslashreplace").decode(encoding))


OUTPUT = Output()


def safe_label(store: str) -> str:
    """The store as shown in messages: no secret of a URL is ever printed."""
    scrub = Scrubber()
    scrub.learn(store)
    return scrub(store)


def without_traceback(message: str) -> str:
    """*message* without a traceback a client wrote into it (litellm does), so that a
    failure stays a readable line."""
    return _TRACEBACK.sub("", message)


class SafeFormatter(logging.Formatter):
    """The library's warnings, one escaped and scrubbed line each (never a traceback)."""

    def format(self, record: logging.LogRecord) -> str:
        # A warning may quote stored text (a corrupt record): cleaned like a listing.
        # Each argument on its own, so that the words after a quoted error are kept.
        args = record.args
        if isinstance(args, tuple) and args:
            args = tuple(without_traceback(a) if isinstance(a, str) else a for a in args)
        message = without_traceback(str(record.msg) % args if args else str(record.msg))
        text = f"{PROG}: {record.levelname.lower()}: {clean(message)}"
        return OUTPUT.scrub(escape_hidden(OUTPUT.scrub(text)))


# --- writing ----------------------------------------------------------------------------------


def out(text: str = "") -> None:
    """One line of human output on stdout (escaped and scrubbed: see :class:`Output`)."""
    OUTPUT.line(sys.stdout, text)


def note(text: str) -> None:
    OUTPUT.line(sys.stderr, f"{PROG}: {text}")


def last_words(line: str) -> None:
    """One line on stderr, unless stderr itself is gone (then there is no one to tell)."""
    with contextlib.suppress(OSError, ValueError):
        OUTPUT.line(sys.stderr, line)


_NOT_PLAIN = re.compile(r"[^\x20-\x7e\n]")


def _json_escape(char: str) -> str:
    code = ord(char)
    if code > 0xFFFF:  # a surrogate pair, as JSON spells a code point beyond the BMP
        high, low = divmod(code - 0x10000, 0x400)
        return f"\\u{0xD800 + high:04x}\\u{0xDC00 + low:04x}"
    return f"\\u{code:04x}"


def json_text(text: str) -> str:
    # Outside strings json.dumps writes only printable ASCII and (with indent) line breaks,
    # so every other hidden character found here is inside a string, where \uXXXX is exact.
    return _NOT_PLAIN.sub(
        lambda m: (
            _json_escape(m.group())
            if is_hidden(m.group()) or unicodedata.category(m.group()) in ("Zl", "Zp")
            else m.group()
        ),
        text,
    )


def to_json(value: Any, indent: int | None = None) -> str:
    """JSON that keeps readable text readable and spells every hidden character (controls,
    the C1 range json.dumps leaves raw, bidi and zero-width characters, lone surrogates from
    undecodable bytes, line separators) as ``\\uXXXX``: the data is exact, the terminal safe."""
    return json_text(json.dumps(OUTPUT.scrub.data(value), ensure_ascii=False, indent=indent))


def dump(value: Any) -> None:
    OUTPUT.data(sys.stdout, to_json(value, indent=2) + "\n")


def confirm(question: str) -> bool:
    """Ask on the terminal. Without one (a pipe, /dev/null, a closed stdin) the answer is no:
    a script must say --yes, and nothing ever waits on a stdin that will never answer."""
    stdin = sys.stdin
    try:
        interactive = stdin is not None and stdin.isatty()
    except (ValueError, OSError):
        interactive = False
    if not interactive:
        return False
    OUTPUT.write(sys.stderr, OUTPUT.scrub(escape_hidden(f"{question} [y/N] ")))
    sys.stderr.flush()
    answer = stdin.readline()
    return answer.strip().lower() in {"y", "yes"}


# --- episodes on one line ---------------------------------------------------------------------


@functools.cache
def _default_redactor() -> Redactor:
    from .. import Redactor

    return Redactor()


def clean(text: str) -> str:
    """*text* (stored, or from outside) safe to show, before anything cuts or escapes it: the
    store URL's secrets and every secret the default :class:`~deepcrew_episodic.Redactor`
    knows replaced. Stored text needs it even though ``record`` redacts: a deepcrew-ai log or a
    memory with ``redact=False`` stores text as given."""
    return _default_redactor().redact(OUTPUT.scrub.known(text)[0])


def for_display(episode: Episode) -> dict[str, Any]:
    """*episode* as a dict (``Episode.to_dict``) with every string :func:`clean` (the ``id``
    included), for the listings and their ``--json``; ``export`` writes episodes as stored.
    A dict, not an ``Episode``: a stored value the model would refuse must still be shown."""

    def cleaned(value: Any) -> Any:
        if isinstance(value, str):
            return clean(value)
        if isinstance(value, list):
            return [cleaned(v) for v in value]
        return value

    return {name: cleaned(value) for name, value in episode.to_dict().items()}


def holds_secrets(episode: Episode) -> bool:
    """Whether the default redactor would change any string of *episode* (its id included)."""
    redactor = _default_redactor()
    return redactor.redact_episode(episode) is not episode or (
        redactor.find(episode.id) is not None
    )


def shown(text: str) -> str:
    """A value as quoted in a message (the output escapes it), cleaned, then cut: it may be
    megabytes long."""
    text = clean(text)
    return f"'{text[:60]}…'" if len(text) > 60 else f"'{text}'"


def one_line(text: str, limit: int) -> str:
    """*text* cleaned, on one line, cut to *limit* characters."""
    # No line break splits an item; the other hidden characters are escaped by out().
    flat = " ".join(clean(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def quantity(n: int, noun: str, *, grouped: bool = False) -> str:
    """*n* and *noun*, plural unless *n* is 1 (``1 episode``, ``0 episodes``); *grouped*
    writes the thousands apart (``12,000 records``)."""
    number = f"{n:,}" if grouped else f"{n}"
    return f"{number} {noun}{'s' * (n != 1)}"


def short_id(episode_id: str) -> str:
    """The id prefix a listing shows (``forget --id`` takes it); an id holding a secret is
    shown as its marker, whole."""
    safe = clean(episode_id)
    return safe if safe != episode_id else episode_id[:12]


def _when(episode: dict[str, Any]) -> str:
    stamp = one_line(episode["timestamp"], 40)
    return f"{stamp[:10]} {stamp[11:16]}" if len(stamp) >= 16 else (stamp or "undated").ljust(16)


def _score(episode: dict[str, Any]) -> str:
    score = episode["score"]
    return f"{score:.2f}" if score is not None else "  - "


def outcome_label(episode: Episode, grades: Sequence[Grade] = ()) -> str:
    """The outcome a listing shows: the effective one (grades applied, as every read path
    reads it) with where it came from (``success (verifier)``, ``claimed_success (agent)``;
    nothing more when no source is recorded), marked ``graded`` when a grade decided it."""
    label = one_line(episode.outcome, 40)
    notes = [one_line(source, 60)] if (source := episode.source_label()) else []
    if grade_applies(episode, grades):
        notes.append("graded")
    return f"{label} ({', '.join(notes)})" if notes else label


def grade_applies(episode: Episode, grades: Sequence[Grade]) -> bool:
    """Whether *grades* decide the outcome *episode* (the effective one) reads: the best
    ranked grade, the newest among equals (``Grade.rank``), decides unless the run's own
    outcome outranks it, and then the episode reads as that grade says (``Grade.reads_as``)."""
    best: Grade | None = None
    for grade in grades:
        if best is None or grade.rank <= best.rank:
            best = grade
    if best is None:
        return False
    return (episode.outcome, episode.outcome_source) == best.reads_as


def outcome_width(labels: Iterable[str]) -> int:
    """The width of a listing's outcome column: its longest label (at least ``partial``)."""
    return max((len(label) for label in labels), default=0) or len("partial")


def timeline_line(episode: Episode, grades: Sequence[Grade] = (), width: int = 0) -> str:
    """One episode on one line; every stored string is cleaned before it is cut."""
    ep = for_display(episode)
    label = outcome_label(episode, grades)
    tags = "  " + one_line(" ".join(f"#{t}" for t in ep["tags"]), 80) if ep["tags"] else ""
    # A long run's phases are different subtasks of one run: each line says which it is.
    phase = f"  (phase: {one_line(ep['phase'], 40)})" if ep["phase"] else ""
    return (
        f"{_when(ep)}  {label:<{width or len(label)}} {_score(ep)}  "
        f"{one_line(ep['query'], 70)}{phase}{tags}  [{short_id(episode.id)}]"
    )


def history_summary(history: History, *, period: bool = False) -> str:
    """The line under a history: where the run of successes broke, or how it stands. With
    *period* (a ``--since`` or ``--until``), runs before it may have worked: never "never"."""

    def point(item: Scored) -> str:
        return f"{_when(for_display(item.episode)).strip()} [{short_id(item.episode.id)}]"

    n = history.failures_since
    runs = quantity(n, "failed run")
    if history.broke is not None and history.last_success is not None:
        return (
            f"started failing: {point(history.broke)}; {runs} since the last success, "
            f"{point(history.last_success)}"
        )
    if history.failing and period:
        return f"no run worked in the period given: {runs}"
    if history.failing:
        return f"never worked: {runs}, and no run that worked"
    if history.last_success is not None:
        return f"working: the newest run with an outcome worked, {point(history.last_success)}"
    return "no run says whether it worked (every outcome is unknown)"


def recall_lines(
    rank: int,
    found: Scored,
    verbose: bool,
    ranking: str = "keywords",
    grades: Sequence[Grade] = (),
    width: int = 0,
) -> list[str]:
    """A recalled episode in two lines (four with *verbose*), cleaned before any cut."""
    ep = for_display(found.episode)
    label = outcome_label(found.episode, grades)
    lines = [
        f"{rank}. {_when(ep)}  {label:<{width or len(label)}} {_score(ep)}  "
        f"{one_line(ep['query'], 90)}"
    ]
    if ep["reflection"]:
        lines.append(f"   lesson: {one_line(ep['reflection'], 160)}")
    elif ep["response"]:
        lines.append(f"   answer: {one_line(ep['response'], 160)}")
    if verbose:
        lines.append(f"   score {found.score:.3f}: {one_line(score_parts(found, ranking), 400)}")
        extra = [f"id {ep['id']}"]
        if found.uses:
            extra.append(f"used {found.uses}x")
        if found.iterations > 1:
            extra.append(f"run of {found.iterations} iterations")
        if ep["phase"]:
            extra.append(f"phase {ep['phase']}")
        if ep["tags"]:
            extra.append("tags " + ", ".join(ep["tags"]))
        if ep["tools_used"]:
            extra.append("tools " + ", ".join(ep["tools_used"]))
        lines.append("   " + one_line("  ".join(extra), 200))
    return lines


def under_floor_lines(
    under: Sequence[Scored],
    floor: float,
    ranking: str,
    grades: Sequence[Sequence[Grade]] = (),
) -> list[str]:
    """The episodes the relevance floor kept out of a recall (``recall -v``), each marked as
    under it, with its outcome as the results show it (*grades*: each one's), its relevance
    and why; cleaned before any cut."""
    if not under:
        return []
    lines = [f"under the relevance floor ({floor:g}), not recalled:"]
    for n, found in enumerate(under):
        ep = for_display(found.episode)
        label = outcome_label(found.episode, grades[n] if n < len(grades) else ())
        lines.append(
            f"-  {_when(ep)}  {label}  {one_line(ep['query'], 90)}  [{short_id(found.episode.id)}]"
        )
        lines.append(
            f"   relevance {found.relevance:.3f} < {floor:g} (under the floor): "
            f"{one_line(score_parts(found, ranking), 300)}"
        )
    return lines


def grade_json(grade: Grade, *, as_stored: bool = False) -> dict[str, Any]:
    """One grade as the listings' ``--json`` show it (its note cleaned), or ``export`` writes
    it (*as_stored*)."""
    text = (lambda t: t) if as_stored else clean
    return {
        "outcome": grade.outcome,
        "score": grade.score,
        "note": text(grade.note),
        "verified": grade.verified,
        "source": text(grade.source),
        "timestamp": text(grade.timestamp),
    }


def score_parts(found: Scored, ranking: str) -> str:
    """Both parts of a score on one line: the matched terms, the keyword part, and when an
    embedder ranked, the similarity and the meaning part; then recency and outcome weight.

    ``score = relevance * recency * outcome weight``, where ``relevance`` is the keyword part
    alone, or ``keyword + meaning * (1 - keyword)`` when an embedder ranked (docs/recall.md)."""
    matched = f"matched {', '.join(found.matched)}" if found.matched else "no term matched"
    if ranking != "hybrid":
        relevance = f"keyword {found.keyword:.2f}"
    elif found.similarity is None:
        relevance = f"keyword {found.keyword:.2f}, no vector yet ('backfill' embeds it)"
    else:
        relevance = (
            f"keyword {found.keyword:.2f} + meaning {found.meaning:.2f} (similarity "
            f"{found.similarity:.2f}) = relevance {found.relevance:.2f}"
        )
    age = f"age {found.age_days:.0f}d" if found.age_days is not None else "undated"
    return (
        f"{matched}; {relevance}; recency {found.recency:.2f} ({age}); outcome "
        f"{found.episode.outcome} x{found.outcome_weight:.4g}"
    )


def number(value: float | None) -> float | None:
    """A computed score as JSON shows it: 4 decimals, no float noise (``0.399999995668588``
    from a float32 similarity is ``0.4``)."""
    return None if value is None else round(float(value), 4)


def size_text(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n / 1024 / 1024:.1f} MiB"
