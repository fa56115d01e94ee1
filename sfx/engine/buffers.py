"""Shared-memory buffers: trajectory slots per policy, per-agent scratch rows, published weights.

All tensors here are carved once by the coordinator from the run's shared-memory arena
(:class:`~sfx.engine.shared_arena.SharedArena`: one descriptor for all of them, whatever their number)
before any worker starts, and handed to the workers at spawn time. After that only integer indices
travel on queues. Without an ``arena`` argument a function makes its own (tests, benches).

Trajectory slot lifecycle (one pool per policy, so routing is per policy from day one)::

    free queue --(rollout worker acquires)--> being filled step by step
       ^                                           |  policy worker writes actions, log-probs,
       |                                           |  values and next recurrent state in place
       +--(learner releases after copying)<-- learner queue (slot index)

A slot holds ``rollout`` transitions plus one extra observation / recurrent state (index
``rollout``) that the learner uses to bootstrap. When every slot is taken, rollout workers block
on the free queue: sampling is throttled and memory stays flat.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from dataclasses import field as dataclass_field
from typing import Any, Mapping

import numpy as np
import torch

from sfx.agents.base import FieldSpec, tree_map  # noqa: F401 - tree_map re-exported (the rollout worker, tests)
from sfx.engine.shared_arena import SharedArena


def torch_dtype(np_dtype) -> torch.dtype:
    """The torch dtype that stores a numpy dtype without conversion."""
    return torch.from_numpy(np.zeros(0, dtype=np_dtype)).dtype


@dataclass
class TrajectoryBuffers:
    """Trajectory slots of one policy. Shapes: N slots, T = rollout.

    Fixed fields every agent gets, plus ``fields``: the per-step fields the agent's acting rule declares
    (APPO: ``log_probs``, ``action_params``, ``values``, ``trunc_values``), and ``final_obs`` where the
    rule asks for the final observation of time-limit steps.
    """

    obs: dict[str, torch.Tensor]  # key -> [N, T+1, *shape]  (a Box observation: key "obs")
    rnn_states: torch.Tensor      # [N, T+1, S]  state *before* the step at that index
    actions: torch.Tensor         # [N, T, k] float32 (integers for discrete actions)
    rewards: torch.Tensor         # [N, T]   raw env rewards
    terminated: torch.Tensor      # [N, T]   bool, episode ended, no bootstrap
    truncated: torch.Tensor       # [N, T]   bool, episode cut by a time limit, bootstrap
    policy_versions: torch.Tensor  # [N, T] int64, version of the weights that acted
    active: torch.Tensor          # [N, T] bool, False where the env said the agent was not playing
    task: torch.Tensor            # [N] int64, the task of the env the trajectory came from (0 = single task)
    memory: torch.Tensor          # [N, M, W] a memory core's per-agent memory before step 0 ([N, 0, 0] without)
    fields: dict[str, torch.Tensor] = dataclass_field(default_factory=dict)  # the agent's: name -> [N, T, ...]
    # key -> [N, T, *shape]: the final observation of a time-limit step (only where the rule asks for it)
    final_obs: dict[str, torch.Tensor] | None = None

    @property
    def num_slots(self) -> int:
        return self.actions.shape[0]

    @property
    def rollout(self) -> int:
        return self.actions.shape[1]

    def tensors(self) -> dict[str, Any]:
        """Every field by name, the agent's fields among them; ``obs`` (and ``final_obs``) stay dicts of
        tensors (see :func:`tree_map`)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("fields", "final_obs")}
        out.update(self.fields)
        if self.final_obs is not None:
            out["final_obs"] = self.final_obs
        return out


ObsSpec = dict[str, tuple[tuple[int, ...], Any]]  # key -> (shape, numpy dtype), see sfx.models.obs


def _shared_obs(arena: SharedArena, leading: tuple, spec: ObsSpec) -> dict[str, torch.Tensor]:
    return {k: arena.tensor((*leading, *shape), torch_dtype(dtype)) for k, (shape, dtype) in spec.items()}


