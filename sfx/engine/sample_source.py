"""Sample sources: what lies between the trajectory slots and an agent's training step.

:class:`FreshTrajectories` is the on-policy path: finished trajectories (slot indices from the rollout
workers) are copied out of shared memory onto the learner's device, their slots go back to the free queue
at once (rollouts never wait for the optimizer), and samples past ``--max_policy_lag`` are masked out.

A replay store is a source too: it wraps a fresh source, keeps the copies :meth:`FreshTrajectories.next_batch`
already makes (``Batch.data``), samples stored trajectories by a rule, mixes them into the batch (``fresh``
False, their ``age`` kept; ``Batch.ids`` where each is stored) and takes the priorities an agent's step returns
(:class:`~sfx.agents.base.Stepped`) back from the learner shell (``update_priorities``). The agents' stores
extend :class:`sfx.agents.kit.replay_store.ReplayStore`. A store that trains on fewer fresh trajectories per
iteration than the agent's whole batch (a replay mix's queue share) says so through
:meth:`FreshTrajectories.take_per_iteration`, the one seam for it: no source writes another's attributes.
Env-step counters count fresh samples only (``Batch.env_steps``).
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

import torch

from sfx.agents import Batch
from sfx.engine import perf
from sfx.engine.buffers import TrajectoryBuffers
from sfx.engine.staging import HostStaging, gather_tree, tree_to_device


class SampleSource(Protocol):
    """What the learner shell asks of a source."""

    def add(self, slots: list[int]) -> None:
        """Finished trajectories arrived (their slot indices)."""

    def ready(self) -> bool:
        """An iteration's batch can be taken."""

    def next_batch(self, policy_version: int) -> Batch:
        """The next iteration's samples; ``policy_version``: the learner's current version (for ages)."""

    def update_priorities(self, ids: torch.Tensor, priorities: torch.Tensor) -> None:
        """Priorities of stored samples (``ids``: the minibatch's) after a step, handed back by the learner
        shell (a prioritized store; others ignore them)."""


class FreshTrajectories:
    """Fresh trajectories only: :meth:`per_iteration` of them make a batch (see the module docstring).

    Args:
        traj: the policy's trajectory slots.
        free_slots: the policy's free-slot queue (slots go back to it once copied).
        device: the learner's device.
        max_policy_lag: samples acted more than this many versions ago are not valid.
        env_frameskip: frames per agent step (counters count frames).
        per_iteration: () -> trajectories per batch (the agent's ``trajectories_per_iteration``), asked
            anew each time: PBT may change ``--batch_size``.
        gate: the rank's :class:`~sfx.engine.buffers.CollectionGate` (``--batches_ahead``), told what this
            policy's learner takes, or None.
        policy: this source's policy (its row in the gate).
    """

    def __init__(self, traj: TrajectoryBuffers, free_slots: Any, device: torch.device, max_policy_lag: int,
                 env_frameskip: int, per_iteration: Callable[[], int], gate: Any = None, policy: int = 0) -> None:
        self.traj = traj
        self.free_slots = free_slots
        self.device = device
        self.max_policy_lag = max_policy_lag
        self.env_frameskip = env_frameskip
        self._per_iteration = per_iteration
        self.pending: list[int] = []
        # on a GPU each batch is gathered into page-locked memory and copied asynchronously; two buffers in
        # turn, so a batch can be gathered while the last one's copy may still run
        self.staging = HostStaging(device, depth=2)
        self.gate = gate
        self.policy = policy
        self._iteration_running = False  # a batch was taken and the shell has not asked ready() since
        if gate is not None:
            gate.set_per_iteration(policy, per_iteration())

    def per_iteration(self) -> int:
        """Fresh trajectories the next batch takes."""
        return int(self._per_iteration())

    def take_per_iteration(self, per_iteration: Callable[[], int]) -> None:
        """From now on a batch takes ``per_iteration()`` fresh trajectories (asked anew each time) instead of the
        agent's ``trajectories_per_iteration``: the seam for a source wrapping this one that mixes stored
        trajectories into the batch (a replay mix takes only its queue's share fresh). The collection gate is
        told at once, so the rollout workers are paced by what the learner will really take."""
        self._per_iteration = per_iteration
        if self.gate is not None:
            self.gate.set_per_iteration(self.policy, self.per_iteration())

    def add(self, slots: list[int]) -> None:
        self.pending.extend(slots)

    def ready(self) -> bool:
        if self._iteration_running and self.gate is not None:
            # the first question after a take comes when the learner shell ends that iteration: tell the gate
            # whether the next batch is already finished (the learner sets the pace: the workers then wait
            # before starting trajectories rather than after, and the next batch acts with fresher weights)
            self.gate.iteration_ended(self.policy)
        self._iteration_running = False
        return len(self.pending) >= self.per_iteration()

    def next_batch(self, policy_version: int) -> Batch:
        k = self.per_iteration()
        slots, self.pending = self.pending[:k], self.pending[k:]
        if self.gate is not None:
            # taken now, before the copy: the workers may start the next trajectories while it is made (the
            # slots themselves stay out of the free pool until copied)
            self.gate.took(self.policy, len(slots), k)
            self._iteration_running = True
        idx = torch.as_tensor(slots, dtype=torch.long)
        with perf.section("batch_gather"):
            data = gather_tree(self.staging, self.traj.tensors(), idx)
        if self.device.type != "cpu":
            with perf.section("to_device"):
                data = tree_to_device(self.staging, data)
        # the slots are free once gathered: on a GPU the copy to the device reads the page-locked staging
        self.free_slots.put_many(list(slots))
        n, T = data["rewards"].shape
        age = (policy_version - data["policy_versions"]).float()
        return Batch(data=data, valids=(age <= self.max_policy_lag) & data["active"],
                     fresh=torch.ones(n, dtype=torch.bool, device=self.device), age=age,
                     env_steps=n * T * self.env_frameskip,
                     ids=torch.full((n,), -1, dtype=torch.long, device=self.device))

    def update_priorities(self, ids: torch.Tensor, priorities: torch.Tensor) -> None:
        pass  # nothing kept: fresh trajectories are trained once
