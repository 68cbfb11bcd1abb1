"""The store and the memory a command works on, opened through the public API only.

``open_provider`` decides what ``--store`` names; ``EpisodicMemory.open`` reads the log's own
ring size. A reading command on a JSON file works on a snapshot of it and runs without an event
loop (:func:`run_now`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Coroutine, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ._errors import CliError, UsageError
from ._output import OUTPUT, ambiguous_url, note, quantity
from ._parse import (
    DEFAULT_NAMESPACE,
    DISTILL_API_BASE_ENV,
    EMBEDDER_API_BASE_ENV,
    EMBEDDER_ENV,
    MAX_AGE_ENV,
    MAX_EPISODES_ENV,
    NAMESPACE_ENV,
    STORE_ENV,
    parse_duration,
    positive_int,
    zone_name,
)

if TYPE_CHECKING:
    from .. import Embedder, Episode, EpisodicMemory, Grade
    from ..providers import MemoryProvider

T = TypeVar("T")

# The MCP server records runs: a store it is pointed at for the first time is created.
CREATES = frozenset({"record", "import", "mcp"})
READS = frozenset({"recall", "timeline", "history", "stats", "export"})
# The commands a memory with an embedder changes: recall ranks by meaning too, record and import
# store vectors, stats counts them. The others never need it (nor numpy, nor litellm).
USE_EMBEDDER = frozenset(
    {"recall", "history", "record", "import", "stats", "backfill", "reembed", "serve", "mcp"}
)
NEED_EMBEDDER = frozenset({"backfill", "reembed"})
# The commands that call the embedder (stats only reads stored vectors).
EMBED = USE_EMBEDDER - {"stats"}


class Settings:
    """The resolved shared options."""

    def __init__(self, args: argparse.Namespace) -> None:
        env = os.environ
        store = getattr(args, "store", None) or env.get(STORE_ENV, "")
        if not store:
            raise UsageError(f"no store given: pass --store or set {STORE_ENV}")
        self.store: str = store
        OUTPUT.scrub.learn(store)
        if "://" in store and ambiguous_url(store):
            raise UsageError(
                f"--store {OUTPUT.scrub(store)}: the URL is ambiguous; percent-encode '@', '#', "
                f"'/' and '?' in a user name, password or parameter (%40, %23, %2F, %3F)"
            )
        self.namespace: str = (
            getattr(args, "namespace", None) or env.get(NAMESPACE_ENV) or DEFAULT_NAMESPACE
        )
        max_episodes = getattr(args, "max_episodes", None)
        if max_episodes is None and env.get(MAX_EPISODES_ENV):
            max_episodes = _from_env(MAX_EPISODES_ENV, positive_int)
        # None: the ring size the log was last written with (see make_memory)
        self.max_episodes: int | None = max_episodes
        max_age = getattr(args, "max_age", None)
        if max_age is None and env.get(MAX_AGE_ENV):
            max_age = _from_env(MAX_AGE_ENV, parse_duration)
        self.max_age: timedelta | None = max_age
        self.label = OUTPUT.scrub(store)
        self.embedder_model, self.embedder_api_base = _embedder_options(args, env)
        # litellm arguments for the distillation model (record TRANSCRIPT --distill-model)
        self.distill_params: dict[str, Any] = _distill_params(args, env)
        # Whether this command's memory gets the embedder (see USE_EMBEDDER).
        self.embedding = self.embedder_model is not None and args.command in USE_EMBEDDER
        # A reading command over a JSON file runs without an event loop (see run_now).
        self.loop_free = False
        # The JSON store file, when the store is one (an export takes its permission bits).
        self.file: Path | None = None
        # The zone of the times given on the command line (resolve_times), and of those the
        # viewer's filters take.
        zone = getattr(args, "zone", None)
        self.tz: str | None = (
            zone if zone or args.command not in ("serve", "mcp") else zone_name(args)
        )


def _checked_url(option: str, url: str) -> str:
    """A base URL given for a model server, refused when it is not one or is ambiguous."""
    OUTPUT.scrub.learn(url)
    if "://" not in url:
        # Not echoed: a secret in it is only recognised in a URL.
        raise UsageError(f"{option}: not a URL (give http://host:port/v1)")
    if ambiguous_url(url):
        raise UsageError(
            f"{option} {OUTPUT.scrub(url)}: the URL is ambiguous; percent-encode '@', '#', "
            f"'/' and '?' in a user name or password"
        )
    return url


def _distill_params(args: argparse.Namespace, env: Mapping[str, str]) -> dict[str, Any]:
    if getattr(args, "distill_model", None) is None:
        return {}
    api_base = (args.api_base or env.get(DISTILL_API_BASE_ENV, "")).strip()
    return {"api_base": _checked_url("--api-base", api_base)} if api_base else {}


def _embedder_options(
    args: argparse.Namespace, env: Mapping[str, str]
) -> tuple[str | None, str | None]:
    """``--embedder`` and ``--embedder-api-base`` (or their variables), checked."""
    given = getattr(args, "embedder", None)
    if given is not None and not given.strip():
        raise UsageError("--embedder: give a litellm embedding model name")
    model = (given or env.get(EMBEDDER_ENV, "")).strip() or None
    flag = getattr(args, "embedder_api_base", None)
    api_base = (flag or env.get(EMBEDDER_API_BASE_ENV, "")).strip() or None
    if api_base is not None:
        _checked_url("--embedder-api-base", api_base)
    if flag is not None and model is None:
        raise UsageError(f"--embedder-api-base needs --embedder MODEL (or ${EMBEDDER_ENV})")
    if args.command in NEED_EMBEDDER and model is None:
        raise UsageError(
            f"{args.command}: needs an embedding model: pass --embedder MODEL (or set "
            f"${EMBEDDER_ENV})"
        )
    return model, api_base


def _from_env(name: str, parse: Callable[[str], Any]) -> Any:
    try:
        return parse(os.environ[name])
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"${name}: {exc}") from None


def open_store(settings: Settings, command: str) -> MemoryProvider:
    """The provider ``--store`` names. A file store that does not exist is an error unless the
    command creates it (``record``, ``import``): a typo must not look like an empty memory. A
    reading command on a JSON file gets a snapshot of it (and ``settings.loop_free``)."""
    from .. import ConfigurationError, StorageError
    from ..providers import FileMemoryProvider, open_provider

    try:
        provider = open_provider(settings.store, create=command in CREATES)
        sqlite = sys.modules.get("deepcrew_episodic.providers._sqlite")  # loaded for a .db
        if sqlite is not None and isinstance(provider, sqlite.SQLiteMemoryProvider):
            provider.progress = UpgradeBar()
        if isinstance(provider, FileMemoryProvider):
            # Nothing is open yet: the provider touches the file on its first call only.
            settings.file = provider.path
            # An embedder is called through litellm, which needs an event loop.
            if command in READS and not settings.embedding:
                settings.loop_free = True
                return open_provider(settings.store, snapshot=True)
        return provider
    except ConfigurationError as exc:
        # The store given names no store, or does not parse: the command line is wrong.
        message = OUTPUT.scrub(str(exc))
        if settings.label not in message:
            message = f"--store '{settings.label}': {message}"
        raise UsageError(message) from None
    except StorageError as exc:
        if isinstance(exc.__cause__, FileNotFoundError):
            raise CliError(f"{exc}; 'record' and 'import' create it") from None
        raise


class UpgradeBar:
    """What the command line shows while a store written by an older version is indexed for
    recall on its first open: a bar on a terminal, one line at the start and one at the end
    otherwise (a log keeps them)."""

    def __init__(self) -> None:
        self._started = False

    def __call__(self, done: int, total: int) -> None:
        tty = sys.stderr.isatty()
        if not self._started:
            self._started = True
            note(
                f"indexing {quantity(total, 'record', grouped=True)} of this store for recall (once; it stays usable)"
            )
        if tty:
            width = 30
            filled = width * done // max(1, total)
            sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done:,}/{total:,}")
            if done >= total:
                sys.stderr.write("\n")
            sys.stderr.flush()
        elif done >= total:
            note(f"indexed {quantity(total, 'record', grouped=True)}")


async def make_memory(
    provider: MemoryProvider, settings: Settings, command: str = "stats"
) -> EpisodicMemory:
    """The memory a command works on. Its ring is the log's own unless ``--max-episodes``
    says otherwise; a smaller ``--max-episodes`` only narrows what a reading command shows:
    a writing command keeps the log's ring, since only ``shrink`` deletes by ring size."""
    from .. import EpisodicMemory

    options: dict[str, Any] = {"namespace": settings.namespace, "max_age": settings.max_age}
    if settings.tz:
        options["tz"] = settings.tz
    if settings.embedding:
        options["embedder"] = await make_embedder(settings, command)
    memory = await EpisodicMemory.open(provider, **options)
    ring, given = memory.max_episodes, settings.max_episodes
    if given is None or given == ring:
        return memory
    if command in READS or given > ring:
        return await EpisodicMemory.open(provider, max_episodes=given, **options)
    if settings.namespace not in await EpisodicMemory.namespaces(provider):
        # No log yet: the first write creates it with the ring asked for.
        return await EpisodicMemory.open(provider, max_episodes=given, **options)
    note(
        f"--max-episodes {given} is smaller than the log's ring ({ring}): '{command}' keeps "
        f"{ring}; 'shrink {given}' deletes what falls outside a smaller ring"
    )
    return memory