def allocate_trajectory_buffers(num_slots: int, rollout: int, obs: ObsSpec, rnn_size: int, action_dim: int,
                                agent_fields: Mapping[str, FieldSpec] | None = None,
                                memory_shape: tuple[int, int] = (0, 0), final_obs: bool = False,
                                arena: SharedArena | None = None) -> TrajectoryBuffers:
    """Allocate one policy's slots in shared memory; ``obs`` is :func:`sfx.models.obs.obs_spec`;
    ``agent_fields``: the acting rule's per-step fields (``ActingRule.fields``); ``memory_shape``:
    ``(memory_len, memory_width)`` of the model's core (see sfx.models.MemoryCore); ``final_obs``: keep the
    final observation of time-limit steps (``ActingRule.stores_final_obs``)."""
    n, t = num_slots, rollout
    arena = arena if arena is not None else SharedArena()
    z = arena.tensor

    return TrajectoryBuffers(
        obs=_shared_obs(arena, (n, t + 1), obs),
        rnn_states=z((n, t + 1, rnn_size)),
        actions=z((n, t, action_dim)),
        rewards=z((n, t)),
        terminated=z((n, t), torch.bool),
        truncated=z((n, t), torch.bool),
        policy_versions=z((n, t), torch.int64),
        active=z((n, t), torch.bool),
        task=z((n,), torch.int64),
        memory=z((n, *memory_shape)),
        fields={name: z((n, t, *spec.shape), spec.dtype) for name, spec in (agent_fields or {}).items()},
        final_obs=_shared_obs(arena, (n, t), obs) if final_obs else None,
    )


@dataclass
class AgentBuffers:
    """One row per agent in the whole run (all workers): the last observation and recurrent
    state of an episode cut by a time limit, so that a policy worker can compute the value the
    learner bootstraps from."""

    final_obs: dict[str, torch.Tensor]  # key -> [A, *shape]
    final_rnn: torch.Tensor             # [A, S]
    initial_rnn: torch.Tensor           # [S]: the state every episode starts from (the core's declaration)
    # [A, M, W] a memory core's memory of each agent (ring order; the state row says which rows count).
    # Policy workers read it and write each step's entry; rollout workers copy it into a slot that
    # continues an episode. Never reset: an episode start resets the state row instead.
    memory: torch.Tensor


def allocate_agent_buffers(num_agents_total: int, obs: ObsSpec, rnn_size: int,
                           memory_shape: tuple[int, int] = (0, 0), arena: SharedArena | None = None) -> AgentBuffers:
    arena = arena if arena is not None else SharedArena()
    return AgentBuffers(
        final_obs=_shared_obs(arena, (num_agents_total,), obs),
        final_rnn=arena.tensor((num_agents_total, rnn_size)),
        initial_rnn=arena.tensor(rnn_size),
        memory=arena.tensor((num_agents_total, *memory_shape)),
    )


def num_trajectory_slots(num_agents_total: int, trajectories_per_iteration: int,
                         excess_ratio: float, serial: bool) -> int:
    """Slots per policy.

    Rollout workers hold at most two slots per agent (the one being filled and the one just
    finished, sent one step later); the rest queue for the learner. ``excess_ratio`` learner
    iterations' worth of queued trajectories bounds both memory and policy lag. Serial mode runs
    the learner between worker steps and never blocks, so it needs room for one more round.
    """
    queued = max(trajectories_per_iteration, math.ceil(excess_ratio * trajectories_per_iteration))
    agents_factor = 3 if serial else 2
    return agents_factor * num_agents_total + queued


