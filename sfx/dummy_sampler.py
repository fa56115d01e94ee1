"""``python -m sfx.dummy_sampler --env=... --num_workers=N --num_envs_per_worker=M``: how fast sfx samples.

Also ``python -m sfx.train --algo=DUMMY_SAMPLER ...``. Every flag of ``sfx.train`` (and of the env's
family) is accepted; the dummy sampler's own are ``--sample_env_frames`` (default 1e6) and
``--timeout_seconds`` (the sampling time, env creation excluded; given alone it lifts the frame
budget). Nothing is trained and no experiment is resumed; the log goes to
``train_dir/<experiment>/sf_log.txt`` (``--experiment`` defaults to ``dummy_sampler`` here).

The sampling path is training's own: the real :class:`~sfx.engine.rollout_worker.RolloutWorker`
processes write observations into the shared trajectory slots and send request rows; a
:class:`~sfx.engine.policy_worker.RandomPolicyWorker` per policy answers them like a policy worker
would, with uniformly random actions written into the slots, and returns finished trajectories'
slots to the free queue in place of a learner. So the figure is the engine's sampling throughput
(envs, shared-memory writes, queues, double buffering), without inference or learning.

Counted and printed:

- frames = agent steps x ``--env_frameskip``, every agent of a multi-agent env counted, as
  training counts them; FPS over the last 1/10/60/300 s every ``--report_every_sec``, and a final
  figure over the sampling time (from the moment every rollout worker steps to the stop);
- ``env.step`` durations measured inside the rollout workers (a histogram in shared memory with
  24 bins per decade, so percentiles are within about 5%): mean, p50, p99 and max.

Exit codes as ``sfx.train``: 0 done, 1 failed, 2 bad command line, 130 interrupted.
"""

from __future__ import annotations

import copy
import logging
import math
import sys
import time
from typing import Any

import numpy as np
import torch

from sfx.cfg import ConfigError
from sfx.registries import parse_args
from sfx.engine.coordinator import run_loop
from sfx.engine.protocol import ERROR, ROLLOUT, STOPPED
from sfx.engine.runtime import ProcessRuntime, SerialRuntime
from sfx.engine.supervision import Stop, StopRequest
from sfx.engine.wiring import ComponentSpec, Wiring, probe_env, rollout_worker_specs, wire
from sfx.engine.stats import ThroughputMeter, format_duration

log = logging.getLogger(__name__)

EXIT_CODES = {"done": 0, "failed": 1, "interrupted": 130}
FPS_WINDOWS_SEC = (1, 10, 60, 300)
# a rollout worker that has not stepped by then is stuck (a VizDoom match that never starts, say)
STARTUP_LIMIT_SEC = 600.0

# env.step duration histogram: log-spaced bins from 1 us to 100 s, plus under- and overflow
_BINS_PER_DECADE = 24
_MIN_SEC = 1e-6
_NUM_DECADES = 8
NUM_STEP_TIME_BINS = _BINS_PER_DECADE * _NUM_DECADES + 2


def step_time_bin(seconds: np.ndarray) -> np.ndarray:
    """Histogram bin of each duration: 0 below 1 us, the last one at 100 s and above."""
    scaled = np.log10(np.maximum(np.asarray(seconds, dtype=np.float64), _MIN_SEC * 0.5) / _MIN_SEC)
    idx = np.floor(scaled * _BINS_PER_DECADE).astype(np.int64) + 1
    return np.clip(idx, 0, NUM_STEP_TIME_BINS - 1)


def _bin_center_sec(i: int) -> float:
    if i == 0:
        return _MIN_SEC
    # geometric middle of bin i: [MIN * 10^((i-1)/b), MIN * 10^(i/b))
    return _MIN_SEC * 10 ** ((i - 0.5) / _BINS_PER_DECADE)


