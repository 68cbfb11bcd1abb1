"""The public surface is what we mean it to be: named, sorted, importable, and nothing else."""

from __future__ import annotations

import subprocess
import sys

import pytest

import deepcrew_episodic
import deepcrew_episodic.providers
import deepcrew_episodic.testing

PUBLIC = {
    "Agent",
    "AgentError",
    "AgentResult",
    "AgentStream",
    "ConfigurationError",
    "CorruptDataError",
    "Counters",
    "DistillationError",
    "Embedder",
    "EmbedderMismatchError",
    "EmbeddingError",
    "Episode",
    "EpisodicHook",
    "EpisodicMemory",
    "EpisodicMemoryError",
    "EventType",
    "FollowUp",
    "FollowUpError",
    "FollowUpModel",
    "Grade",
    "History",
    "InvalidEpisodeError",
    "LLMVerifier",
    "LiteLLMEmbedder",
    "LoopConfig",
    "MaxTurnsError",
    "MemoryStats",
    "MissingDependencyError",
    "Outcome",
    "Page",
    "Ranking",
    "Recalled",
    "Recorded",
    "Redactor",
    "Scored",
    "StorageError",
    "StorageTimeoutError",
    "StorageUnavailableError",
    "StreamEvent",
    "StreamPolicy",
    "SyncEpisodicMemory",
    "Telemetry",
    "ToolError",
    "Verdict",
    "Verifier",
    "VerifierError",
    "__version__",
    "distill",
    "outcome_for_score",
    "parse_time",
    "read_followup",
    "run_agent",
    "stream_agent",
}
PROVIDERS = {
    "FileMemoryProvider",
    "InMemoryProvider",
    "MemoryProvider",
    "PostgresMemoryProvider",
    "RedisMemoryProvider",
    "SQLiteMemoryProvider",
    "open_provider",
    "register_provider",
}
TESTING = {
    "AtomicCounters",
    "Capability",
    "EpisodeLog",
    "InStoreIndex",
    "KeyValueContract",
    "MultiProcess",
    "ProviderConformance",
    "Store",
}


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        (deepcrew_episodic, PUBLIC),
        (deepcrew_episodic.providers, PROVIDERS),
        (deepcrew_episodic.testing, TESTING),
    ],
)
def test_all_is_exactly_the_public_surface_and_sorted(module: object, expected: set[str]) -> None:
    names = module.__all__  # type: ignore[attr-defined]
    assert set(names) == expected
    assert list(names) == sorted(names)
    for name in names:
        value = getattr(module, name)
        if name not in {"__version__", "Outcome"}:  # Outcome is a Literal alias
            assert getattr(value, "__module__", "").startswith("deepcrew_episodic"), name


def test_every_public_class_lives_in_a_private_module() -> None:
    for name in PUBLIC - {"__version__", "Outcome"}:
        module = getattr(deepcrew_episodic, name).__module__
        assert module.split(".")[-1].startswith("_"), f"{name} is defined in {module}"


def test_unknown_names_raise_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        deepcrew_episodic.Nope  # noqa: B018
    with pytest.raises(AttributeError):
        deepcrew_episodic.providers.Nope  # noqa: B018
    with pytest.raises(AttributeError):
        deepcrew_episodic.testing.Nope  # noqa: B018


def test_exceptions_share_one_root() -> None:
    root = deepcrew_episodic.EpisodicMemoryError
    errors = [
        v
        for n in PUBLIC - {"__version__"}
        if isinstance(v := getattr(deepcrew_episodic, n), type) and issubclass(v, BaseException)
    ]
    assert len(errors) >= 8
    assert all(issubclass(e, root) for e in errors)


def test_the_memory_itself_needs_no_pydantic() -> None:
    # Only the runner (tool schemas) uses pydantic; recording and recalling do not.
    code = (
        "import sys\n"
        "from deepcrew_episodic import Episode, EpisodicMemory, EpisodicHook\n"
        "from deepcrew_episodic.providers import FileMemoryProvider, SQLiteMemoryProvider\n"
        "print(','.join(m for m in ('pydantic', 'litellm') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""


def test_a_bare_import_loads_neither_litellm_nor_redis_nor_pydantic() -> None:
    code = (
        "import sys, deepcrew_episodic, deepcrew_episodic.providers\n"
        "heavy = [m for m in ('litellm', 'redis', 'pydantic', 'psycopg') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # providers needs the ABC only; the package itself defers everything
    assert done.stdout.strip() == ""
    assert "litellm" not in done.stdout
    assert "redis" not in done.stdout


def test_the_conformance_report_plugin_loads_nothing_of_the_library() -> None:
    """pytest may load the report's plugin in any run (an entry point, ``-p``): it must cost
    nothing there, and must not import the kit (its asserts are rewritten when imported)."""
    code = (
        "import sys, deepcrew_episodic.testing.pytest_plugin\n"
        "loaded = [m for m in sys.modules if m.startswith(('deepcrew_episodic.', 'anyio'))]\n"
        "print(','.join(sorted(loaded)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == [
        "deepcrew_episodic.testing,deepcrew_episodic.testing.pytest_plugin"
    ]
