"""The storage contract as a test suite: run it against your own provider in a few lines.

In a pytest module of your project (pytest is needed; ``import deepcrew_episodic`` never
imports it)::

    import pytest
    from deepcrew_episodic.testing import ProviderConformance, Store

    from mypackage import PostgresProvider  # a MemoryProvider subclass


    class TestPostgresProvider(ProviderConformance):
        @pytest.fixture
        def store(self, postgres_url: str) -> Store:
            # An empty store: every test starts from one. Store.open() must give a new
            # provider on the same data each time it is called.
            return Store(PostgresProvider, postgres_url)

The kit is split by capability, one class each; ``ProviderConformance`` combines them all:

* :class:`KeyValueContract` (every provider): reads, batches, exact prefixes with any
  character, ``write_if``, deletes, bytes another program left undecodable.
* :class:`AtomicCounters` (every provider): ``increment`` and ``increment_and_write`` with
  ``read`` and ``fresh``, counters that are not counts, one winner among concurrent tasks.
* :class:`MultiProcess` (when the provider declares ``shared_across_processes``): worker
  processes on the same store, claims and lost updates between them, a writer killed with
  SIGKILL mid-record. The ``store`` must then be picklable (a module-level class or function as
  ``opener``).
* :class:`EpisodeLog` (every provider): the episode log's guarantees on the provider: the
  ring, clear and namespaces isolated, corrupt data left in place, counters repaired from the
  records, grades, uses and vectors going with their episode, constant round trips.

A capability the provider does not declare is skipped; a provider may also subclass only the
capabilities it has (``class TestMine(KeyValueContract, AtomicCounters)``). At the end of the
run, pytest prints what each provider declared and passed (:mod:`.pytest_plugin`). Tests run
with the anyio pytest plugin (on asyncio unless an ``anyio_backend`` fixture says otherwise).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._capability import Capability
    from ._counters import AtomicCounters
    from ._episode_log import EpisodeLog
    from ._in_store_index import InStoreIndex
    from ._key_value import KeyValueContract
    from ._processes import MultiProcess
    from ._store import Store
    from ._suite import ProviderConformance

__all__ = [
    "AtomicCounters",
    "Capability",
    "EpisodeLog",
    "InStoreIndex",
    "KeyValueContract",
    "MultiProcess",
    "ProviderConformance",
    "Store",
]

# Where each name lives; the kit's test classes need pytest, the Store does not.
_KIT = {
    "AtomicCounters": "_counters",
    "Capability": "_capability",
    "EpisodeLog": "_episode_log",
    "InStoreIndex": "_in_store_index",
    "KeyValueContract": "_key_value",
    "MultiProcess": "_processes",
    "ProviderConformance": "_suite",
}


def __getattr__(name: str) -> Any:
    # Lazy, so that a worker process (which imports the Store) never imports pytest.
    if name == "Store":
        from ._store import Store

        return Store
    if name in _KIT:
        import importlib
        import sys

        if f"{__name__}._capability" not in sys.modules:
            try:
                import pytest
            except ImportError as exc:
                from .._exceptions import MissingDependencyError

                raise MissingDependencyError(
                    "deepcrew_episodic.testing needs pytest: pip install pytest"
                ) from exc
            # Its asserts then explain a failure the way the caller's own tests do.
            pytest.register_assert_rewrite(*(f"{__name__}.{module}" for module in _KIT.values()))
        return getattr(importlib.import_module(f".{_KIT[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
