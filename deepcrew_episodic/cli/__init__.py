"""``deepcrew-episodic``: look inside an episodic memory, and make it forget.

Usage: ``deepcrew-episodic [--store STORE] [--namespace NS] COMMAND ...`` (``--store`` and
``--namespace`` may also follow the command). ``docs/cli.md`` is the user guide.

Exit status: 0 success, 2 usage error, 1 any other failure. A failure is one line on stderr,
never a traceback, whatever raised it.

A thin layer over the public API: the store is opened with
:func:`deepcrew_episodic.providers.open_provider`, the memory with
:meth:`deepcrew_episodic.EpisodicMemory.open`, and every command calls public methods only
(a test walks this package's syntax tree to keep it so). One module per concern:

* ``_parse``: the grammar and the values it accepts;
* ``_output``: what reaches the terminal, escaped and scrubbed of the store's secrets;
* ``_store``: the store and the memory a command works on;
* ``_read``: ``recall``, ``timeline``, ``stats``, ``export``;
* ``_grade``: ``grade``, an outcome learnt after the run;
* ``_write``: ``record`` (from flags, a file of episodes, or a transcript it distils),
  ``import``, ``forget``, ``clear``, ``sweep``, ``shrink``, and
  ``backfill`` and ``reembed`` (vectors for recall by meaning, with ``--embedder``);
* ``_main``: :func:`main`, and one line for any failure.

Parsing is argparse's, not click's or typer's: start-up time is a measured target (``recall``
on a file store answers in about 0.1 to 0.17 s), and importing argparse costs about 7 ms where
click costs about 29 ms and typer (click and rich) about 120 ms on the same machine. argparse
also lets the two hooks that keep secrets and escapes safe (its messages and its error exit)
be replaced in one small subclass, and it is in the standard library: no dependency to add.

Only the standard library loads at start-up; the providers and anyio load when a command
needs them, so ``recall`` starts fast. litellm (and with it pydantic) and numpy load only with
``--embedder``, for the commands that use it.
"""

from __future__ import annotations

from ._main import main

__all__ = ["main"]