async def make_embedder(settings: Settings, command: str) -> Embedder:
    """The ``--embedder`` model, through litellm (imported first for a command that calls it:
    see :func:`load_litellm_quietly`)."""
    from .. import LiteLLMEmbedder

    assert settings.embedder_model is not None
    params = {"api_base": settings.embedder_api_base} if settings.embedder_api_base else {}
    embedder = LiteLLMEmbedder(settings.embedder_model, **params)
    if command in EMBED:
        await load_litellm_quietly()
    return embedder


async def load_litellm_quietly() -> None:
    """Import litellm for a command that calls a model: in a worker thread (seconds of file
    reads), before the call, so that the call's timeout measures the model, not the import."""
    import importlib

    import anyio.to_thread

    # Unless told otherwise, litellm fetches its model price list from GitHub on import:
    # seconds of retries and warning lines offline, for prices this command never reads.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

    litellm: Any = await anyio.to_thread.run_sync(importlib.import_module, "litellm")
    # Its "Give Feedback / Get Help" banner is printed to stdout on every error: it would
    # corrupt --json output, and the error itself is reported in one line.
    litellm.suppress_debug_info = True


async def stored(memory: EpisodicMemory) -> list[Episode]:
    """Every stored episode this memory shows, expired ones included (for ids, imports and
    deletions)."""
    return await memory.load(include_expired=True)


