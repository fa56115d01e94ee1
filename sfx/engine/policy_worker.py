"""Policy worker: batched inference for many rollout workers.

It drains every request waiting on its policy's queue, runs one forward pass over all of them,
writes actions, log-probs, values, distribution parameters and the next recurrent state straight
into the trajectory slots, and tells each rollout worker how many of its rows are answered.
Fresh weights are picked up from the policy's :class:`~sfx.engine.buffers.WeightsBuffer` before
each batch; the version that acted is stored per sample so the learner can measure policy lag.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from sfx.algo.distributions import make_action_distribution
from sfx.engine.buffers import AgentBuffers, TrajectoryBuffers, WeightsBuffer
from sfx.engine.component import Component
from sfx.engine.protocol import ACT, REQ_AGENT, REQ_SLOT, REQ_T, REQ_TRUNC_SLOT, REQ_TRUNC_T, TRAJ

if TYPE_CHECKING:
    from sfx.models.actor_critic import ActorCritic

log = logging.getLogger(__name__)


class PolicyWorker(Component):
    """Messages in (:mod:`sfx.engine.protocol`): ``REQ`` from rollout workers. Out: ``ACT`` to each
    rollout worker's inbox. A component (start / process / tick / finish)."""

    def __init__(self, cfg: Any, policy_id: int, worker_idx: int, model: ActorCritic,
                 traj_buffers: TrajectoryBuffers, agent_buffers: AgentBuffers,
                 weights: WeightsBuffer, rollout_inboxes: list, report_queue: Any,
                 device: torch.device) -> None:
        self.cfg = cfg
        self.policy_id = policy_id
        self.worker_idx = worker_idx
        self.model = model.to(device).for_inference()
        self.traj = traj_buffers
        self.agents = agent_buffers
        self.weights = weights
        self.rollout_inboxes = rollout_inboxes
        self.report_queue = report_queue
        self.device = device
        self.version = -1
        self._memory_buf: torch.Tensor | None = None  # a memory core's gathered memories (see process)

    def update_weights(self) -> None:
        self.version = self.weights.read_into(self.model, self.version)

    def start(self) -> None:
        """Wait for the learner's first weights (in serial mode the learner has published them already)."""
        self.update_weights()
        while self.version < 0 and not self.should_stop():
            time.sleep(0.01)
            self.update_weights()

    def process(self, msgs: list) -> None:
        if not msgs:
            return
        self.update_weights()
        if self.version < 0:
            raise RuntimeError(f"policy worker {self.policy_id}.{self.worker_idx} asked to act "
                               f"before the learner published weights")
        rows = np.concatenate([m[3] for m in msgs]) if len(msgs) > 1 else msgs[0][3]
        rows_t = torch.from_numpy(rows)
        slots, ts = rows_t[:, REQ_SLOT], rows_t[:, REQ_T]
        trunc_mask = rows_t[:, REQ_TRUNC_SLOT] >= 0
        n = len(rows)
        traj, dev = self.traj, self.device

        obs = {k: v[slots, ts] for k, v in traj.obs.items()}
        rnn = traj.rnn_states[slots, ts]
        # a memory core (Transformer-XL): each row's agent's memory; a truncated episode's last value reads
        # the same agent's memory (this step's entry is written only after the forward pass)
        memory_agents = rows_t[:, REQ_AGENT] if self.model.memory_len else None
        if bool(trunc_mask.any()):
            trunc_rows = rows_t[trunc_mask]
            agent_idx = trunc_rows[:, REQ_AGENT]
            obs = {k: torch.cat([v, self.agents.final_obs[k][agent_idx]]) for k, v in obs.items()}
            rnn = torch.cat([rnn, self.agents.final_rnn[agent_idx]])
            if memory_agents is not None:
                memory_agents = torch.cat([memory_agents, agent_idx])
        else:
            trunc_rows = None
        memory = None
        if memory_agents is not None:
            # gathered into a buffer kept between batches: a fresh [n, R, W] tensor per batch (up to hundreds of
            # MB with a long memory) costs more in page faults than the copy itself
            rows = len(memory_agents)
            if self._memory_buf is None or self._memory_buf.shape[0] < rows:
                self._memory_buf = torch.empty((rows, *self.agents.memory.shape[1:]), dtype=self.agents.memory.dtype)
            memory = torch.index_select(self.agents.memory, 0, memory_agents, out=self._memory_buf[:rows])
            memory = memory.to(dev, non_blocking=True)

        tasks = None
        if self.model.popart is not None:  # per-task value outputs: each row's task (its slot's)
            tasks = traj.task[slots]
            if trunc_rows is not None:
                tasks = torch.cat([tasks, traj.task[trunc_rows[:, REQ_TRUNC_SLOT]]])
            tasks = tasks.to(dev, non_blocking=True)
        with torch.inference_mode():
            out = self.model.forward_step({k: v.to(dev, non_blocking=True) for k, v in obs.items()},
                                          rnn.to(dev, non_blocking=True), tasks, memory)
            params = out["action_params"][:n]
            dist = make_action_distribution(self.model.action_space, params)
            actions = dist.sample()
            log_probs = dist.log_prob(actions)
            values = out["values"]
            new_rnn = out["new_rnn_states"][:n]

        traj.actions[slots, ts] = actions.float().cpu().reshape(n, -1)
        traj.log_probs[slots, ts] = log_probs.cpu()
        traj.action_params[slots, ts] = params.cpu()
        traj.values[slots, ts] = values[:n].cpu()
        traj.rnn_states[slots, ts + 1] = new_rnn.cpu()
        if memory is not None:
            self.agents.memory[rows_t[:, REQ_AGENT], out["memory_index"][:n].cpu()] = out["memory_entry"][:n].cpu()
        traj.policy_versions[slots, ts] = self.version
        if trunc_rows is not None:
            traj.trunc_values[trunc_rows[:, REQ_TRUNC_SLOT], trunc_rows[:, REQ_TRUNC_T]] = values[n:].cpu()

        # answer only after every write above: the rollout worker reads the slots right away.
        # One message per rollout worker: waking a process costs more than the payload.
        answers: dict[int, list[tuple[int, int]]] = {}
        for _, worker, split, r in msgs:
            answers.setdefault(worker, []).append((split, len(r)))
        for worker, splits in answers.items():
            self.rollout_inboxes[worker].put((ACT, splits))


