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
import threading
import time
from typing import Any

import faster_fifo

Empty = queue.Empty
Full = queue.Full

# Messages are indices and small dicts; a few MB leaves room for bursts of episode stats.
DEFAULT_QUEUE_BYTES = 8 * 1024 * 1024


def make_process_queue(max_size_bytes: int = DEFAULT_QUEUE_BYTES, arena: Any = None) -> faster_fifo.Queue:
    """A queue that can be handed to a spawned process; in ``arena``
    (:class:`~sfx.engine.shared_arena.SharedArena`) where given, so it travels without a descriptor of its own."""
    if arena is not None:
        return arena.queue(max_size_bytes)
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


class SwitchableQueue:
    """A queue with spares, for a queue whose reader may be killed and restarted.

    A process killed (or frozen) while it waits inside a shared queue can leave that queue's lock or
    condition variable unusable, and the next writer hangs. When the coordinator restarts the reader
    it switches to a fresh spare; writers and the reader always use the current one (an index in
    shared memory), so nobody needs to be told. Messages still in the old queue are lost: the
    protocols above tolerate that (requests are resent, answers carry a generation).
    """

    def __init__(self, make_queue, spares: int = 0, arena: Any = None) -> None:
        import ctypes
        import multiprocessing

        self.queues = [make_queue() for _ in range(spares + 1)]
        # a plain shared int (in the run's arena where given): travels to spawned processes with the queues
        if not spares:
            self._current = None
        else:
            self._current = arena.value(ctypes.c_int, 0) if arena is not None else multiprocessing.RawValue("i", 0)

    @property
    def current(self) -> Any:
        return self.queues[self._current.value if self._current is not None else 0]

    def switch(self) -> None:
        """Make the next spare current (after the reader died); wraps around after the last one."""
        if self._current is not None:
            self._current.value = (self._current.value + 1) % len(self.queues)

    def put(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        self.current.put(msg, *args, **kwargs)

    def put_many(self, msgs: list, *args: Any, **kwargs: Any) -> None:
        self.current.put_many(msgs, *args, **kwargs)

    def get(self, *args: Any, **kwargs: Any) -> Any:
        return self.current.get(*args, **kwargs)

    def get_many(self, *args: Any, **kwargs: Any) -> list:
        return self.current.get_many(*args, **kwargs)

    def qsize(self) -> int:
        return self.current.qsize()

    def empty(self) -> bool:
        return self.current.empty()


class QueuePump:
    """Reads a shared queue on daemon threads, so that its reader never blocks inside it.

    A process killed in the middle of a ``put`` can leave a faster_fifo queue's lock taken for good
    (measured here: about one ``kill -9`` in 16 of a busy writer), and every later ``get`` then
    blocks forever, with the GIL released. The coordinator must go on supervising when that happens
    (a dead learner stops the run with its checkpoint kept; a dead worker is restarted), so it reads
    its report queue through a pump: a thread per underlying queue moves messages into a local
    queue, and a thread stuck on a locked queue is simply abandoned. ``source`` may be a
    :class:`SwitchableQueue`: once it switches to a spare, a new thread reads the spare, and the old
    thread goes on draining the old queue (a writer may still finish a put there) unless it is stuck.
    """

    POLL_SEC = 0.1

    def __init__(self, source: Any) -> None:
        self._source = source
        self._local: queue.SimpleQueue = queue.SimpleQueue()
        self._closed = threading.Event()
        # per queue read (one reader thread each): reads finished; a reader that stops counting is stuck
        self._rounds: dict[int, int] = {}
        self._follow()

    def _follow(self) -> None:
        q = self._source.current if isinstance(self._source, SwitchableQueue) else self._source
        if id(q) not in self._rounds:
            self._rounds[id(q)] = 0
            threading.Thread(target=self._read, args=(q,), daemon=True, name=f"queue pump {len(self._rounds)}").start()

    def _read(self, q: Any) -> None:
        key = id(q)
        while not self._closed.is_set():
            msgs = drain(q, timeout=self.POLL_SEC)
            if msgs:
                self._local.put(msgs)
            self._rounds[key] += 1

    def get(self, timeout: float = 0.0) -> list:
        """Every message pumped so far, waiting at most ``timeout`` for the first."""
        self._follow()
        out: list = []
        try:
            out.extend(self._local.get(timeout=timeout) if timeout > 0 else self._local.get_nowait())
            while True:
                out.extend(self._local.get_nowait())
        except queue.Empty:
            pass
        return out

    def get_rest(self, timeout: float = 1.0) -> list:
        """Everything the writers (now gone) left: waits until every reader that is not stuck has
        finished a read begun after this call, at most ``timeout``."""
        self._follow()
        started = dict(self._rounds)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(self._rounds.get(k, 0) < n + 2 for k, n in started.items()):
            time.sleep(0.01)
        return self.get()

    def close(self) -> None:
        """Stop the readers (a reader stuck on a locked queue stays stuck: it is a daemon thread)."""
        self._closed.set()


class LockedQueueError(RuntimeError):
    """A shared queue stays locked: a process died or froze inside one of its operations."""


def put_or_raise(q: Any, items: list, what: str, timeout_sec: float = 5.0) -> None:
    """``q.put_many(items)`` from a helper thread: the coordinator must never hang on a queue that a
    killed process left locked (the thread is abandoned and the run stops instead)."""
    done = threading.Event()

    def put() -> None:
        q.put_many(items)
        done.set()

    threading.Thread(target=put, daemon=True, name=f"put {what}").start()
    if not done.wait(timeout_sec):
        raise LockedQueueError(f"the queue of {what} stayed locked for {timeout_sec:.0f} s")
