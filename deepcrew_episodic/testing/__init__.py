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

Every guarantee the episode log relies on becomes a test of that class: round trips, batches,
``write_if``, ``increment_and_write`` with ``read``, concurrency between tasks, namespaces,
corrupt data, exact key prefixes, and the log's own guarantees on top of the provider. What
a provider declares (``shared_across_processes``) adds the multi-process and SIGKILL tests,
which open the same store in worker processes: the ``store`` must then be picklable (a
module-level class or function as ``opener``). Tests run with the anyio pytest plugin (on
asyncio unless an ``anyio_backend`` fixture says otherwise).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._store import Store
    from ._suite import ProviderConformance

__all__ = ["ProviderConformance", "Store"]


def __getattr__(name: str) -> Any:
    # Lazy, so that a worker process (which imports the Store) never imports pytest.
    if name == "Store":
        from ._store import Store

        return Store
    if name == "ProviderConformance":
        if "deepcrew_episodic.testing._suite" not in __import__("sys").modules:
            try:
                import pytest
            except ImportError as exc:
                from .._exceptions import MissingDependencyError

                raise MissingDependencyError(
                    "deepcrew_episodic.testing needs pytest: pip install pytest"
                ) from exc
            # Its asserts then explain a failure the way the caller's own tests do.
            pytest.register_assert_rewrite("deepcrew_episodic.testing._suite")
        from ._suite import ProviderConformance

        return ProviderConformance
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
