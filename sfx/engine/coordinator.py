"""The coordinator: allocates everything, starts the components, supervises, reports, stops.

:func:`wire` is the one place that shows how the components are connected (which queue goes to
whom, which shared buffers each one touches). Two runtimes consume it:

- :class:`ProcessRuntime`: every component in its own spawned process (the fast, normal mode);
- :class:`SerialRuntime` (``--serial_mode``): the same component objects driven round-robin in
  this process, for debugging and bit-for-bit determinism.
"""

from __future__ import annotations

import copy
import faulthandler
import logging
import os
import random
import threading
import signal
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import torch

from sfx.engine.buffers import (AgentBuffers, TrajectoryBuffers, WeightsBuffer, allocate_agent_buffers,
                                allocate_trajectory_buffers, num_trajectory_slots)
from sfx.engine.learner import Learner, trajectories_per_iteration
from sfx.engine.policy_worker import PolicyWorker, RandomPolicyWorker
from sfx.engine.queues import LocalQueue, QueuePump, SwitchableQueue, drain, make_process_queue
from sfx.engine.rollout_worker import RolloutWorker
from sfx.models.obs import max_obs_ndim, obs_spec
from sfx.pbt.cluster import ClusterPopulationMember
from sfx.pbt.population import PopulationManager, max_batch_size
from sfx.engine.resources import (check_cpus, check_shared_memory, ensure_open_file_limit, process_rss_mb,
                                  trajectory_buffer_bytes)
from sfx.engine.stats import (PolicyStats, ThroughputMeter, format_duration, reward_target_reached, status_line,
                              write_summaries)

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- wiring

@dataclass
class EnvInfo:
    observation_space: Any
    action_space: Any
    num_agents: int
    reward_shaping: dict | None = None  # the env's named reward components (PBT mutates them)


@dataclass
class Wiring:
    """Everything shared between components. Built once by the coordinator."""

    cfg: Any
    env_info: EnvInfo
    traj: list[TrajectoryBuffers]          # per policy
    agents: AgentBuffers
    weights: list[WeightsBuffer]           # per policy
    free_slots: list                       # per policy: free trajectory slot indices
    policy_queues: list                    # per policy: requests from rollout workers
    learner_queues: list                   # per policy: finished trajectories
    rollout_inboxes: list                  # per rollout worker: answers from policy workers
    report_queue: Any                      # everything -> coordinator
    env_family: Any = None                 # registered again in each worker process
    make_env_fn: Any = None                # rollout workers' env factory; None = sfx.envs.make_env
    components: list[tuple[str, int, int]] = field(default_factory=list)  # (role, index, policy)


def resolve_device(cfg: Any, warn: bool = False) -> torch.device:
    """``cuda`` for ``--device=gpu`` where CUDA is available, else ``cpu``. Only the coordinator passes
    ``warn=True``: the fallback is said once per run, not once per process."""
    if cfg.device == "gpu":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if warn:
            log.warning("--device=gpu but CUDA is not available here: using the CPU")
    return torch.device("cpu")


def learner_threads(cfg: Any, obs_ndim: int) -> int:
    """Torch threads for a learner (``--learner_main_loop_num_cores``, 0 = auto). On the CPU a
    convolutional learner gets the cores the rollout workers (one pinned per core) leave free, at
    least one: an OpenMP thread that shares its core with workers and game engines is often
    descheduled, and its peers spin at every barrier (doom, 2 cores, 2 workers: 1 thread trained
    1.13x faster than 2 at load ~4, and ~900 FPS against 0 at load ~12). A small MLP loses more to
    thread synchronisation than it gains (CartPole: -25% samples/s with 2 threads), as does a
    learner whose maths runs on a GPU."""
    if cfg.learner_main_loop_num_cores > 0:
        return cfg.learner_main_loop_num_cores
    if resolve_device(cfg).type == "cuda" or obs_ndim < 2:
        return 1
    return max(1, len(os.sched_getaffinity(0)) - cfg.num_workers)


def probe_env(cfg: Any) -> EnvInfo:
    """Make one env to learn its spaces and number of agents."""
    from sfx.envs import make_env

    env = make_env(cfg, {"worker_index": -1, "vector_index": 0, "env_id": -1})
    try:
        shaping = env.get_reward_shaping() if hasattr(env, "get_reward_shaping") else None
        return EnvInfo(env.observation_space, env.action_space, env.num_agents, shaping or None)
    finally:
        env.close()


