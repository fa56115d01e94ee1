"""Throughput side by side, in one run on one doom scenario: the raw env limit, sfx's dummy sampler,
sfx training and Sample Factory 2.1.1 training, plus a pipeline-overhead trio (a negligible model).

    python -m bench.throughput [--seconds=60] [--env=doom_basic] [--device=cpu|gpu] [--episode_len=N]
                               [--sfx_row NAME="--flag=value ..."]... [--only KEY]... [--scaling] [--tiny]
                               [--skip_sf] [--train_flags="..."] [-- flags for every sfx doom training]

Measured one after the other, each in fresh processes, on the same scenario and settings
(``--env``, 128x72 observations, frameskip 4, ``--num_workers`` x ``--num_envs_per_worker``); the key of
each row (for ``--only`` and in throughput.json) in brackets:

1. raw limit [raw]: one env per process in as many processes as CPU cores, each pinned to its own core,
   stepping with random actions (no queues, no shared memory, nothing else running); and, as a
   diagnostic [raw_many], the same with ``--num_envs_per_worker`` envs per process stepped round-robin
   (what a rollout worker's envs cost without the worker: many game engines share one core's caches);
2. sfx dummy sampler [sampler] (``python -m sfx.dummy_sampler``): training's sampling path, random actions;
3. with ``--episode_len=N``, both again with every episode cut after N agent steps [raw_len, sampler_len]
   (``bench/episode_cap.py``: the env in gymnasium's TimeLimit; neither sfx's doom family nor the dummy
   sampler has such a flag). A trained doom_basic agent ends its episodes in 6-11 steps, a random one in
   ~47, and every reset costs a few steps: a training compares like with like against these rows at
   its own episode length (the "ep len" column gives every row's measured mean);
4. sfx training [sfx]: APPO, conv encoder + LSTM, rollout 32, batch 2048 (``sfx.train``), on
   ``--device``; flags after ``--`` and ``--train_flags`` go to it (and to the named rows), never to
   Sample Factory;
5. named sfx rows [NAME]: ``--sfx_row NAME="--batches_ahead=0"`` (repeatable) is the sfx training again
   with those flags added, e.g. ``--sfx_row ungated="--batches_ahead=0"``;
6. Sample Factory 2.1.1 training [sf] with the same settings (``sf_examples.vizdoom.train_vizdoom``),
   from its own venv ``bench/sf_venv`` (``bash bench/setup_sample_factory.sh`` makes it; without
   it this row is reported as skipped);
7. pipeline overhead [overhead = overhead_sampler, overhead_sfx, overhead_sf]: the dummy sampler and
   both trainings on the same doom scenario and settings with a model of negligible compute: each
   channel averaged over a 2 x 2 grid, one 16-unit layer, no RNN (``bench/negligible_model.py`` for sfx,
   ``bench/sf_negligible_model.py``, the same network through Sample Factory's encoder API), GAE
   (Sample Factory's default), no input normalization, rollout 32. Each training's FPS over the sampler's is what the pipeline
   (inference requests, trajectories, the learner's batches, weight updates, the collection gate)
   costs where the env is a real one and the model costs nothing: on a 2-core CPU both frameworks'
   default conv encoder would make the learner the bottleneck, not the pipeline;
   ipc floor [ipc = ipc_sampler, ipc_sfx, ipc_sf, only with ``--only ipc``]: the same trio on
   CartPole-v1 (a 7 us step) with two 8-unit layers (``--hidden_size=8`` / ``--encoder_mlp_layers 8 8``):
   the env costs nothing either, so the ratio is the cost of a message round trip per step against
   none, which no pipeline that runs inference in another process can bring near 1 on 2 cores;
8. ratios: sampler / raw, sfx / Sample Factory (and sampler / raw with as many envs per process), at
   N-step episodes sampler / raw and each training / sampler, and the pipeline-overhead ratios.

FPS is env frames per second (agent steps x frameskip). The trainings are timed the same way for
both frameworks: each prints its own cumulative count of frames the learner has consumed
(sfx: ``env steps``, Sample Factory: ``Total num frames``) every 5 s; a line is time-stamped when it
arrives here, and the figure is the least-squares slope through the lines from the first one
``--warmup`` seconds after frames first appear to the first one ``--seconds`` later. Then the run is interrupted and its process
group killed (VizDoom engines included). ``doom_basic`` is the default because both frameworks
ship it (the same basic.cfg scenario); their ``doom_benchmark`` are different maps. Each training's
mean episode length (agent steps) and policy lag come from its own reports (sfx: the status line;
Sample Factory: its log's lag and its TensorBoard ``len/len`` in frames, divided by the frameskip).

``--device=gpu`` runs every training (both frameworks, their ``--device`` flag) on the GPU; the GPU's
name goes into the table's header and throughput.json, and ``nvidia-smi`` samples its utilisation and
memory through each training's measured window (the "GPU %" column). The raw and sampler rows use no
model and run on the CPU either way.

``--scaling`` adds a table of the dummy sampler's FPS against ``--scaling_workers`` and
``--scaling_envs``. ``--tiny`` runs everything for a few seconds with small settings (to keep the
script working; its figures mean little). Results: a table on stdout, ``throughput.json`` and
``throughput.png`` (a bar chart; ``throughput_scaling.png`` with ``--scaling``) in ``--out_dir``.

Figures, never pass/fail: the exit code is 0 unless a measurement could not run at all (2 for a bad
command line).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import queue
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from bench.episode_cap import MODULE as EPISODE_CAP_MODULE
from bench.episode_cap import capped_name
from bench.procs import split_extra, stop_group
from bench.throughput_common import (REPO_ROOT, GpuMonitor, format_columns, gpu_info, ratio, run_json_child, tail,
                                    write_result)
from bench.throughput_common import child_env as common_child_env
from bench.throughput_common import fmt_count as fmt_fps

LOG_TAIL_LINES = 25  # of a failed measurement's output: in its result and on the terminal

SF_VENV = REPO_ROOT / "bench" / "sf_venv"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
SFX_COUNTER = re.compile(r"\| env steps ([\d,]+) ")
SF_COUNTER = re.compile(r"Total num frames: (\d+)")
# what else each framework reports beside its frame counter: the last value seen in the window is kept
SFX_STATS = {"episode_len": re.compile(r"\blen (nan|[\d.]+) lag"), "policy_lag": re.compile(r"\blag (nan|[\d.]+)/")}
SF_STATS = {"policy_lag": re.compile(r"Policy #0 lag: \(min: [-\d.]+, avg: ([-\d.]+),")}
# a training that shows no consumed frame by then is reported as failed
STARTUP_LIMIT_SEC = 420.0

# the pipeline-overhead rows: the doom scenario, the same negligible-compute network in both frameworks
# (bench/negligible_model.py for sfx, bench/sf_negligible_model.py for Sample Factory)
OVERHEAD_SFX_MODULE = "bench.negligible_model"
OVERHEAD_SF_MODULE = "bench.sf_negligible_model"
OVERHEAD_ENCODER = "bench_pooled"  # bench.negligible_model.ENCODER_NAME (not imported: it imports torch)
OVERHEAD_WIDTH = 16  # bench.negligible_model.WIDTH
# the message-passing floor rows: CartPole-v1 (a 7 us step), the smallest model both frameworks build alike
IPC_SFX_ENV = "gym_CartPole-v1"
IPC_SF_ENV = "CartPole-v1"
IPC_WIDTH = 8

FIXED_KEYS = ("raw", "raw_many", "sampler", "raw_len", "sampler_len", "sfx", "sf",
              "overhead_sampler", "overhead_sfx", "overhead_sf", "ipc_sampler", "ipc_sfx", "ipc_sf")
ONLY_GROUPS = {"overhead": ("overhead_sampler", "overhead_sfx", "overhead_sf"),
               "ipc": ("ipc_sampler", "ipc_sfx", "ipc_sf")}
# measured only when asked for (--only)
OPT_IN_KEYS = {"raw_len", "sampler_len", "ipc_sampler", "ipc_sfx", "ipc_sf"}
ROW_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")


class BenchArgError(ValueError):
    """A bad bench command line (reported as one line, exit code 2)."""


def parse_sfx_row(text: str, taken: set[str]) -> tuple[str, list[str]]:
    """``NAME=--flag=value --other=x`` -> (NAME, [flags]); :class:`BenchArgError` naming what is wrong."""
    name, sep, flags_text = text.partition("=")
    name = name.strip()
    if not sep or not ROW_NAME.match(name):
        raise BenchArgError(f"--sfx_row {text!r}: give NAME=\"--flag=value ...\" with NAME made of letters, digits, "
                            f"_ . - (starting with a letter), e.g. --sfx_row ungated=\"--batches_ahead=0\"")
    if name in FIXED_KEYS or name in ONLY_GROUPS or name in taken:
        raise BenchArgError(f"--sfx_row {name}: the name is taken (by another row or one of "
                            f"{', '.join(FIXED_KEYS)}); choose another")
    try:
        flags = shlex.split(flags_text)
    except ValueError as e:
        raise BenchArgError(f"--sfx_row {name}: cannot split its flags {flags_text!r}: {e}") from None
    if not flags or any(not f.startswith("--") for f in flags):
        raise BenchArgError(f"--sfx_row {name}: its flags must be sfx.train flags, each starting with --, "
                            f"got {flags_text!r}")
    return name, flags


def parse_bench_args(argv: list[str] | None) -> argparse.Namespace:
    """The bench's own flags (before ``--``) and the extra sfx training flags (after it); a bad value is a
    :class:`BenchArgError`."""
    p = argparse.ArgumentParser(prog="python -m bench.throughput", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--seconds", type=float, default=60.0, help="measured time of each figure")
    p.add_argument("--warmup", type=float, default=15.0,
                   help="trainings: seconds skipped after the first consumed frames before the measured window")
    p.add_argument("--env", default="doom_basic", help="doom scenario both frameworks know")
    p.add_argument("--device", choices=["cpu", "gpu"], default="cpu",
                   help="where both frameworks' trainings run (their --device); the raw and sampler rows need none")
    p.add_argument("--num_workers", type=int, default=2, help="rollout workers (sampler and trainings)")
    p.add_argument("--num_envs_per_worker", type=int, default=16)
    p.add_argument("--batch_size", type=int, default=2048)
    p.add_argument("--episode_len", type=int, default=0,
                   help="also the raw and sampler rows with every episode cut after this many agent steps "
                        "(raw_len, sampler_len); 0 = not measured")
    p.add_argument("--sfx_row", action="append", default=[], metavar='NAME="FLAGS"',
                   help="one more sfx training row named NAME, with these sfx.train flags added (repeatable)")
    p.add_argument("--train_flags", default="",
                   help="sfx.train flags for every sfx doom training row (as after --), e.g. \"--hidden_size=256\"")
    p.add_argument("--sfx_env_flags", default="",
                   help="sfx env flags for every sfx row (raw, sampler, trainings, the overhead pair), never Sample "
                        "Factory's, e.g. \"--resize_interpolation=linear\"")
    p.add_argument("--raw_processes", type=int, default=0, help="raw limit's processes; 0 = one per CPU core")
    p.add_argument("--raw_envs_per_process", type=int, default=1, help=argparse.SUPPRESS)  # set per row
    p.add_argument("--only", action="append", metavar="KEY",
                   help=f"measure only this row (repeatable): {', '.join(FIXED_KEYS)}, overhead or ipc (their three "
                        f"rows; ipc rows only when asked for), "
                        f"rows (every --sfx_row) or a --sfx_row NAME")
    p.add_argument("--skip_sf", action="store_true", help="leave Sample Factory out")
    # made absolute here: the trainings run in folders of their own, where a relative path finds nothing
    p.add_argument("--sf_python", default=str(SF_VENV / "bin" / "python"), type=os.path.abspath,
                   help="python of the Sample Factory 2.1.1 venv")
    p.add_argument("--scaling", action="store_true", help="also the dummy sampler's FPS against workers x envs")
    p.add_argument("--scaling_workers", default="1,2", help="comma-separated --num_workers values")
    p.add_argument("--scaling_envs", default="4,8,16,32", help="comma-separated --num_envs_per_worker values")
    p.add_argument("--scaling_seconds", type=float, default=20.0, help="measured time of each scaling point")
    p.add_argument("--tiny", action="store_true",
                   help="a few seconds each, small settings (1 worker x 4 envs, batch 256): checks the script runs")
    p.add_argument("--out_dir", default=str(REPO_ROOT / "bench" / "results"), help="where the JSON and PNGs go")
    p.add_argument("--keep_logs", action="store_true", help="copy every run's output into --out_dir/logs")
    p.add_argument("--child", choices=["raw", "sampler"], help=argparse.SUPPRESS)
    p.add_argument("--child_result", help=argparse.SUPPRESS)
    argv, extra = split_extra(list(sys.argv[1:] if argv is None else argv))
    args = p.parse_args(argv)
    if args.child:
        args.extra = extra
        return args
    split = {}
    for name in ("train_flags", "sfx_env_flags"):
        try:
            split[name] = shlex.split(getattr(args, name))
        except ValueError as e:
            raise BenchArgError(f"--{name}={getattr(args, name)!r} cannot be split: {e}") from None
    args.sfx_env = split["sfx_env_flags"]
    args.extra = [*args.sfx_env, *split["train_flags"], *extra]
    for name, value in (("--seconds", args.seconds), ("--num_workers", args.num_workers),
                        ("--num_envs_per_worker", args.num_envs_per_worker), ("--batch_size", args.batch_size)):
        if value <= 0:
            raise BenchArgError(f"{name}={value:g} must be positive")
    if args.warmup < 0 or args.episode_len < 0:
        raise BenchArgError(f"--warmup={args.warmup:g} and --episode_len={args.episode_len} must be >= 0")
    args.rows = {}
    for text in args.sfx_row:
        name, flags = parse_sfx_row(text, set(args.rows))
        args.rows[name] = flags
    args.wanted = wanted_keys(args)
    if args.tiny:
        args.seconds = min(args.seconds, 4.0)
        args.warmup = min(args.warmup, 1.0)
        args.num_workers, args.num_envs_per_worker, args.batch_size = 1, 4, 256
        args.scaling_workers, args.scaling_envs, args.scaling_seconds = "1", "2,4", min(args.scaling_seconds, 2.0)
    return args


def wanted_keys(args: argparse.Namespace) -> list[str]:
    """The rows to measure, in measuring order (every row of the table; the others are 'not selected')."""
    every = [*FIXED_KEYS[:6], *args.rows, *FIXED_KEYS[6:]]
    if not args.only:
        chosen = set(every) - OPT_IN_KEYS | ({"raw_len", "sampler_len"} if args.episode_len else set())
    else:
        chosen = set()
        for key in args.only:
            if key in ONLY_GROUPS:
                chosen.update(ONLY_GROUPS[key])
            elif key == "rows":
                if not args.rows:
                    raise BenchArgError("--only=rows selects the --sfx_row rows, and none is given")
                chosen.update(args.rows)
            elif key in every:
                chosen.add(key)
            else:
                raise BenchArgError(f"--only={key} is not a row: choose from {', '.join(every)}, "
                                    f"{', '.join(ONLY_GROUPS)}, rows")
        if {"raw_len", "sampler_len"} & chosen and not args.episode_len:
            raise BenchArgError("--only=raw_len / sampler_len need --episode_len=N (agent steps per episode)")
    if args.skip_sf:
        chosen -= {"sf", "overhead_sf", "ipc_sf"}
    return [k for k in every if k in chosen]


def env_flags(args: argparse.Namespace) -> list[str]:
    """The scenario and observation settings every sfx measurement uses."""
    return [f"--env={args.env}", "--res_w=128", "--res_h=72", "--env_frameskip=4", "--wide_aspect_ratio=False"]


def sfx_env(args: argparse.Namespace) -> list[str]:
    """:func:`env_flags` and ``--sfx_env_flags``: the env settings of rows that only sfx runs."""
    return [*env_flags(args), *args.sfx_env]


def child_env() -> dict[str, str]:
    return common_child_env(env_modules=(EPISODE_CAP_MODULE,), unbuffered=True)


# --------------------------------------------------------------------------- 1. raw limit

class RoundRobinEnvs:
    """Several multi-agent envs stepped one after the other as one env whose agents are all of theirs
    (for :func:`bench.env_timing.time_random_steps`): a rollout worker's envs without the worker."""

    def __init__(self, envs: list) -> None:
        self.envs = envs
        self.per_env = envs[0].num_agents
        self.num_agents = self.per_env * len(envs)
        self.action_space = envs[0].action_space

    def reset(self, seed: int | None = None) -> None:
        for i, env in enumerate(self.envs):
            env.reset(seed=None if seed is None else seed + i)

    def step(self, actions: list) -> tuple:
        infos: list = []
        k = self.per_env
        for i, env in enumerate(self.envs):
            infos += env.step(actions[i * k:(i + 1) * k])[4]
        return None, None, None, None, infos

    def close(self) -> None:
        for env in self.envs:
            env.close()


