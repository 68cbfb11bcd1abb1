"""The whole conformance kit in one class: every capability a provider can have.

Each test reads what the provider declares (``shared_across_processes``,
``atomic_increment_and_write``) to decide what to run and what to assert; none guesses from a
name.
"""

from __future__ import annotations

from ._counters import AtomicCounters
from ._episode_log import EpisodeLog
from ._in_store_index import InStoreIndex
from ._key_value import KeyValueContract
from ._processes import MultiProcess

__all__ = ["ProviderConformance"]


# One more capability is one more module and one more base here: its tests then run for every
# ProviderConformance subclass, and the report lists it (a Capability subclass registers
# itself). Bases are listed in the report's order.
class ProviderConformance(KeyValueContract, AtomicCounters, MultiProcess, EpisodeLog, InStoreIndex):
    """Every capability of the kit. Subclass it in a test module (as ``Test<YourProvider>``)
    and define the ``store`` fixture; see :mod:`deepcrew_episodic.testing`.

    The capabilities a provider does not declare are skipped, and the report at the end of
    the run says which were declared and what passed. To test only some capabilities,
    subclass those classes instead (``class TestMine(KeyValueContract, AtomicCounters)``).

    Override :meth:`check_after_crashes` to add what only your store can check after the
    SIGKILL test (no temporary files left, say).
    """
