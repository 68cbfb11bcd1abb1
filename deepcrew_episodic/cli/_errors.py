"""The command's own failures: what ends a command with one line on stderr."""

from __future__ import annotations

__all__ = ["CliError", "UsageError"]


class CliError(Exception):
    """A failure reported as one line on stderr; exit status 1."""


class UsageError(CliError):
    """A command line that cannot be run as given; exit status 2."""
