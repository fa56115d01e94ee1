"""The coordinator: checks the cfg, wires the run, starts the components, then only runs the loop.

:func:`run_loop` is the one loop every run uses (a training, the dummy sampler): each turn the
runtime's reports go to every part, then each part is asked whether the run must stop. A training's
parts, in order (each in its own module):

- reporting (:mod:`sfx.engine.reporting`): status line, TensorBoard, status.json;
- supervision (:mod:`sfx.engine.supervision`): heartbeats, restarts and what a restart gives back;
- observers (:mod:`sfx.engine.observers`): features that steer the run through control messages,
  e.g. population-based training (registered by ``sfx.pbt``; the engine does not import it);
- stop rules (:mod:`sfx.engine.supervision`): signals, env steps, time, reward.

How the components are connected: :mod:`sfx.engine.wiring`; how they run: :mod:`sfx.engine.runtime`.
"""

from __future__ import annotations

import errno
import logging
import random
import threading
import time
import traceback
from typing import Any

import torch

from sfx.engine.evaluation import EvaluationPart, check_eval_env
from sfx.experiment.wandb_log import require_wandb
from sfx.engine.ranks import detect_ranks
from sfx.engine.rendezvous import meet_ranks
from sfx.engine.observers import ObserverContext, check_observers_available, create_observers, largest_batch_size
from sfx.engine.reporting import TrainingReporter
from sfx.engine.resources import check_cpus, ensure_open_file_limit
from sfx.engine.runtime import ProcessRuntime, SerialRuntime, _exit_hung_shutdown, give_back_slots  # noqa: F401
from sfx.engine.stats import format_duration
from sfx.engine.supervision import RankAgreement, Stop, StopRequest, Supervisor, TrainingStopRules
# build_component and give_back_slots: kept importable from here for tests and benches
from sfx.engine.wiring import build_component, probe_env, rank_device, resolve_device, wire  # noqa: F401

log = logging.getLogger(__name__)


def check_checkpoints_fit(cfg: Any, model: torch.nn.Module, agent: Any = None) -> None:
    """Before any worker starts: every policy's newest readable checkpoint (a corrupted newest one falls back,
    with a warning) must resume with the current flags, as the agent (``--algo``'s by default) judges it
    (:meth:`~sfx.agents.base.Agent.check_checkpoint`: its weights load into the model they build)."""
    from sfx.agents import find_agent
    from sfx.experiment import checkpoint_dir, load_latest_checkpoint

    agent = find_agent(cfg.algo) if agent is None else agent
    for p in range(cfg.num_policies):
        ckpt = load_latest_checkpoint(cfg, p)
        if ckpt is not None:
            agent.check_checkpoint(cfg, model, ckpt, str(checkpoint_dir(cfg, p)))