class CollectionGate:
    """How far the rollout workers of one rank may collect ahead of its learners (``--batches_ahead``).

    Trajectory slots alone bound sampling by memory: when the learner sets the pace, every slot fills
    and a batch waits behind the others, trained ``slots / batch`` versions after it was acted (doom_basic's
    line: lag 3 with 192 slots for batches of 64 trajectories). The gate bounds it by the learners' progress
    instead, counting the trajectories started and not yet taken by a learner (``out``), with a bound that
    follows who sets the pace:

    * while some learner waits for data (the sampler sets the pace): ``num_agents + batches_ahead x batch``,
      one trajectory in progress per agent beyond ``batches_ahead`` finished batches, so no env is ever held
      while a learner lacks data. A bound of whole batches alone (the first version) idled envs wherever the
      agents outnumber a batch's trajectories: 256 agents and batches of 128 trajectories let only 128 step
      (measured on an H100 with 16 workers: 26,020 FPS gated, 48,201 ungated).
    * while every learner finds its next batch finished when it ends an iteration (the learners set the pace):
      ``max(num_agents, batches_ahead x batch)``. The envs wait for the learners either way; under this bound
      they wait before starting a trajectory instead of after it, so the next batch acts with the weights the
      learner just published: lag ~1 with 1 (``batches_ahead``, or ``num_agents / batch`` when the agents
      outnumber a batch's trajectories) instead of ``1 + num_agents / batch`` (doom_basic's line, 32 agents and
      batches of 64 trajectories: 1.5), at the same FPS (each learner step still finds its batch ready; the
      moment one does not, the looser bound is back from that learner's next iteration on).

    Shared int64 counters, each written by one process only (no lock): per policy, the trajectories its
    learner has taken, its trajectories per iteration now (PBT may change ``--batch_size``) and whether it set
    the pace at the end of its last iteration; per rollout worker, the trajectories it has started (a restarted
    worker goes on counting) and, per policy, those it has finished and sent; the trajectories lost with dead
    workers (the slots given back, written by the coordinator).

    A worker starts a split's new round of trajectories while ``out`` is under the bound (it may overshoot by
    a split per worker: the workers read, then count; an agent that starts alone mid-round, after a policy
    switch, is counted and never held). The workers never all wait while a learner lacks a batch: a split waits
    only when all its agents are between trajectories, after sending the finished ones, so when all wait at the
    looser bound, more than ``num_agents`` plus ``batches_ahead`` batches (summed over the policies) are out,
    finished and sent, and some learner has its whole batch; at the tighter one every learner has just found
    its batch whole and, having taken it, will find the next once ``out`` reaches the bound again.
    """

    def __init__(self, num_policies: int, num_workers: int, batches_ahead: int,
                 arena: SharedArena | None = None, num_agents: int = 0) -> None:
        if batches_ahead < 1:
            raise ValueError(f"batches_ahead must be >= 1 for a gate (0 means no gate), got {batches_ahead}")
        arena = arena if arena is not None else SharedArena()
        self.batches_ahead = int(batches_ahead)
        self.num_agents = int(num_agents)  # the rank's acting agents: each may have a trajectory in progress
        self.learners = arena.tensor((num_policies, 3), torch.int64)  # [taken, per iteration, sets the pace]
        self.started = arena.tensor(num_workers, torch.int64)
        self.sent = arena.tensor((num_workers, num_policies), torch.int64)  # finished and sent, per policy
        self.lost = arena.tensor(1, torch.int64)

    # learners
    def set_per_iteration(self, policy: int, per_iteration: int) -> None:
        self.learners[policy, 1] = int(per_iteration)

    def took(self, policy: int, num_trajectories: int, per_iteration: int) -> None:
        """A learner took ``num_trajectories`` for an iteration (their slots are free again)."""
        self.learners[policy, 0] += int(num_trajectories)
        self.learners[policy, 1] = int(per_iteration)

    def finished_waiting(self, policy: int) -> int:
        """Trajectories of ``policy`` finished and sent, not yet taken by its learner (some may still be in
        its queue, unread)."""
        return int(self.sent[:, policy].sum()) - int(self.learners[policy, 0])

    def iteration_ended(self, policy: int) -> bool:
        """A learner ended an iteration: it sets the pace if its next batch is already finished (it will not
        wait for data). Recorded for the workers' bound; returns it."""
        paced = self.finished_waiting(policy) >= int(self.learners[policy, 1])
        self.learners[policy, 2] = int(paced)
        return paced

    # the coordinator
    def lose(self, num_trajectories: int) -> None:
        """Trajectories a dead rollout worker held (started, never sent) were given back."""
        self.lost[0] += int(num_trajectories)

    # rollout workers
    def read_out(self) -> tuple[int, int]:
        """(trajectories started and not yet taken nor lost, how many may be)."""
        c = self.learners.numpy()
        out = int(self.started.numpy().sum()) - int(self.lost.numpy()[0]) - int(c[:, 0].sum())
        ahead = self.batches_ahead * int(c[:, 1].sum())
        paced = bool(c[:, 2].all())
        return out, max(self.num_agents, ahead) if paced else self.num_agents + ahead

    def may_start(self) -> bool:
        out, allowed = self.read_out()
        return out < allowed

    def count(self, worker: int, num_trajectories: int) -> None:
        self.started[worker] += int(num_trajectories)

    def count_sent(self, worker: int, policy: int, num_trajectories: int) -> None:
        self.sent[worker, policy] += int(num_trajectories)