def summarize_step_times(counts: np.ndarray, total_sec: float, max_sec: float) -> dict:
    """``count``, ``mean_sec`` (exact), ``p50_sec`` and ``p99_sec`` (bin centres), ``max_sec`` (exact)."""
    counts = np.asarray(counts, dtype=np.int64)
    n = int(counts.sum())
    if n == 0:
        nan = float("nan")
        return {"count": 0, "mean_sec": nan, "p50_sec": nan, "p99_sec": nan, "max_sec": nan}
    cum = np.cumsum(counts)

    def percentile(q: float) -> float:
        return _bin_center_sec(int(np.searchsorted(cum, q * n, side="left")))

    return {"count": n, "mean_sec": total_sec / n, "p50_sec": percentile(0.5), "p99_sec": percentile(0.99),
            "max_sec": float(max_sec)}


class StepTimes:
    """Per-env histograms of ``env.step`` durations in shared memory: rollout workers add to their
    envs' rows, the sampler's main process reads them (a slightly stale read is fine for a report)."""

    def __init__(self, num_envs: int) -> None:
        from sfx.engine.shared_arena import SharedArena

        arena = SharedArena()
        self.counts = arena.tensor((num_envs, NUM_STEP_TIME_BINS), torch.int64)
        self.totals = arena.tensor((num_envs, 2), torch.float64)  # [sum, max] seconds

    def summary(self, envs: slice | list[int] = slice(None)) -> dict:
        counts = self.counts.numpy()[envs]
        totals = self.totals.numpy()[envs]
        return summarize_step_times(counts.sum(axis=0), float(totals[:, 0].sum()), float(totals[:, 1].max()))


class StepTimedEnv:
    """An env whose ``step`` is timed; everything else goes to the wrapped env unchanged.

    Durations are kept in a list and folded into the shared histogram about once a second, so the
    per-step cost is two clock reads and an append.
    """

    FLUSH_EVERY_SEC = 1.0

    def __init__(self, env: Any, counts: np.ndarray, totals: np.ndarray) -> None:
        self.env = env
        self._counts = counts
        self._totals = totals
        self._pending: list[float] = []
        self._last_flush = time.perf_counter()

    def __getattr__(self, name: str) -> Any:
        if name == "env":  # before __init__ ran (e.g. while unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.env, name)

    def step(self, actions: Any) -> Any:
        start = time.perf_counter()
        out = self.env.step(actions)
        self.record(time.perf_counter() - start)
        return out

    def record(self, seconds: float) -> None:
        """One step's duration (folded into the shared histogram about once a second)."""
        self._pending.append(seconds)
        if time.perf_counter() - self._last_flush > self.FLUSH_EVERY_SEC:
            self.flush()

    def flush(self) -> None:
        self._last_flush = time.perf_counter()
        if not self._pending:
            return
        d = np.asarray(self._pending)
        self._pending = []
        self._counts += np.bincount(step_time_bin(d), minlength=NUM_STEP_TIME_BINS)
        self._totals[0] += float(d.sum())
        self._totals[1] = max(float(self._totals[1]), float(d.max()))

    def close(self) -> None:
        self.flush()
        if self.env is not None:
            self.env.close()


class StepTimedVectors:
    """The rollout workers' vector factory in the dummy sampler (see :mod:`sfx.envs.vector`), timed. Python
    envs are timed one by one (each env's ``step``); a native vector (EnvPool) is timed per call, each of its
    envs getting the call's time divided by the number of envs (what one env step costs in the pool). It
    travels to the worker processes inside the wiring (its shared tensors go by handle, not by copy)."""

    def __init__(self, step_times: StepTimes) -> None:
        self.step_times = step_times

    def _row(self, env_config: dict) -> tuple[np.ndarray, np.ndarray]:
        row = int(env_config.get("env_id", 0))
        return self.step_times.counts[row].numpy(), self.step_times.totals[row].numpy()

    def __call__(self, cfg: Any, env_configs: list[dict], name: str = "envs") -> Any:
        from sfx.envs import make_env
        from sfx.envs.vector import PythonVectorEnv, native_vector_env

        native = native_vector_env(cfg, env_configs)
        if native is not None:
            return StepTimedVector(native, [self._row(c) for c in env_configs])
        return PythonVectorEnv(lambda e: StepTimedEnv(make_env(cfg, env_configs[e]), *self._row(env_configs[e])),
                               len(env_configs), name=name)


