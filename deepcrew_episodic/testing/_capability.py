"""What a capability of the conformance kit is: a class of tests, and what declares it.

Each capability is one class (one module) of tests that call the provider. A capability is
either required of every provider (``declared_by = None``) or declared by a class attribute of
the provider (``shared_across_processes``): a provider that does not declare it has its tests
skipped, and the kit's report says so. Defining a subclass with its own ``capability`` name
registers it: the report lists it for every provider, and ``ProviderConformance`` runs it
once it is one of its bases.
"""

from __future__ import annotations

import warnings
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import pytest

from .. import Episode
from ..providers import MemoryProvider
from . import pytest_plugin
from ._store import StoreSpec

__all__ = ["CAPABILITIES", "Capability", "ep", "slow"]

CAPABILITIES: list[type[Capability]] = []
"""Every capability class, in the order they were defined (the report's order)."""


class Capability:
    """Base of the kit's capability classes; see :mod:`deepcrew_episodic.testing`.

    A subclass names itself (``capability``), says what the provider must declare for it to
    run (``declared_by``, a ``MemoryProvider`` class attribute that is true when declared;
    ``None``: every provider), and holds the tests. The ``store`` fixture is the provider's
    own; the ``provider`` fixture opens it once per test.
    """

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.anyio]

    #: The name the report gives this capability ("" on the base and on a provider's class).
    capability: ClassVar[str] = ""
    #: The provider class attribute that declares it, or None when every provider needs it.
    declared_by: ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("capability"):
            CAPABILITIES.append(cls)

    @pytest.fixture
    def store(self) -> StoreSpec:
        """An empty store. Subclasses override this fixture."""
        pytest.fail(f"{type(self).__name__} must define a `store` fixture returning a Store")

    @pytest.fixture
    async def provider(self, store: StoreSpec) -> AsyncIterator[MemoryProvider]:
        async with store.open() as opened:
            yield opened

    # Two fixtures, in this order (pytest sets up autouse fixtures as they are defined): the
    # first names the test's capability before anything can fail, so that a store that does
    # not open still counts against it; the second adds what the provider declares.

    @pytest.fixture(autouse=True)
    def _conformance_capability(self, request: pytest.FixtureRequest) -> None:
        pytest_plugin.register(request.config)
        owner = _owner(type(self), request.node.originalname)
        if owner is not None:
            pytest_plugin.tag(request.node, _group(request), owner.capability)

    @pytest.fixture(autouse=True)
    def _conformance_declared(self, request: pytest.FixtureRequest) -> None:
        owner = _owner(type(self), request.node.originalname)
        if owner is None:
            return  # a test of the provider's own class: it may not want a provider at all
        provider: MemoryProvider = request.getfixturevalue("provider")
        kind = type(provider)
        states = [(c.capability, _state(c, kind), isinstance(self, c)) for c in _in_order()]
        pytest_plugin.declare(request.node, kind.__name__, states)
        if owner.declared_by and not getattr(kind, owner.declared_by, False):
            pytest.skip(f"{kind.__name__} does not declare {owner.declared_by}")


def _owner(cls: type, test: str) -> type[Capability] | None:
    """The capability that states *test*: the first capability class among *cls*'s bases
    that defines it (a provider's class that overrides a kit test still counts it there);
    None for a test of the provider's class's own."""
    for base in cls.__mro__:
        if base in CAPABILITIES and test in base.__dict__:
            return base
    return None


def _in_order() -> list[type[Capability]]:
    """Every capability, in the order ``ProviderConformance`` lists them, then any other
    (by name here: this module is imported by the ones that define them)."""
    import importlib

    # Every kit capability is listed in a report, imported or not by the provider's tests
    # (by name: a static import would make the modules that define them import this one back).
    importlib.import_module(f"{__package__}._suite")
    known = {name: i for i, name in enumerate(_KIT_ORDER)}
    return sorted(CAPABILITIES, key=lambda c: known.get(c.capability, len(known)))


# The kit's own capabilities, in ProviderConformance's order (others follow, as defined).
_KIT_ORDER = (
    "key/value contract",
    "atomic counters",
    "multi-process",
    "episode log",
    "in-store index",
)


def _state(capability: type[Capability], kind: type[MemoryProvider]) -> str:
    if capability.declared_by is None:
        return "required"
    return "declared" if getattr(kind, capability.declared_by, False) else "not declared"


def _group(request: pytest.FixtureRequest) -> str:
    """The report's heading for a test: its class, and the store it runs on when the ``store``
    fixture is parametrized (one class over several providers)."""
    name: str = request.node.cls.__qualname__ if request.node.cls else request.node.name
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and "store" in callspec.params:
        param = callspec.params["store"]
        name += f"[{param if isinstance(param, str) else callspec.id}]"
    return name


def ep(query: str, **fields: Any) -> Episode:
    return Episode(query=query, response=fields.pop("response", "ok"), **fields)


def slow(test: Any) -> Any:
    """Mark *test* ``slow`` where the project registers that marker (``-m "not slow"`` skips
    the multi-process tests); leave it unmarked where the marker is unknown."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", pytest.PytestUnknownMarkWarning)
        try:
            return pytest.mark.slow(test)
        except (pytest.fail.Exception, pytest.PytestUnknownMarkWarning):
            return test