def check_checkpoints_fit(cfg: Any, model: torch.nn.Module) -> None:
    """Before any worker starts: every policy's newest readable checkpoint must load into the
    model the current flags build (a corrupted newest one falls back, with a warning)."""
    from sfx.cfg import ConfigError
    from sfx.experiment import checkpoint_dir, load_latest_checkpoint

    for p in range(cfg.num_policies):
        ckpt = load_latest_checkpoint(cfg, p)
        if ckpt is None:
            continue
        try:
            model.load_state_dict(ckpt["model"])
        except (RuntimeError, KeyError) as e:
            detail = " ".join(line.strip() for line in str(e).splitlines()[1:3]) or str(e)
            raise ConfigError(f"the checkpoint in {checkpoint_dir(cfg, p)} does not fit the model the current flags "
                              f"build ({detail[:300]}); use the flags it was trained with or a new --experiment") from None


def wire(cfg: Any, env_info: EnvInfo, model: torch.nn.Module, serial: bool) -> Wiring:
    """Allocate shared memory and queues and list the components that use them.

    rollout worker w --req(slot,t)--> policy_queues[p] --> policy worker(s) of p
    policy worker   --act(split,n)--> rollout_inboxes[w]
    rollout worker  --traj(slots)---> learner_queues[p] --> learner p
    learner p       --slot ids------> free_slots[p]      --> rollout workers
    learner p       --weights-------> weights[p]  (shared memory, no queue)
    everyone        --reports-------> report_queue --> coordinator
    """
    from sfx.algo.distributions import action_params_size, action_shape

    obs_space, action_space = env_info.observation_space, env_info.action_space
    num_agents_total = cfg.num_workers * cfg.num_envs_per_worker * env_info.num_agents
    rnn_size = max(1, model.rnn_state_size)
    # room for the largest batch PBT may give a policy (a learner waiting for more slots than
    # exist would never train again)
    sized_for = copy.copy(cfg)
    sized_for.batch_size = max_batch_size(cfg)
    num_slots = num_trajectory_slots(num_agents_total, trajectories_per_iteration(sized_for),
                                     cfg.traj_buffers_excess_ratio, serial)
    spec = obs_spec(obs_space)
    if not serial:
        check_shared_memory(trajectory_buffer_bytes(spec, cfg.rollout, rnn_size, action_shape(action_space),
                                                    action_params_size(action_space), num_slots, cfg.num_policies,
                                                    num_agents_total))
    traj = [allocate_trajectory_buffers(num_slots, cfg.rollout, spec, rnn_size,
                                        action_shape(action_space), action_params_size(action_space))
            for _ in range(cfg.num_policies)]
    agents = allocate_agent_buffers(num_agents_total, spec, rnn_size)
    weights = [WeightsBuffer.for_model(model) for _ in range(cfg.num_policies)]

    new_queue = LocalQueue if serial else make_process_queue
    spares = 0 if serial else min(cfg.max_component_restarts, MAX_SPARE_QUEUES)
    free_slots = []
    for _ in range(cfg.num_policies):
        q = new_queue()
        q.put_many(list(range(num_slots)))
        free_slots.append(q)

    w = Wiring(cfg=cfg, env_info=env_info, traj=traj, agents=agents, weights=weights, free_slots=free_slots,
               env_family=_portable_family(cfg.env),
               # readers of these may be killed and restarted: each has spare queues (see SwitchableQueue)
               policy_queues=[SwitchableQueue(lambda: new_queue(REQUEST_QUEUE_BYTES) if not serial else new_queue(),
                                              spares) for _ in range(cfg.num_policies)],
               # written by rollout workers, which may be killed mid-put: switched on their restart too
               learner_queues=[SwitchableQueue(new_queue, spares) if not serial else new_queue()
                               for _ in range(cfg.num_policies)],
               rollout_inboxes=[SwitchableQueue(lambda: new_queue(INBOX_QUEUE_BYTES) if not serial else new_queue(),
                                                spares) for _ in range(cfg.num_workers)],
               # written by every component: one killed mid-put may leave it locked (see QueuePump)
               report_queue=SwitchableQueue(new_queue, spares) if not serial else new_queue())
    # learners first: they publish the weights the policy workers wait for
    w.components += [("learner", p, p) for p in range(cfg.num_policies)]
    w.components += [("policy_worker", p * cfg.policy_workers_per_policy + i, p)
                     for p in range(cfg.num_policies) for i in range(cfg.policy_workers_per_policy)]
    w.components += [("rollout_worker", i, -1) for i in range(cfg.num_workers)]
    w.heartbeats = torch.zeros(len(w.components), dtype=torch.float64).share_memory_()
    w.slot_owners = [torch.full((num_slots,), -1, dtype=torch.int32).share_memory_() for _ in range(cfg.num_policies)]
    log.info("%d trajectory slots of %d steps per policy for %d agents", num_slots, cfg.rollout, num_agents_total)
    return w