class StepTimedVector:
    """A native vector whose ``step`` calls are timed (see :class:`StepTimedVectors`); everything else is the
    vector's own."""

    def __init__(self, vector: Any, rows: list[tuple[np.ndarray, np.ndarray]]) -> None:
        self.vector = vector
        self.timed = [StepTimedEnv(None, counts, totals) for counts, totals in rows]

    def __getattr__(self, name: str) -> Any:
        if name == "vector":  # before __init__ ran: no recursion
            raise AttributeError(name)
        return getattr(self.vector, name)

    def step(self, actions: Any) -> Any:
        start = time.perf_counter()
        out = self.vector.step(actions)
        per_env = (time.perf_counter() - start) / len(self.timed)
        for timed in self.timed:
            timed.record(per_env)
        return out

    def close(self) -> None:
        for timed in self.timed:
            timed.flush()
        self.vector.close()


def _fmt_sec(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} us"
    if seconds < 1.0:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def format_step_times(s: dict) -> str:
    return (f"mean {_fmt_sec(s['mean_sec'])}, p50 {_fmt_sec(s['p50_sec'])}, p99 {_fmt_sec(s['p99_sec'])}, "
            f"max {_fmt_sec(s['max_sec'])} over {s['count']:,} calls")


def build_random_policy_worker(w: Wiring, spec: ComponentSpec, device: torch.device, incarnation: int = 0):
    from sfx.engine.policy_worker import RandomPolicyWorker

    return RandomPolicyWorker(spec.policy, spec.index, w.env_info.action_space, w.traj[spec.policy],
                              w.free_slots[spec.policy], list(w.rollout_inboxes), w.cfg.seed)


def sampler_components(w: Wiring) -> tuple[ComponentSpec, ...]:
    """A random policy worker per policy (in place of policy workers and learner: it also frees finished
    trajectories' slots, which arrive on its own queue) and the run's rollout workers."""
    specs = [ComponentSpec("random_policy_worker", p, p, build_random_policy_worker, w.policy_queues[p])
             for p in range(w.cfg.num_policies)]
    return tuple(specs) + rollout_worker_specs(w)


class SamplerReporter:
    """Counts frames, agent steps and episodes; the status line; knows when sampling time starts."""

    def __init__(self, cfg: Any, step_times: StepTimes) -> None:
        self.cfg = cfg
        self.step_times = step_times
        self.meter = ThroughputMeter(FPS_WINDOWS_SEC)
        self.counts = {"agent_steps": 0, "episodes": 0}
        self.stepping: set[int] = set()
        self.measure_start: float | None = None
        self.frames_at_measure_start = 0
        self.start = self.last_report = time.time()

    def started(self, start: float) -> None:
        self.start = self.last_report = start

    def handle(self, reports: list) -> None:
        now = time.time()
        for kind, who, payload in reports:
            if kind == ROLLOUT:
                self.counts["agent_steps"] += payload["env_steps"]
                self.counts["episodes"] += len(payload["episodes"])
                self.meter.add(payload["env_steps"] * int(self.cfg.env_frameskip), now)
                if payload["env_steps"] > 0:
                    self.stepping.add(who)
                if self.measure_start is None and len(self.stepping) == self.cfg.num_workers:
                    # every worker's envs exist and step: sampling time starts now
                    self.measure_start, self.frames_at_measure_start = now, self.meter.total

    def check(self, now: float) -> Stop | None:
        if now - self.last_report >= self.cfg.report_every_sec:
            self.last_report = now
            log.info(_status_line(self.meter, now, self.counts["agent_steps"], self.step_times, self.start))
        return None