# Up to this many episodes, their grades are read one episode at a time.
_FEW = 20


async def grades_of(memory: EpisodicMemory, episodes: Sequence[Episode]) -> list[list[Grade]]:
    """The grades of each of *episodes*, oldest first (``[]`` for an ungraded one): one
    read of every grade, not one per episode."""
    if len(episodes) <= _FEW:
        # A recall's few episodes: read from the store's index, not the whole log.
        return [await memory.grades(episode.id) for episode in episodes]
    by_id: dict[str, list[Grade]] = {}
    for grade in await memory.grades():
        by_id.setdefault(grade.episode_id, []).append(grade)
    return [by_id.get(episode.id, []) for episode in episodes]


def run_now(coro: Coroutine[Any, Any, T]) -> T:
    """Run *coro* to completion on this thread, without an event loop.

    Only for a coroutine that never suspends: every await in it must complete at once, as
    an in-memory provider's and an uncontended lock's do. Importing asyncio and anyio is
    most of a command's start-up time, and a reading command over a file needs neither.
    """
    try:
        coro.send(None)
    except StopIteration as done:
        result: T = done.value
        return result
    coro.close()
    raise RuntimeError(f"{coro!r} suspended: it cannot run without an event loop")


async def off_the_loop(settings: Settings, work: Callable[[], None]) -> None:
    """Run blocking file work in a worker thread when an event loop is running; a loop-free
    command (see run_now) has no loop to block, and no anyio to ask."""
    if settings.loop_free:
        work()
        return
    import anyio.to_thread

    await anyio.to_thread.run_sync(work)


async def stored_namespaces(provider: MemoryProvider) -> list[str]:
    """The namespaces that hold a log in *provider*, sorted."""
    from .. import EpisodicMemory

    return await EpisodicMemory.namespaces(provider)


async def hint_if_empty(memory: EpisodicMemory) -> None:
    """A namespace with no key at all is more often a typo than an empty memory: say so."""
    if (await memory.stats()).stored_bytes:
        return
    names = await stored_namespaces(memory.backend)
    where = f"; namespaces in this store: {', '.join(names)}" if names else ""
    note(f"namespace '{memory.namespace}' holds no episodes{where}")
