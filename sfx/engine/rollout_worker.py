"""Rollout worker: owns ``num_envs_per_worker`` envs split into ``worker_num_splits`` groups.

Double buffering: while one group's envs step on this CPU, the policy worker computes actions for
the other group, so neither the env nor the network waits for the other.

Each split steps as one vector (:mod:`sfx.envs.vector`: the family's Python envs one after the other, or a
native pool such as EnvPool), and the whole split's observations, rewards and flags go into the agents'
trajectory slots with a few array operations: no Python runs per agent on a step where no episode or
trajectory ends. The rare events (an episode or trajectory end, a policy switch, a crashed env) are handled
per agent.

The worker never sees the model. It sends the policy worker of each agent's policy only ``(slot, t)``
indices; the policy worker writes the action back into the same slot and answers with a count.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import gymnasium
import numpy as np

from sfx.engine import perf
from sfx.engine.buffers import AgentBuffers, TrajectoryBuffers, tree_map
from sfx.engine.component import Component
from sfx.engine.protocol import ACT, REQ, RESEND, ROLLOUT, SHAPING, TRAJ, pack_request_rows, request_rows
from sfx.engine.queues import Empty
from sfx.envs.registry import env_seed
from sfx.envs.vector import VectorEnv, VectorStep, make_vector_env
from sfx.models.obs import BOX_KEY, EXTRA_KEYS, PREV_ACTION_KEY, PREV_REWARD_KEY

log = logging.getLogger(__name__)


class RolloutWorker(Component):
    """Steps envs and fills trajectory slots; see the module docstring for the protocol.

    Messages in (:mod:`sfx.engine.protocol`): ``ACT`` from policy workers on its inbox; ``SHAPING`` (PBT)
    and ``RESEND`` (a policy worker was replaced) from the coordinator on its control queue.
    Messages out: ``REQ`` to a policy's request queue, ``TRAJ`` to a policy's learner queue, ``ROLLOUT``
    reports. A component (start / process / tick / finish, see :mod:`sfx.engine.runtime`).
    """

    def __init__(self, cfg: Any, worker_idx: int, num_agents_per_env: int,
                 traj_buffers: list[TrajectoryBuffers], agent_buffers: AgentBuffers,
                 free_slot_queues: list, policy_queues: list, learner_queues: list,
                 report_queue: Any, make_vector_fn=None, slot_owners: list | None = None, incarnation: int = 0,
                 initial_rnn_state: Any = None, gate: Any = None) -> None:
        self.cfg = cfg
        # --batches_ahead: a split whose agents start new trajectories waits while the rank's workers are that
        # far ahead of the learners (sfx.engine.buffers.CollectionGate); None: only the free slots throttle
        self.gate = gate
        self.held: set[int] = set()  # splits whose actions came back, waiting at the gate to step
        # splits stepping in an asynchronous vector (sfx.envs.vector), not yet recorded: split -> (agents, policy
        # groups, actions)
        self.in_flight: dict[int, tuple] = {}
        # per policy, which worker holds each slot (shared): a restarted worker's slots go back
        self.slot_owners = [o.numpy() for o in slot_owners] if slot_owners is not None else None
        # requests carry a generation in their split id; answers to another generation's requests (sent
        # before this process replaced a dead one, or before a resend) are ignored
        self.gen = incarnation * 1_000_000
        self.worker_idx = worker_idx
        self.num_agents_per_env = num_agents_per_env
        self.traj = traj_buffers
        self.free_slot_queues = free_slot_queues
        self.policy_queues = policy_queues
        self.learner_queues = learner_queues
        self.report_queue = report_queue
        # (cfg, env_configs, name) -> VectorEnv: one per split (sfx.envs.vector.make_vector_env unless the caller
        # times or replaces the envs, as the dummy sampler does)
        self.make_vector_fn = make_vector_fn or make_vector_env

        self.num_envs = cfg.num_envs_per_worker
        self.num_splits = cfg.worker_num_splits
        self.envs_per_split = self.num_envs // self.num_splits
        self.rollout = cfg.rollout
        self.num_policies = cfg.num_policies
        self.agents_per_split = self.envs_per_split * num_agents_per_env
        num_local_agents = self.num_envs * num_agents_per_env
        self.agent_offset = worker_idx * num_local_agents

        # numpy views of shared memory: element writes are much cheaper than torch indexing
        self.np = [tree_map(lambda v: v.numpy(), tb.tensors()) for tb in traj_buffers]
        self.final_obs = {k: v.numpy() for k, v in agent_buffers.final_obs.items()}
        # a Box observation is stored under one key; a Dict one key by key (decided in start())
        self.obs_keys = [k for k in self.final_obs if k not in EXTRA_KEYS]
        # --use_prev_action_reward: the previous action and reward are written beside each observation
        self.prev_action_reward = PREV_ACTION_KEY in self.final_obs
        self.prev_action_offset = 0.0  # categorical choices are stored + 1 there (0 = none), set in start()
        self.box_obs = True
        self.final_rnn = agent_buffers.final_rnn.numpy()
        # a memory core's per-agent memory: copied into a slot that continues an episode (the learner needs
        # the memory the slot's first step acted with); a slot that starts an episode needs none
        self.memory = agent_buffers.memory.numpy() if agent_buffers.memory.shape[1] > 0 else None
        # the recurrent state each episode starts from, as the model's core declares it
        init = agent_buffers.initial_rnn if initial_rnn_state is None else initial_rnn_state
        self.init_rnn = init.numpy().copy()

        self.slot = np.full(num_local_agents, -1, dtype=np.int64)
        self.t = np.zeros(num_local_agents, dtype=np.int64)
        self.policy = np.zeros(num_local_agents, dtype=np.int64)
        self.repick_policy = np.zeros(num_local_agents, dtype=bool)
        self.env_policy = np.full(self.num_envs, -1, dtype=np.int64)
        self.env_task = np.zeros(self.num_envs, dtype=np.int64)  # each env's task (env.task_id; 0 = single task)
        self.policy_shaping: dict[int, dict] = {}
        self.trunc_slot = np.full(num_local_agents, -1, dtype=np.int64)
        self.trunc_t = np.full(num_local_agents, -1, dtype=np.int64)

        seed = cfg.seed if cfg.seed is not None else None
        self.rng = np.random.default_rng(None if seed is None else seed * 1000 + worker_idx)

        self.vectors: list[VectorEnv] = []  # one per split
        self.awaiting = np.zeros(self.num_splits, dtype=np.int64)  # rows still without actions
        self.asked_at = np.zeros(self.num_splits)  # when each split's requests went out (round-trip latency)
        # finished trajectories per split, (policy, slot): ready ones go to the learner as soon as the split's step
        # is recorded; one whose last step a time limit cut waits for the next answer, which writes V(final obs)
        # into it (a trajectory held for nothing would reach the learner an act round trip late, and in serial mode
        # each trajectory's first step would then be acted by the weights from before the iteration it ends)
        self.ready_sends: list[list[tuple[int, int]]] = [[] for _ in range(self.num_splits)]
        self.pending_sends: list[list[tuple[int, int]]] = [[] for _ in range(self.num_splits)]
        self.last_requests: list[dict[int, bytes]] = [{} for _ in range(self.num_splits)]  # packed rows per policy
        self.episode_stats: list[dict] = []
        self.last_report = time.time()
        self.env_steps = 0
        self.env_errors = 0  # envs that crashed and were recreated
        self.reported_env_errors = 0
        self.last_env_error: str | None = None  # the last crash's exception, one line (the supervisor names it)
        self.stopped = False

    # ---------------------------------------------------------------- setup

    def start(self) -> None:
        """Create and reset the envs, take a slot per agent and ask for the first actions (after a
        random delay up to --decorrelate_experience_max_seconds, so workers do not run in lockstep)."""
        cfg = self.cfg
        if cfg.decorrelate_experience_max_seconds > 0:
            delay = float(self.rng.uniform(0.0, cfg.decorrelate_experience_max_seconds))
            log.info("rollout worker %d starts in %.1f s (--decorrelate_experience_max_seconds)", self.worker_idx, delay)
            deadline = time.time() + delay
            while time.time() < deadline and not self.should_stop():
                time.sleep(min(0.1, max(0.0, deadline - time.time())))
        for split in range(self.num_splits):
            configs = [self._env_config(e) for e in self._split_envs(split)]
            vector = self.make_vector_fn(cfg, configs, f"rollout worker {self.worker_idx} split {split}")
            self.vectors.append(vector)
            if vector.num_agents != self.num_agents_per_env:
                raise RuntimeError(f"env {cfg.env} made {vector.num_agents} agents in worker "
                                   f"{self.worker_idx}, expected {self.num_agents_per_env}")
            self.env_task[self._split_envs(split)] = vector.task_ids
        self.action_space = self.vectors[0].action_space
        self.box_obs = not isinstance(self.vectors[0].observation_space, gymnasium.spaces.Dict)
        self.prev_action_offset = 0.0 if isinstance(self.action_space, gymnasium.spaces.Box) else 1.0

        for a in range(len(self.slot)):
            self.policy[a] = self._pick_policy(a)
            self._apply_shaping(a)
        for split, vector in enumerate(self.vectors):
            obs = vector.reset([env_seed(cfg, self._env_config(e)) for e in self._split_envs(split)])
            for i, a in enumerate(self._split_agents(split)):
                slot = self._acquire_slot(self.policy[a], a)
                if slot is None:
                    return
                self.slot[a], self.t[a] = slot, 0
                p = self.policy[a]
                self._write_obs(self.np[p]["obs"], (slot, 0), _row(obs, i))
                self.np[p]["rnn_states"][slot, 0] = self.init_rnn
        for s in range(self.num_splits):
            self._send_requests(s)

    def _env_config(self, e: int) -> dict:
        """Env ``e`` of this worker: its index here and its global id (its seed is ``cfg.seed + env_id``)."""
        return {"worker_index": self.worker_idx, "vector_index": e, "env_id": self.worker_idx * self.num_envs + e}

    def _split_envs(self, split: int) -> range:
        return range(split * self.envs_per_split, (split + 1) * self.envs_per_split)

    def _pick_policy(self, a: int) -> int:
        """A policy for agent ``a``'s next episode: uniformly at random, or with
        ``--pbt_mix_policies_in_one_env=False`` the one its env's first agent last drew."""
        if self.num_policies == 1:
            return 0
        nap = self.num_agents_per_env
        if nap > 1 and not self.cfg.pbt_mix_policies_in_one_env:
            e, j = divmod(a, nap)
            if j == 0 or self.env_policy[e] < 0:
                self.env_policy[e] = int(self.rng.integers(self.num_policies))
            return int(self.env_policy[e])
        return int(self.rng.integers(self.num_policies))

    def _apply_shaping(self, a: int) -> None:
        weights = self.policy_shaping.get(int(self.policy[a]))
        if weights is not None and self.vectors:
            split, i = divmod(a, self.agents_per_split)
            self.vectors[split].set_reward_shaping(dict(weights), i)

    def set_policy_shaping(self, policy: int, weights: dict) -> None:
        """PBT: the reward-shaping weights of ``policy``, for every agent playing it now or later."""
        self.policy_shaping[int(policy)] = dict(weights)
        for a in range(len(self.policy)):
            if self.policy[a] == policy:
                self._apply_shaping(a)

    def _acquire_slot(self, policy: int, agent: int) -> int | None:
        """A free slot of ``policy`` for ``agent`` (the slot takes the agent's task); blocks while the
        learner is behind (throttling)."""
        q = self.free_slot_queues[policy]
        next_check = time.monotonic() + 0.5
        waited_from = None
        while not self.stopped:
            try:
                # polled, not a blocking get: a worker killed or frozen while waiting inside a shared
                # queue's condition variable can leave that queue unusable for everyone else
                slot = int(q.get(block=False))
                if self.slot_owners is not None:
                    self.slot_owners[policy][slot] = self.worker_idx
                self.np[policy]["task"][slot] = self.env_task[agent // self.num_agents_per_env]
                if waited_from is not None:  # the learners are behind: every slot is taken
                    perf.current().add("wait_slot", time.perf_counter() - waited_from)
                return slot
            except Empty:
                if waited_from is None:
                    waited_from = time.perf_counter()
                if self.cfg.serial_mode:
                    raise RuntimeError("serial mode ran out of trajectory slots; this is a bug")
                time.sleep(0.001)
                if time.monotonic() >= next_check:
                    next_check = time.monotonic() + 0.5
                    if self.should_stop():
                        self.stopped = True
        return None

    @property
    def waiting_for(self) -> str:
        """What a wait on the inbox is for (sfx.engine.perf): the collection gate while a split is held there,
        else the policy workers' actions."""
        return "gate" if self.held else "actions"

    # ---------------------------------------------------------------- main step

    def process(self, msgs: list) -> None:
        for kind, answered in msgs:
            if kind == SHAPING:
                self.set_policy_shaping(*answered)
                continue
            if kind == RESEND:
                self.resend_requests()
                continue
            if kind != ACT:
                raise ValueError(f"rollout worker got unknown message {kind!r}")
            for tagged, n in answered:
                gen, split = divmod(tagged, self.num_splits)
                if gen != self.gen:
                    continue  # an answer to requests made before a restart or a resend
                self.awaiting[split] -= n
                if self.awaiting[split] == 0:
                    perf.latency("act_round_trip", time.perf_counter() - self.asked_at[split])
                    self._advance_split(split)
                    if self.stopped:
                        return

    def _split_agents(self, split: int) -> range:
        first = split * self.agents_per_split
        return range(first, first + self.agents_per_split)

    def _advance_split(self, split: int) -> None:
        self._flush_sends(self.pending_sends[split])
        agents = self._split_agents(split)
        if self.gate is not None:
            starting = int((self.t[agents.start:agents.stop] == 0).sum())
            if starting:
                # only a whole round waits: then every trajectory its agents started is finished and sent (it
                # steps once the learners take a batch). An agent that starts alone (its next episode is another
                # policy's) goes on: holding the split would strand its neighbours' unfinished trajectories
                if starting == len(agents) and not self.gate.may_start():
                    self.held.add(split)
                    self.read_timeout_sec = 0.002
                    self._collect_others(None)  # what the learners wait for may be stepping there
                    return
                self.gate.count(self.worker_idx, starting)
        sl = slice(agents.start, agents.stop)
        groups = self._policy_groups(sl)
        actions = self._gather_actions(sl, groups)
        vector = self.vectors[split]
        t0 = time.perf_counter()
        vector.step_async(actions)
        perf.current().add("env_step", time.perf_counter() - t0)
        self.in_flight[split] = (sl, groups, actions)
        if not vector.asynchronous:
            self._collect_split(split)
            return
        # double buffering on a native pool: its threads step this split while the other splits' steps, already
        # taken, are recorded and their requests sent (or at once, with nothing else to do)
        self._collect_others(split)

    def _collect_others(self, split: int | None) -> None:
        """Record every split in flight but ``split`` (None: every one); then ``split`` too if no other split awaits
        actions (no answer would come to wake this worker for it)."""
        for other in [s for s in self.in_flight if s != split]:
            if self.stopped:
                return
            self._collect_split(other)
        if split is not None and split in self.in_flight and not any(
                self.awaiting[s] > 0 for s in range(self.num_splits) if s != split):
            self._collect_split(split)

    def _collect_split(self, split: int) -> None:
        """Take split ``split``'s step from its vector, write it into the slots and ask for the next actions."""
        sl, groups, actions = self.in_flight.pop(split)
        vector = self.vectors[split]
        errors_before, env_sec_before = vector.env_errors, vector.env_sec
        t0 = time.perf_counter()
        step = vector.step_wait()
        wall = time.perf_counter() - t0
        # the envs' own time, and the vector's Python around it (collecting a split's results into arrays)
        env_sec = wall if env_sec_before is None else vector.env_sec - env_sec_before
        perf.current().add("env_step", env_sec)
        if wall > env_sec:
            perf.current().add("vector", wall - env_sec)
        if vector.env_errors != errors_before:
            self.env_errors += vector.env_errors - errors_before
            self.last_env_error = vector.last_env_error
            self.env_task[self._split_envs(split)] = vector.task_ids  # a re-made env may play another task
        self.env_steps += self.agents_per_split
        self._record_split(sl, groups, actions, step)
        if self.stopped:
            return
        self._send_requests(split)
        self._flush_sends(self.ready_sends[split])
        self._maybe_report()

    def _policy_groups(self, sl: slice) -> list[tuple[int, np.ndarray | None]]:
        """The policies of agents ``sl`` with the mask of each one's agents (None: every agent is that policy's)."""
        policies = self.policy[sl]
        first = int(policies[0])
        if self.num_policies == 1 or (policies == first).all():
            return [(first, None)]
        return [(int(p), policies == p) for p in np.unique(policies)]

    def _gather_actions(self, sl: slice, groups: list) -> np.ndarray:
        """The actions the policy workers wrote for agents ``sl``: ``[n, k]`` rows as the slots store them."""
        slots, ts = self.slot[sl], self.t[sl]
        if groups[0][1] is None:
            return self.np[groups[0][0]]["actions"][slots, ts]
        actions = np.empty((sl.stop - sl.start, *self.np[0]["actions"].shape[2:]), dtype=self.np[0]["actions"].dtype)
        for p, mask in groups:
            actions[mask] = self.np[p]["actions"][slots[mask], ts[mask]]
        return actions

    def _record_split(self, sl: slice, groups: list, actions: np.ndarray, step: VectorStep) -> None:
        """Write one step of agents ``sl`` into their slots: rewards and flags at ``t``, the next observation at
        ``t + 1``, with array operations; then, per agent, what is rare (an episode or trajectory end)."""
        slots, ts = self.slot[sl], self.t[sl]
        next_ts = ts + 1
        terminated = step.terminated
        time_limit = step.truncated & ~terminated
        done = terminated | step.truncated
        any_done = bool(done.any())
        prev_action = prev_reward = None
        if self.prev_action_reward:  # what led to the next observation; none where a new episode starts
            prev_action = actions + self.prev_action_offset
            prev_reward = step.rewards.astype(np.float32, copy=True)
            if any_done:
                prev_action[done] = 0.0
                prev_reward[done] = 0.0
        for p, mask in groups:
            buf = self.np[p]
            at_s, at_t, at_next = (slots, ts, next_ts) if mask is None else (slots[mask], ts[mask], next_ts[mask])
            pick = _all if mask is None else (lambda x, m=mask: x[m])
            buf["rewards"][at_s, at_t] = pick(step.rewards)
            buf["terminated"][at_s, at_t] = pick(terminated)
            buf["truncated"][at_s, at_t] = pick(time_limit)
            # multi-agent envs mark agents that sit out (e.g. dead, waiting to respawn): not trained on
            buf["active"][at_s, at_t] = True if step.active is None else pick(step.active)
            obs_dst = buf["obs"]
            if self.box_obs:
                obs_dst[BOX_KEY][at_s, at_next] = pick(step.obs)
            else:
                for k in self.obs_keys:
                    obs_dst[k][at_s, at_next] = pick(step.obs[k])
            if prev_action is not None:
                obs_dst[PREV_ACTION_KEY][at_s, at_next] = pick(prev_action)
                obs_dst[PREV_REWARD_KEY][at_s, at_next] = pick(prev_reward)[:, None]
        first = sl.start
        if any_done:
            for i in np.flatnonzero(done).tolist():
                self._episode_end(first + i, step.events.get(i), bool(time_limit[i]), actions[i], step.rewards[i])
        self.t[sl] = next_ts
        # trajectories that are complete, and (several policies) episodes whose next one is another policy's
        moving = next_ts >= self.rollout
        if any_done and self.num_policies > 1:
            moving |= done & self.repick_policy[sl]
        for i in np.flatnonzero(moving).tolist():
            self._trajectory_event(first + i, done[i])
            if self.stopped:
                return

    def _episode_end(self, a: int, event, time_limit: bool, action: np.ndarray, reward: float) -> None:
        """Agent ``a``'s episode ended on its step ``t`` (its next observation, already written at ``t + 1``,
        starts the next episode): statistics, the time limit's bootstrap, the core's state reset."""
        p, slot, t = self.policy[a], self.slot[a], self.t[a]
        buf = self.np[p]
        if event is not None and event.episode is not None:
            self.episode_stats.append({"policy": int(p), "task": int(self.env_task[a // self.num_agents_per_env]),
                                       **event.episode})
        if time_limit:
            # the learner bootstraps from V(final obs); the policy worker computes it with the state the episode
            # would have continued with
            g = self.agent_offset + a
            self._write_obs(self.final_obs, g, event.final_obs, action, reward)
            self.final_rnn[g] = buf["rnn_states"][slot, t + 1]
            self.trunc_slot[a], self.trunc_t[a] = slot, t
            if "final_obs" in buf:
                # the agent's rule keeps it in the slot: a target computed later, with other weights,
                # bootstraps from the state the episode would have continued from
                self._write_obs(buf["final_obs"], (slot, t), event.final_obs, action, reward)
        # rnn_states[slot, t + 1] was written by the policy worker together with the action
        buf["rnn_states"][slot, t + 1] = self.init_rnn
        if self.num_policies > 1:
            self.repick_policy[a] = True

    def _trajectory_event(self, a: int, done: bool) -> None:
        """Agent ``a`` (its step recorded, ``t`` advanced) filled its trajectory, or ended an episode whose
        successor may be another policy's: move it to a new slot where needed."""
        p, slot, t = int(self.policy[a]), int(self.slot[a]), int(self.t[a])
        if t < self.rollout:  # an episode ended and the agent drew its next policy
            self.repick_policy[a] = False
            new_p = self._pick_policy(a)
            if new_p != p:
                # the next episode belongs to another policy: this trajectory ends here
                self._switch_policy_early(a, p, slot, t, new_p)
            return
        # trajectory complete: obs[T] and rnn_states[T] bootstrap it and start the next one
        new_p = p
        if self.repick_policy[a]:
            new_p = self._pick_policy(a)
            self.repick_policy[a] = False
        new_slot = self._acquire_slot(new_p, a)
        if new_slot is None:
            return
        buf, nbuf = self.np[p], self.np[new_p]
        self._copy_obs(buf["obs"], (slot, t), nbuf["obs"], (new_slot, 0))
        continues = new_p == p and not done
        nbuf["rnn_states"][new_slot, 0] = buf["rnn_states"][slot, t] if continues else self.init_rnn
        if continues and self.memory is not None:
            # the policy worker wrote step t - 1's entry before it answered
            nbuf["memory"][new_slot] = self.memory[self.agent_offset + a]
        self._finished(a, p, slot)
        self.policy[a], self.slot[a], self.t[a] = new_p, new_slot, 0
        if new_p != p:
            self._apply_shaping(a)

    def _switch_policy_early(self, a: int, p: int, slot: int, t: int, new_p: int) -> None:
        """Agent ``a``'s episode ended at step ``t - 1`` and its next one is ``new_p``'s: steps ``t..T-1``
        of this slot are padding (inactive, terminal, zero reward: the learner neither trains on them nor
        bootstraps through them) and the new episode starts at step 0 of a slot of ``new_p``."""
        buf = self.np[p]
        buf["active"][slot, t:] = False
        buf["terminated"][slot, t:] = True
        buf["truncated"][slot, t:] = False
        buf["rewards"][slot, t:] = 0.0
        buf["policy_versions"][slot, t:] = buf["policy_versions"][slot, t - 1]
        new_slot = self._acquire_slot(new_p, a)
        if new_slot is None:
            return
        nbuf = self.np[new_p]
        # an episode's first observation (its previous action and reward, if stored, are zeros)
        self._copy_obs(buf["obs"], (slot, t), nbuf["obs"], (new_slot, 0))
        nbuf["rnn_states"][new_slot, 0] = self.init_rnn
        self._finished(a, p, slot)
        self.policy[a], self.slot[a], self.t[a] = new_p, new_slot, 0
        self._apply_shaping(a)

    @staticmethod
    def _copy_obs(src: dict, src_index: tuple, dst: dict, dst_index: tuple) -> None:
        """The observation (and previous action and reward, where stored) at ``src_index`` to ``dst_index``."""
        for k, v in src.items():
            dst[k][dst_index] = v[src_index]

    def _write_obs(self, dst: dict, index, obs, prev_action=None, prev_reward: float = 0.0) -> None:
        """An observation into ``dst`` at ``index``; with --use_prev_action_reward also the action and
        reward that led to it (``prev_action`` None: an episode start, written as zeros)."""
        if self.box_obs:
            dst[BOX_KEY][index] = obs
        else:
            for k in self.obs_keys:
                dst[k][index] = obs[k]
        if self.prev_action_reward:
            if prev_action is None:
                dst[PREV_ACTION_KEY][index] = 0.0
                dst[PREV_REWARD_KEY][index] = 0.0
            else:
                dst[PREV_ACTION_KEY][index] = prev_action + self.prev_action_offset
                dst[PREV_REWARD_KEY][index] = prev_reward

    def _send_requests(self, split: int) -> None:
        agents = self._split_agents(split)
        sl = slice(agents.start, agents.stop)
        rows = np.stack([self.slot[sl], self.t[sl], self.trunc_slot[sl], self.trunc_t[sl],
                         np.arange(self.agent_offset + agents.start, self.agent_offset + agents.stop)], axis=1)
        self.trunc_slot[sl] = self.trunc_t[sl] = -1
        self.awaiting[split] = len(agents)
        self.last_requests[split] = {p: pack_request_rows(rows if mask is None else rows[mask])
                                     for p, mask in self._policy_groups(sl)}
        self._put_requests(split)

    def _put_requests(self, split: int) -> None:
        self.asked_at[split] = time.perf_counter()
        tagged = self.gen * self.num_splits + split
        for p, rows in self.last_requests[split].items():
            self.policy_queues[p].put((REQ, self.worker_idx, tagged, rows))

    def resend_requests(self) -> None:
        """A policy worker was replaced: requests it had taken are lost. Ask again for every split
        still waiting, under a new generation (late answers to the old requests are ignored)."""
        self.gen += 1
        for split in range(self.num_splits):
            if self.awaiting[split] > 0:
                self.awaiting[split] = sum(len(request_rows(r)) for r in self.last_requests[split].values())
                self._put_requests(split)

    def _finished(self, a: int, p: int, slot: int) -> None:
        """Agent ``a``'s trajectory in ``slot`` of policy ``p`` is complete: to the learner after this step
        (``ready_sends``), or after the next answer when that answer still writes its truncation value."""
        split = a // self.agents_per_split
        (self.pending_sends if self.trunc_slot[a] == slot else self.ready_sends)[split].append((p, slot))

    def _flush_sends(self, sends: list[tuple[int, int]]) -> None:
        """Hand the finished trajectories ``sends`` (policy, slot) to their learners and empty the list."""
        if not sends:
            return
        by_policy: dict[int, list[int]] = {}
        for p, slot in sends:
            by_policy.setdefault(p, []).append(slot)
        for p, slots in by_policy.items():
            if self.slot_owners is not None:
                self.slot_owners[p][slots] = -1
            self.learner_queues[p].put((TRAJ, slots))
            if self.gate is not None:
                self.gate.count_sent(self.worker_idx, p, len(slots))
        sends.clear()

    # ---------------------------------------------------------------- reporting

    def _maybe_report(self, force: bool = False) -> None:
        now = time.time()
        if not force and now - self.last_report < 1.0:
            return
        self.report_queue.put((ROLLOUT, self.worker_idx, {"env_steps": self.env_steps,
                                                            "episodes": self.episode_stats,
                                                            "env_errors": self.env_errors - self.reported_env_errors,
                                                            "env_error": self.last_env_error}))
        self.reported_env_errors = self.env_errors
        self.episode_stats = []
        self.env_steps = 0
        self.last_report = now

    def tick(self) -> None:
        """Step the splits held at the collection gate once it lets them start."""
        for split in sorted(self.held):
            if self.stopped or not self.gate.may_start():
                break
            self.held.discard(split)
            self._advance_split(split)
        if not self.held:
            self.read_timeout_sec = Component.read_timeout_sec
        if self.in_flight and not self.stopped and not self.awaiting.any():
            self._collect_others(None)  # nothing is coming back: take the steps in flight

    def finish(self) -> None:
        self.close()

    def close(self) -> None:
        self.stopped = True
        self._maybe_report(force=True)
        for vector in self.vectors:
            try:
                vector.close()
            except Exception:  # an env failing to close must not hide the real shutdown
                log.exception("closing the envs of rollout worker %d failed", self.worker_idx)
        self.vectors = []


def _all(x: np.ndarray) -> np.ndarray:
    return x


def _row(obs, i: int):
    """Agent ``i``'s observation in a vector's batch (an array, or a dict of arrays)."""
    return {k: v[i] for k, v in obs.items()} if isinstance(obs, dict) else obs[i]