class SamplerStopRules:
    """Sampling ends on a crash or an early exit of a component (nothing is restarted here), a signal,
    the frame budget, the sampling time, or workers that never step."""

    def __init__(self, cfg: Any, runtime: Any, reporter: SamplerReporter, stop_request: StopRequest,
                 frame_budget: int | None) -> None:
        self.cfg = cfg
        self.runtime = runtime
        self.reporter = reporter
        self.stop_request = stop_request
        self.frame_budget = frame_budget
        self.errors: list[str] = []
        self.stopped: set[str] = set()
        self.start = time.time()
        self.stop_time: float | None = None
        self.fps_windows: dict[int, float] | None = None  # the FPS windows at the moment of the stop

    def started(self, start: float) -> None:
        self.start = start

    def handle(self, reports: list) -> None:
        for kind, who, _ in reports:
            if kind == ERROR:
                self.errors.append(who)
            elif kind == STOPPED:
                self.stopped.add(who)

    def check(self, now: float) -> Stop | None:
        stop = self._verdict(now)
        if stop is not None:
            self.stopping_now()
        return stop

    def stopping_now(self) -> None:
        if self.stop_time is None:
            self.stop_time = time.time()
            self.fps_windows = {w: self.reporter.meter.rate(w, self.stop_time) for w in FPS_WINDOWS_SEC}

    def _verdict(self, now: float) -> Stop | None:
        cfg, r = self.cfg, self.reporter
        if self.errors:
            return Stop("failed", f"stopping: {', '.join(self.errors)} crashed (see the log above)", logging.ERROR)
        dead = sorted(set(self.runtime.dead_components()) | self.stopped)
        if dead:
            return Stop("failed", f"stopping: {', '.join(dead)} exited before being asked to", logging.ERROR)
        if self.stop_request.requested:
            return Stop("interrupted", f"{self.stop_request.requested} received: stopping")
        if self.frame_budget is not None and r.meter.total >= self.frame_budget:
            return Stop("done")
        if r.measure_start is None and now - self.start > STARTUP_LIMIT_SEC:
            return Stop("failed", f"stopping: rollout workers {sorted(set(range(cfg.num_workers)) - r.stepping)} did "
                                  f"not step within {STARTUP_LIMIT_SEC:.0f} s", logging.ERROR)
        if cfg.timeout_seconds is not None and r.measure_start is not None \
                and now - r.measure_start >= cfg.timeout_seconds:
            return Stop("done")
        return None


def run_sampler(cfg: Any) -> dict:
    """Sample with random actions until ``sample_env_frames`` frames or ``timeout_seconds`` of sampling.

    Returns ``{'status': 'done'|'interrupted'|'failed', 'frames', 'agent_steps', 'env_steps'
    (env.step calls), 'env_frameskip', 'num_agents', 'episodes', 'startup_sec', 'sampling_sec',
    'fps' (frames/s over the sampling time), 'fps_windows' ({1: .., 10: .., ...} at the stop),
    'step_time' (:func:`summarize_step_times` over every env), 'step_time_per_worker'}``.
    """
    from sfx.agents import find_agent
    from sfx.experiment import experiment_dir, setup_logging

    cfg = copy.copy(cfg)
    cfg.algo = "DUMMY_SAMPLER"
    cfg.device = "cpu"  # no model runs anywhere: keeps resolve_device quiet on machines without CUDA
    experiment_dir(cfg).mkdir(parents=True, exist_ok=True)
    setup_logging(cfg, "sampler")
    frameskip = int(cfg.env_frameskip)
    frame_budget = cfg.sample_env_frames
    if cfg.timeout_seconds is not None and "sample_env_frames" not in cfg.explicit_args:
        frame_budget = None  # --timeout_seconds alone: sample for that long

    env_info = probe_env(cfg)
    # the real model sizes the recurrent-state columns of the slots, so memory matches training's
    model = find_agent(cfg.algo).make_model(cfg, env_info.observation_space, env_info.action_space,
                                            env_info.num_tasks)
    envs_per_worker = cfg.num_envs_per_worker
    step_times = StepTimes(cfg.num_workers * envs_per_worker)
    # no learner: finished trajectories go to the random policy worker, which frees their slots
    w = wire(cfg, env_info, model, serial=cfg.serial_mode, components=sampler_components, with_learners=False,
             make_vector_fn=StepTimedVectors(step_times))
    del model
    runtime = SerialRuntime(w, torch.device("cpu")) if cfg.serial_mode else ProcessRuntime(w)
    log.info("dummy sampler: %s, %d workers x %d envs x %d agents, frameskip %d, random actions; stops after %s",
             cfg.env, cfg.num_workers, envs_per_worker, env_info.num_agents, frameskip,
             " or ".join(filter(None, [f"{frame_budget:,} frames" if frame_budget else None,
                                       f"{cfg.timeout_seconds:g} s of sampling" if cfg.timeout_seconds else None])))

    reporter = SamplerReporter(cfg, step_times)
    with StopRequest() as stop_request:
        rules = SamplerStopRules(cfg, runtime, reporter, stop_request, frame_budget)
        try:
            status = run_loop(runtime, [reporter, rules], forced=lambda: stop_request.forced).status
        except Exception:
            log.exception("dummy sampler crashed")
            raise
        finally:
            rules.stopping_now()  # no-op after a stop rule fired
    stop_time, fps_windows = rules.stop_time, rules.fps_windows

    start = reporter.start
    measure_start, frames_at_measure_start = reporter.measure_start, reporter.frames_at_measure_start
    if measure_start is None:
        measure_start, frames_at_measure_start = stop_time, reporter.meter.total
    sampling_sec = stop_time - measure_start
    frames = reporter.meter.total
    result = {
        "status": status, "env": cfg.env, "num_workers": cfg.num_workers, "num_envs_per_worker": envs_per_worker,
        "frames": frames, "agent_steps": reporter.counts["agent_steps"], "env_steps": step_times.summary()["count"],
        "env_frameskip": frameskip, "num_agents": env_info.num_agents, "episodes": reporter.counts["episodes"],
        "startup_sec": measure_start - start, "sampling_sec": sampling_sec,
        "fps": (frames - frames_at_measure_start) / sampling_sec if sampling_sec > 0 else float("nan"),
        "fps_windows": fps_windows, "step_time": step_times.summary(),
        "step_time_per_worker": [step_times.summary(slice(i * envs_per_worker, (i + 1) * envs_per_worker))
                                 for i in range(cfg.num_workers)],
    }
    log.info("dummy sampler %s after %s", status, format_duration(time.time() - start))
    print(format_result(result), flush=True)
    return result