# a cfg.json that cannot be written at start (a full disk): how long the start waits for room before it goes on or
# gives up. A disk filled for seconds (another job's temp files, the fault injector) then costs a wait, not an exit
DISK_FULL_WAIT_SEC = 20.0
_DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def save_cfg_at_start(cfg: Any, wait_sec: float = DISK_FULL_WAIT_SEC) -> str | None:
    """Write cfg.json as a training starts; on a full disk, wait up to ``wait_sec`` for room. None when written
    (or when the disk stayed full but the saved cfg.json already holds these very values: only this start's
    provenance is not recorded, one warning); else the one line saying why the training cannot start (a new
    experiment, or changed values, on a disk that stays full).

    Without the wait a training restarted while the disk is full would die here with a traceback (the OSError of
    the write), into a log on the same full disk."""
    import json

    from sfx.experiment import save_cfg
    from sfx.experiment.cfg_io import cfg_to_dict
    from sfx.experiment.paths import cfg_path

    deadline = time.monotonic() + wait_sec
    warned = False
    while True:
        try:
            save_cfg(cfg)
            if warned:
                log.info("%s written: there is room again", cfg_path(cfg))
            return None
        except OSError as e:
            if e.errno not in _DISK_FULL_ERRNOS:
                raise
            why = e.strerror or str(e)
        if time.monotonic() >= deadline:
            break
        if not warned:
            log.warning("%s could not be written (%s): waiting up to %.0f s for room", cfg_path(cfg), why, wait_sec)
            warned = True
        time.sleep(0.5)
    try:
        saved = json.loads(cfg_path(cfg).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        saved = None
    if isinstance(saved, dict):
        saved.pop("provenance", None)
        if saved == json.loads(json.dumps(cfg_to_dict(cfg))):
            log.warning("%s could not be rewritten (%s): the saved one holds the same values, so the training "
                        "goes on (this start's provenance is not recorded)", cfg_path(cfg), why)
            return None
    return (f"{cfg_path(cfg)} could not be written ({why}, for {wait_sec:.0f} s) and "
            f"{'holds other values' if isinstance(saved, dict) else 'there is none yet'}: the training does not start; "
            f"the same command starts it once there is room")


def _not_started(cfg: Any) -> dict:
    """run_training's result for a training that did not start (see :func:`save_cfg_at_start`)."""
    return {"status": "failed", "stop_reason": None, "env_steps": 0, "elapsed_sec": 0.0, "samples_per_sec": 0.0,
            "fps": 0.0, "reward": [float("nan")] * cfg.num_policies, "train_step": [0] * cfg.num_policies,
            "train_stats": [{} for _ in range(cfg.num_policies)]}


def rank_cfg(cfg: Any, ranks: Any) -> Any:
    """The cfg of one rank of a multi-rank training (``ranks``: :class:`~sfx.engine.ranks.RankInfo`).

    Rank 0 keeps the experiment folder (cfg.json, checkpoints, TensorBoard, status.json, the done file);
    rank r > 0 writes its own log, summaries and status into ``<experiment>/rank_<r>/`` and no checkpoint
    (its learner takes rank 0's weights at the start). Every rank's envs get their own seeds. Several
    policies, PBT and serial mode are not supported with several ranks yet: a ConfigError says so."""
    import copy

    from sfx.errors import ConfigError
    from sfx.experiment import experiment_dir

    unsupported = [f"--{name}={getattr(cfg, name)}" for name, bad in
                   (("num_policies", cfg.num_policies != 1), ("with_pbt", cfg.with_pbt),
                    ("serial_mode", cfg.serial_mode)) if bad]
    if unsupported:
        raise ConfigError(f"{', '.join(unsupported)} with {ranks.world_size} ranks is not supported yet: "
                          f"run one rank (no torchrun / srun tasks) or --num_policies=1 without PBT, asynchronous")
    from sfx.agents import find_agent

    agent = find_agent(cfg.algo)
    if agent.ranks_refused:
        raise ConfigError(f"--algo={agent.name} with {ranks.world_size} ranks is not supported: "
                          f"{agent.ranks_refused}; allowed: one rank (no torchrun / srun tasks)")
    cfg = copy.copy(cfg)
    if cfg.seed is not None:
        cfg.seed = cfg.seed + RANK_SEED_STRIDE * ranks.rank
    if not ranks.is_main:
        cfg.train_dir, cfg.experiment = str(experiment_dir(cfg)), f"rank_{ranks.rank}"
    return cfg


# rank r's envs and workers are seeded with --seed + r * this (the model's start comes from rank 0)
RANK_SEED_STRIDE = 1_000_003


def run_loop(runtime: Any, parts: list, stop_timeout_sec: float = 30.0, forced=lambda: False) -> Stop:
    """Start the runtime, then turn: every report to every part (``handle``), then every part's
    ``check(now)`` until one returns a :class:`~sfx.engine.supervision.Stop`; stop the runtime (the
    components' last reports still reach the parts). Returns that Stop."""

    def handle(reports: list) -> None:
        for part in parts:
            part.handle(reports)

    start = time.time()
    try:
        runtime.start()
        for part in parts:
            part.started(start)
        while True:
            handle(runtime.step())
            now = time.time()
            stop = next((s for s in (part.check(now) for part in parts) if s is not None), None)
            if stop is not None:
                if stop.message:
                    log.log(stop.level, stop.message)
                break
    except Exception:
        log.error("coordinator crashed:\n%s", traceback.format_exc())
        raise
    finally:
        timeout = 5.0 if forced() else stop_timeout_sec
        # the last resort: a queue left locked by a killed process could hang the shutdown itself
        watchdog = threading.Timer(timeout + 60.0, _exit_hung_shutdown)
        watchdog.daemon = True
        watchdog.start()
        runtime.stop(handle, timeout_sec=timeout)
        watchdog.cancel()
    return stop


class ObserversPart:
    """The loop part that runs the observers: reports to each, and ``update`` every turn once every
    learner is ready."""

    def __init__(self, observers: list, reporter: TrainingReporter) -> None:
        self.observers = observers
        self.reporter = reporter
        for o in observers:
            reporter.summary_hooks.append(o.write_summaries)

    def started(self, start: float) -> None:
        pass

    def handle(self, reports: list) -> None:
        for o in self.observers:
            o.handle(reports)

    def check(self, now: float) -> Stop | None:
        if self.observers and self.reporter.all_learners_ready:
            env_steps = [s.env_steps for s in self.reporter.policies]
            for o in self.observers:
                o.update(self.reporter.policies, env_steps)
        return None


def run_training(cfg: Any) -> dict:
    """Train until ``train_for_env_steps`` or ``train_for_seconds``, or until interrupted.

    Returns ``{'status': 'done'|'interrupted'|'failed', 'stop_reason', 'env_steps', 'elapsed_sec',
    'samples_per_sec', 'fps', 'reward', 'train_step', 'train_stats'}`` (the last three per
    policy; ``stop_reason``: which rule ended it, one of :data:`~sfx.engine.supervision.STOP_REASONS`, None
    for a failure; ``reward`` is the average at the end, which also counts the episodes that ended while
    the run stopped, so after ``stop_at_reward`` it can be a little below the target), and with an
    evaluator ``'evaluations'`` (each result, in order) and ``'evaluations_skipped'`` (per policy).
    ``samples_per_sec`` counts agent steps collected, ``fps`` env frames
    (samples x ``--env_frameskip``), both over the whole session.
    """
    from sfx.experiment import done_path, experiment_dir, setup_logging

    ranks = detect_ranks()
    if ranks.is_distributed:
        cfg = rank_cfg(cfg, ranks)
    setup_logging(cfg, "coordinator")
    if ranks.is_distributed:
        log.info("rank %d of %d (local rank %d of %d, launched by %s; rendezvous %s:%s)", ranks.rank,
                 ranks.world_size, ranks.local_rank, ranks.local_world_size, ranks.launcher, ranks.master_addr,
                 ranks.master_port)
    exp_dir = experiment_dir(cfg)
    device = resolve_device(cfg, warn=True)
    log.info("experiment %s, env %s, %s mode, device %s", exp_dir, cfg.env,
             "serial" if cfg.serial_mode else "asynchronous", device)

    # with several ranks: one GPU per rank on this node (a ConfigError if too few), then all ranks meet
    # (same flags, every rank present) before anything starts
    if ranks.is_distributed:
        log.info("this rank's learner and policy workers run on %s", rank_device(cfg, ranks))
    meeting = meet_ranks(cfg, ranks) if ranks.is_distributed else None
    env_info, w, runtime = _checked_run(cfg, ranks, device, meeting)
    exp_dir.mkdir(parents=True, exist_ok=True)
    if done_path(cfg).exists():
        done_path(cfg).unlink()  # a resumed run is not done until it finishes again
    cannot_start = save_cfg_at_start(cfg)
    if cannot_start is not None:
        log.error("%s", cannot_start)
        if meeting is not None:
            meeting.close()
        return _not_started(cfg)

    reporter = TrainingReporter(cfg, runtime.pids, world_size=ranks.world_size, task_names=env_info.task_names,
                                main_rank=ranks.is_main)
    ctx = ObserverContext(env_info=env_info, learner_control=w.learner_control, rollout_control=w.rollout_control,
                          summary=reporter.summary,
                          rng=random.Random(None if cfg.seed is None else cfg.seed + 7919))
    observers = create_observers(cfg, ctx)
    with StopRequest() as stop_request:
        rules = TrainingStopRules(cfg, reporter, stop_request)
        if ranks.is_distributed:
            rules = RankAgreement(cfg, w.learner_control, rules, stop_request,
                                  learners_ready=lambda: reporter.all_learners_ready)
        parts = [reporter, Supervisor(cfg, runtime, on_restart=reporter.restarted),
                 ObserversPart(observers, reporter), rules]
        evaluation = EvaluationPart(cfg, w.eval_queue, reporter) if w.eval_queue is not None else None
        if evaluation is not None:
            parts.insert(3, evaluation)
        try:
            stop = run_loop(runtime, parts, forced=lambda: stop_request.forced)
        finally:
            reporter.close()
            if meeting is not None:
                meeting.close()  # rank 0's store (when it serves it) lives until here: its learner is done
    return _training_result(cfg, ranks, reporter, stop, evaluation)


def _checked_run(cfg: Any, ranks: Any, device: torch.device, meeting: Any) -> tuple[Any, Any, Any]:
    """The env's info, the run's wiring and its runtime, after everything that can reject the cfg: they run before
    cfg.json is written, so a typo is not saved into the experiment to come back on the next resume. With several
    ranks every rank's checks must pass (``meeting``): a ConfigError here or on another rank ends them all."""
    from sfx.agents import find_agent
    from sfx.errors import ConfigError

    try:
        check_observers_available(cfg)
        env_info = probe_env(cfg)
        agent = find_agent(cfg.algo)
        model = agent.make_model(cfg, env_info.observation_space, env_info.action_space, env_info.num_tasks)
        agent.check_model(cfg, model)
        check_checkpoints_fit(cfg, model, agent)
        check_eval_env(cfg, env_info)
        require_wandb(cfg)
        check_cpus(cfg)
        ensure_open_file_limit(cfg.num_workers * cfg.num_envs_per_worker)
        # ConfigError when /dev/shm is too small
        w = wire(cfg, env_info, model, serial=cfg.serial_mode, largest_batch_size=largest_batch_size(cfg),
                 ranks=ranks if ranks.is_distributed else None)
        runtime = SerialRuntime(w, device) if cfg.serial_mode else ProcessRuntime(w)
        if isinstance(runtime, ProcessRuntime):
            runtime.check_start()
    except ConfigError as e:
        if meeting is not None:
            meeting.agree("checks", str(e))  # the other ranks end now, naming this rank
        raise
    if meeting is not None:
        meeting.agree("checks")  # a ConfigError when another rank's checks failed (the buffers go with w)
    return env_info, w, runtime


def _training_result(cfg: Any, ranks: Any, reporter: TrainingReporter, stop: Stop,
                     evaluation: EvaluationPart | None) -> dict:
    """run_training's result (see there), also written to status.json; the done file for a finished training."""
    from sfx.experiment import done_path

    status = stop.status
    result = reporter.result(status)
    result["stop_reason"] = stop.reason
    if evaluation is not None:
        result["evaluations"] = evaluation.results
        result["evaluations_skipped"] = list(evaluation.skipped)
    reporter.write_status(status, time.time(), stop_reason=stop.reason, result=result)
    if status == "done":
        from sfx.experiment.cfg_io import atomic_write_text

        try:
            # atomically: a plain write on a full disk leaves an empty done file, which a runner would take for a
            # finished training
            atomic_write_text(done_path(cfg), f"env_steps={result['env_steps']}\n")
        except OSError as e:
            log.error("training finished but %s could not be written (%s): the same command will resume and "
                      "finish at once", done_path(cfg), e.strerror or e)
    every_rank = (f", all {ranks.world_size} ranks {result['fps_all_ranks']:.0f} FPS" if "fps_all_ranks" in result
                  else "")
    log.info("training %s after %s: %s env steps, %.0f samples/s (%.0f FPS)%s, reward %s", status,
             format_duration(result["elapsed_sec"]), f"{result['env_steps']:,}", result["samples_per_sec"],
             result["fps"], every_rank, ", ".join(f"{r:.2f}" for r in result["reward"]))
    return result