def _portable_family(env_name: str) -> Any:
    """The env's family if it can travel to worker processes (its functions pickle by reference);
    else None, and the workers rely on the registration their imports perform (a lambda made
    inside ``if __name__ == '__main__'`` cannot reach them at all)."""
    import pickle

    from sfx.envs.registry import find_family

    family = find_family(env_name)
    try:
        pickle.dumps(family)
    except Exception:
        log.debug("env family %r cannot be pickled; workers register it through their imports", family.prefix)
        return None
    return family


def build_component(w: Wiring, role: str, index: int, policy: int, device: torch.device, incarnation: int = 0):
    """Construct one component from the wiring (in whichever process will run it); ``incarnation``
    counts the restarts of that component."""
    from sfx.envs import make_env
    from sfx.models import create_actor_critic

    cfg, info = w.cfg, w.env_info
    if role == "rollout_worker":
        # slot_owners: which slots it holds, so a restart can give back a dead worker's slots;
        # incarnation: a restarted worker's requests carry a new generation (stale answers are ignored)
        return RolloutWorker(cfg, index, info.num_agents, w.traj, w.agents, w.free_slots, w.policy_queues,
                             w.learner_queues, w.report_queue, w.make_env_fn or make_env,
                             slot_owners=w.slot_owners, incarnation=incarnation)
    if role == "random_policy_worker":  # the dummy sampler's stand-in for policy worker and learner
        return RandomPolicyWorker(policy, index, info.action_space, w.traj[policy], w.free_slots[policy],
                                  w.rollout_inboxes, cfg.seed)
    if cfg.seed is not None:
        torch.manual_seed(cfg.seed * 1000 + policy)
    model = create_actor_critic(cfg, info.observation_space, info.action_space)
    if role == "policy_worker":
        return PolicyWorker(cfg, policy, index, model, w.traj[policy], w.agents, w.weights[policy],
                            w.rollout_inboxes, w.report_queue, device)
    if role == "learner":
        return Learner(cfg, policy, model, w.traj[policy], w.weights[policy], w.free_slots[policy],
                       w.report_queue, device)
    raise ValueError(f"unknown component role {role!r}")


def component_inbox(w: Wiring, role: str, index: int, policy: int):
    return {"rollout_worker": lambda: w.rollout_inboxes[index],
            "policy_worker": lambda: w.policy_queues[policy],
            "random_policy_worker": lambda: w.policy_queues[policy],
            "learner": lambda: w.learner_queues[policy]}[role]()


# --------------------------------------------------------------------------- process mode

