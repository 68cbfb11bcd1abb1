"""``main``: parse, open the store, run one command, and turn any failure into one line."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from ._errors import CliError, UsageError
from ._grade import cmd_grade
from ._mcp import cmd_mcp
from ._output import (
    OUTPUT,
    PROG,
    REDACTED,
    SafeFormatter,
    Scrubber,
    clean,
    last_words,
    quantity,
    without_traceback,
)
from ._parse import (
    DISTILL_API_BASE_ENV,
    EMBEDDER_API_BASE_ENV,
    STORE_ENV,
    build_parser,
    check_usage,
)
from ._read import cmd_export, cmd_history, cmd_recall, cmd_stats, cmd_timeline
from ._serve import cmd_serve
from ._store import Settings, make_memory, open_store, run_now
from ._write import (
    cmd_backfill,
    cmd_clear,
    cmd_forget,
    cmd_import,
    cmd_record,
    cmd_reembed,
    cmd_shrink,
    cmd_sweep,
)

if TYPE_CHECKING:
    from ..providers import MemoryProvider

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line *argv* (default ``sys.argv[1:]``); return the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # The secrets are known before anything can print: argparse echoes arguments in errors.
    OUTPUT.scrub = Scrubber()
    ambient = (STORE_ENV, EMBEDDER_API_BASE_ENV, DISTILL_API_BASE_ENV)
    for given in (*argv, *(os.environ.get(name, "") for name in ambient)):
        OUTPUT.scrub.learn(given)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(SafeFormatter())
    logger = logging.getLogger("deepcrew_episodic")
    logger.addHandler(handler)
    try:
        return _main(argv)
    finally:
        logger.removeHandler(handler)
        if OUTPUT.scrub.removed_from_data:
            last_words(
                f"{PROG}: replaced {quantity(OUTPUT.scrub.removed_from_data, 'occurrence')} of the store "
                f"URL's credentials in the output with {REDACTED}"
            )


def _main(argv: list[str]) -> int:
    from .. import EpisodicMemoryError

    settings: Settings | None = None
    try:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as exc:  # --help, --version, or a usage error argparse reported
            return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
        check_usage(args)
        settings = Settings(args)
        provider = open_store(settings, args.command)
        if settings.loop_free:
            return run_now(_run(args, settings, provider))
        import anyio

        return anyio.run(_run, args, settings, provider, backend="asyncio")
    except UsageError as exc:
        last_words(f"{PROG}: error: {exc}")
        return 2
    except (CliError, EpisodicMemoryError, OSError) as exc:
        if isinstance(exc, BrokenPipeError):
            return _stdout_gone()
        last_words(f"{PROG}: error: {_explain(exc, settings)}")
        return 1
    except KeyboardInterrupt:
        last_words(f"{PROG}: interrupted")
        return 130
    except Exception as exc:
        # Not one of ours (a bug, or a library's error nobody translated): still one line,
        # escaped and scrubbed like everything else, never a traceback.
        message = " ".join(clean(str(exc)).split())
        last_words(
            f"{PROG}: error: unexpected {type(exc).__name__}" + f": {message}" * bool(message)
        )
        return 1


async def _run(args: argparse.Namespace, settings: Settings, provider: MemoryProvider) -> int:
    try:
        return await _command(args, settings, provider)
    finally:
        await _close_model_clients()


async def _close_model_clients() -> None:
    """Close the HTTP clients litellm cached, as the command's event loop ends.

    litellm keeps its clients per event loop and never closes those of a loop that has ended:
    their connections would stay open until the collector found them. This closes every client
    it cached, whichever loop made it: right for the command line, which owns the process.
    Nothing to do when no model was called (litellm never loaded)."""
    litellm = sys.modules.get("litellm")
    close = getattr(litellm, "close_litellm_async_clients", None) if litellm else None
    if close is not None:
        await close()


async def _command(args: argparse.Namespace, settings: Settings, provider: MemoryProvider) -> int:
    async with provider:
        memory = await make_memory(provider, settings, args.command)
        handlers: dict[str, Callable[[], Awaitable[int]]] = {
            "record": lambda: cmd_record(args, memory, settings.distill_params),
            "grade": lambda: cmd_grade(args, memory),
            "recall": lambda: cmd_recall(args, memory),
            "timeline": lambda: cmd_timeline(args, memory),
            "history": lambda: cmd_history(args, memory),
            "stats": lambda: cmd_stats(args, memory, settings.label),
            "export": lambda: cmd_export(args, memory, settings),
            "import": lambda: cmd_import(args, memory),
            "forget": lambda: cmd_forget(args, memory),
            "clear": lambda: cmd_clear(args, memory, settings.label),
            "sweep": lambda: cmd_sweep(args, memory),
            "shrink": lambda: cmd_shrink(args, memory, settings.label),
            "backfill": lambda: cmd_backfill(args, memory),
            "reembed": lambda: cmd_reembed(args, memory, settings.label),
            "serve": lambda: cmd_serve(args, memory, settings.label),
            "mcp": lambda: cmd_mcp(args, memory, settings.label),
        }
        return await handlers[args.command]()


_REDIS_SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster")


def _explain(exc: BaseException, settings: Settings | None) -> str:
    """One line for a failure the user can act on (escaped and scrubbed on the way out)."""
    from .. import StorageError

    # A message may quote stored text or a value read from a file: cleaned before any use.
    message = " ".join(clean(without_traceback(str(exc))).split()) or type(exc).__name__
    cause = exc.__cause__
    scheme = settings.store.partition("://")[0].lower() if settings is not None else ""
    unreachable = cause is not None and (
        isinstance(cause, OSError) or type(cause).__name__ in {"ConnectionError", "TimeoutError"}
    )
    if settings is not None and scheme in _REDIS_SCHEMES and unreachable:
        return f"cannot reach redis at {settings.label}: {' '.join(clean(str(cause)).split())}"
    if isinstance(exc, StorageError) and settings is not None and settings.label not in message:
        return f"{settings.label}: {message}"
    return message


def _stdout_gone() -> int:
    # The reader of our output went away (`export | head`): stop quietly, and keep Python
    # from reporting the failed flush of stdout at exit.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 0
