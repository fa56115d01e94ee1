"""The one interface every component has: rollout worker, policy worker, learner, evaluator, the
dummy sampler's random policy worker.

A runtime (:mod:`sfx.engine.runtime`) drives any of them the same way, in its own process or
round-robin in one: ``start()`` once; then, until the run stops, ``process(msgs)`` with what waits
on its control queue (first: control never waits behind data) and on its inbox, and ``tick()``
between reads; ``finish()`` once at the end, also after a crash (a learner saves its checkpoint
there, a rollout worker closes its envs). A component that must wait (for weights, for a free
trajectory slot) calls ``should_stop()``, which the runtime replaces with its own check (and which
beats the component's heartbeat), and sets ``stopped`` to end its loop early.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


class Component:
    stopped: bool = False
    # how long the runtime waits for messages before the next tick(): a component with work of its own
    # to retry (a rollout worker holding a split at the collection gate) shortens it
    read_timeout_sec: float = 0.1
    # what a wait on its inbox is for (the runtime loop times it as ``wait/<waiting_for>``, sfx.engine.perf)
    waiting_for: str = "messages"

    def should_stop(self) -> bool:
        """Replaced by the runtime: whether the run is stopping."""
        return False

    def start(self) -> None:
        """Before the first message (make envs, load a checkpoint, wait for weights)."""

    def process(self, msgs: list) -> None:
        """Handle messages from the control queue or the inbox (:mod:`sfx.engine.protocol`)."""
        raise NotImplementedError

    def tick(self) -> None:
        """Periodic work between reads (a learner's timed checkpoint)."""

    def finish(self) -> None:
        """Last call, after a stop or a crash."""


@dataclass(frozen=True)
class ComponentSpec:
    """One component: what it is, what it reads, where it runs, how it is built and supervised.

    ``build(w, spec, device, incarnation)`` constructs it in the process that runs it (a module-level
    function: it travels to that process by reference); ``incarnation`` counts its restarts.
    """

    role: str
    index: int
    policy: int
    build: Callable[..., Any]
    inbox: Any                       # the data queue it reads
    control: Any = None              # its control queue (read first, not behind data), or None
    device: str = "cpu"              # "cpu", "cuda" or, with several ranks on GPUs, "cuda:LOCAL_RANK"
    threads: int = 1                 # torch threads in its process
    pin_core: bool = False           # pinned to core index % cores (with --set_workers_cpu_affinity)
    pump_inbox: bool = False         # read the inbox through a QueuePump: it must never hang on a locked queue
    heartbeat_deadline: bool = True  # found hung when it stops beating (a learner's iteration may be long)
    restartable: bool = True         # restarted when it dies or hangs; else its death stops the run
    holds_slots: bool = False        # takes trajectory slots (a restart gives back the dead one's)

    @property
    def name(self) -> str:
        return f"{self.role}_{self.index}"