def _raw_process(index: int, core: int | None, flags: list[str], seconds: float, num_envs: int, barrier,
                 results) -> None:
    from bench.env_timing import time_random_steps
    from sfx.registries import parse_args
    from sfx.envs import make_env

    if core is not None:
        os.sched_setaffinity(0, {core})  # before the game starts: VizDoom runs about twice as fast pinned
    cfg = parse_args([*flags, f"--train_dir={tempfile.gettempdir()}"], resume=False)
    env = RoundRobinEnvs([make_env(cfg, {"worker_index": index, "vector_index": e, "env_id": index * num_envs + e})
                          for e in range(num_envs)])
    try:
        env.reset(seed=index * num_envs)
        time_random_steps(env, 0.0, warmup_steps=50, presample_actions=1024)
        barrier.wait()  # every process steps at the same time, as the sampler's workers do
        timed = time_random_steps(env, seconds, presample_actions=1024)
    finally:
        env.close()
    results.put({"steps": timed["steps"], "episodes": timed["episodes"], "elapsed": timed["elapsed"],
                 "frames": timed["steps"] * cfg.env_frameskip})


def child_raw(args: argparse.Namespace, flags: list[str]) -> dict:
    """``--raw_envs_per_process`` envs (round-robin) in each of ``--raw_processes`` pinned processes."""
    import multiprocessing

    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [None] * (os.cpu_count() or 1)
    n = args.raw_processes or len(cores)
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_raw_process, args=(i, cores[i % len(cores)], flags, args.seconds,
                                                    args.raw_envs_per_process, barrier, results))
             for i in range(n)]
    for proc in procs:
        proc.start()
    outs = [results.get(timeout=args.seconds + 300) for _ in range(n)]
    for proc in procs:
        proc.join(timeout=30)
    fps = sum(o["frames"] / o["elapsed"] for o in outs)
    return {"status": "done", "fps": fps, "processes": n, "envs_per_process": args.raw_envs_per_process,
            "frames": sum(o["frames"] for o in outs), "agent_steps": sum(o["steps"] for o in outs),
            "episodes": sum(o["episodes"] for o in outs),
            "seconds": max(o["elapsed"] for o in outs)}


