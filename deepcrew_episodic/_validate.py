"""Argument checks, written once and used by every public entry point.

Each check returns the value (converted where that is lossless, an int to a float) or raises
:class:`~deepcrew_episodic.ConfigurationError` naming the argument and what it holds. ``bool`` is
never taken for a number: ``recall_k=True`` is a mistake, not the integer 1.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from datetime import timedelta
from typing import Any

from ._exceptions import ConfigurationError

__all__ = [
    "boolean",
    "integer",
    "number",
    "optional_integer",
    "optional_number",
    "positive_duration",
    "shown",
    "strings",
]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def integer(
    name: str, value: Any, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    """*value* as an int (not a bool, not a float), within bounds."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigurationError(f"{name} must be an integer, not {_show(value)}")
    if minimum is not None and value < minimum:
        raise ConfigurationError(f"{name} must be an integer >= {minimum}, not {_show(value)}")
    if maximum is not None and value > maximum:
        raise ConfigurationError(f"{name} must be an integer <= {maximum:,}, not {_show(value)}")
    return value


def optional_integer(name: str, value: Any, *, minimum: int | None = None) -> int | None:
    return None if value is None else integer(name, value, minimum=minimum)


def number(
    name: str,
    value: Any,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    exclusive_minimum: bool = False,
) -> float:
    """*value* as a finite float (an int or a float, not a bool, not a string), within bounds."""
    if not _is_number(value):
        raise ConfigurationError(f"{name} must be a number, not {_show(value)}")
    try:
        result = float(value)
    except OverflowError:  # an int beyond any float
        raise ConfigurationError(f"{name} must be a finite number, not {_show(value)}") from None
    if not math.isfinite(result):
        raise ConfigurationError(f"{name} must be a finite number, not {_show(value)}")
    if minimum is not None and (result <= minimum if exclusive_minimum else result < minimum):
        relation = ">" if exclusive_minimum else ">="
        raise ConfigurationError(f"{name} must be {relation} {minimum:g}, not {_show(value)}")
    if maximum is not None and result > maximum:
        raise ConfigurationError(f"{name} must be <= {maximum:g}, not {_show(value)}")
    return result


def optional_number(
    name: str,
    value: Any,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    exclusive_minimum: bool = False,
) -> float | None:
    if value is None:
        return None
    return number(
        name, value, minimum=minimum, maximum=maximum, exclusive_minimum=exclusive_minimum
    )


def positive_duration(name: str, value: Any) -> timedelta:
    """A :class:`~datetime.timedelta` longer than zero."""
    if not isinstance(value, timedelta) or value <= timedelta(0):
        raise ConfigurationError(f"{name} must be a positive timedelta, not {_show(value)}")
    return value


def boolean(name: str, value: Any) -> bool:
    """*value*, which must be ``True`` or ``False`` (``"no"`` is not false)."""
    if not isinstance(value, bool):
        raise ConfigurationError(f"{name} must be True or False, not {_show(value)}")
    return value


def strings(name: str, value: Any, *, one: bool = False) -> list[str]:
    """*value* as a list of strings: a list, tuple, set or other collection of them (or, with
    *one*, a single string, which is never taken for the collection of its characters)."""
    if isinstance(value, str):
        if one:
            return [value]
        raise ConfigurationError(
            f"{name} must be a collection of strings, not the string {_show(value)}"
        )
    if isinstance(value, bytes | bytearray | dict) or not isinstance(value, Collection):
        raise ConfigurationError(
            f"{name} must be {'a string or ' if one else ''}a collection of strings, "
            f"not {_show(value)}"
        )
    items = list(value)
    for item in items:
        if not isinstance(item, str):
            raise ConfigurationError(f"{name} must hold strings only, not {_show(item)}")
    return items


def shown(value: Any) -> str:
    """*value* as an error quotes it: its repr redacted with the built-in rules, with hidden
    characters spelled out, then cut to 80 characters (a stored or given value may hold a
    secret, or be megabytes long); a huge integer by its size (its repr may not exist)."""
    from ._redact import safe_message

    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    return safe_message(repr(value), 80)


_show = shown
