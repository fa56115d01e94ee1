"""Processes and shared memory: rollout workers, policy workers, learners, the coordinator."""

from sfx.engine.coordinator import run_training

__all__ = ["run_training"]