# --------------------------------------------------------------------------- 2. dummy sampler

def child_sampler(args: argparse.Namespace, flags: list[str]) -> dict:
    from sfx.dummy_sampler import parse_sampler_args, run_sampler

    with tempfile.TemporaryDirectory(prefix="sfx_bench_sampler_") as tmp:
        cfg = parse_sampler_args([*flags, f"--train_dir={tmp}", f"--timeout_seconds={args.seconds}"])
        return run_sampler(cfg)


def run_child(kind: str, args: argparse.Namespace, flags: list[str], workdir: Path, name: str,
              raw_envs_per_process: int = 1) -> dict:
    """One measurement in a fresh Python process (``--child``), its result read back as JSON."""
    forwarded = [f"--child={kind}", f"--seconds={args.seconds}", f"--raw_processes={args.raw_processes}",
                 f"--raw_envs_per_process={raw_envs_per_process}"]
    run = run_json_child("bench.throughput", forwarded, flags, name, workdir, cwd=workdir, env=child_env(),
                         timeout=args.seconds + STARTUP_LIMIT_SEC + 120)
    if run.result is None:
        return {"status": "failed", "fps": float("nan"), "reason": f"exit {run.returncode}",
                "log": tail(run.log_path, LOG_TAIL_LINES)}
    result = run.result
    # agent steps per finished episode over the whole run (the raw rows: the timed part)
    result["episode_len"] = ratio(float(result.get("agent_steps", "nan")), float(result.get("episodes", 0)))
    return result