def _alive(pid: int) -> bool:
    """Whether the coordinator still runs (our parent is the forkserver, so getppid won't do):
    a component whose coordinator was killed saves what it must and exits, leaving no orphan."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a killed coordinator stays a zombie until its own parent reaps it, and a zombie still answers
    # kill(pid, 0): ask /proc for the state too
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
        return state not in (b"Z", b"X")
    except (OSError, IndexError):
        return True  # no /proc here: trust kill(pid, 0)


# a component asks whether the coordinator still lives at most this often (a read of /proc, which
# the rollout workers' per-step stop checks made about 60 times a second each)
PARENT_CHECK_SEC = 0.5


def _component_main(w: Wiring, role: str, index: int, policy: int, stop_flag: torch.Tensor, parent_pid: int,
                    incarnation: int = 0) -> None:
    """Entry point of a spawned component process."""
    # Ctrl+C and SIGTERM go to the coordinator, which stops everyone in order (final checkpoint)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    name = f"{role}_{index}"
    cfg = w.cfg
    from sfx.experiment import log_path, setup_logging
    setup_logging(cfg, name)
    # SIGUSR1 (sent by the coordinator to a component that stopped beating) writes every thread's
    # stack to the experiment's log: the "what was it doing" of a hang
    stack_file = open(log_path(cfg), "a")  # noqa: SIM115 - must stay open for the process's life
    faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=True)
    beat_idx = w.components.index((role, index, policy))

    # numpy views of the shared tensors: an element write through numpy costs ~0.1 us, through
    # torch several us, and rollout workers beat at every env step
    heartbeats, stop = w.heartbeats.numpy(), stop_flag.numpy()

    def beat() -> None:
        heartbeats[beat_idx] = time.time()
    torch.set_num_threads(learner_threads(cfg, max_obs_ndim(w.env_info.observation_space)) if role == "learner" else 1)
    if role == "rollout_worker" and cfg.set_workers_cpu_affinity and hasattr(os, "sched_setaffinity"):
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[index % len(cores)]})

    parent_checked = [0.0, True]  # [when, alive]: /proc is read at most every PARENT_CHECK_SEC

    def stopping() -> bool:
        beat()  # called by every wait loop below, including a rollout worker blocked on free slots
        if stop[0]:
            return True
        now = time.monotonic()
        if now - parent_checked[0] >= PARENT_CHECK_SEC:
            parent_checked[:] = [now, _alive(parent_pid)]
        return not parent_checked[1]

    component = reader = None
    try:
        if w.env_family is not None:
            from sfx.envs.registry import ensure_registered
            ensure_registered(w.env_family)
        device = resolve_device(cfg) if role != "rollout_worker" else torch.device("cpu")
        beat()
        component = build_component(w, role, index, policy, device, incarnation)
        inbox = component_inbox(w, role, index, policy)
        # a learner has no heartbeat deadline (an iteration may take long), so it must never hang on a
        # queue a killed rollout worker left locked: it reads through a pump that follows the switch to a
        # spare (workers and policy workers that hang are found by their heartbeats and restarted)
        reader = QueuePump(inbox) if role == "learner" else None
        if role == "rollout_worker":
            component.should_stop = stopping
        if role == "policy_worker":
            while component.version < 0 and not stopping():
                component.update_weights()
                time.sleep(0.01)
        if hasattr(component, "start"):
            component.start()
        while not stopping():
            msgs = reader.get(timeout=0.1) if reader is not None else drain(inbox, timeout=0.1)
            if msgs:
                component.process(msgs)
            if role == "learner":
                component.maybe_save()
            if getattr(component, "stopped", False):
                break
        if role == "learner":
            component.save_checkpoint()
    except Exception:
        log.error("%s crashed:\n%s", name, traceback.format_exc())
        w.report_queue.put(("error", name, traceback.format_exc()))
        if role == "learner" and component is not None:
            try:
                component.save_checkpoint()
            except Exception:
                log.exception("%s could not save a checkpoint after crashing", name)
    finally:
        if reader is not None:
            reader.close()
        if component is not None and hasattr(component, "close"):
            component.close()
        w.report_queue.put(("stopped", name, {}))


class LockedQueueError(RuntimeError):
    """A shared queue stays locked: a process died or froze inside one of its operations."""


def _exit_hung_shutdown() -> None:
    log.error("the shutdown hangs (probably on a queue a killed process left locked): exiting now; the last "
              "checkpoint is kept and the same command resumes")
    logging.shutdown()
    os._exit(1)


def _put_or_raise(q: Any, items: list, what: str, timeout_sec: float = 5.0) -> None:
    """``q.put_many(items)`` from a helper thread: the coordinator must never hang on a queue that a
    killed process left locked (the thread is abandoned and the run stops instead)."""
    import threading

    done = threading.Event()

    def put() -> None:
        q.put_many(items)
        done.set()

    threading.Thread(target=put, daemon=True, name=f"put {what}").start()
    if not done.wait(timeout_sec):
        raise LockedQueueError(f"the queue of {what} stayed locked for {timeout_sec:.0f} s")


def give_back_slots(w: Wiring, worker_index: int) -> int:
    """Return to the free pools every trajectory slot a (dead) rollout worker held, per the owners
    table it kept in shared memory; how many. LockedQueueError if a pool stays locked."""
    given_back = 0
    for p, owners in enumerate(w.slot_owners):
        held = (owners == worker_index).nonzero().flatten()
        if len(held):
            owners[held] = -1
            _put_or_raise(w.free_slots[p], [int(x) for x in held], f"free slots of policy {p}")
            given_back += len(held)
    return given_back


MAX_SPARE_QUEUES = 8  # fresh request/answer queues for restarts; later restarts reuse the first ones
INBOX_QUEUE_BYTES = 128 * 1024  # a rollout worker's answers are a few dozen bytes each
REQUEST_QUEUE_BYTES = 1024 * 1024  # requests: one small index array per worker and split


class ProcessRuntime:
    """Each component in its own spawned process."""

    def __init__(self, w: Wiring) -> None:
        self.w = w
        # forkserver: children fork from a clean single-threaded server that imported torch and
        # sfx once, so they start in a fraction of a second (spawn re-imports everything per
        # process) and, unlike plain fork, never inherit this process's threads or CUDA state.
        self.ctx = torch.multiprocessing.get_context("forkserver")
        self.ctx.set_forkserver_preload(["sfx.engine.coordinator", "sfx.models", "sfx.envs", "gymnasium"])
        # a flag in shared memory rather than an Event: an Event is a named POSIX semaphore
        # in /dev/shm that stays there until the garbage collector finalizes it
        self.stop_flag = torch.zeros(1, dtype=torch.uint8).share_memory_()
        self.procs: dict[str, Any] = {}
        self.roles: dict[str, tuple[str, int, int]] = {}
        self.launched: dict[str, float] = {}
        self.restarts: dict[str, int] = {}

    def start(self) -> None:
        # the coordinator never reads the report queue itself: a killed component may have left it locked
        self.reports = QueuePump(self.w.report_queue)
        for i, (role, index, policy) in enumerate(self.w.components):
            self.w.heartbeats[i] = 0.0  # no beat yet: the startup grace period applies
            self._launch(role, index, policy)

    def _launch(self, role: str, index: int, policy: int) -> None:
        name = f"{role}_{index}"
        incarnation = self.restarts.get(name, 0)
        p = self.ctx.Process(target=_component_main, name=name,
                             args=(self.w, role, index, policy, self.stop_flag, os.getpid(), incarnation))
        self.launched[name] = time.time()
        p.start()
        self.procs[name] = p
        self.roles[name] = (role, index, policy)

    def step(self) -> list:
        return self.reports.get(timeout=0.1)

    def dead_components(self) -> list[str]:
        return [n for n, p in self.procs.items() if not p.is_alive()]

    def startup_limit_sec(self, timeout_sec: float) -> float:
        """How long a component may take to its first heartbeat (imports, env creation and reset, the
        decorrelation delay): --reset_timeout_seconds, at least 3 heartbeat timeouts."""
        cfg = self.w.cfg
        return max(cfg.reset_timeout_seconds, 3 * timeout_sec) + cfg.decorrelate_experience_max_seconds

    def stalled_components(self, timeout_sec: float, now: float | None = None) -> list[str]:
        """Rollout and policy workers without a heartbeat for ``timeout_sec`` (learners are left
        out: one training iteration of a big model can legitimately take long)."""
        now = time.time() if now is None else now
        out = []
        for i, (role, index, _) in enumerate(self.w.components):
            name = f"{role}_{index}"
            if role == "learner" or not self.procs[name].is_alive():
                continue
            last = float(self.w.heartbeats[i])
            launched = self.launched[name]
            # until its first beat a component is importing and making envs, which on a loaded machine
            # (or for envs that compile levels) takes much longer than a step: a longer grace period
            limit = timeout_sec if last > launched else self.startup_limit_sec(timeout_sec)
            if now - max(last, launched) > limit:
                out.append(name)
        return out

    def dump_stack(self, name: str) -> None:
        """Ask a live component to write its threads' stacks into the log (faulthandler on SIGUSR1)."""
        p = self.procs[name]
        try:
            os.kill(p.pid, signal.SIGUSR1)
        except ProcessLookupError:
            return
        time.sleep(0.5)

    def restart(self, name: str) -> tuple[int, int]:
        """Kill ``name`` if it still runs, give back the trajectory slots it held, start it again.
        Returns its restart count and the number of slots given back. Every queue the dead process read
        or wrote switches to a fresh spare, a restarted rollout worker starts a new request generation
        and the others resend what they wait for (answers to older requests are ignored);
        LockedQueueError if even a fresh queue cannot be written."""
        role, index, policy = self.roles[name]
        old = self.procs[name]
        if old.is_alive():
            old.kill()
        old.join(timeout=10)
        given_back = give_back_slots(self.w, index) if role == "rollout_worker" else 0
        # The dead process may have left any queue it read or wrote unusable (a lock or a condition
        # variable held forever): every request, answer, report and trajectory queue moves to a fresh
        # spare (each once: the dummy sampler's wiring uses its policy queues as learner queues), and every
        # rollout worker asks again for what it was waiting for (old answers are ignored by generation).
        queues = (*self.w.rollout_inboxes, *self.w.policy_queues, self.w.report_queue, *self.w.learner_queues)
        for q in {id(q): q for q in queues}.values():
            q.switch()
        self.restarts[name] = self.restarts.get(name, 0) + 1
        self.w.heartbeats[self.w.components.index((role, index, policy))] = 0.0
        self._launch(role, index, policy)
        for i, inbox in enumerate(self.w.rollout_inboxes):
            if not (role == "rollout_worker" and i == index):
                _put_or_raise(inbox, [("resend", None)], f"rollout worker {i}'s inbox")
        return self.restarts[name], given_back

    def stop(self, reports_sink, timeout_sec: float = 30.0) -> None:
        """Ask everyone to stop, wait for learners' final checkpoints, then make sure all exited."""
        self.stop_flag[0] = 1
        deadline = time.time() + timeout_sec
        for p in self.procs.values():
            while p.is_alive() and time.time() < deadline:
                reports_sink(self.reports.get(timeout=0.05))
                p.join(timeout=0.05)
        for name, p in self.procs.items():
            if p.is_alive():
                log.warning("%s did not stop in %.0f s: terminating it", name, timeout_sec)
                p.kill()
                p.join(timeout=5)
        reports_sink(self.reports.get_rest())
        self.reports.close()


