"""Event payloads are declared once (``PAYLOAD_FIELDS``); the docs cannot drift from them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from deepcrew_episodic import EventType
from deepcrew_episodic._events import PAYLOAD_FIELDS, emit

DOCS = Path(__file__).resolve().parent.parent / "docs"
_ROW = re.compile(r"^\| `([a-z_]+)` \| (.+?) \| .+ \|$")
_BRACES = re.compile(r"`\{([a-z_, ]+)\}`")


def test_the_event_table_lists_exactly_the_declared_fields() -> None:
    rows = {}
    for line in (DOCS / "events.md").read_text().splitlines():
        match = _ROW.match(line)
        if match and match.group(1) in {e.value for e in EventType}:
            rows[EventType(match.group(1))] = set(re.findall(r"`([a-z_]+)`", match.group(2)))
    assert set(rows) == set(PAYLOAD_FIELDS), "every emitted event has a row, and only those"
    for event, fields in rows.items():
        assert fields == set(PAYLOAD_FIELDS[event]), event


@pytest.mark.parametrize("page", sorted(p.name for p in DOCS.glob("*.md")))
def test_every_payload_mentioned_in_the_docs_is_the_declared_one(page: str) -> None:
    """A comparison row names the event and ends with this library's payload in braces."""
    for line in (DOCS / page).read_text().splitlines():
        for event in (EventType.EPISODE_RECALLED, EventType.EPISODE_RECORDED):
            named = f"`{event.value}`" in line or f"`{event.name}`" in line
            shapes = _BRACES.findall(line)
            if named and line.startswith("|") and shapes:
                ours = {f.strip() for f in shapes[-1].split(",")}
                assert ours == set(PAYLOAD_FIELDS[event]), (page, line)


def test_emit_refuses_an_undeclared_shape() -> None:
    emit(
        EventType.EPISODE_RECALLED,
        {"count": 1, "ids": ["a"], "query": "q", "ranking": "keywords", "embedder_error": None},
    )
    with pytest.raises(AssertionError, match="episode_recalled"):
        emit(EventType.EPISODE_RECALLED, {"count": 1, "ids": ["a"]})