def capped_flags(args: argparse.Namespace, flags: list[str]) -> list[str]:
    """``flags`` with the env's episodes cut after ``--episode_len`` agent steps (bench/episode_cap.py)."""
    return [f"--env={capped_name(f[len('--env='):])}" if f.startswith("--env=") else f for f in flags] + \
        [f"--bench_cap_steps={args.episode_len}"]


# --------------------------------------------------------------------------- 3.-7. trainings

@dataclass
class Training:
    """A training command and how to read its log."""

    name: str  # also its log file and run folder in the work folder
    cmd: list[str]
    counter: re.Pattern  # its cumulative count of consumed frames
    env: dict[str, str]
    stats: dict[str, re.Pattern] = field(default_factory=dict)  # more numbers its reports carry
    after: Callable[[Path], dict] | None = None  # reads more figures from its run folder when it is over


def run_training(training: Training, args: argparse.Namespace, workdir: Path) -> dict:
    """:func:`measure_training` of ``training``, the GPU sampled when the trainings run on one."""
    return measure_training(training.name, training.cmd, training.counter, args, workdir, training.env,
                            stats=training.stats, after=training.after, gpu=args.device == "gpu")


def measure_training(name: str, cmd: list[str], counter: re.Pattern, args: argparse.Namespace, workdir: Path,
                     env: dict[str, str], *, stats: dict[str, re.Pattern] | None = None,
                     after: Callable[[Path], dict] | None = None, gpu: bool = False) -> dict:
    """Run a training command, time-stamp its cumulative frame counter lines as they arrive and
    return the slope over the measured window; then interrupt it and kill its process group.
    ``args``: ``warmup`` and ``seconds``. ``stats``: more numbers its lines carry (the last value
    inside the window is kept); ``after``: reads more figures from its run folder once it is over;
    ``gpu``: sample the GPU's utilisation through the window."""
    log_path = workdir / f"{name}.log"
    lines: queue.Queue = queue.Queue()
    patterns, stats = stats or {}, {}
    run_dir = workdir / name
    run_dir.mkdir()  # VizDoom writes _vizdoom.ini and _vizdoom/ into the working directory
    monitor = GpuMonitor(gpu)
    proc = subprocess.Popen(cmd, cwd=run_dir, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True, text=True, errors="replace", bufsize=1)
    window_open = threading.Event()

    def read() -> None:
        with open(log_path, "w") as log:
            for line in proc.stdout:
                now = time.monotonic()
                log.write(line)
                clean = ANSI.sub("", line)
                if window_open.is_set():
                    for key, pattern in patterns.items():
                        m = pattern.search(clean)
                        if m:
                            stats[key] = float(m.group(1))
                m = counter.search(clean)
                if m:
                    lines.put((now, int(m.group(1).replace(",", ""))))
        lines.put(None)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    started = time.monotonic()
    first = start = end = None
    window: list[tuple[float, int]] = []
    reason = ""
    try:
        while True:
            try:
                item = lines.get(timeout=1.0)
            except queue.Empty:
                item = ()
            now = time.monotonic()
            if item is None:
                reason = f"exited early (exit {proc.wait()})"
                break
            if item:
                t, frames = item
                if first is None and frames > 0:
                    first = (t, frames)
                if first is not None and start is None and t >= first[0] + args.warmup:
                    start = (t, frames)
                    window_open.set()
                if start is not None:
                    window.append((t, frames))
                if start is not None and t >= start[0] + args.seconds:
                    end = (t, frames)
                    break
            if first is None and now - started > STARTUP_LIMIT_SEC:
                reason = f"no frame consumed within {STARTUP_LIMIT_SEC:.0f} s"
                break
            if now - started > STARTUP_LIMIT_SEC + args.warmup + args.seconds + 120:
                reason = "measured window never completed"
                break
    finally:
        stop_group(proc)
        reader.join(timeout=10)
        monitor.stop()
    if end is None:
        return {"status": "failed", "fps": float("nan"), "reason": reason, "log": tail(log_path, LOG_TAIL_LINES)}
    result = {"status": "done", "fps": slope(window), "fps_endpoints": (end[1] - start[1]) / (end[0] - start[0]),
              "frames": end[1] - start[1], "seconds": end[0] - start[0], "startup_sec": first[0] - started,
              "counter_lines": len(window), "command": cmd, **stats, **monitor.summary(start[0], end[0])}
    if after is not None:
        result.update(after(run_dir))
    return result


