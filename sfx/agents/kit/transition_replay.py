"""Uniform transition replay (SAC's, DQN-style) as a sample source.

Fresh trajectories are stored whole, in a ring of ``ceil(capacity / T)`` rows (``capacity`` in transitions,
``--replay_buffer_size``; ``T`` the rollout): each row keeps its ``T + 1`` observations, so a transition's next
observation is the following step's own observation, stored once. A time-limit step (``truncated``) is the
exception: the observation after it is already the next episode's first, and the one to bootstrap from is the
episode's final observation, which the slots keep (``ActingRule.stores_final_obs``); those go to a second,
smaller ring (one entry per stored row: a 1000-step time limit and 64-step rollouts leave 15 times more room
than needed). If an env truncates more often than once per row, the oldest truncated transitions lose their
final observation and are no longer drawn (``replay/final_obs_lost`` counts them).

Sampling is uniform over the stored transitions that count (the acting agent's active steps), by
rejection: ``(row, step)`` pairs uniformly over the filled rows, those that do not count drawn again.
n-step returns (``n_step > 1``): at insertion each step gets its window's summed rewards (each step's reward
scaled and clipped first, ``--reward_scale`` / ``--reward_clip`` as APPO's) and bootstrap
discount (:func:`sfx.algo.nstep.n_step_targets` with zero values) and the index of the step whose next
observation it bootstraps from; windows end at the trajectory's end (shorter there), terminations cut them.

The update-to-data ratio (the store base's credit, :class:`sfx.agents.kit.replay_store.ReplayStore`): each iteration
inserts its fresh transitions and earns ``replay_ratio x`` their count in trained transitions; :meth:`due` spends
it in whole minibatches (each gradient step one), once ``learning_starts`` transitions were stored. The learner trains that many steps before it takes the next
fresh batch, and trajectory slots are freed only when a batch is taken, so sampling waits for a learner that
falls behind, and a fast sampler never makes it train faster than the ratio. Checkpointed with
``--save_replay_buffer`` (:meth:`replay_state`); otherwise a resumed run refills it (and waits ``learning_starts``
again).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from sfx.agents.base import Batch
from sfx.agents.kit.replay_store import ReplayStore
from sfx.algo.nstep import n_step_targets
from sfx.algo.qlearning import scale_rewards

STEP_FIELDS = ("actions", "rewards", "terminated", "truncated", "active", "policy_versions")


def rows_for(capacity: int, rollout: int) -> int:
    """Rows of ``rollout`` steps that hold ``capacity`` transitions."""
    return max(1, math.ceil(int(capacity) / int(rollout)))


def bootstrap_steps(active: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor, n: int) -> torch.Tensor:
    """``[B, T]`` int64: for each step ``t``, the raw step ``j >= t`` whose next observation its n-step window
    bootstraps from (``sfx.algo.nstep``'s loop: the window counts ``n`` active steps, inactive ones ride along,
    an episode end at ``j`` stops it there, the trajectory's last step ends it). Meaningless at inactive ``t``."""
    B, T = active.shape
    ends = terminated | truncated
    out = torch.empty(B, T, dtype=torch.long)
    for t in range(T):
        j = torch.full((B,), t, dtype=torch.long)
        count = active[:, t].long()
        open_ = ~ends[:, t] & (t < T - 1)
        while bool(open_.any()):
            nxt = (j + 1).clamp(max=T - 1)
            nxt_active = active.gather(1, nxt.unsqueeze(1)).squeeze(1)
            # the next active step would be the (n+1)-th: the window closes before it
            full = open_ & nxt_active & (count >= n)
            open_ = open_ & ~full
            j = torch.where(open_, nxt, j)
            count = count + (open_ & nxt_active).long()
            end_here = ends.gather(1, j.unsqueeze(1)).squeeze(1)
            open_ = open_ & ~end_here & (j < T - 1)
        out[:, t] = j
    return out


class TransitionReplay(ReplayStore):
    """The sample source of SAC (see the module docstring).

    Args:
        fresh: the engine's fresh source (``add`` / ``ready`` / ``next_batch``).
        capacity: transitions kept (``--replay_buffer_size``), rounded up to whole rows.
        learning_starts: transitions stored before the first gradient step.
        replay_ratio: trained transitions per fresh (active) transition.
        gamma, n_step: the n-step windows' discount and length.
        device: the learner's device (minibatches land there; the ring stays in host memory).
        seed: the sampler's random stream.
        reward_scale, reward_clip: ``--reward_scale``, ``--reward_clip``, applied to each step's reward before the
            n-step windows sum them (APPO's unit); the stored ``rewards`` stay the env's. Defaults: rewards as
            they are.
    """

    def __init__(self, fresh: Any, capacity: int, learning_starts: int, replay_ratio: float, gamma: float,
                 n_step: int, device: torch.device, seed: int | None = None, reward_scale: float = 1.0,
                 reward_clip: float = math.inf) -> None:
        # the ring's rows are known at the first insert (the trajectories' length)
        super().__init__(fresh, 0, replay_ratio, device, seed)
        self.transitions = int(capacity)
        self.learning_starts = int(learning_starts)
        self.gamma, self.n_step = float(gamma), int(n_step)
        self.reward_scale, self.reward_clip = float(reward_scale), float(reward_clip)
        self.valid_count = 0  # transitions that can be drawn
        self.final_next = 0
        self.final_lost = 0
        self.inserted = 0  # transitions (active steps) over the store's life
        self.gradient_steps = 0  # minibatches due so far
        self.counted_steps = 0  # active transitions inserted since learning started (the ratio's denominator)

    @property
    def rows(self) -> int:
        return self.capacity

    state_fields = ("valid_count", "final_next", "final_lost", "inserted", "gradient_steps", "counted_steps")

    # ------------------------------------------------------------------------------------ the source

    def insert(self, batch: Batch) -> Batch:
        """Insert the iteration's fresh trajectories; the batch handed on is the fresh one (its counters, its
        observations for the input statistics); the agent draws :meth:`due` minibatches with :meth:`sample`."""
        data = batch.data
        new = int(data["active"].sum())
        ids = self._insert(data)
        self.inserted += new
        if self.inserted >= max(1, self.learning_starts) and self.valid_count > 0:
            self.earn(new)
            self.counted_steps += new
        batch.stats.update(self.stats())
        # off-policy: every active fresh step is stored and counts (--max_policy_lag does not apply; a high replay
        # ratio makes fresh samples many learner steps old), e.g. for the input statistics
        # ids: the rows the trajectories were stored at
        return Batch(data=data, valids=data["active"], fresh=batch.fresh, age=batch.age, env_steps=batch.env_steps,
                     ids=ids.to(batch.ids.device), stats=batch.stats)

    def due(self, samples_per_minibatch: int) -> int:
        """Gradient steps (minibatches of ``samples_per_minibatch``) the replay ratio asks for now (spent)."""
        k = super().due(samples_per_minibatch)
        self.gradient_steps += k
        return k

    def refund(self, k: int, samples_per_minibatch: int) -> None:
        super().refund(k, samples_per_minibatch)
        self.gradient_steps -= k

    def stats(self) -> dict[str, float]:
        # SB3's unit (gradient steps per env step): --replay_ratio / --batch_size when held
        ratio = self.gradient_steps / self.counted_steps if self.counted_steps else 0.0
        return {"replay/fill": self.size / self.rows if self.rows else 0.0,
                "replay/transitions": float(self.valid_count), "replay/inserted": float(self.inserted),
                "replay/final_obs_lost": float(self.final_lost), "replay/updates_per_step": ratio}

    def sample(self, k: int, policy_version: int | None = None) -> tuple[dict[str, Any], torch.Tensor]:
        """``k`` transitions drawn uniformly -> on the learner's device: ``obs {key: [k, ...]}``, ``actions [k, d]``,
        ``rewards [k]`` (n-step: the window's discounted sum), ``discounts [k]`` (the bootstrap's factor,
        ``gamma^h``, 0 where a termination cut the window), ``next_obs {key: [k, ...]}`` (the bootstrap
        observation: the final one where the window ended at a time limit), ``age [k]`` (learner steps since it
        was acted; ``policy_version`` default: the last batch's), and ``valids [k]`` (all True)."""
        policy_version = self.version if policy_version is None else policy_version
        if self.valid_count == 0:
            raise RuntimeError("TransitionReplay.sample: nothing stored to draw from")
        d = self.data
        rows_t = torch.empty(0, dtype=torch.long)
        steps_t = torch.empty(0, dtype=torch.long)
        T = d["rewards"].shape[1]
        while rows_t.numel() < k:
            want = 2 * (k - rows_t.numel()) + 8
            r = torch.randint(0, self.size, (want,), generator=self.generator)
            t = torch.randint(0, T, (want,), generator=self.generator)
            ok = d["valid"][r, t]
            rows_t, steps_t = torch.cat([rows_t, r[ok]]), torch.cat([steps_t, t[ok]])
        rows_t, steps_t = rows_t[:k], steps_t[:k]
        j = d["boot_step"][rows_t, steps_t]
        trunc = d["truncated"][rows_t, j] & ~d["terminated"][rows_t, j]
        fidx = d["final_index"][rows_t, j].clamp(min=0)
        obs = {key: v[rows_t, steps_t] for key, v in d["obs"].items()}
        next_obs = {key: torch.where(trunc.reshape(-1, *[1] * (v.dim() - 2)), d["final_obs"][key][fidx],
                                     v[rows_t, j + 1]) for key, v in d["obs"].items()}
        dev = self.device
        return {"obs": {key: v.to(dev) for key, v in obs.items()},
                "next_obs": {key: v.to(dev) for key, v in next_obs.items()},
                "actions": d["actions"][rows_t, steps_t].to(dev),
                "rewards": d["nstep_rewards"][rows_t, steps_t].to(dev),
                "discounts": d["discounts"][rows_t, steps_t].to(dev),
                "age": (policy_version - d["policy_versions"][rows_t, steps_t]).float().to(dev)}, \
            torch.ones(k, dtype=torch.bool, device=dev)

    # ------------------------------------------------------------------------------------ insertion

    def _insert(self, data: dict[str, Any]) -> torch.Tensor:
        """The trajectories into the ring's next rows -> ``[n]`` each one's row (-1: not kept)."""
        cpu = {k: (v.cpu() if isinstance(v, torch.Tensor) else {kk: vv.cpu() for kk, vv in v.items()})
               for k, v in data.items() if k in (*STEP_FIELDS, "obs", "final_obs")}
        T = cpu["rewards"].shape[1]
        if self.data is None:
            self._allocate(cpu)
        first, rows = self.claim(cpu["rewards"].shape[0])
        n = len(rows)
        active, term, trunc = cpu["active"][first:], cpu["terminated"][first:], cpu["truncated"][first:]
        trunc = trunc & ~term
        zeros = torch.zeros(n, T)
        rewards = scale_rewards(cpu["rewards"][first:].float(), self.reward_scale, self.reward_clip)
        nstep = n_step_targets(rewards, term, trunc, zeros, zeros, self.gamma, self.n_step,
                               active=active)
        boot = bootstrap_steps(active, term, trunc, self.n_step)
        d = self.data
        # the rows overwritten leave the drawable count
        self.valid_count -= int(d["valid"][rows].sum())
        d["final_index"][rows] = -1
        for key, v in cpu["obs"].items():
            d["obs"][key][rows] = v[first:]
        for key in STEP_FIELDS:
            d[key][rows] = cpu[key][first:]
        d["terminated"][rows], d["truncated"][rows] = term, trunc
        d["nstep_rewards"][rows] = nstep.targets.to(d["nstep_rewards"].dtype)
        d["discounts"][rows] = nstep.discounts.to(d["discounts"].dtype)
        d["boot_step"][rows] = boot
        d["valid"][rows] = active
        self.valid_count += int(active.sum())
        # final observations of the time-limit steps, into their own ring
        where = trunc.nonzero()
        if where.numel():
            if "final_obs" not in cpu:
                raise RuntimeError("TransitionReplay: a truncated step without final_obs in the slots "
                                   "(the acting rule must set stores_final_obs)")
            F = d["final_owner"].shape[0]
            for b, t in where.tolist():
                f = self.final_next
                owner_row, owner_t = d["final_owner"][f].tolist()
                if owner_row >= 0 and int(d["final_index"][owner_row, owner_t]) == f:
                    # an older row still points here: its transitions that bootstrap from it can no longer be drawn
                    d["final_index"][owner_row, owner_t] = -1
                    lost = d["valid"][owner_row] & (d["boot_step"][owner_row] == owner_t)
                    self.final_lost += int(lost.sum())
                    self.valid_count -= int(lost.sum())
                    d["valid"][owner_row] &= ~lost
                row = int(rows[b])
                for key, v in cpu["final_obs"].items():
                    d["final_obs"][key][f] = v[first + b, t]
                d["final_index"][row, t] = f
                d["final_owner"][f] = torch.tensor([row, t])
                self.final_next = (f + 1) % F
        return torch.cat([torch.full((first,), -1, dtype=torch.long), rows])

    def _allocate(self, cpu: dict[str, Any]) -> None:
        T = cpu["rewards"].shape[1]
        self.capacity = rows_for(self.transitions, T)
        R = self.capacity
        F = max(R, 64)
        like = self.zeros_like_rows

        obs = cpu["obs"]
        self.data = {"obs": {k: like(v, T + 1) for k, v in obs.items()},
                     "final_obs": {k: torch.zeros((F, *v.shape[2:]), dtype=v.dtype) for k, v in obs.items()},
                     "final_index": torch.full((R, T), -1, dtype=torch.long),
                     "final_owner": torch.full((F, 2), -1, dtype=torch.long),
                     **{k: like(cpu[k], T) for k in STEP_FIELDS},
                     "nstep_rewards": torch.zeros(R, T), "discounts": torch.zeros(R, T),
                     "boot_step": torch.zeros(R, T, dtype=torch.long), "valid": torch.zeros(R, T, dtype=torch.bool)}
