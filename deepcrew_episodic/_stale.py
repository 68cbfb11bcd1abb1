"""The store's recall index disagreeing with itself: the error that says so, and the guard
that turns a value of the index that does not read into it (both read by the log, the index
and the providers, so they live apart from all three)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

__all__ = ["StaleIndexError", "index_read"]

P = ParamSpec("P")
R = TypeVar("R")


class StaleIndexError(Exception):
    """The store's index disagrees with itself (edited behind the library's back): the caller
    rebuilds it, or reads the log in process instead."""


def index_read(read: Callable[P, R]) -> Callable[P, R]:
    """A reader's method, whose values an edit of the index may have made unreadable (a seq
    that is text, a count that is not a number): what it cannot read is a ``StaleIndexError``,
    as any other disagreement of the index, rather than a ValueError out of recall."""

    @functools.wraps(read)
    def reading(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return read(*args, **kwargs)
        except (ValueError, TypeError, OverflowError) as exc:
            raise StaleIndexError(f"a value of the index does not read ({exc})") from exc

    return reading
