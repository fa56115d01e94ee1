"""Prioritized sequence replay (R2D2, Kapturowski et al. 2019; Ape-X, Horgan et al. 2018) as a sample source.

Every fresh trajectory of ``T`` steps becomes one stored sequence of ``burn_in + T`` steps: its first
``burn_in`` steps are the last ones of the same actor's previous trajectory (consecutive sequences of an
actor overlap on ``burn_in`` steps, as in SEED RL), together with the recurrent state stored when acting
at the start of that prefix. The learner replays the prefix only to warm the recurrent state up
("burn-in"), and trains on the ``T`` steps after it. An actor's first trajectory (or one that does not
continue the previous one: a restarted worker) has no prefix: its stored starting state is used as it
is (``has_prefix`` False).

Sequences live in a ring of ``capacity`` (``--replay_buffer_size``) in the learner process's memory
(:class:`sfx.agents.kit.replay_store.ReplayStore`)
(checked at start against free memory) and are drawn by priority (:class:`sfx.algo.prioritized.
PrioritizedSampler`, exponent ``--priority_exponent``), with importance weights (exponent
``--importance_sampling_exponent``, normalised by the batch's largest). A new sequence's priority comes
from the acting side: the TD errors of the Q-values the policy worker stored (``q_taken``, ``q_max``), so
no learner compute is spent on insertion. The agent puts the priorities its step measures back
(:meth:`update_priorities`). Checkpointed with ``--save_replay_buffer`` (:meth:`replay_state`; the actors' last
trajectories are not, so each one's first sequence after a resume has no prefix); otherwise a resumed run refills it.

The update-to-data ratio: ``--replay_ratio`` trained steps per fresh step (SEED's meaning: the average
number of times each observation is trained on; the store base's credit). Each iteration inserts its fresh
sequences and earns ``replay_ratio x`` their steps; every full minibatch of credit is one minibatch step
(:meth:`due`), once the sequences stored hold ``--learning_starts`` samples.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import torch

from sfx.agents.base import Batch, tree_map
from sfx.agents.kit.replay_store import ReplayStore
from sfx.algo.nstep import n_step_targets
from sfx.algo.prioritized import PrioritizedSampler
from sfx.algo.qlearning import (importance_weights, scale_rewards, sequence_priorities, value_rescale,
                                value_rescale_inverse)

# the per-step fields a stored sequence keeps (besides obs); the acting rule's q_taken / q_max are only read
# for the initial priorities
STEP_FIELDS = ("actions", "rewards", "terminated", "truncated", "active", "trunc_q", "policy_versions")


def acting_priorities(rewards: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor,
                      q_taken: torch.Tensor, q_max: torch.Tensor, trunc_q: torch.Tensor, valids: torch.Tensor,
                      gamma: float, n: int, eps: float, eta: float) -> torch.Tensor:
    """``[B]`` initial priorities of fresh sequences from the Q-values their actors computed (``[B, T]`` each,
    rescaled units): n-step targets bootstrapped from ``h^-1(max_a Q(s_{t+1}, a))`` (the acting weights are both
    the online and the target network, so double Q is the max); the last step's next state was not acted
    on in this trajectory, its own ``q_max`` stands in for it. Priority ``eta max|delta| + (1 - eta) mean|delta|``."""
    next_max = torch.cat([q_max[:, 1:], q_max[:, -1:]], dim=1)
    nstep = n_step_targets(rewards, terminated, truncated, value_rescale_inverse(next_max, eps),
                           value_rescale_inverse(trunc_q, eps), gamma, n)
    td = (value_rescale(nstep.targets, eps) - q_taken).abs()
    return sequence_priorities(td, valids, eta)


class PrioritizedSequences(ReplayStore):
    """The sample source of R2D2 (see the module docstring).

    Args:
        fresh: the engine's fresh source (``add`` / ``ready`` / ``next_batch``).
        capacity: sequences kept (``--replay_buffer_size``).
        burn_in: ``--burn_in`` steps of prefix.
        min_size: sequences stored before the first minibatch (``--learning_starts`` samples in whole sequences).
        replay_ratio: trained steps per fresh step.
        per_minibatch: () -> sequences per minibatch (asked anew: PBT may change ``--batch_size``).
        priority_exponent, importance_exponent, eta, gamma, n_step, rescale_eps: as the flags say.
        device: the learner's device.
        seed: the sampler's random stream.
        reward_scale, reward_clip: ``--reward_scale``, ``--reward_clip`` for the initial priorities' targets (the
            stored rewards are the env's; the agent's step scales them the same way). Defaults: rewards as they are.
    """

    def __init__(self, fresh: Any, capacity: int, burn_in: int, min_size: int, replay_ratio: float,
                 per_minibatch: Callable[[], int], priority_exponent: float, importance_exponent: float,
                 eta: float, gamma: float, n_step: int, rescale_eps: float, device: torch.device,
                 seed: int | None = None, reward_scale: float = 1.0, reward_clip: float = math.inf) -> None:
        super().__init__(fresh, capacity, replay_ratio, device, seed)
        self.burn_in, self.min_size = int(burn_in), int(min_size)
        self.per_minibatch = per_minibatch
        self.importance_exponent, self.eta = float(importance_exponent), float(eta)
        self.gamma, self.n_step, self.rescale_eps = float(gamma), int(n_step), float(rescale_eps)
        self.reward_scale, self.reward_clip = float(reward_scale), float(reward_clip)
        self.sampler = PrioritizedSampler(self.capacity, alpha=priority_exponent)
        self.inserted = 0
        # actor -> (the batch data, row) of its last trajectory, whose last burn_in steps prefix its next one
        self.tails: dict[int, tuple[dict[str, Any], int]] = {}

    # ------------------------------------------------------------------------------------ the source

    def insert(self, batch: Batch) -> Batch:
        """Insert the iteration's fresh trajectories as sequences; the batch handed on is the fresh one (its
        counters, its observations for the input statistics); the agent draws its minibatches from
        :meth:`sample`, :meth:`due` of them."""
        data = batch.data
        valids = data["active"]
        T = valids.shape[1]
        rewards = scale_rewards(data["rewards"], self.reward_scale, self.reward_clip)
        priorities = acting_priorities(rewards, data["terminated"], data["truncated"], data["q_taken"],
                                       data["q_max"], data["trunc_q"], valids, self.gamma, self.n_step,
                                       self.rescale_eps, self.eta)
        ids = self._insert(data, priorities.cpu())
        self.earn(valids.shape[0] * T)
        batch.stats.update({"replay/fill": self.size / self.capacity, "replay/inserted": float(self.inserted),
                            "replay/initial_priority_mean": float(priorities.mean())})
        eps = data.get("epsilon")
        if eps is not None:
            batch.stats.update({"epsilon/min": float(eps.min()), "epsilon/max": float(eps.max()),
                                "epsilon/mean": float(eps.float().mean())})
        # every active step (R2D2 replays past any policy lag); ids: the rows the trajectories were stored at
        return dataclasses.replace(batch, valids=valids, ids=ids.to(batch.ids.device))

    def due(self) -> int:
        """Minibatches the replay ratio asks for now (the credit they use is spent); 0 until the buffer holds
        ``min_size`` sequences."""
        if self.size < max(1, self.min_size):
            self.forfeit()
            return 0
        return super().due(self.per_minibatch() * self._trained_len())

    def sample(self, k: int, policy_version: int | None = None) -> tuple[dict[str, Any], torch.Tensor]:
        """``k`` stored sequences by priority: the minibatch (stored fields ``[k, L(+1), ...]``, ``state0 [k, S]``,
        ``has_prefix [k]``, ``ids [k]``, ``weights [k]`` importance weights, ``age [k]`` learner steps since the
        oldest of its steps was acted; ``policy_version`` default: the last batch's) on the learner's device, and
        ``valids [k, T]`` (the trained steps)."""
        policy_version = self.version if policy_version is None else policy_version
        drawn = self.sampler.sample(k, self.generator)
        rows = drawn.indices
        weights = importance_weights(drawn.probabilities, self.size, self.importance_exponent)
        mb = tree_map(lambda v: v[rows].to(self.device), self.data)
        mb["ids"] = rows.to(self.device)
        mb["weights"] = weights.to(self.device, torch.float32)
        versions = mb["policy_versions"][:, self.burn_in:]
        mb["age"] = (policy_version - versions.min(dim=1).values).float()
        return mb, mb["active"][:, self.burn_in:]

    def update_priorities(self, ids: torch.Tensor, priorities: torch.Tensor) -> None:
        self.sampler.update(ids.cpu(), priorities.detach().double().cpu())

    state_fields = ("inserted",)

    def extra_state(self) -> dict[str, Any]:
        # the actors' last trajectories (the burn-in prefixes of their next ones) are not kept: each actor's first
        # sequence after a resume starts from its stored state, as after a restarted worker
        return {"priorities": self.sampler.get(torch.arange(self.size)).clone()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        if self.size:
            self.sampler.update(torch.arange(self.size), state["priorities"].cpu())

    def stats(self) -> dict[str, float]:
        stored = self.sampler.get(torch.arange(self.size)) if self.size else torch.zeros(1)
        return {"replay/priority_mean": float(stored.mean()), "replay/priority_max": float(stored.max())}

    # ------------------------------------------------------------------------------------ insertion

    def _trained_len(self) -> int:
        return int(self.data["rewards"].shape[1]) - self.burn_in if self.data is not None else 1

    def _insert(self, data: dict[str, Any], priorities: torch.Tensor) -> torch.Tensor:
        """Write the fresh trajectories into the ring's next rows: each one after its burn-in prefix (the last
        ``burn_in`` steps of the same actor's previous trajectory, when this one continues it), straight into
        the stored tensors (no intermediate copies: insertion must not stall the learner). Returns ``[n]`` each
        trajectory's row (-1: more than the ring holds, not kept)."""
        B = self.burn_in
        if self.data is None:
            self._allocate(data)
        first, rows = self.claim(data["rewards"].shape[0])
        ring = self.data
        for k, v in data["obs"].items():
            ring["obs"][k][rows, B:] = v[first:].cpu()
        for k in STEP_FIELDS:
            ring[k][rows, B:] = data[k][first:].cpu()
        ring["state0"][rows] = data["rnn_states"][first:, 0].cpu()
        ring["has_prefix"][rows] = False
        if B:
            # a row without a prefix must not start with an episode end its stale prefix columns would say
            ring["terminated"][rows, :B] = False
            ring["truncated"][rows, :B] = False
            actors = data["actor_ids"][:, 0].tolist()
            for j, actor in enumerate(actors):
                if j >= first:
                    self._prefix(data, j, int(rows[j - first]))
                # handed on at once: the actor's next trajectory may be in this same batch (the engine's slots
                # come in the order they were finished, so an actor's trajectories come in order)
                self.tails[actor] = (data, j)  # the batch's own copy out of the slots: kept, never cloned
        self.sampler.update(rows, priorities[first:].double().clamp(min=1e-6))
        self.inserted += len(rows)
        return torch.cat([torch.full((first,), -1, dtype=torch.long), rows])

    def _prefix(self, data: dict[str, Any], j: int, row: int) -> None:
        """Ring row ``row`` (trajectory ``j`` of ``data``) gets the last ``burn_in`` steps of its actor's previous
        trajectory as its prefix, and the state acted at the prefix's start, when this one continues that one."""
        tail = self.tails.get(int(data["actor_ids"][j, 0]))
        if tail is None:
            return
        prev, i = tail
        B, T = self.burn_in, data["rewards"].shape[1]
        ring = self.data
        # the previous trajectory continues into this one: its next observation is this one's first
        if not all(torch.equal(prev["obs"][k][i, T], v[j, 0]) for k, v in data["obs"].items()):
            return
        for k, v in prev["obs"].items():
            ring["obs"][k][row, :B] = v[i, T - B:T].cpu()
        for k in STEP_FIELDS:
            ring[k][row, :B] = prev[k][i, T - B:].cpu()
        ring["state0"][row] = prev["rnn_states"][i, T - B].cpu()
        ring["has_prefix"][row] = True

    def _allocate(self, data: dict[str, Any]) -> None:
        L = self.burn_in + data["rewards"].shape[1]
        like = self.zeros_like_rows
        self.data = {"obs": {k: like(v, L + 1) for k, v in data["obs"].items()},
                     "state0": like(data["rnn_states"][:, 0]),
                     "has_prefix": torch.zeros(self.capacity, dtype=torch.bool),
                     **{k: like(data[k], L) for k in STEP_FIELDS}}
