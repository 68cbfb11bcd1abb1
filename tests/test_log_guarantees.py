"""What an episode id and a namespace may be. The log's storage guarantees (rings, unique ids,
namespace isolation, damaged data) are in the shipped conformance suite,
``deepcrew_episodic.testing``, run over every provider by tests/test_conformance.py."""

from __future__ import annotations

import pytest

from deepcrew_episodic import ConfigurationError, Episode, EpisodicMemory, InvalidEpisodeError
from deepcrew_episodic.providers import InMemoryProvider


@pytest.mark.parametrize(
    "bad_id",
    ["\x1b[2J", "line\nforged", "tab\there", "zero\u200bwidth", "bidi\u202eevil", "x" * 129, " "],
)
def test_an_id_is_one_visible_token(bad_id: str) -> None:
    with pytest.raises(InvalidEpisodeError, match="id"):
        Episode(query="q", id=bad_id)


@pytest.mark.parametrize("bad", ["", "x" * 257, "a\nb", "a\x1bb", "a\u200bb", 5, None])
def test_an_unusable_namespace_is_a_clear_error(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="namespace"):
        EpisodicMemory(InMemoryProvider(), namespace=bad)  # type: ignore[arg-type]