# --------------------------------------------------------------------------- serial mode

class SerialRuntime:
    """The same components, driven round-robin in the calling process."""

    def __init__(self, w: Wiring, device: torch.device) -> None:
        self.w = w
        self.device = device
        self.parts: list[tuple[str, Any, Any]] = []

    def start(self) -> None:
        torch.set_num_threads(1)
        for role, index, policy in self.w.components:
            comp = build_component(self.w, role, index, policy, self.device)
            self.parts.append((role, comp, component_inbox(self.w, role, index, policy)))
        for role, comp, _ in self.parts:
            if role == "policy_worker":
                comp.update_weights()
            elif hasattr(comp, "start"):  # learners come first in the wiring and publish weights
                comp.start()

    def step(self) -> list:
        """One round: every component handles what waits for it. The coordinator checks its stop
        conditions between rounds, so a seeded serial run stops at the same step every time."""
        for role, comp, inbox in self.parts:
            msgs = drain(inbox)
            if msgs:
                comp.process(msgs)
            if role == "learner":
                comp.maybe_save()
        return drain(self.w.report_queue)

    def dead_components(self) -> list[str]:
        return []

    def stop(self, reports_sink, timeout_sec: float = 30.0) -> None:
        for role, comp, _ in self.parts:
            if role == "learner":
                comp.save_checkpoint()
            if hasattr(comp, "close"):
                comp.close()
        reports_sink(drain(self.w.report_queue))