class WeightsBuffer:
    """A policy's weights (parameters and buffers, e.g. normalizer statistics) in one flat
    shared float32 tensor, published by the learner and read by policy workers without pickling.

    A sequence counter makes it a seqlock: the writer makes it odd while copying and even when
    done; a reader that sees it odd, or changed during its copy, keeps its old weights and tries
    again on its next batch.
    """

    def __init__(self, num_floats: int, arena: SharedArena | None = None) -> None:
        arena = arena if arena is not None else SharedArena()
        self.flat = arena.tensor(num_floats, torch.float32)
        # [sequence, policy_version]
        self.meta = arena.tensor(2, torch.int64)

    @staticmethod
    def state_tensors(model: torch.nn.Module) -> list[torch.Tensor]:
        """The tensors that define a model's behaviour, in a fixed order (without the parts only a learner
        uses: names starting with one of the model's ``learner_only_prefixes``, e.g. auxiliary heads)."""
        skip = tuple(getattr(model, "learner_only_prefixes", ()))
        return [t for name, t in model.state_dict(keep_vars=True).items()
                if t.is_floating_point() and not (skip and name.startswith(skip))]

    @classmethod
    def for_model(cls, model: torch.nn.Module, arena: SharedArena | None = None) -> "WeightsBuffer":
        return cls(sum(t.numel() for t in cls.state_tensors(model)), arena)

    @property
    def version(self) -> int:
        return int(self.meta[1])

    def publish(self, model: torch.nn.Module, version: int) -> None:
        seq = int(self.meta[0])
        self.meta[0] = seq + 1
        offset = 0
        with torch.no_grad():
            for t in self.state_tensors(model):
                n = t.numel()
                self.flat[offset:offset + n].copy_(t.detach().reshape(-1))
                offset += n
        self.meta[1] = version
        self.meta[0] = seq + 2

    def read_into(self, model: torch.nn.Module, current_version: int) -> int:
        """Copy newer weights into ``model``; returns the version the model now has."""
        seq = int(self.meta[0])
        if seq % 2 == 1 or seq == 0:
            return current_version  # being written, or never published yet
        version = int(self.meta[1])
        if version == current_version:
            return current_version
        staged = self.flat.clone()
        if int(self.meta[0]) != seq:
            return current_version  # torn read: a publish happened meanwhile
        offset = 0
        with torch.no_grad():
            for t in self.state_tensors(model):
                n = t.numel()
                t.copy_(staged[offset:offset + n].view_as(t))
                offset += n
        return version
