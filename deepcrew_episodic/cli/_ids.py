"""Episode ids on the command line: a full id, or a prefix of one, as git takes commits.

A listing shows 12 characters of an id; any unambiguous prefix of at least :data:`MIN_PREFIX`
characters names its episode. An ambiguous one is refused with its candidates, a shorter one
as too short (four characters are what one reads and types off a listing; fewer match too much
by chance).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ._errors import CliError
from ._output import clean, one_line, short_id

if TYPE_CHECKING:
    from .. import Episode

MIN_PREFIX = 4
# The candidates an ambiguous prefix lists before "and N more" (the error stays one line).
_SHOWN = 5


def resolve_id(
    given: str,
    episodes: Sequence[Episode],
    is_expired: Callable[[Episode], bool],
    *,
    nothing: str,
) -> str | None:
    """The id of *episodes* that *given* names: itself when an episode has it, else the one
    id it is a prefix of; ``None`` when no id starts with it. Raises :class:`CliError`
    (ending in *nothing*, what was not done) for an ambiguous or too short prefix."""
    if any(ep.id == given for ep in episodes):
        return given
    matches = sorted((ep for ep in episodes if ep.id.startswith(given)), key=lambda ep: ep.id)
    if not matches:
        return None
    if len(given) < MIN_PREFIX:
        raise CliError(
            f"id prefix '{clean(given)}' is too short: give at least {MIN_PREFIX} characters "
            f"of the id; {nothing}"
        )
    if len(matches) == 1:
        return matches[0].id
    more = f", and {len(matches) - _SHOWN} more" if len(matches) > _SHOWN else ""
    listed = ", ".join(_candidate(ep, matches, is_expired) for ep in matches[:_SHOWN])
    raise CliError(
        f"id prefix '{clean(given)}' is ambiguous: the candidates are {listed}{more}; "
        f"give more characters of the id; {nothing}"
    )


def _candidate(
    episode: Episode, matches: Sequence[Episode], is_expired: Callable[[Episode], bool]
) -> str:
    # The prefix a listing shows, or the whole id when that does not tell the candidates apart.
    apart = len({short_id(ep.id) for ep in matches}) == len(matches)
    shown = short_id(episode.id) if apart else clean(episode.id)
    # An expired episode's text must not reach any output: its id alone.
    what = "expired" if is_expired(episode) else one_line(episode.query, 40)
    return f"{shown} ({what})"