def _status_line(meter: ThroughputMeter, now: float, agent_steps: int, step_times: StepTimes, start: float) -> str:
    fps = "/".join(f"{meter.rate(w, now):,.0f}" for w in FPS_WINDOWS_SEC)
    windows = "/".join(f"{w}s" for w in FPS_WINDOWS_SEC)
    return (f"FPS ({windows}) {fps} | frames {meter.total:,} | agent steps {agent_steps:,} | "
            f"env.step {format_step_times(step_times.summary())} | elapsed {format_duration(now - start)}")


def format_result(r: dict) -> str:
    """The final report: what was counted, the FPS figure, the env.step statistics."""
    per_worker = ", ".join(_fmt_sec(s["mean_sec"]) for s in r["step_time_per_worker"])
    return "\n".join([
        f"dummy sampler {r['status']}: {r['env']}, {r['num_workers']} workers x {r['num_envs_per_worker']} envs x "
        f"{r['num_agents']} agents, random actions",
        f"frames {r['frames']:,} = agent steps {r['agent_steps']:,} x frameskip {r['env_frameskip']} "
        f"(env.step calls {r['env_steps']:,} x {r['num_agents']} agents), episodes {r['episodes']:,}",
        f"FPS {r['fps']:,.0f} over {r['sampling_sec']:.1f} s of sampling (startup {r['startup_sec']:.1f} s excluded)",
        f"env.step in rollout workers: {format_step_times(r['step_time'])}; mean per worker: {per_worker}",
    ])


def parse_sampler_args(argv: list[str] | None = None) -> Any:
    """sfx's full parser (env families' flags included), without resuming any saved cfg."""
    argv = list(sys.argv[1:] if argv is None else argv)
    cfg = parse_args([*argv, "--algo=DUMMY_SAMPLER"], resume=False, prog="python -m sfx.dummy_sampler")
    if "experiment" not in cfg.explicit_args:
        cfg.experiment = "dummy_sampler"
    return cfg


def main(argv: list[str] | None = None) -> int:
    try:
        cfg = parse_sampler_args(argv)
        result = run_sampler(cfg)
    except ConfigError as e:
        print(f"sfx: error: {e}", file=sys.stderr)
        return 2
    return EXIT_CODES[result["status"]]


if __name__ == "__main__":
    # run as sfx.dummy_sampler, not __main__, so that what travels to the worker processes pickles by
    # that module's name
    from sfx import dummy_sampler

    sys.exit(dummy_sampler.main())
