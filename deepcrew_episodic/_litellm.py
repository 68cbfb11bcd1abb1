"""litellm, imported when a model is first called, and never on the event loop's thread.

Importing litellm reads hundreds of files (seconds of blocking I/O): done inside a coroutine it
would stall every other task of the loop, so the first caller imports it in a worker thread and
every later one gets the module at once. ``import deepcrew_episodic`` never loads it.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

__all__ = ["load_litellm"]


async def load_litellm() -> ModuleType:
    """The ``litellm`` module, imported off the event loop the first time."""
    module = sys.modules.get("litellm")
    if module is not None and getattr(module, "acompletion", None) is not None:
        return module
    import anyio.to_thread

    return await anyio.to_thread.run_sync(importlib.import_module, "litellm")
