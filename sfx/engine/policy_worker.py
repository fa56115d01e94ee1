"""Policy worker: batched inference for many rollout workers.

It drains every request waiting on its policy's queue, runs one forward pass over all of them,
lets the agent's acting rule (:class:`~sfx.agents.ActingRule`) pick the actions and the per-step fields
it stores (APPO: log-probs, values, distribution parameters), writes them and the next recurrent state
straight into the trajectory slots, and tells each rollout worker how many of its rows are answered.
Fresh weights are picked up from the policy's :class:`~sfx.engine.buffers.WeightsBuffer` before
each batch; the version that acted is stored per sample so the learner can measure policy lag.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import torch

from sfx.agents import ActingRule
from sfx.agents.dummy import RandomActingRule
from sfx.engine import perf
from sfx.engine.buffers import AgentBuffers, TrajectoryBuffers, WeightsBuffer
from sfx.engine.component import Component
from sfx.engine.cuda_graphs import GraphedStep
from sfx.engine.protocol import (ACT, REQ_AGENT, REQ_SLOT, REQ_T, REQ_TRUNC_SLOT, REQ_TRUNC_T, REQUEST_COLUMNS, TRAJ,
                                 request_rows)
from sfx.engine.staging import HostStaging, to_host

if TYPE_CHECKING:
    from sfx.models.actor_critic import ActorCritic

log = logging.getLogger(__name__)

ROW_BYTES = REQUEST_COLUMNS * 8  # one packed request row (int64 columns)


class PolicyWorker(Component):
    """Messages in (:mod:`sfx.engine.protocol`): ``REQ`` from rollout workers. Out: ``ACT`` to each
    rollout worker's inbox. A component (start / process / tick / finish)."""

    waiting_for = "requests"

    def __init__(self, cfg: Any, policy_id: int, worker_idx: int, model: ActorCritic, rule: ActingRule,
                 traj_buffers: TrajectoryBuffers, agent_buffers: AgentBuffers,
                 weights: WeightsBuffer, rollout_inboxes: list, report_queue: Any,
                 device: torch.device) -> None:
        self.cfg = cfg
        self.policy_id = policy_id
        self.worker_idx = worker_idx
        self.model = model.to(device).for_inference()
        self.rule = rule
        self.traj = traj_buffers
        self.agents = agent_buffers
        self.weights = weights
        self.rollout_inboxes = rollout_inboxes
        self.report_queue = report_queue
        self.device = device
        self.version = -1
        self._memory_buf: torch.Tensor | None = None  # a memory core's gathered memories (see process)
        # on a GPU, rows are gathered into page-locked buffers so their copies to the device are asynchronous
        self.staging = HostStaging(device)
        # --inference_gather=device: the GPU reads the observation and recurrent-state rows from the slots in place
        self.mapped = None
        if cfg.inference_gather == "device" and device.type == "cuda":
            from sfx.engine.mapped_slots import MappedSlots

            self.mapped = MappedSlots.create(device, {**{f"obs.{k}": v for k, v in traj_buffers.obs.items()},
                                                      "rnn_states": traj_buffers.rnn_states})
        # on a GPU, forward passes replayed from CUDA graphs (launching the kernels from Python costs more than
        # running them); at most every agent of this rank acts at once, plus its time-limit rows
        self.graphs = GraphedStep.create(cfg, self.model, device, max_rows=2 * int(agent_buffers.final_rnn.shape[0]))
        # the slot tensors seen as [slots * steps, ...] once: rows are written by one flat index each
        self._flat_actions = _flat(traj_buffers.actions)
        self._flat_fields = {name: _flat(buf) for name, buf in traj_buffers.fields.items()}
        self._flat_rnn = _flat(traj_buffers.rnn_states)
        self._flat_versions = traj_buffers.policy_versions.view(-1)

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
        with perf.section("weights"):
            self.update_weights()
        if self.version < 0:
            raise RuntimeError(f"policy worker {self.policy_id}.{self.worker_idx} asked to act "
                               f"before the learner published weights")
        meter = perf.current()
        t_gather = time.perf_counter()
        rows = np.concatenate([request_rows(m[3]) for m in msgs]) if len(msgs) > 1 else request_rows(msgs[0][3])
        meter.count("rows", len(rows))
        meter.count("forwards")
        batch = self._gather(rows)
        meter.add("gather", time.perf_counter() - t_gather)
        with meter.section("to_device"):
            if self.mapped is None:
                batch.obs = {k: self.staging.to_device(k, v) for k, v in batch.obs.items()}
                batch.rnn = self.staging.to_device("rnn_states", batch.rnn)
        with meter.section("forward"), torch.inference_mode():
            out, acted, new_rnn = self._forward(batch, meter)
        with meter.section("to_host"):
            answer = self._to_host(batch, out, acted, new_rnn)
        with meter.section("scatter"):
            self._scatter(batch, answer)
        # answer only after every write above: the rollout worker reads the slots right away
        with perf.section("answer"):
            self._tell_workers(msgs)

    def _gather(self, rows: np.ndarray) -> _Batch:
        """The model's inputs for request ``rows``: each row's observation and core state from its slot, a time-limit
        row's final observation and state from its agent, and where the rule needs them the agents' memories and
        the slots' tasks."""
        traj, dev = self.traj, self.device
        rows_t = torch.from_numpy(rows)
        # (slot, t) as one row index of a [slots * (T + 1), ...] view: index_select on a flat view is ~10x
        # faster than indexing with two index tensors. The index arithmetic of a few dozen rows runs in numpy,
        # a few microseconds less per operation than in torch
        slots, ts = rows[:, REQ_SLOT], rows[:, REQ_T]
        at_obs = torch.from_numpy(slots * (traj.rollout + 1) + ts)
        at_step = torch.from_numpy(slots * traj.rollout + ts)
        if self.mapped is not None:  # gathered by the device from the slots: already where the model runs
            at_dev = at_obs.to(dev, non_blocking=True)  # one copy of the indices for every buffer
            obs = {k: self.mapped.rows(f"obs.{k}", at_dev) for k in traj.obs}
            rnn = self.mapped.rows("rnn_states", at_dev)
        else:
            obs = {k: self.staging.rows(k, v, at_obs) for k, v in traj.obs.items()}
            rnn = self.staging.rows("rnn_states", traj.rnn_states, at_obs)
        # a memory core (Transformer-XL): each row's agent's memory; a truncated episode's last value reads
        # the same agent's memory (this step's entry is written only after the forward pass)
        memory_agents = rows_t[:, REQ_AGENT] if self.model.memory_len else None
        # a time-limit step's final observation: evaluated here only where the rule stores a value for it
        trunc_mask = rows[:, REQ_TRUNC_SLOT] >= 0 if self.rule.truncation_field else None
        trunc_rows = None
        if trunc_mask is not None and trunc_mask.any():
            trunc_rows = rows_t[torch.from_numpy(trunc_mask)]
            agent_idx = trunc_rows[:, REQ_AGENT]
            obs = {k: torch.cat([v, self.agents.final_obs[k][agent_idx].to(v.device)]) for k, v in obs.items()}
            rnn = torch.cat([rnn, self.agents.final_rnn[agent_idx].to(rnn.device)])
            if memory_agents is not None:
                memory_agents = torch.cat([memory_agents, agent_idx])
        memory = self._memories(memory_agents) if memory_agents is not None else None
        tasks = None
        if self.model.reads_tasks:  # per-task outputs (e.g. PopArt's values): each row's task (its slot's)
            tasks = traj.task[torch.from_numpy(slots)]
            if trunc_rows is not None:
                tasks = torch.cat([tasks, traj.task[trunc_rows[:, REQ_TRUNC_SLOT]]])
            tasks = tasks.to(dev, non_blocking=True)
        return _Batch(len(rows), rows_t, at_obs, at_step, obs, rnn, memory, tasks, trunc_rows)

    def _memories(self, memory_agents: torch.Tensor) -> torch.Tensor:
        """The memories of ``memory_agents``, on the device, gathered into a buffer kept between batches: a fresh
        [n, R, W] tensor per batch (up to hundreds of MB with a long memory) costs more in page faults than the
        copy itself."""
        n = len(memory_agents)
        if self._memory_buf is None or self._memory_buf.shape[0] < n:
            self._memory_buf = torch.empty((n, *self.agents.memory.shape[1:]), dtype=self.agents.memory.dtype)
        memory = torch.index_select(self.agents.memory, 0, memory_agents, out=self._memory_buf[:n])
        return memory.to(self.device, non_blocking=True)

    def _forward(self, batch: _Batch, meter: Any) -> tuple[dict, Any, torch.Tensor]:
        """One forward pass (replayed from a CUDA graph where one is captured) and the acting rule on the request
        rows' outputs: ``(outputs, the rule's ActingOutput, the rows' new core states)``."""
        n = batch.n
        out = self.graphs(batch.obs, batch.rnn) if self.graphs is not None else None
        if out is None:
            out = self.model.forward_step(batch.obs, batch.rnn, batch.tasks, batch.memory)
        else:
            meter.count("graphed")
        acting_out = out if batch.trunc_rows is None else {k: v[:n] for k, v in out.items()}
        acted = self.rule.act(acting_out, actor_ids=batch.rows_t[:, REQ_AGENT])
        return out, acted, out["new_rnn_states"][:n]

    def _to_host(self, batch: _Batch, out: dict, acted: Any, new_rnn: torch.Tensor) -> _Answer:
        """What is written into the slots and memories, copied to host memory."""
        n = batch.n
        outputs = {"actions": acted.actions, "new_rnn": new_rnn,
                   **{f"field.{name}": value for name, value in acted.fields.items()}}
        if batch.trunc_rows is not None:
            outputs["truncation_values"] = self.rule.truncation_values({k: v[n:] for k, v in out.items()})
        if batch.memory is not None:
            outputs["memory_index"], outputs["memory_entry"] = out["memory_index"][:n], out["memory_entry"][:n]
        host = to_host(outputs)
        return _Answer(host["actions"], host["new_rnn"], {name: host[f"field.{name}"] for name in acted.fields},
                       host.get("truncation_values"),
                       (host["memory_index"], host["memory_entry"]) if batch.memory is not None else None)

    def _scatter(self, batch: _Batch, answer: _Answer) -> None:
        """Write ``answer`` into the trajectory slots and the agents' memories, in place."""
        at_step = batch.at_step
        _write_rows(self._flat_actions, at_step, answer.actions)
        for name, value in answer.fields.items():
            _write_rows(self._flat_fields[name], at_step, value)
        _write_rows(self._flat_rnn, batch.at_obs + 1, answer.new_rnn)
        if answer.memory_update is not None:
            self.agents.memory[batch.rows_t[:, REQ_AGENT], answer.memory_update[0]] = answer.memory_update[1]
        self._flat_versions.index_fill_(0, at_step, self.version)
        if answer.truncation_values is not None:
            field = self.traj.fields[self.rule.truncation_field]
            trunc_rows = batch.trunc_rows
            field[trunc_rows[:, REQ_TRUNC_SLOT], trunc_rows[:, REQ_TRUNC_T]] = answer.truncation_values

    def _tell_workers(self, msgs: list) -> None:
        """Tell each rollout worker how many rows of each of its splits are answered: one message per worker
        (waking a process costs more than the payload)."""
        answers: dict[int, list[tuple[int, int]]] = {}
        for _, worker, split, r in msgs:
            answers.setdefault(worker, []).append((split, len(r) // ROW_BYTES))
        for worker, splits in answers.items():
            self.rollout_inboxes[worker].put((ACT, splits))  # an Act, as a tuple literal: see sfx.engine.protocol


@dataclass(slots=True)
class _Batch:
    """One batch of requests as the model reads it (:meth:`PolicyWorker._gather`): ``n`` request rows (``rows_t``,
    int64 [n, REQUEST_COLUMNS]), their flat slot indices (``at_obs`` into [slots * (T + 1)], ``at_step`` into
    [slots * T]), the model's inputs for them and, after them, for the time-limit rows ``trunc_rows``."""

    n: int
    rows_t: torch.Tensor
    at_obs: torch.Tensor
    at_step: torch.Tensor
    obs: dict
    rnn: torch.Tensor
    memory: torch.Tensor | None
    tasks: torch.Tensor | None
    trunc_rows: torch.Tensor | None


class _Answer(NamedTuple):
    """A batch's answer in host memory (:meth:`PolicyWorker._to_host`): the actions, the new core states, the rule's
    fields by name, a time-limit row's bootstrap value (None without such rows) and a memory core's new entries
    ``(index, entry)`` (None without a memory)."""

    actions: torch.Tensor
    new_rnn: torch.Tensor
    fields: dict
    truncation_values: torch.Tensor | None
    memory_update: tuple | None


def _flat(buf: torch.Tensor) -> torch.Tensor:
    """``buf`` [N, T, ...] seen as [N * T, ...] (slot tensors are contiguous: a view of the same memory)."""
    return buf.view(-1, *buf.shape[2:])


def _write_rows(flat: torch.Tensor, at: torch.Tensor, values: torch.Tensor) -> None:
    """Rows ``at`` of a :func:`_flat` view := ``values`` (in place, in shared memory)."""
    flat.index_copy_(0, at, values.reshape(len(at), *flat.shape[1:]).to(flat.dtype))


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
        self.actions = traj_buffers.actions.numpy()
        self.free_slots = free_slots
        self.rollout_inboxes = rollout_inboxes
        self.rule = RandomActingRule(action_space, None if seed is None else seed * 1000 + 7 * policy_id + worker_idx)

    def process(self, msgs: list) -> None:
        answers: dict[int, list[tuple[int, int]]] = {}
        for msg in msgs:
            if msg[0] == TRAJ:
                self.free_slots.put_many(list(msg[1]))
                continue
            _, worker, split, packed = msg
            rows = request_rows(packed)
            self.actions[rows[:, REQ_SLOT], rows[:, REQ_T]] = self.rule.random_rows(len(rows))
            answers.setdefault(worker, []).append((split, len(rows)))
        for worker, splits in answers.items():
            self.rollout_inboxes[worker].put((ACT, splits))  # an Act