def keep_logs(workdir: Path, out_dir: Path) -> None:
    """Copy every run's log in ``workdir`` into ``out_dir``/logs (``--keep_logs``)."""
    logs = out_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    for f in workdir.glob("*.log"):
        (logs / f.name).write_text(f.read_text(errors="replace"))


def slope(points: list[tuple[float, int]]) -> float:
    """Least-squares frames/s through every counter line of the window. A learner's count grows by
    whole batches (2048 x 4 frames), so two end points alone can be off by a batch each; the fit
    through all lines of the window averages that step pattern out."""
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mf = sum(f for _, f in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    return sum((t - mt) * (f - mf) for t, f in points) / var if var > 0 else float("nan")


def run_flags(device: str) -> list[str]:
    """How long and where every training runs (the bench stops it; flag names shared by both frameworks)."""
    return [f"--device={device}", "--set_workers_cpu_affinity=True", "--train_for_seconds=100000",
            "--save_every_sec=100000"]


def training_flags(args: argparse.Namespace, device: str = "cpu") -> list[str]:
    """Settings both doom trainings share (flag names are the same in sfx and Sample Factory 2); ``args``:
    ``env``, ``num_workers``, ``num_envs_per_worker``, ``batch_size``."""
    return [f"--num_workers={args.num_workers}", f"--num_envs_per_worker={args.num_envs_per_worker}",
            "--worker_num_splits=2", "--rollout=32", "--recurrence=32", f"--batch_size={args.batch_size}",
            "--use_rnn=True", "--rnn_type=lstm", "--res_w=128", "--res_h=72",
            "--env_frameskip=4", "--wide_aspect_ratio=False", *run_flags(device), f"--env={args.env}"]


def overhead_flags(args: argparse.Namespace) -> list[str]:
    """Settings both pipeline-overhead trainings share: the doom scenario's, no RNN, GAE, no input normalization,
    the bench's workers/envs/batch (the negligible-compute encoder is each framework's own spelling of one network)."""
    # no input normalization either: per-pixel running statistics over every frame of a batch (57M values at
    # batch 2048) are model compute, and would cost the learner more than the negligible encoder itself
    return [*env_flags(args), *ipc_flags(args), "--normalize_input=False"]


def ipc_flags(args: argparse.Namespace) -> list[str]:
    """Settings both message-passing-floor trainings share (without the env): no RNN, GAE, workers/envs/batch."""
    return [f"--num_workers={args.num_workers}", f"--num_envs_per_worker={args.num_envs_per_worker}",
            "--worker_num_splits=2", "--rollout=32", "--recurrence=1", f"--batch_size={args.batch_size}",
            "--use_rnn=False", "--with_vtrace=False", *run_flags(args.device)]


def sfx_training(args: argparse.Namespace, workdir: Path, name: str, row_flags: list[str]) -> Training:
    """The sfx doom training: the shared settings, conv + LSTM 512, then ``--`` / ``--train_flags``, then the row's."""
    cmd = [sys.executable, "-m", "sfx.train", *training_flags(args, args.device), "--hidden_size=512",
           f"--train_dir={workdir / 'train_dir'}", f"--experiment=bench_{name}", "--report_every_sec=5",
           *args.extra, *row_flags]
    return Training(name, cmd, SFX_COUNTER, child_env(), SFX_STATS)


def sf_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHONUNBUFFERED"] = "1"
    env["WANDB_MODE"] = "disabled"
    return env


def sf_episode_len(experiment: Path, frameskip: int) -> Callable[[Path], dict]:
    """Reads Sample Factory's mean episode length from its TensorBoard ``len/len`` (frames: its
    ``--summaries_use_frameskip`` default) as agent steps, once the run is over."""

    def read(_: Path) -> dict:
        from bench.learning import read_events

        points = read_events(experiment / ".summary" / "0").get("len/len", [])
        return {"episode_len": points[-1][2] / frameskip} if points else {}

    return read


def sf_training(args: argparse.Namespace, workdir: Path) -> Training:
    # Sample Factory 2's defaults for the rest: conv encoder (convnet_simple) + 512-wide core, as sfx's
    train_dir = workdir / "sf_train_dir"
    cmd = [args.sf_python, "-m", "sf_examples.vizdoom.train_vizdoom", *training_flags(args, args.device),
           f"--train_dir={train_dir}", "--experiment=bench_sf", "--with_wandb=False"]
    return Training("sf_train", cmd, SF_COUNTER, sf_env(), SF_STATS, sf_episode_len(train_dir / "bench_sf", 4))


def overhead_sfx_training(args: argparse.Namespace, workdir: Path) -> Training:
    # run as the main module: sfx's worker processes import it again and register its encoder
    cmd = [sys.executable, "-m", OVERHEAD_SFX_MODULE, *overhead_flags(args), *args.sfx_env,
           f"--encoder_type={OVERHEAD_ENCODER}",
           f"--hidden_size={OVERHEAD_WIDTH}", f"--train_dir={workdir / 'train_dir'}", "--experiment=bench_overhead",
           "--report_every_sec=5"]
    return Training("overhead_sfx", cmd, SFX_COUNTER, child_env(), SFX_STATS)


def overhead_sf_training(args: argparse.Namespace, workdir: Path) -> Training:
    train_dir = workdir / "sf_train_dir"
    cmd = [args.sf_python, "-m", OVERHEAD_SF_MODULE, *overhead_flags(args), f"--train_dir={train_dir}",
           "--experiment=bench_overhead", "--with_wandb=False"]
    env = {**sf_env(), "PYTHONPATH": str(REPO_ROOT)}  # bench/ only: nothing of sfx is importable there
    return Training("overhead_sf", cmd, SF_COUNTER, env, SF_STATS, sf_episode_len(train_dir / "bench_overhead", 4))


def overhead_sampler_flags(args: argparse.Namespace) -> list[str]:
    """The dummy sampler on the overhead trainings' env and settings (its slots sized like theirs)."""
    return [*sfx_env(args), f"--num_workers={args.num_workers}",
            f"--num_envs_per_worker={args.num_envs_per_worker}", "--worker_num_splits=2", "--rollout=32",
            f"--batch_size={args.batch_size}", "--use_rnn=False", f"--hidden_size={OVERHEAD_WIDTH}",
            "--set_workers_cpu_affinity=True"]


def ipc_sfx_training(args: argparse.Namespace, workdir: Path) -> Training:
    cmd = [sys.executable, "-m", "sfx.train", f"--env={IPC_SFX_ENV}", *ipc_flags(args),
           f"--hidden_size={IPC_WIDTH}", f"--train_dir={workdir / 'train_dir'}", "--experiment=bench_ipc",
           "--report_every_sec=5"]
    return Training("ipc_sfx", cmd, SFX_COUNTER, child_env(), SFX_STATS)


def ipc_sf_training(args: argparse.Namespace, workdir: Path) -> Training:
    train_dir = workdir / "sf_train_dir"
    cmd = [args.sf_python, "-m", "sf_examples.train_gym_env", f"--env={IPC_SF_ENV}", *ipc_flags(args),
           "--encoder_mlp_layers", str(IPC_WIDTH), str(IPC_WIDTH), f"--train_dir={train_dir}",
           "--experiment=bench_ipc", "--with_wandb=False"]
    return Training("ipc_sf", cmd, SF_COUNTER, sf_env(), SF_STATS, sf_episode_len(train_dir / "bench_ipc", 1))


def ipc_sampler_flags(args: argparse.Namespace) -> list[str]:
    """The dummy sampler on CartPole with the ipc trainings' settings."""
    return [f"--env={IPC_SFX_ENV}", f"--num_workers={args.num_workers}",
            f"--num_envs_per_worker={args.num_envs_per_worker}", "--worker_num_splits=2", "--rollout=32",
            f"--batch_size={args.batch_size}", "--use_rnn=False", f"--hidden_size={IPC_WIDTH}",
            "--set_workers_cpu_affinity=True"]


def sf_missing(args: argparse.Namespace) -> dict | None:
    """The skipped result of a Sample Factory row when its venv is missing, else None."""
    if Path(args.sf_python).exists():
        return None
    return {"status": "skipped", "fps": float("nan"),
            "reason": f"no Sample Factory venv at {Path(args.sf_python).parent.parent} "
                      f"(bash bench/setup_sample_factory.sh makes it)"}


def measure_sfx_training(args: argparse.Namespace, workdir: Path, name: str = "sfx",
                         row_flags: list[str] | None = None) -> dict:
    return run_training(sfx_training(args, workdir, name, row_flags or []), args, workdir)


def measure_sf_training(args: argparse.Namespace, workdir: Path) -> dict:
    return sf_missing(args) or run_training(sf_training(args, workdir), args, workdir)


# --------------------------------------------------------------------------- report

def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "-"


def _fmt(x: object, spec: str) -> str:
    return format(x, spec) if isinstance(x, (int, float)) and x == x else "-"


def format_table(rows: list[tuple[str, dict]]) -> str:
    """One line per measurement: FPS, mean episode length (agent steps), policy lag, (on a GPU) its mean
    utilisation over the window, and the status."""
    with_gpu = any("gpu_util_mean" in r for _, r in rows)
    lines = [("measurement", "FPS", "ep len", "lag", *(["GPU %"] if with_gpu else []), "status")]
    for label, r in rows:
        status = r["status"] if r["status"] == "done" else f"{r['status']}: {r.get('reason', '')}"
        gpu = [_fmt(r.get("gpu_util_mean"), ".0f")] if with_gpu else []
        lines.append((label, fmt_fps(r["fps"]), _fmt(r.get("episode_len"), ".1f"), _fmt(r.get("policy_lag"), ".1f"),
                      *gpu, status))
    return format_columns(lines, "lrrr" + ("r" if with_gpu else "") + "l")


def format_scaling(points: dict, workers: list[int], envs: list[int]) -> str:
    header = ["workers \\ envs/worker", *[str(e) for e in envs]]
    lines = [header] + [[str(w), *[fmt_fps(points.get(f"{w}x{e}", float("nan"))) for e in envs]] for w in workers]
    return format_columns(lines, "r" * len(header), rule=False)


def _bar_color(key: str) -> str:
    if key.startswith("raw"):
        return "#888888"
    if "sampler" in key:
        return "#bbbbbb"
    if key in ("sf", "overhead_sf", "ipc_sf"):
        return "#55a868"
    return "#4c72b0"  # sfx trainings, the named rows included


def plot(rows: list[tuple[str, dict]], title: str, path: Path) -> None:
    """A bar per row, labelled by its key (``raw``, ``sampler``, ``sfx``, a --sfx_row name ...)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    values = [r["fps"] if r["fps"] == r["fps"] else 0.0 for _, r in rows]
    fig, ax = plt.subplots(figsize=(max(9.0, 1.1 * len(rows)), 4.8))
    bars = ax.bar(range(len(rows)), values, color=[_bar_color(key) for key, _ in rows])
    for bar, (_, r) in zip(bars, rows):
        text = fmt_fps(r["fps"]) if r["status"] == "done" else r["status"]
        ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom",
                    xytext=(0, 3), textcoords="offset points", fontsize=8)
    ax.set_xticks(range(len(rows)), [key.replace("_", "\n", 1) for key, _ in rows], fontsize=8)
    ax.set_ylabel("env frames per second")
    ax.set_title(title, fontsize=10)
    ax.margins(y=0.15)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_scaling(points: dict, workers: list[int], envs: list[int], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for w in workers:
        ax.plot(envs, [points.get(f"{w}x{e}", float("nan")) for e in envs], marker="o", label=f"{w} workers")
    ax.set_xscale("log", base=2)
    ax.set_xticks(envs, [str(e) for e in envs])
    ax.set_xlabel("envs per worker")
    ax.set_ylabel("env frames per second")
    ax.set_title(title, fontsize=10)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def compute_ratios(results: dict[str, dict], row_names: list[str]) -> dict[str, float]:
    """Every ratio the summary reports (NaN where a figure is missing)."""
    fps = {k: float(v["fps"]) for k, v in results.items()}
    nan = float("nan")
    out = {"sampler_over_raw": ratio(fps["sampler"], fps["raw"]),
           "sfx_over_sample_factory": ratio(fps["sfx"], fps["sf"]),
           "sampler_over_raw_many_envs": ratio(fps["sampler"], fps["raw_many"]),
           "sampler_len_over_raw_len": ratio(fps["sampler_len"], fps["raw_len"]),
           "overhead_sfx": ratio(fps["overhead_sfx"], fps["overhead_sampler"]),
           "overhead_sf": ratio(fps["overhead_sf"], fps["overhead_sampler"]),
           "ipc_sfx": ratio(fps.get("ipc_sfx", nan), fps.get("ipc_sampler", nan)),
           "ipc_sf": ratio(fps.get("ipc_sf", nan), fps.get("ipc_sampler", nan))}
    for key in ["sfx", *row_names, "sf"]:
        out[f"{key}_over_sampler_len"] = ratio(fps.get(key, nan), fps["sampler_len"])
    for name in row_names:
        out[f"{name}_over_sample_factory"] = ratio(fps[name], fps["sf"])
        out[f"{name}_over_sfx"] = ratio(fps[name], fps["sfx"])
    return out


def format_ratios(r: dict[str, float], args: argparse.Namespace) -> str:
    def f(x: float) -> str:
        return f"{x:.2f}" if x == x else "-"

    lines = [f"ratios: sfx dummy sampler / raw limit = {f(r['sampler_over_raw'])} (target >= 0.9); "
             f"sfx training / Sample Factory 2.1.1 = {f(r['sfx_over_sample_factory'])} (target >= 1.5); "
             f"sfx dummy sampler / raw with as many envs per process = {f(r['sampler_over_raw_many_envs'])}"]
    if args.episode_len:
        trainings = ", ".join(f"{key} {f(r[f'{key}_over_sampler_len'])}" for key in ["sfx", *args.rows, "sf"])
        lines.append(f"at {args.episode_len}-step episodes: sampler / raw = {f(r['sampler_len_over_raw_len'])}; "
                     f"training / sampler: {trainings} (target >= 0.8 for sfx on a GPU machine; compare at the "
                     f"training's own ep len)")
    if args.rows:
        lines.append("named rows: " + "; ".join(f"{n} / sfx = {f(r[f'{n}_over_sfx'])}, / Sample Factory = "
                                                f"{f(r[f'{n}_over_sample_factory'])}" for n in args.rows))
    lines.append(f"pipeline overhead (training / sampler, {args.env}, negligible-compute model): "
                 f"sfx {f(r['overhead_sfx'])} (target >= 0.85), Sample Factory 2.1.1 {f(r['overhead_sf'])}")
    if r["ipc_sfx"] == r["ipc_sfx"] or r["ipc_sf"] == r["ipc_sf"]:
        lines.append(f"message-passing floor (training / sampler, CartPole, {IPC_WIDTH}-unit MLP): "
                     f"sfx {f(r['ipc_sfx'])}, Sample Factory 2.1.1 {f(r['ipc_sf'])}")
    return "\n".join(lines)


def sampling_flags(args: argparse.Namespace) -> list[str]:
    """The sfx flags of the raw and sampler rows (their children parse them as sfx's configuration)."""
    return [*sfx_env(args), f"--num_workers={args.num_workers}",
            f"--num_envs_per_worker={args.num_envs_per_worker}", "--worker_num_splits=2",
            f"--batch_size={args.batch_size}", "--set_workers_cpu_affinity=True"]


def measurements(args: argparse.Namespace, workdir: Path, raw_n: int) -> list[tuple[str, str, Callable[[], dict]]]:
    """(key, label, measure) of every row, in measuring order."""
    setting = f"{args.num_workers} workers x {args.num_envs_per_worker} envs"
    flags = sampling_flags(args)
    n = args.episode_len
    on = "" if args.device == "cpu" else f" on {args.device}"
    steps = [
        ("raw", f"raw limit: {raw_n} processes x 1 env, pinned", lambda: run_child("raw", args, flags, workdir, "raw")),
        ("raw_many", f"raw, {raw_n} processes x {args.num_envs_per_worker} envs round-robin, pinned",
         lambda: run_child("raw", args, flags, workdir, "raw_many", args.num_envs_per_worker)),
        ("sampler", f"sfx dummy sampler: {setting}", lambda: run_child("sampler", args, flags, workdir, "sampler")),
        ("raw_len", f"raw limit, episodes cut at {n} steps",
         lambda: run_child("raw", args, capped_flags(args, flags), workdir, "raw_len")),
        ("sampler_len", f"sfx dummy sampler, episodes cut at {n} steps",
         lambda: run_child("sampler", args, capped_flags(args, flags), workdir, "sampler_len")),
        ("sfx", f"sfx training{on}: APPO conv+LSTM, {setting}, batch {args.batch_size}"
                + (f", {' '.join(args.extra)}" if args.extra else ""),
         lambda: measure_sfx_training(args, workdir)),
    ]
    for name, row_flags in args.rows.items():
        steps.append((name, f"sfx training{on}, {name}: {' '.join(row_flags)}",
                      lambda name=name, row_flags=row_flags: measure_sfx_training(args, workdir, name, row_flags)))
    steps += [
        ("sf", f"Sample Factory 2.1.1 training{on}: same settings", lambda: measure_sf_training(args, workdir)),
        ("overhead_sampler", f"overhead: sfx dummy sampler, no RNN, {setting}",
         lambda: run_child("sampler", args, overhead_sampler_flags(args), workdir, "overhead_sampler")),
        ("overhead_sfx", f"overhead: sfx training{on}, negligible model (pooled {OVERHEAD_WIDTH}), no RNN",
         lambda: run_training(overhead_sfx_training(args, workdir), args, workdir)),
        ("overhead_sf", f"overhead: Sample Factory 2.1.1{on}, same",
         lambda: sf_missing(args) or run_training(overhead_sf_training(args, workdir), args, workdir)),
        ("ipc_sampler", f"ipc floor: sfx dummy sampler, CartPole, {setting}",
         lambda: run_child("sampler", args, ipc_sampler_flags(args), workdir, "ipc_sampler")),
        ("ipc_sfx", f"ipc floor: sfx training{on}, CartPole, MLP {IPC_WIDTH}x2, no RNN",
         lambda: run_training(ipc_sfx_training(args, workdir), args, workdir)),
        ("ipc_sf", f"ipc floor: Sample Factory 2.1.1{on}, same",
         lambda: sf_missing(args) or run_training(ipc_sf_training(args, workdir), args, workdir)),
    ]
    return steps


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_bench_args(argv)
    except BenchArgError as e:
        print(f"bench.throughput: error: {e}", file=sys.stderr)
        return 2
    if args.child:
        fn = child_raw if args.child == "raw" else child_sampler
        result = fn(args, args.extra)
        write_result(args.child_result, result)
        return 0

    gpu = gpu_info() if args.device == "gpu" else {}
    if args.device == "gpu" and not gpu:
        print("bench.throughput: error: --device=gpu, but no CUDA GPU is visible (nvidia-smi and torch find none)",
              file=sys.stderr)
        return 2
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    raw_n = args.raw_processes or cores
    rows: list[tuple[str, str, dict]] = []
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    today = datetime.date.today().isoformat()
    device = f"GPU {gpu['name']}" if gpu else "CPU"
    print(f"bench.throughput {today}: {args.env} 128x72 frameskip 4, {cores} CPU cores ({platform.processor() or platform.machine()}), "
          f"trainings on the {device}, {args.seconds:g} s measured per figure{' (tiny)' if args.tiny else ''}; "
          f"load average {_load()}", flush=True)

    with tempfile.TemporaryDirectory(prefix="sfx_bench_throughput_") as tmp:
        workdir = Path(tmp)
        results = {}
        for key, label, run in measurements(args, workdir, raw_n):
            if key not in args.wanted:
                results[key] = {"status": "skipped", "fps": float("nan"), "reason": "not selected"}
                if key in ("sf", "overhead_sf", "ipc_sf") and args.skip_sf:
                    results[key]["reason"] = "--skip_sf"
                if key not in OPT_IN_KEYS or (args.episode_len and key in ("raw_len", "sampler_len")):
                    rows.append((key, label, results[key]))
                continue
            print(f"measuring {label} ...", flush=True)
            results[key] = run()
            r = results[key]
            print(f"  {fmt_fps(r['fps'])} FPS ({r['status']}{': ' + r.get('reason', '') if r['status'] != 'done' else ''})",
                  flush=True)
            if r["status"] == "failed" and r.get("log"):
                print("  last lines of its output:\n    " + r["log"].replace("\n", "\n    "), flush=True)
            rows.append((key, label, r))
            if args.keep_logs:  # each row's log as soon as it is over: a bench cut short keeps what it measured
                keep_logs(workdir, out_dir)

        scaling: dict[str, float] = {}
        workers = [int(x) for x in args.scaling_workers.split(",") if x]
        envs = [int(x) for x in args.scaling_envs.split(",") if x]
        if args.scaling:
            scale_args = argparse.Namespace(**{**vars(args), "seconds": args.scaling_seconds})
            for w in workers:
                for e in envs:
                    point_flags = [*sfx_env(args), f"--num_workers={w}", f"--num_envs_per_worker={e}",
                                   "--worker_num_splits=2" if e % 2 == 0 else "--worker_num_splits=1",
                                   "--set_workers_cpu_affinity=True"]
                    print(f"scaling: dummy sampler {w} workers x {e} envs ...", flush=True)
                    r = run_child("sampler", scale_args, point_flags, workdir, f"scaling_{w}x{e}")
                    scaling[f"{w}x{e}"] = float(r["fps"])
        if args.keep_logs:
            keep_logs(workdir, out_dir)

    print(f"load average at the end {_load()} (other processes on the machine slow every figure)")
    ratios = compute_ratios(results, list(args.rows))
    print()
    print(format_table([(label, r) for _, label, r in rows]))
    print(format_ratios(ratios, args))
    f2 = lambda x: f"{x:.2f}" if x == x else "-"  # noqa: E731
    title = (f"{args.env} 128x72 frameskip 4, {cores} cores, {device}, {today}: sampler/raw "
             f"{f2(ratios['sampler_over_raw'])}, sfx/SF {f2(ratios['sfx_over_sample_factory'])}")
    plot([(key, r) for key, _, r in rows], title, out_dir / "throughput.png")
    files = [out_dir / "throughput.png"]
    if args.scaling:
        print(f"\ndummy sampler FPS by workers and envs per worker ({args.scaling_seconds:g} s each):")
        print(format_scaling(scaling, workers, envs))
        plot_scaling(scaling, workers, envs, f"sfx dummy sampler, {args.env}, {cores} cores, {today}",
                     out_dir / "throughput_scaling.png")
        files.append(out_dir / "throughput_scaling.png")
    summary = {"date": today, "env": args.env, "cores": cores, "seconds": args.seconds, "tiny": args.tiny,
               "device": args.device, "gpu": gpu, "episode_len": args.episode_len,
               "sfx_extra_flags": args.extra, "sfx_env_flags": args.sfx_env, "sfx_rows": args.rows,
               "settings": {"num_workers": args.num_workers, "num_envs_per_worker": args.num_envs_per_worker,
                            "batch_size": args.batch_size},
               "load_average_at_end": _load(),
               "labels": {key: label for key, label, _ in rows},
               "results": {k: {kk: vv for kk, vv in v.items() if kk != "log"} for k, v in results.items()},
               "ratios": ratios, "scaling": scaling}
    (out_dir / "throughput.json").write_text(json.dumps(summary, indent=1, default=float))
    files.append(out_dir / "throughput.json")
    print("wrote " + ", ".join(str(f) for f in files))
    return 1 if any(r["status"] == "failed" for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
