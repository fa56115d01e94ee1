"""Throughput side by side, in one run on one doom scenario: the raw env limit, sfx's dummy sampler,
sfx training and Sample Factory 2.1.1 training.

    python -m bench.throughput [--seconds=60] [--env=doom_basic] [--scaling] [--tiny] [--skip_sf]

Measured one after the other, each in fresh processes, on the same scenario and settings
(``--env``, 128x72 observations, frameskip 4, ``--num_workers`` x ``--num_envs_per_worker``):

1. raw limit: one env per process in as many processes as CPU cores, each pinned to its own core,
   stepping with random actions (no queues, no shared memory, nothing else running); and, as a
   diagnostic, the same with ``--num_envs_per_worker`` envs per process stepped round-robin (what a
   rollout worker's envs cost without the worker: many game engines share one core's caches);
2. sfx dummy sampler (``python -m sfx.dummy_sampler``): training's sampling path, random actions;
3. sfx training: APPO, conv encoder + LSTM, rollout 32, batch 2048, on the CPU (``sfx.train``);
4. Sample Factory 2.1.1 training with the same settings (``sf_examples.vizdoom.train_vizdoom``),
   from its own venv ``bench/sf_venv`` (``bash bench/setup_sample_factory.sh`` makes it; without
   it this row is reported as skipped);
5. ratios: sampler / raw and sfx / Sample Factory (and sampler / raw with as many envs per process).

FPS is env frames per second (agent steps x frameskip). The trainings are timed the same way for
both frameworks: each prints its own cumulative count of frames the learner has consumed
(sfx: ``env steps``, Sample Factory: ``Total num frames``) every 5 s; a line is time-stamped when it
arrives here, and the figure is the least-squares slope through the lines from the first one
``--warmup`` seconds after frames first appear to the first one ``--seconds`` later. Then the run is interrupted and its process
group killed (VizDoom engines included). ``doom_basic`` is the default because both frameworks
ship it (the same basic.cfg scenario); their ``doom_benchmark`` are different maps.

``--scaling`` adds a table of the dummy sampler's FPS against ``--scaling_workers`` and
``--scaling_envs``. ``--tiny`` runs everything for a few seconds with small settings (to keep the
script working; its figures mean little). Results: a table on stdout, ``throughput.json`` and
``throughput.png`` (a bar chart; ``throughput_scaling.png`` with ``--scaling``) in ``--out_dir``.

Figures, never pass/fail: the exit code is 0 unless a measurement could not run at all.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import queue
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.procs import split_extra, stop_group
from bench.throughput_common import REPO_ROOT, format_columns, ratio, run_json_child, tail, write_result
from bench.throughput_common import child_env as common_child_env
from bench.throughput_common import fmt_count as fmt_fps

LOG_TAIL_LINES = 25  # of a failed measurement's output: in its result and on the terminal

SF_VENV = REPO_ROOT / "bench" / "sf_venv"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
SFX_COUNTER = re.compile(r"\| env steps ([\d,]+) ")
SF_COUNTER = re.compile(r"Total num frames: (\d+)")
# a training that shows no consumed frame by then is reported as failed
STARTUP_LIMIT_SEC = 420.0


def parse_bench_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--seconds", type=float, default=60.0, help="measured time of each figure")
    p.add_argument("--warmup", type=float, default=15.0,
                   help="trainings: seconds skipped after the first consumed frames before the measured window")
    p.add_argument("--env", default="doom_basic", help="doom scenario both frameworks know")
    p.add_argument("--num_workers", type=int, default=2, help="rollout workers (sampler and trainings)")
    p.add_argument("--num_envs_per_worker", type=int, default=16)
    p.add_argument("--batch_size", type=int, default=2048)
    p.add_argument("--raw_processes", type=int, default=0, help="raw limit's processes; 0 = one per CPU core")
    p.add_argument("--raw_envs_per_process", type=int, default=1, help=argparse.SUPPRESS)  # set per row
    p.add_argument("--only", action="append", choices=["raw", "raw_many", "sampler", "sfx", "sf"],
                   help="measure only this (repeatable)")
    p.add_argument("--skip_sf", action="store_true", help="leave Sample Factory out")
    p.add_argument("--sf_python", default=str(SF_VENV / "bin" / "python"),
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
    args.extra = extra
    if args.tiny:
        args.seconds = min(args.seconds, 4.0)
        args.warmup = min(args.warmup, 1.0)
        args.num_workers, args.num_envs_per_worker, args.batch_size = 1, 4, 256
        args.scaling_workers, args.scaling_envs, args.scaling_seconds = "1", "2,4", min(args.scaling_seconds, 2.0)
    return args


def env_flags(args: argparse.Namespace) -> list[str]:
    """The scenario and observation settings every sfx measurement uses."""
    return [f"--env={args.env}", "--res_w=128", "--res_h=72", "--env_frameskip=4", "--wide_aspect_ratio=False"]


def child_env() -> dict[str, str]:
    return common_child_env(unbuffered=True)


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
    from sfx.cfg import parse_args
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
    results.put({"steps": timed["steps"], "elapsed": timed["elapsed"], "frames": timed["steps"] * cfg.env_frameskip})


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
            "frames": sum(o["frames"] for o in outs),
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
    return run.result


# --------------------------------------------------------------------------- 3./4. trainings

def measure_training(name: str, cmd: list[str], counter: re.Pattern, args: argparse.Namespace, workdir: Path,
                     env: dict[str, str]) -> dict:
    """Run a training command, time-stamp its cumulative frame counter lines as they arrive and
    return the slope over the measured window; then interrupt it and kill its process group."""
    log_path = workdir / f"{name}.log"
    lines: queue.Queue = queue.Queue()
    run_dir = workdir / name
    run_dir.mkdir()  # VizDoom writes _vizdoom.ini and _vizdoom/ into the working directory
    proc = subprocess.Popen(cmd, cwd=run_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, text=True, errors="replace", bufsize=1)

    def read() -> None:
        with open(log_path, "w") as log:
            for line in proc.stdout:
                now = time.monotonic()
                log.write(line)
                m = counter.search(ANSI.sub("", line))
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
    if end is None:
        return {"status": "failed", "fps": float("nan"), "reason": reason, "log": tail(log_path, LOG_TAIL_LINES)}
    return {"status": "done", "fps": slope(window), "fps_endpoints": (end[1] - start[1]) / (end[0] - start[0]),
            "frames": end[1] - start[1], "seconds": end[0] - start[0], "startup_sec": first[0] - started,
            "counter_lines": len(window)}


def slope(points: list[tuple[float, int]]) -> float:
    """Least-squares frames/s through every counter line of the window. A learner's count grows by
    whole batches (2048 x 4 frames), so two end points alone can be off by a batch each; the fit
    through all lines of the window averages that step pattern out."""
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mf = sum(f for _, f in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    return sum((t - mt) * (f - mf) for t, f in points) / var if var > 0 else float("nan")


def training_flags(args: argparse.Namespace) -> list[str]:
    """Settings both trainings share (flag names are the same in sfx and Sample Factory 2)."""
    return [f"--num_workers={args.num_workers}", f"--num_envs_per_worker={args.num_envs_per_worker}",
            "--worker_num_splits=2", "--rollout=32", "--recurrence=32", f"--batch_size={args.batch_size}",
            "--use_rnn=True", "--rnn_type=lstm", "--device=cpu", "--res_w=128", "--res_h=72",
            "--env_frameskip=4", "--wide_aspect_ratio=False", "--set_workers_cpu_affinity=True",
            "--train_for_seconds=100000", "--save_every_sec=100000", f"--env={args.env}"]


def measure_sfx_training(args: argparse.Namespace, workdir: Path) -> dict:
    cmd = [sys.executable, "-m", "sfx.train", *training_flags(args), "--hidden_size=512",
           f"--train_dir={workdir / 'train_dir'}", "--experiment=bench_sfx", "--report_every_sec=5", *args.extra]
    return measure_training("sfx_train", cmd, SFX_COUNTER, args, workdir, child_env())


def measure_sf_training(args: argparse.Namespace, workdir: Path) -> dict:
    if not Path(args.sf_python).exists():
        return {"status": "skipped", "fps": float("nan"),
                "reason": f"no Sample Factory venv at {Path(args.sf_python).parent.parent} "
                          f"(bash bench/setup_sample_factory.sh makes it)"}
    # Sample Factory 2's defaults for the rest: conv encoder (convnet_simple) + 512-wide core, as sfx's
    cmd = [args.sf_python, "-m", "sf_examples.vizdoom.train_vizdoom", *training_flags(args),
           f"--train_dir={workdir / 'sf_train_dir'}", "--experiment=bench_sf", "--with_wandb=False"]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHONUNBUFFERED"] = "1"
    env["WANDB_MODE"] = "disabled"
    return measure_training("sf_train", cmd, SF_COUNTER, args, workdir, env)


# --------------------------------------------------------------------------- report

def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "-"


def format_table(rows: list[tuple[str, dict]]) -> str:
    lines = [("measurement", "FPS", "status")]
    for label, r in rows:
        status = r["status"] if r["status"] == "done" else f"{r['status']}: {r.get('reason', '')}"
        lines.append((label, fmt_fps(r["fps"]), status))
    return format_columns(lines, "lrl")


def format_scaling(points: dict, workers: list[int], envs: list[int]) -> str:
    header = ["workers \\ envs/worker", *[str(e) for e in envs]]
    lines = [header] + [[str(w), *[fmt_fps(points.get(f"{w}x{e}", float("nan"))) for e in envs]] for w in workers]
    return format_columns(lines, "r" * len(header), rule=False)


def plot(rows: list[tuple[str, dict]], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [label.split(":")[0].split(",")[0].replace("raw", "raw, many envs") if "round-robin" in label
              else label.split(":")[0] for label, _ in rows]
    values = [r["fps"] if r["fps"] == r["fps"] else 0.0 for _, r in rows]
    fig, ax = plt.subplots(figsize=(9, 4.8))
    bars = ax.bar(range(len(rows)), values, color=["#888888", "#bbbbbb", "#4c72b0", "#55a868", "#c44e52"][:len(rows)])
    for bar, (_, r) in zip(bars, rows):
        text = fmt_fps(r["fps"]) if r["status"] == "done" else r["status"]
        ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom",
                    xytext=(0, 3), textcoords="offset points")
    ax.set_xticks(range(len(rows)), labels, fontsize=9)
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


def main(argv: list[str] | None = None) -> int:
    args = parse_bench_args(argv)
    if args.child:
        fn = child_raw if args.child == "raw" else child_sampler
        result = fn(args, args.extra)
        write_result(args.child_result, result)
        return 0

    wanted = set(args.only or ["raw", "raw_many", "sampler", "sfx", "sf"]) - ({"sf"} if args.skip_sf else set())
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    raw_n = args.raw_processes or cores
    setting = f"{args.num_workers} workers x {args.num_envs_per_worker} envs"
    rows: list[tuple[str, dict]] = []
    skipped = {"status": "skipped", "fps": float("nan"), "reason": "not selected"}
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    today = datetime.date.today().isoformat()
    print(f"bench.throughput {today}: {args.env} 128x72 frameskip 4, {cores} CPU cores ({platform.processor() or platform.machine()}), "
          f"{args.seconds:g} s measured per figure{' (tiny)' if args.tiny else ''}; load average {_load()}", flush=True)

    with tempfile.TemporaryDirectory(prefix="sfx_bench_throughput_") as tmp:
        workdir = Path(tmp)
        flags = [*env_flags(args), f"--num_workers={args.num_workers}",
                 f"--num_envs_per_worker={args.num_envs_per_worker}", "--worker_num_splits=2",
                 f"--batch_size={args.batch_size}", "--set_workers_cpu_affinity=True"]
        steps = [
            ("raw", f"raw limit: {raw_n} processes x 1 env, pinned", lambda: run_child("raw", args, flags, workdir, "raw")),
            ("raw_many", f"raw, {raw_n} processes x {args.num_envs_per_worker} envs round-robin, pinned",
             lambda: run_child("raw", args, flags, workdir, "raw_many", args.num_envs_per_worker)),
            ("sampler", f"sfx dummy sampler: {setting}",
             lambda: run_child("sampler", args, flags, workdir, "sampler")),
            ("sfx", f"sfx training: APPO conv+LSTM, {setting}, batch {args.batch_size}",
             lambda: measure_sfx_training(args, workdir)),
            ("sf", f"Sample Factory 2.1.1 training: same settings", lambda: measure_sf_training(args, workdir)),
        ]
        results = {}
        for key, label, run in steps:
            if key not in wanted:
                results[key] = dict(skipped)
                if key == "sf" and args.skip_sf:
                    results[key]["reason"] = "--skip_sf"
                rows.append((label, results[key]))
                continue
            print(f"measuring {label} ...", flush=True)
            results[key] = run()
            r = results[key]
            print(f"  {fmt_fps(r['fps'])} FPS ({r['status']}{': ' + r.get('reason', '') if r['status'] != 'done' else ''})",
                  flush=True)
            if r["status"] == "failed" and r.get("log"):
                print("  last lines of its output:\n    " + r["log"].replace("\n", "\n    "), flush=True)
            rows.append((label, r))

        scaling: dict[str, float] = {}
        workers = [int(x) for x in args.scaling_workers.split(",") if x]
        envs = [int(x) for x in args.scaling_envs.split(",") if x]
        if args.scaling:
            scale_args = argparse.Namespace(**{**vars(args), "seconds": args.scaling_seconds})
            for w in workers:
                for e in envs:
                    point_flags = [*env_flags(args), f"--num_workers={w}", f"--num_envs_per_worker={e}",
                                   "--worker_num_splits=2" if e % 2 == 0 else "--worker_num_splits=1",
                                   "--set_workers_cpu_affinity=True"]
                    print(f"scaling: dummy sampler {w} workers x {e} envs ...", flush=True)
                    r = run_child("sampler", scale_args, point_flags, workdir, f"scaling_{w}x{e}")
                    scaling[f"{w}x{e}"] = float(r["fps"])
        if args.keep_logs:
            logs = out_dir / "logs"
            logs.mkdir(exist_ok=True)
            for f in workdir.glob("*.log"):
                (logs / f.name).write_text(f.read_text(errors="replace"))

    print(f"load average at the end {_load()} (other processes on the machine slow every figure)")
    r_sampler_raw = ratio(results["sampler"]["fps"], results["raw"]["fps"])
    r_sampler_raw_many = ratio(results["sampler"]["fps"], results["raw_many"]["fps"])
    r_sfx_sf = ratio(results["sfx"]["fps"], results["sf"]["fps"])
    print()
    print(format_table(rows))
    print(f"ratios: sfx dummy sampler / raw limit = {r_sampler_raw:.2f} (target >= 0.9); "
          f"sfx training / Sample Factory 2.1.1 = {r_sfx_sf:.2f} (target >= 1.5 on a 2-core CPU machine); "
          f"sfx dummy sampler / raw with as many envs per process = {r_sampler_raw_many:.2f}".replace("nan", "-"))
    title = (f"{args.env} 128x72 frameskip 4, {cores} cores, {today}: sampler/raw {r_sampler_raw:.2f}, "
             f"sfx/SF {r_sfx_sf:.2f}").replace("nan", "-")
    plot(rows, title, out_dir / "throughput.png")
    files = [out_dir / "throughput.png"]
    if args.scaling:
        print(f"\ndummy sampler FPS by workers and envs per worker ({args.scaling_seconds:g} s each):")
        print(format_scaling(scaling, workers, envs))
        plot_scaling(scaling, workers, envs, f"sfx dummy sampler, {args.env}, {cores} cores, {today}",
                     out_dir / "throughput_scaling.png")
        files.append(out_dir / "throughput_scaling.png")
    summary = {"date": today, "env": args.env, "cores": cores, "seconds": args.seconds, "tiny": args.tiny,
               "load_average_at_end": _load(),
               "results": {k: {kk: vv for kk, vv in v.items() if kk != "log"} for k, v in results.items()},
               "ratios": {"sampler_over_raw": r_sampler_raw, "sfx_over_sample_factory": r_sfx_sf,
                          "sampler_over_raw_many_envs": r_sampler_raw_many},
               "scaling": scaling}
    (out_dir / "throughput.json").write_text(json.dumps(summary, indent=1, default=float))
    files.append(out_dir / "throughput.json")
    print("wrote " + ", ".join(str(f) for f in files))
    return 1 if any(r["status"] == "failed" for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
