"""litellm, imported when a model is first called, and never on the event loop's thread.

Importing litellm reads hundreds of files (seconds of blocking I/O): done inside a coroutine it
would stall every other task of the loop, so the first caller imports it in a worker thread and
every later one gets the module at once. ``import deepcrew_episodic`` never loads it.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

__all__ = ["close_litellm_clients", "load_litellm"]


async def load_litellm() -> ModuleType:
    """The ``litellm`` module, imported off the event loop the first time."""
    module = sys.modules.get("litellm")
    if module is not None and getattr(module, "acompletion", None) is not None:
        return module
    import anyio.to_thread

    return await anyio.to_thread.run_sync(importlib.import_module, "litellm")


async def close_litellm_clients() -> None:
    """Close the HTTP clients litellm has cached; called by the command line as its event
    loop ends.

    litellm caches its clients per event loop and never closes those of a loop that has ended:
    their connections would stay open until the collector found them, unclosed. This closes
    every client litellm has cached, whichever loop made it, so it is only for a program that
    owns the process's use of litellm, as the command line does. Nothing to do if litellm was
    never loaded."""
    module = sys.modules.get("litellm")
    close = getattr(module, "close_litellm_async_clients", None) if module is not None else None
    if close is not None:
        await close()
