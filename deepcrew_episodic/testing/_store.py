"""How the conformance suite opens a store, here and in a worker process."""

from __future__ import annotations

import os
import pickle
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ..providers import MemoryProvider

__all__ = ["Store", "StoreSpec", "worker"]


class StoreSpec(Protocol):
    """What the suite needs from the ``store`` fixture (:class:`Store` is one)."""

    def open(self) -> MemoryProvider:
        """A new provider on the store's data (each call may be in another process)."""
        ...

    def write_raw(self, key: bytes, value: bytes) -> None:
        """Store raw bytes behind the provider's back, as another program could; raise
        :class:`NotImplementedError` when the store holds no bytes (the test is skipped)."""
        ...


@dataclass(frozen=True)
class Store:
    """Where a provider keeps its data: enough to open the same store again, in this process
    or in a worker process.

    Parameters
    ----------
    opener:
        Called with *target* to open a provider: the provider class itself, or a function.
        For the multi-process tests it must be picklable, i.e. defined at module level.
    target:
        What locates the data: a path, a URL, a database name.
    raw_writer:
        Optional: ``raw_writer(target, key, value)`` writes bytes that are not UTF-8 into the
        store without the provider, which turns on the test of how they are read back.

    Example::

        Store(SQLiteMemoryProvider, str(tmp_path / "episodes.db"))
    """

    opener: Callable[[str], MemoryProvider]
    target: str = ""
    raw_writer: Callable[[str, bytes, bytes], None] | None = None

    def open(self) -> MemoryProvider:
        return self.opener(self.target)

    def write_raw(self, key: bytes, value: bytes) -> None:
        if self.raw_writer is None:
            raise NotImplementedError("this store has no raw_writer")
        self.raw_writer(self.target, key, value)


def worker(store: StoreSpec, mode: str, *args: object) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of a worker process working on *store* (see
    ``_worker.py``). The worker sees this process's ``sys.path``, so it can import the module
    that defines the store and its opener (a test module, an example)."""
    try:
        spec = pickle.dumps(store).hex()
    except (pickle.PicklingError, AttributeError, TypeError) as exc:
        raise TypeError(
            f"the store {store!r} cannot be sent to a worker process ({exc}); define its "
            f"opener at module level, or do not declare shared_across_processes"
        ) from exc
    command = [sys.executable, "-m", "deepcrew_episodic.testing._worker", spec, mode]
    path = os.pathsep.join(entry or os.getcwd() for entry in sys.path)
    return [*command, *map(str, args)], {**os.environ, "PYTHONPATH": path}
