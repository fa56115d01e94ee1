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


class Component:
    stopped: bool = False

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
