"""An async lock that costs nothing while it is free."""

from __future__ import annotations

from collections import deque
from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import anyio

__all__ = ["Mutex"]


class Mutex:
    """Mutual exclusion between the tasks of one event loop, on any anyio backend.

    Taking a free lock neither suspends nor touches the event loop, so code that only ever
    finds it free runs without one: the command line's reading commands run that way, and
    start without importing asyncio. A task that finds it held waits on an anyio ``Event``;
    the releaser hands the lock straight to the first waiter, so no newcomer can slip in
    between. Not reentrant.
    """

    __slots__ = ("_held", "_waiters")

    def __init__(self) -> None:
        self._held = False
        self._waiters: deque[anyio.Event] = deque()

    def locked(self) -> bool:
        return self._held

    async def __aenter__(self) -> None:
        if not self._held:
            self._held = True
            return
        import anyio  # only under contention, that is inside a running event loop

        event = anyio.Event()
        self._waiters.append(event)
        try:
            await event.wait()
        except BaseException:
            if event.is_set():
                # The lock was handed to us as we were cancelled: hand it on.
                self._release()
            else:
                self._waiters.remove(event)
            raise
        # Handed over by the releaser: _held is still True, and now ours.

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._release()

    def _release(self) -> None:
        if self._waiters:
            self._waiters.popleft().set()
        else:
            self._held = False
