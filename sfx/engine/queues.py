"""Message queues between components.

Only small messages travel on queues (indices into shared buffers, stats dicts); tensors never do.
Two implementations share one interface so that ``--serial_mode`` runs the very same component
code in one process:

- :func:`make_process_queue`: a ``faster_fifo.Queue`` (a lock-protected circular buffer in shared
  memory whose ``get_many`` drains every waiting message in one call, which is what lets a policy
  worker batch requests from many rollout workers cheaply).
- :class:`LocalQueue`: a deque with the same ``put / put_many / get / get_many`` methods.
"""

from __future__ import annotations

import collections
import queue
from typing import Any

import faster_fifo

Empty = queue.Empty
Full = queue.Full

# Messages are indices and small dicts; a few MB leaves room for bursts of episode stats.
DEFAULT_QUEUE_BYTES = 8 * 1024 * 1024


def make_process_queue(max_size_bytes: int = DEFAULT_QUEUE_BYTES) -> faster_fifo.Queue:
    """A queue that can be handed to a spawned process."""
    return faster_fifo.Queue(max_size_bytes=max_size_bytes)


class LocalQueue:
    """In-process queue with the faster_fifo interface, for serial mode and tests.

    Never blocks: in serial mode a blocking read would stall the only thread, so an empty queue
    raises :class:`queue.Empty` at once whatever ``block`` and ``timeout`` say.
    """

    def __init__(self) -> None:
        self._items: collections.deque = collections.deque()

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        self._items.append(item)

    def put_nowait(self, item: Any) -> None:
        self._items.append(item)

    def put_many(self, items: list, block: bool = True, timeout: float | None = None) -> None:
        self._items.extend(items)

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        if not self._items:
            raise Empty
        return self._items.popleft()

    def get_nowait(self) -> Any:
        return self.get(block=False)

    def get_many(self, block: bool = True, timeout: float | None = None,
                 max_messages_to_get: int = 1_000_000_000) -> list:
        if not self._items:
            raise Empty
        n = min(max_messages_to_get, len(self._items))
        return [self._items.popleft() for _ in range(n)]

    def qsize(self) -> int:
        return len(self._items)

    def empty(self) -> bool:
        return not self._items

    def close(self) -> None:
        self._items.clear()


def drain(q, timeout: float = 0.0, max_messages: int = 1_000_000_000) -> list:
    """All messages waiting on ``q`` (waiting at most ``timeout`` for the first one)."""
    try:
        if timeout > 0:
            return q.get_many(block=True, timeout=timeout, max_messages_to_get=max_messages)
        return q.get_many(block=False, max_messages_to_get=max_messages)
    except Empty:
        return []