def random_action_rows(space: Any, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` uniformly random actions of ``space`` as stored in a trajectory slot (``[n, k]`` float32,
    categorical choices counted from 0: :func:`~sfx.algo.distributions.action_to_env` adds ``start``)."""
    from gymnasium import spaces

    if isinstance(space, spaces.Discrete):
        return rng.integers(int(space.n), size=(n, 1)).astype(np.float32)
    if isinstance(space, spaces.Tuple):
        return np.concatenate([random_action_rows(s, n, rng) for s in space.spaces], axis=1)
    if isinstance(space, spaces.MultiDiscrete):
        nvec = np.asarray(space.nvec, dtype=np.int64).reshape(-1)
        return (rng.random((n, len(nvec))) * nvec).astype(np.int64).astype(np.float32)
    if isinstance(space, spaces.Box):
        low = np.broadcast_to(space.low, space.shape).reshape(-1).astype(np.float64)
        high = np.broadcast_to(space.high, space.shape).reshape(-1).astype(np.float64)
        bounded = np.isfinite(low) & np.isfinite(high)
        # unbounded dimensions get a standard normal, as a fresh Gaussian policy would act
        rows = rng.standard_normal((n, len(low)))
        rows[:, bounded] = rng.uniform(low[bounded], high[bounded], size=(n, int(bounded.sum())))
        return rows.astype(np.float32)
    raise ValueError(f"no random actions for action space {space!r}")


class RandomPolicyWorker(Component):
    """Stands in for a policy worker in the dummy sampler (``python -m sfx.dummy_sampler``): it
    answers requests exactly like a :class:`PolicyWorker` (same queues, same slots, same answer),
    but writes uniformly random actions instead of running a model, so the figure measured is the
    sampling path alone. It also takes the place of the learner: finished trajectories
    (``('traj', slots)``, wired to arrive on this worker's own queue) go straight back to the
    policy's free-slot queue.

    Messages in: ``REQ`` and ``TRAJ`` (:mod:`sfx.engine.protocol`). Out: ``ACT`` to the rollout
    worker's inbox; slot ids to ``free_slots``.
    """

    def __init__(self, policy_id: int, worker_idx: int, action_space: Any, traj_buffers: TrajectoryBuffers,
                 free_slots: Any, rollout_inboxes: list, seed: int | None = None) -> None:
        self.policy_id = policy_id
        self.worker_idx = worker_idx
        self.action_space = action_space
        self.actions = traj_buffers.actions.numpy()
        self.free_slots = free_slots
        self.rollout_inboxes = rollout_inboxes
        self.rng = np.random.default_rng(None if seed is None else seed * 1000 + 7 * policy_id + worker_idx)

    def process(self, msgs: list) -> None:
        answers: dict[int, list[tuple[int, int]]] = {}
        for msg in msgs:
            if msg[0] == TRAJ:
                self.free_slots.put_many(list(msg[1]))
                continue
            _, worker, split, rows = msg
            self.actions[rows[:, REQ_SLOT], rows[:, REQ_T]] = random_action_rows(self.action_space, len(rows), self.rng)
            answers.setdefault(worker, []).append((split, len(rows)))
        for worker, splits in answers.items():
            self.rollout_inboxes[worker].put((ACT, splits))