# --------------------------------------------------------------------------- supervision

class _StopRequest:
    """Turns SIGINT / SIGTERM into a flag; a second Ctrl+C stops without waiting."""

    def __init__(self) -> None:
        self.requested: str | None = None
        self.forced = False
        self._old: dict = {}

    def __enter__(self) -> "_StopRequest":
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.requested is not None:
            self.forced = True
        self.requested = signal.Signals(signum).name

    def __exit__(self, *exc) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)


def run_training(cfg: Any) -> dict:
    """Train until ``train_for_env_steps`` or ``train_for_seconds``, or until interrupted.

    Returns ``{'status': 'done'|'interrupted'|'failed', 'env_steps', 'elapsed_sec',
    'samples_per_sec', 'fps', 'reward', 'train_step', 'train_stats'}`` (the last three per
    policy). ``samples_per_sec`` counts agent steps collected, ``fps`` env frames
    (samples x ``--env_frameskip``), both over the whole session.
    """
    from sfx.experiment import done_path, experiment_dir, save_cfg, setup_logging, summary_dir, write_status
    from sfx.models import create_actor_critic

    setup_logging(cfg, "coordinator")
    exp_dir = experiment_dir(cfg)
    device = resolve_device(cfg, warn=True)
    log.info("experiment %s, env %s, %s mode, device %s", exp_dir, cfg.env,
             "serial" if cfg.serial_mode else "asynchronous", device)

    # everything that can reject the cfg runs before cfg.json is written: a typo must not be
    # saved into the experiment and come back on the next resume
    env_info = probe_env(cfg)
    model = create_actor_critic(cfg, env_info.observation_space, env_info.action_space)
    check_checkpoints_fit(cfg, model)
    check_cpus(cfg)
    ensure_open_file_limit(cfg.num_workers * cfg.num_envs_per_worker)
    w = wire(cfg, env_info, model, serial=cfg.serial_mode)  # ConfigError when /dev/shm is too small
    del model
    exp_dir.mkdir(parents=True, exist_ok=True)
    if done_path(cfg).exists():
        done_path(cfg).unlink()  # a resumed run is not done until it finishes again
    save_cfg(cfg)
    runtime = SerialRuntime(w, device) if cfg.serial_mode else ProcessRuntime(w)

    from torch.utils.tensorboard import SummaryWriter
    writers = [SummaryWriter(str(summary_dir(cfg, p)), flush_secs=10) for p in range(cfg.num_policies)]
    pstats = [PolicyStats(cfg.stats_avg) for _ in range(cfg.num_policies)]
    fps_meter = ThroughputMeter()
    samples_meter = ThroughputMeter()
    learners_ready: set[int] = set()
    counters = {"env_errors": 0, "checkpoint_failures": 0, "component_restarts": 0}  # run-wide counts (TensorBoard)
    errors: list[str] = []
    stopped: set[str] = set()

    def handle(reports: list) -> None:
        for kind, who, payload in reports:
            if kind == "rollout":
                fps_meter.add(payload["env_steps"] * cfg.env_frameskip)
                counters["env_errors"] += payload.get("env_errors", 0)
                for ep in payload["episodes"]:
                    pstats[ep["policy"]].add_episode(ep)
            elif kind == "train":
                samples_meter.add(payload["samples"])
                pstats[who].add_train(payload)
            elif kind == "learner_ready":
                learners_ready.add(who)
                pstats[who].env_steps = payload["env_steps"]
                pstats[who].train_step = payload["train_step"]
            elif kind == "checkpoint":
                log.debug("policy %d checkpoint %s", who, payload["path"])
            elif kind == "checkpoint_failed":
                counters["checkpoint_failures"] += 1
            elif kind == "pbt_snapshot" and population is not None:
                population.on_snapshot(who, payload)
            elif kind == "pbt_applied" and population is not None:
                population.on_applied(who, payload)
            elif kind == "error":
                errors.append(who)
            elif kind == "stopped":
                stopped.add(who)

    last_restart: dict[str, float] = {}

    def restart_or_fail(name: str, why: str) -> str | None:
        now = time.time()
        # A process killed or frozen in the middle of a queue operation can leave that queue's lock
        # taken for good, and then whoever uses the queue next hangs too: the restart cannot help,
        # only a fresh start of the run (from the last checkpoint) can.
        window = 3 * cfg.heartbeat_timeout_sec
        recent = [n for n, t in last_restart.items() if now - t < window]
        if recent:
            return (f"stopping: {name} {why} within {window:.0f} s of the restart of {', '.join(recent)}: a queue "
                    f"the failed process was using is probably left locked. The last checkpoint is kept and the "
                    f"same command resumes")
        done_before = runtime.restarts.get(name, 0)
        if done_before >= cfg.max_component_restarts:
            return (f"stopping: {name} {why}, and it was restarted {done_before} times already "
                    f"(--max_component_restarts={cfg.max_component_restarts}); the same command resumes")
        try:
            n, slots_back = runtime.restart(name)
        except LockedQueueError as e:
            return (f"stopping: {name} {why} and could not be restarted: {e}: a queue the failed process was "
                    f"using is probably left locked. The last checkpoint is kept and the same command resumes")
        last_restart[name] = time.time()
        counters["component_restarts"] += 1
        report_status("running", time.time())
        if name.startswith("rollout_worker"):
            log.warning("%s %s: restarted it (restart #%d; %d trajectory slots it held were given back, its envs' "
                        "current episodes are lost)", name, why, n, slots_back)
        else:
            log.warning("%s %s: restarted it (restart #%d)", name, why, n)
        return None

    def supervise(now: float) -> str | None:
        """Learners that fail end the run (their last checkpoint stays); rollout and policy workers
        that die or stop sending heartbeats are restarted. Returns why the run must stop, or None."""
        learner_errors = [n for n in errors if n.startswith("learner")]
        if learner_errors:
            return (f"stopping: {', '.join(learner_errors)} crashed (see the log above); its last checkpoint is "
                    f"kept and the same command resumes")
        errors.clear()  # a worker that reported an error exits next and is restarted below
        if not isinstance(runtime, ProcessRuntime):
            return None
        for name in runtime.stalled_components(cfg.heartbeat_timeout_sec, now):
            log.error("%s sent no heartbeat for more than %.0f s (--heartbeat_timeout_sec): a dump of its stacks "
                      "follows in sf_log.txt", name, cfg.heartbeat_timeout_sec)
            runtime.dump_stack(name)
            failure = restart_or_fail(name, f"hung for more than {cfg.heartbeat_timeout_sec:.0f} s")
            if failure:
                return failure
        for name in runtime.dead_components():
            code = runtime.procs[name].exitcode
            if name.startswith("learner"):
                return (f"stopping: {name} died (exit code {code}); its last checkpoint is kept and the same "
                        f"command resumes")
            failure = restart_or_fail(name, f"died (exit code {code})")
            if failure:
                return failure
        return None

    def total_env_steps() -> int:
        return sum(s.env_steps for s in pstats)

    def report_status(state: str, now: float) -> None:
        rewards = [s.mean("reward") for s in pstats]
        try:
            procs = getattr(runtime, "procs", {})
            write_status(cfg, status=state, env_steps=total_env_steps(), train_for_env_steps=cfg.train_for_env_steps,
                         reward=[None if r != r else r for r in rewards], fps=fps_meter.rate(60, now),
                         elapsed_sec=now - start, restarts=counters["component_restarts"],
                         components={n: p.pid for n, p in procs.items()})
        except OSError as e:  # a full disk must not stop training; the checkpoints say the same louder
            log.warning("could not write %s: %s", "status.json", e.strerror or e)

    def pbt_summary(p: int, tag: str, value: Any, step: int) -> None:
        if isinstance(value, str):
            writers[p].add_text(tag, value, step)
        else:
            writers[p].add_scalar(tag, value, step)

    population = None
    if cfg.with_pbt:
        manager_class = ClusterPopulationMember if cfg.pbt_population_dir else PopulationManager
        population = manager_class(cfg, w.learner_queues, w.rollout_inboxes, env_info.reward_shaping,
                                   random.Random(None if cfg.seed is None else cfg.seed + 7919), pbt_summary)

    def flush_summaries() -> None:
        for p, (s, wr) in enumerate(zip(pstats, writers)):
            if population is not None:
                population.write_summaries(p, s.env_steps)
            scalars = s.pop_summaries()
            scalars["fps"] = fps_meter.rate(60)
            scalars["env_errors"] = float(counters["env_errors"])
            scalars["checkpoint_failures"] = float(counters["checkpoint_failures"])
            scalars["component_restarts"] = float(counters["component_restarts"])
            scalars["samples_per_sec"] = samples_meter.rate(60)
            if p == 0:
                # memory of every process, to see a leak over hours (policy 0's summaries only)
                rss = process_rss_mb({"coordinator": os.getpid(),
                                      **{n: pr.pid for n, pr in getattr(runtime, "procs", {}).items()}})
                scalars.update({f"memory/{n}_rss_mb": v for n, v in rss.items()})
                scalars["memory/total_rss_mb"] = sum(rss.values())
            write_summaries(wr, scalars, s.env_steps)
            wr.flush()

    start = time.time()
    status = "failed"
    population_started = False
    last_report = last_summary = start
    with _StopRequest() as stop_request:
        try:
            runtime.start()
            fps_meter.mark_start()
            samples_meter.mark_start()
            report_status("running", time.time())
            while True:
                handle(runtime.step())
                now = time.time()
                if population is not None and len(learners_ready) == cfg.num_policies:
                    if not population_started:
                        population.start([s.env_steps for s in pstats])
                        population_started = True
                    population.update(pstats, [s.env_steps for s in pstats])
                failure = supervise(now)
                if failure:
                    log.error(failure)
                    status = "failed"
                    break
                if stop_request.requested:
                    log.info("%s received: stopping, saving a final checkpoint", stop_request.requested)
                    status = "interrupted"
                    break
                if len(learners_ready) == cfg.num_policies and total_env_steps() >= cfg.train_for_env_steps:
                    status = "done"
                    break
                if now - start >= cfg.train_for_seconds:
                    status = "done"
                    break
                reached = reward_target_reached(pstats, cfg.stop_at_reward, cfg.stats_avg)
                if reached:
                    log.info("policy %d: average reward %.2f over its last %d episodes reached "
                             "--stop_at_reward=%g: done", reached[0], reached[1], cfg.stats_avg, cfg.stop_at_reward)
                    status = "done"
                    break
                if now - last_report >= cfg.report_every_sec:
                    last_report = now
                    log.info(status_line(pstats, fps_meter.rates(now), samples_meter.rate(60, now),
                                         total_env_steps(), cfg.train_for_env_steps, now - start,
                                         cfg.train_for_seconds))
                    report_status("running", now)
                if now - last_summary >= cfg.experiment_summaries_interval:
                    last_summary = now
                    flush_summaries()
        except Exception:
            log.error("coordinator crashed:\n%s", traceback.format_exc())
            status = "failed"
            raise
        finally:
            stop_timeout = 5.0 if stop_request.forced else 30.0
            # the last resort: a queue left locked by a killed process could hang the shutdown itself
            watchdog = threading.Timer(stop_timeout + 60.0, _exit_hung_shutdown)
            watchdog.daemon = True
            watchdog.start()
            runtime.stop(handle, timeout_sec=stop_timeout)
            watchdog.cancel()
            flush_summaries()
            for wr in writers:
                wr.close()

    elapsed = time.time() - start
    result = {"status": status, "env_steps": total_env_steps(), "elapsed_sec": elapsed,
              "samples_per_sec": fps_meter.total / cfg.env_frameskip / elapsed if elapsed > 0 else 0.0,
              "fps": fps_meter.total / elapsed if elapsed > 0 else 0.0,
              "reward": [s.mean("reward") for s in pstats], "train_step": [s.train_step for s in pstats],
              "train_stats": [dict(s.train) for s in pstats]}
    report_status(status, time.time())
    if status == "done":
        try:
            done_path(cfg).write_text(f"env_steps={result['env_steps']}\n")
        except OSError as e:
            log.error("training finished but %s could not be written (%s): the same command will resume and "
                      "finish at once", done_path(cfg), e.strerror or e)
    log.info("training %s after %s: %s env steps, %.0f samples/s (%.0f FPS), reward %s", status,
             format_duration(elapsed), f"{result['env_steps']:,}", result["samples_per_sec"], result["fps"],
             ", ".join(f"{r:.2f}" for r in result["reward"]))
    return result
