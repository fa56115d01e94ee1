"""Wiring: the shared memory, the queues, and the components that use them, built once per run.

:func:`wire` is the one place that shows how the components are connected::

    rollout worker w --REQ(slot,t)--> policy_queues[p]    --> policy worker(s) of p
    policy worker    --ACT(split,n)-> rollout_inboxes[w]
    rollout worker   --TRAJ(slots)--> learner_queues[p]   --> learner p
    learner p        --slot ids-----> free_slots[p]       --> rollout workers
    learner p        --weights------> weights[p]          --> policy workers, evaluator  (shared memory)
    rollout worker w --holds slot---> slot_owners[p]      --> coordinator: a restart gives a dead worker's slots
                                                              back (shared memory, int32 per slot, -1 = free)
    rollout worker w --started/sent-> gate                --> rollout workers: start a trajectory only while
    learner p        --taken--------> gate                    few enough are out (shared memory, --batches_ahead;
                                                              the coordinator counts a dead worker's as lost)
    coordinator      --control------> learner_control[p], rollout_control[w]  (PBT, resend)
    everyone         --reports------> report_queue        --> coordinator

(message types and layouts: :mod:`sfx.engine.protocol`). Each component is a :class:`ComponentSpec`: its role,
the queue it reads, its control queue, where it runs, and the function that builds it in whichever
process runs it; the runtimes (:mod:`sfx.engine.runtime`) read only the specs, never role names.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import os
from dataclasses import dataclass
from typing import Any, Callable

import torch

from sfx.agents import Agent, find_agent
from sfx.engine.buffers import (AgentBuffers, CollectionGate, TrajectoryBuffers, WeightsBuffer,
                                allocate_agent_buffers, allocate_trajectory_buffers, num_trajectory_slots)
from sfx.engine.component import ComponentSpec
from sfx.engine.queues import DEFAULT_QUEUE_BYTES, LocalQueue, SwitchableQueue, make_process_queue
from sfx.engine.resources import check_host_memory, check_shared_memory, trajectory_buffer_bytes
from sfx.engine.shared_arena import SharedArena
from sfx.models.device import select_device
from sfx.models.obs import max_obs_ndim, obs_spec, prev_action_reward_spec

log = logging.getLogger(__name__)

MAX_SPARE_QUEUES = 8  # fresh queues for restarts; later restarts reuse the first ones
INBOX_QUEUE_BYTES = 128 * 1024  # a rollout worker's answers are a few dozen bytes each
REQUEST_QUEUE_BYTES = 1024 * 1024  # requests: one small index array per worker and split
CONTROL_QUEUE_BYTES = 256 * 1024  # PBT and resend messages: rare and small


@dataclass(frozen=True)
class EnvInfo:
    observation_space: Any
    action_space: Any
    num_agents: int
    reward_shaping: dict | None = None  # the env's named reward components (PBT mutates them)
    task_names: tuple = ()              # the env's tasks in task-id order (env.task_names); () = one task

    @property
    def num_tasks(self) -> int:
        return max(1, len(self.task_names))


@dataclass(frozen=True)
class Wiring:
    """Everything shared between components. Built once by :func:`wire`, never changed after."""

    cfg: Any
    env_info: EnvInfo
    traj: tuple[TrajectoryBuffers, ...]    # per policy
    agents: AgentBuffers
    weights: tuple[WeightsBuffer, ...]     # per policy
    free_slots: tuple                      # per policy: free trajectory slot indices
    slot_owners: tuple                     # per policy: int32 [slots], the rollout worker holding each (-1 = none):
                                           # written by rollout workers, read by the coordinator's give_back_slots
    policy_queues: tuple                   # per policy: requests from rollout workers
    learner_queues: tuple                  # per policy: finished trajectories
    learner_control: tuple                 # per policy: PBT snapshot / update for its learner
    rollout_inboxes: tuple                 # per rollout worker: answers from policy workers
    rollout_control: tuple                 # per rollout worker: reward shaping, resend
    report_queue: Any                      # everything -> coordinator
    components: tuple[ComponentSpec, ...] = ()
    env_family: Any = None                 # registered again in each worker process
    make_vector_fn: Any = None             # rollout workers' (cfg, env_configs, name) -> VectorEnv; None = sfx.envs.vector's
    ranks: Any = None                      # this rank's RankInfo (sfx.engine.ranks); None = a single rank
    eval_queue: Any = None                 # EVALUATE requests -> the evaluator (--eval_every_env_steps > 0)
    agent: type[Agent] | None = None       # --algo's agent (travels to worker processes by reference)
    gate: Any = None                       # CollectionGate (--batches_ahead): counters in shared memory, written by
                                           # rollout workers and learners; None: the slots alone bound sampling
    arena: Any = None                      # the SharedArena every shared tensor and queue above is carved from

    def spec(self, role: str, index: int) -> ComponentSpec:
        for s in self.components:
            if s.role == role and s.index == index:
                return s
        raise KeyError(f"no component {role}_{index} in this wiring")

    def queues_to_switch(self) -> list:
        """Every queue a dead process may have left unusable, each once (a wiring may share queues)."""
        qs = (*self.rollout_inboxes, *self.rollout_control, *self.policy_queues, self.report_queue,
              *self.learner_queues, *self.learner_control, *([self.eval_queue] if self.eval_queue is not None else []))
        return [q for q in {id(q): q for q in qs}.values() if isinstance(q, SwitchableQueue)]


def resolve_device(cfg: Any, warn: bool = False) -> torch.device:
    """``cuda`` for ``--device=gpu`` where CUDA is available, else ``cpu`` (the decision itself:
    :func:`sfx.models.device.select_device`). Only the coordinator passes ``warn=True``: the fallback
    is said once per run, not once per process."""
    device = select_device(cfg)
    if warn and cfg.device == "gpu" and device.type == "cpu":
        log.warning("--device=gpu but CUDA is not available here: using the CPU")
    return device


def rank_device(cfg: Any, ranks: Any) -> str:
    """The device of this rank's learner and policy workers: :func:`resolve_device`'s for a single rank;
    with several ranks, GPU ``LOCAL_RANK`` of this node (one GPU per rank; more ranks on a node than GPUs
    is a ConfigError) or the CPU (:func:`sfx.engine.ranks.check_devices`)."""
    if ranks is None or not ranks.is_distributed:
        return resolve_device(cfg).type
    from sfx.engine.ranks import check_devices

    gpus = torch.cuda.device_count() if cfg.device == "gpu" and torch.cuda.is_available() else 0
    return check_devices(ranks, cfg.device, gpus)


def learner_threads(cfg: Any, obs_ndim: int, device: str, learner_sets_the_pace: bool = False,
                    local_ranks: int = 1) -> int:
    """Torch threads for a learner on ``device`` (``cpu``, ``cuda`` or ``cuda:N``: :func:`rank_device`'s)
    (``--learner_main_loop_num_cores``, 0 = auto). On the CPU a
    convolutional learner gets the cores the rollout workers (one pinned per core) leave free, at
    least one: an OpenMP thread that shares its core with workers and game engines is often
    descheduled, and its peers spin at every barrier (doom, 2 cores, 2 workers: 1 thread trained
    1.13x faster than 2 at load ~4, and ~900 FPS against 0 at load ~12). A small MLP loses more to
    thread synchronisation than it gains (CartPole: -25% samples/s with 2 threads), as does a
    learner whose maths runs on a GPU. An agent whose learner sets the pace (``Agent.learner_sets_the_pace``:
    sampling waits on its replay ratio, so the workers idle most of the time) gets every core: SAC's
    256x256 step on 2 cores, 1.4x the gradient steps/s of one thread (README, "SAC")). ``local_ranks``: the
    ranks of this training on this machine, which share its cores: each rank's learner counts its share
    (SAC on 2 ranks of a 2-core machine with 2 threads each: 2-3 env steps/s beside a nice'd job; 1 each: 73)."""
    if cfg.learner_main_loop_num_cores > 0:
        return cfg.learner_main_loop_num_cores
    if device.startswith("cuda"):
        return 1
    cores = max(1, len(os.sched_getaffinity(0)) // max(1, int(local_ranks)))
    if learner_sets_the_pace:
        return cores
    if obs_ndim < 2:
        return 1
    return max(1, cores - cfg.num_workers)


def collection_gate(cfg: Any, agent: type[Agent], arena: SharedArena | None = None,
                    num_agents: int = 0) -> CollectionGate | None:
    """The rank's collection gate for ``--batches_ahead`` (-1: the agent's choice), or None for 0; ``num_agents``:
    the rank's acting agents (each keeps a trajectory in progress beyond the batches ahead)."""
    ahead = cfg.batches_ahead if cfg.batches_ahead >= 0 else agent.batches_ahead(cfg)
    return CollectionGate(cfg.num_policies, cfg.num_workers, ahead, arena, num_agents) if ahead > 0 else None


def probe_env(cfg: Any) -> EnvInfo:
    """Make one env to learn its spaces and number of agents."""
    from sfx.envs import make_env

    env = make_env(cfg, {"worker_index": -1, "vector_index": 0, "env_id": -1})
    try:
        shaping = env.get_reward_shaping() if hasattr(env, "get_reward_shaping") else None
        tasks = tuple(str(t) for t in (getattr(env, "task_names", None) or ()))
        return EnvInfo(env.observation_space, env.action_space, env.num_agents, shaping or None, tasks)
    finally:
        env.close()


# --------------------------------------------------------------------------- builders

def build_rollout_worker(w: Wiring, spec: ComponentSpec, device: torch.device, incarnation: int = 0):
    from sfx.engine.rollout_worker import RolloutWorker

    # slot_owners: which slots it holds, so a restart can give back a dead worker's slots;
    # incarnation: a restarted worker's requests carry a new generation (stale answers are ignored)
    return RolloutWorker(w.cfg, spec.index, w.env_info.num_agents, list(w.traj), w.agents, list(w.free_slots),
                         list(w.policy_queues), list(w.learner_queues), w.report_queue, w.make_vector_fn,
                         slot_owners=list(w.slot_owners), incarnation=incarnation,
                         initial_rnn_state=w.agents.initial_rnn, gate=w.gate)


def wiring_agent(w: Wiring) -> type[Agent]:
    """The run's agent, registered in this process too (a worker process gets the coordinator's)."""
    from sfx.agents import ensure_registered

    if w.agent is None:
        return find_agent(w.cfg.algo)
    ensure_registered(w.agent)
    return w.agent


def _seeded_model(w: Wiring, policy: int):
    if w.cfg.seed is not None:
        torch.manual_seed(w.cfg.seed * 1000 + policy)
    return wiring_agent(w).make_model(w.cfg, w.env_info.observation_space, w.env_info.action_space,
                                      w.env_info.num_tasks)


def _actor(w: Wiring, policy: int, index: int, weights: Any, device: torch.device, workers: int):
    """A policy worker of ``policy``: its acting rule bound to this rank's agents and told the ``workers`` acting
    processes that share the policy's requests, a model of its own."""
    from sfx.engine.policy_worker import PolicyWorker

    rule = wiring_agent(w).acting_rule(w.cfg, w.env_info.action_space)
    actors = int(w.agents.final_rnn.shape[0])  # this rank's acting agents (all workers)
    rank, world = (w.ranks.rank, w.ranks.world_size) if w.ranks is not None else (0, 1)
    rule.bind_actors(first=rank * actors, total=world * actors, workers=workers)
    return PolicyWorker(w.cfg, policy, index, _seeded_model(w, policy), rule, w.traj[policy], w.agents, weights,
                        list(w.rollout_inboxes), w.report_queue, device)


def build_policy_worker(w: Wiring, spec: ComponentSpec, device: torch.device, incarnation: int = 0):
    return _actor(w, spec.policy, spec.index, w.weights[spec.policy], device, w.cfg.policy_workers_per_policy)


def build_learner(w: Wiring, spec: ComponentSpec, device: torch.device, incarnation: int = 0):
    from sfx.engine.learner import Learner

    weights, inference = w.weights[spec.policy], None
    if w.cfg.inference == "learner":
        from sfx.engine.learner_inference import LearnerInference, LocalWeights

        # the policy's acting runs in this process (a thread), on a copy of the model the learner keeps current;
        # shared memory is published too only for the evaluator
        actor = _actor(w, spec.policy, 0, None, device, workers=1)
        weights = LocalWeights(actor.model, device, shared=w.weights[spec.policy] if w.eval_queue is not None else None)
        actor.weights = weights
        inference = LearnerInference(actor, w.policy_queues[spec.policy], weights, w.report_queue, spec.policy,
                                     w.cfg.report_every_sec)
    return Learner(w.cfg, spec.policy, wiring_agent(w), _seeded_model(w, spec.policy), w.traj[spec.policy],
                   weights, w.free_slots[spec.policy], w.report_queue, device, ranks=w.ranks, gate=w.gate,
                   inference=inference)


def build_evaluator(w: Wiring, spec: ComponentSpec, device: torch.device, incarnation: int = 0):
    from sfx.engine.evaluator import Evaluator

    return Evaluator(w.cfg, list(w.weights), w.env_info, w.report_queue, device, agent=wiring_agent(w))


def training_components(w: Wiring) -> tuple[ComponentSpec, ...]:
    """A training run's components: a learner and ``policy_workers_per_policy`` policy workers per
    policy, ``num_workers`` rollout workers. Learners first: they publish the weights the policy
    workers wait for."""
    cfg = w.cfg
    device = rank_device(cfg, w.ranks)
    threads = learner_threads(cfg, max_obs_ndim(w.env_info.observation_space), device,
                              wiring_agent(w).learner_sets_the_pace,
                              w.ranks.local_world_size if w.ranks is not None else 1)
    specs = [ComponentSpec("learner", p, p, build_learner, w.learner_queues[p], w.learner_control[p], device,
                           threads, pump_inbox=True, heartbeat_deadline=False, restartable=False)
             for p in range(cfg.num_policies)]
    if cfg.inference == "workers":  # else each learner acts for its policy (sfx.engine.learner_inference)
        specs += [ComponentSpec("policy_worker", p * cfg.policy_workers_per_policy + i, p, build_policy_worker,
                                w.policy_queues[p], None, device)
                  for p in range(cfg.num_policies) for i in range(cfg.policy_workers_per_policy)]
    if w.eval_queue is not None:  # evaluation during training (rank 0 only): one more process, one thread
        specs.append(ComponentSpec("evaluator", 0, -1, build_evaluator, w.eval_queue, None, device))
    return tuple(specs) + rollout_worker_specs(w)


def rollout_worker_specs(w: Wiring) -> tuple[ComponentSpec, ...]:
    """``num_workers`` rollout workers, each pinned to a core (with --set_workers_cpu_affinity)."""
    return tuple(ComponentSpec("rollout_worker", i, -1, build_rollout_worker, w.rollout_inboxes[i],
                               w.rollout_control[i], pin_core=True, holds_slots=True)
                 for i in range(w.cfg.num_workers))


# --------------------------------------------------------------------------- wire

def wire(cfg: Any, env_info: EnvInfo, model: torch.nn.Module, serial: bool, *,
         components: Callable[[Wiring], tuple[ComponentSpec, ...]] = training_components,
         largest_batch_size: int | None = None, with_learners: bool = True, make_vector_fn: Any = None,
         ranks: Any = None) -> Wiring:
    """Allocate shared memory and queues and list the components that use them.

    ``components(w)`` lists the components (default: a training run's); ``largest_batch_size`` is the
    largest batch any policy may get during the run (observers such as PBT may grow it; the slots
    are sized for it); without learners (``with_learners=False``, the dummy sampler) finished
    trajectories go to the policy's request queue, whose reader frees their slots.
    """
    agent = find_agent(cfg.algo)
    rule = agent.acting_rule(cfg, env_info.action_space)
    layout = slot_layout(cfg, env_info, model, agent, rule, largest_batch_size, serial)
    num_slots, num_agents_total = layout.num_slots, layout.num_agents
    spares = 0 if serial else min(cfg.max_component_restarts, MAX_SPARE_QUEUES)
    weight_floats = sum(t.numel() for t in WeightsBuffer.state_tensors(model))
    # one arena for every shared tensor and queue of the run: a process receives one descriptor for all of
    # them (see sfx.engine.shared_arena); sized for the buffers, the weights and the queue rings (sparse)
    arena = SharedArena(layout.shm_bytes + cfg.num_policies * 4 * weight_floats
                        + (0 if serial else _queue_bytes(cfg, spares)) + 2**20)
    traj = tuple(allocate_trajectory_buffers(num_slots, cfg.rollout, layout.obs, layout.rnn_size, layout.action_shape,
                                             rule.fields, layout.memory_shape, rule.stores_final_obs, arena=arena)
                 for _ in range(cfg.num_policies))
    agents = allocate_agent_buffers(num_agents_total, layout.obs, layout.rnn_size, layout.memory_shape, arena=arena)
    # the state every episode starts from, as the model's core declares it (zeros for GRU / LSTM)
    agents.initial_rnn.copy_(model.initial_rnn_states(1, torch.device("cpu"))[0])
    weights = tuple(WeightsBuffer.for_model(model, arena) for _ in range(cfg.num_policies))

    def queue(max_bytes: int = DEFAULT_QUEUE_BYTES) -> Any:
        """A queue whose reader or writers may be killed and restarted: with spares (see SwitchableQueue)."""
        if serial:
            return LocalQueue()
        return SwitchableQueue(lambda: make_process_queue(max_bytes, arena), spares, arena)

    free_slots = _free_slot_pools(cfg.num_policies, num_slots, serial, arena)
    policy_queues = tuple(queue(REQUEST_QUEUE_BYTES) for _ in range(cfg.num_policies))
    w = Wiring(cfg=cfg, env_info=env_info, traj=traj, agents=agents, weights=weights, free_slots=free_slots,
               slot_owners=tuple(arena.tensor(num_slots, torch.int32, fill=-1) for _ in range(cfg.num_policies)),
               policy_queues=policy_queues,
               learner_queues=tuple(queue() for _ in range(cfg.num_policies)) if with_learners else policy_queues,
               learner_control=tuple(queue(CONTROL_QUEUE_BYTES) for _ in range(cfg.num_policies)),
               rollout_inboxes=tuple(queue(INBOX_QUEUE_BYTES) for _ in range(cfg.num_workers)),
               rollout_control=tuple(queue(CONTROL_QUEUE_BYTES) for _ in range(cfg.num_workers)),
               report_queue=queue(), env_family=_portable_family(cfg.env), make_vector_fn=make_vector_fn, ranks=ranks,
               eval_queue=(queue(CONTROL_QUEUE_BYTES) if with_learners and cfg.eval_every_env_steps > 0
                           and (ranks is None or ranks.is_main) else None), agent=_portable_agent(agent),
               gate=collection_gate(cfg, agent, arena, num_agents_total) if with_learners and not serial else None,
               arena=arena)
    w = dataclasses.replace(w, components=tuple(components(w)))
    log.info("%d trajectory slots of %d steps per policy for %d agents", num_slots, cfg.rollout, num_agents_total)
    return w


@dataclass(frozen=True)
class SlotLayout:
    """What a run's trajectory slots hold and how many there are (:func:`slot_layout`)."""

    num_agents: int                 # this rank's acting agents (all workers)
    num_slots: int                  # trajectory slots per policy
    obs: dict                       # the observation's spec, the previous action / reward's included where asked
    rnn_size: int                   # floats of core state per step (at least 1)
    action_shape: tuple
    memory_shape: tuple[int, int]   # a memory core's (steps, floats) per agent; (0, 0) without one
    shm_bytes: int                  # every policy's slots and the agents' buffers, in shared memory


def slot_layout(cfg: Any, env_info: EnvInfo, model: torch.nn.Module, agent: type[Agent], rule: Any,
                largest_batch_size: int | None, serial: bool) -> SlotLayout:
    """The run's trajectory slots, sized for the largest batch a policy may get (a learner waiting for more slots
    than exist would never train again); ConfigError when they do not fit in /dev/shm (not in serial mode) or the
    agent's replay buffers do not fit in the host's memory."""
    from sfx.algo.distributions import action_shape

    num_agents_total = cfg.num_workers * cfg.num_envs_per_worker * env_info.num_agents
    rnn_size = max(1, model.rnn_state_size)
    sized_for = copy.copy(cfg)
    sized_for.batch_size = max(cfg.batch_size, largest_batch_size or 0)
    num_slots = num_trajectory_slots(num_agents_total, agent.trajectories_per_iteration(sized_for),
                                     cfg.traj_buffers_excess_ratio, serial)
    spec = obs_spec(env_info.observation_space)
    actions = action_shape(env_info.action_space)
    if cfg.use_prev_action_reward:
        spec.update(prev_action_reward_spec(actions))
    memory_shape = (int(model.memory_len), int(model.memory_width)) if model.memory_len else (0, 0)
    memory_floats = memory_shape[0] * memory_shape[1]
    shm_bytes = trajectory_buffer_bytes(spec, cfg.rollout, rnn_size, actions, rule.fields, num_slots,
                                        cfg.num_policies, num_agents_total, memory_floats, rule.stores_final_obs)
    if not serial:
        check_shared_memory(shm_bytes)
    # what the agent keeps in its learners' memory (replay buffers), per trajectory slot's size
    slot_bytes = trajectory_buffer_bytes(spec, cfg.rollout, rnn_size, actions, rule.fields, 1, 1, 0, memory_floats,
                                         rule.stores_final_obs)
    host_bytes = agent.host_memory_bytes(cfg, slot_bytes) * cfg.num_policies
    if host_bytes:
        check_host_memory(host_bytes, f"the learners' replay buffers ({cfg.num_policies} policies)",
                          "lower the capacities in --replay_parameters (or --rollout, the observation size)")
    if model.memory_len:
        memory_mib = 4 * memory_floats * (num_slots * cfg.num_policies + num_agents_total) / 2**20
        log.info("the core's memory (%d steps x %d floats) takes %.0f MiB of shared memory: one per agent and one per "
                 "trajectory slot (%.0f MiB in all)", memory_shape[0], memory_shape[1], memory_mib, shm_bytes / 2**20)
    return SlotLayout(num_agents_total, num_slots, spec, rnn_size, actions, memory_shape, shm_bytes)


def _free_slot_pools(num_policies: int, num_slots: int, serial: bool, arena: SharedArena) -> tuple:
    """Per policy, the queue of its free trajectory slots, every slot free."""
    pools = []
    for _ in range(num_policies):
        q = LocalQueue() if serial else make_process_queue(DEFAULT_QUEUE_BYTES, arena)
        q.put_many(list(range(num_slots)))
        pools.append(q)
    return tuple(pools)


def _queue_bytes(cfg: Any, spares: int) -> int:
    """The message rings of a run's queues (each switchable queue with its spares), as :func:`wire` makes them."""
    per_set = (cfg.num_policies * (REQUEST_QUEUE_BYTES + DEFAULT_QUEUE_BYTES + CONTROL_QUEUE_BYTES)
               + cfg.num_workers * (INBOX_QUEUE_BYTES + CONTROL_QUEUE_BYTES) + DEFAULT_QUEUE_BYTES + CONTROL_QUEUE_BYTES)
    return (spares + 1) * per_set + cfg.num_policies * DEFAULT_QUEUE_BYTES + 2**20


def _portable_family(env_name: str) -> Any:
    """The env's family if it can travel to worker processes (its functions pickle by reference);
    else None, and the workers rely on the registration their imports perform (a lambda made
    inside ``if __name__ == '__main__'`` cannot reach them at all)."""
    from sfx.envs.registry import find_family

    family = find_family(env_name)
    return _portable(family, f"env family {family.prefix!r}")


def _portable_agent(agent: type[Agent]) -> type[Agent] | None:
    """The agent if its class can travel to worker processes (by reference); else None, as for families."""
    return _portable(agent, f"agent {agent.name!r}")


def _portable(obj: Any, what: str) -> Any:
    import pickle

    try:
        pickle.dumps(obj)
    except Exception:
        log.debug("%s cannot be pickled; workers find it through their imports", what)
        return None
    return obj


def build_component(w: Wiring, role: str, index: int, policy: int, device: torch.device, incarnation: int = 0):
    """Construct one component of the wiring in this process (tests and the serial runtime)."""
    spec = w.spec(role, index)
    if spec.policy != policy and policy >= 0:
        spec = dataclasses.replace(spec, policy=policy)
    return spec.build(w, spec, device, incarnation)
