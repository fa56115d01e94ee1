"""Throughput per env backend, in one run: the Python envs and EnvPool, raw and through sfx's dummy sampler.

    python -m bench.envpool_throughput [--env=atari_breakout] [--seconds=20] [--num_workers=2]
                                       [--num_envs_per_worker=8] [--only KEY]...

Rows (their keys in brackets), each measured in a fresh process, one after the other:

1. [python_raw] the family's Python env, one per process in as many processes as CPU cores, each pinned,
   random actions (``bench.throughput``'s raw row: the same env objects with their preprocessing, stepped bare);
2. [envpool_async] EnvPool's own asynchronous loop on all cores: ``2 x --num_workers x --num_envs_per_worker``
   envs, batches of half of them, one thread per core, ``recv`` then ``send`` of random actions for the batch
   that came back (the way EnvPool's own benchmarks drive it); the same sfx flags translated by the family;
3. [envpool_sync] EnvPool's synchronous loop, the same envs stepped all at once (what one pool of a rollout
   worker's split does, on all cores);
4. [vector] :class:`sfx.envs.envpool.vector.EnvPoolVector` in one process: ``--num_envs_per_worker`` envs, one
   thread, random action rows: what sfx's translation (the reset of ended envs, episodic life, statistics) costs
   beside EnvPool's own sync step of one core;
5. [sampler_python], [sampler_envpool] ``python -m sfx.dummy_sampler`` with ``--env_backend=python`` / ``envpool``
   and ``--num_workers`` x ``--num_envs_per_worker`` (the training's sampling path with random actions);
6. ratios: sampler_envpool / envpool_async (the issue's target: >= 0.9 on the same cores), sampler_envpool /
   sampler_python, envpool_async / python_raw, vector / envpool_sync at the same number of threads.

Families whose only backend is EnvPool (``procgen_``) have no python rows. FPS counts env frames (agent steps x
``--env_frameskip``). Figures, never pass/fail; results on stdout and in ``--out_dir/envpool_throughput.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from bench.throughput_common import REPO_ROOT, format_columns, ratio, run_json_child, tail, write_result
from bench.throughput_common import child_env as common_child_env
from bench.throughput_common import fmt_count

KEYS = ("python_raw", "envpool_async", "envpool_sync", "vector", "sampler_python", "sampler_envpool")
STARTUP_LIMIT_SEC = 300.0


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="atari_breakout")
    p.add_argument("--seconds", type=float, default=20.0, help="measured time of each row")
    p.add_argument("--num_workers", type=int, default=2)
    p.add_argument("--num_envs_per_worker", type=int, default=8)
    p.add_argument("--only", action="append", choices=KEYS, help="measure only these rows (repeatable)")
    p.add_argument("--out_dir", default=str(REPO_ROOT / "bench" / "results"))
    p.add_argument("--child", choices=KEYS, help=argparse.SUPPRESS)
    p.add_argument("--child_result", help=argparse.SUPPRESS)
    args, extra = p.parse_known_args(argv)
    args.extra = [a for a in extra if a != "--"]
    return args


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def env_cfg(args: argparse.Namespace, backend: str):
    from sfx.registries import default_cfg

    return default_cfg(args.env, train_dir=tempfile.gettempdir(), env_backend=backend)


# --------------------------------------------------------------------------- children

def task_and_options(cfg) -> tuple[str, dict]:
    import importlib

    family = cfg.env.split("_", 1)[0]  # atari, mujoco, minigrid, procgen: each translates its own flags
    return getattr(importlib.import_module(f"sfx.envs.{family}"), f"{family}_options")(cfg)


def child_envpool(args: argparse.Namespace, asynchronous: bool) -> dict:
    """EnvPool's own loop (rows 2 and 3) with random actions, on every core."""
    import envpool
    import numpy as np

    cfg = env_cfg(args, "envpool")
    task, options = task_and_options(cfg)
    n = 2 * args.num_workers * args.num_envs_per_worker if asynchronous else args.num_workers * args.num_envs_per_worker
    batch = n // 2 if asynchronous else n
    pool = envpool.make_gymnasium(task, num_envs=n, batch_size=batch, num_threads=cores(), seed=1, **options)
    space = pool.action_space
    rng = np.random.default_rng(0)
    if hasattr(space, "n"):
        acts = rng.integers(space.n, size=(64, batch)).astype(np.int32)
    else:
        acts = rng.uniform(space.low, space.high, size=(64, batch, *space.shape)).astype(space.dtype)
    pool.async_reset()
    steps, i = 0, 0
    start = None
    deadline_warmup = time.perf_counter() + 2.0
    while True:
        _, _, _, _, info = pool.recv()
        pool.send(acts[i % 64], info["env_id"])
        i += 1
        now = time.perf_counter()
        if start is None:
            if now >= deadline_warmup:
                start, steps = now, 0
            continue
        steps += batch
        if now - start >= args.seconds:
            break
    elapsed = time.perf_counter() - start
    pool.recv()
    pool.close()
    return {"status": "done", "fps": steps * cfg.env_frameskip / elapsed, "agent_steps": steps, "envs": n,
            "batch": batch, "threads": cores(), "seconds": elapsed}


def child_vector(args: argparse.Namespace) -> dict:
    """sfx's EnvPoolVector (row 4): one split's pool on one thread, random rows."""
    import numpy as np

    from sfx.envs.vector import make_vector_env

    cfg = env_cfg(args, "envpool")
    n = args.num_envs_per_worker
    vector = make_vector_env(cfg, [{"worker_index": 0, "vector_index": e, "env_id": e} for e in range(n)])
    space = vector.action_space
    rng = np.random.default_rng(0)
    if hasattr(space, "n"):
        rows = rng.integers(space.n, size=(64, n, 1)).astype(np.float32)
    else:
        rows = rng.uniform(space.low, space.high, size=(64, n, *space.shape)).astype(np.float32)
    vector.reset([1 + e for e in range(n)])
    for i in range(50):
        vector.step(rows[i % 64])
    steps = episodes = i = 0
    start = time.perf_counter()
    while time.perf_counter() - start < args.seconds:
        for _ in range(20):
            step = vector.step(rows[i % 64])
            i += 1
            episodes += sum(e.episode is not None for e in step.events.values())
        steps += 20 * n
    elapsed = time.perf_counter() - start
    vector.close()
    return {"status": "done", "fps": steps * cfg.env_frameskip / elapsed, "agent_steps": steps, "episodes": episodes,
            "envs": n, "threads": vector.num_threads, "seconds": elapsed}


def run_row(key: str, args: argparse.Namespace, workdir: Path) -> dict:
    """One row in a fresh process: this module's children, or bench.throughput's raw and sampler children."""
    env = common_child_env()
    timeout = args.seconds + STARTUP_LIMIT_SEC
    if key in ("envpool_async", "envpool_sync", "vector"):
        own = [f"--child={key}", f"--env={args.env}", f"--seconds={args.seconds}",
               f"--num_workers={args.num_workers}", f"--num_envs_per_worker={args.num_envs_per_worker}"]
        run = run_json_child("bench.envpool_throughput", own, [], key, workdir, cwd=REPO_ROOT, env=env, timeout=timeout)
    else:
        backend = "envpool" if key == "sampler_envpool" else "python"
        flags = [f"--env={args.env}", f"--env_backend={backend}", f"--num_workers={args.num_workers}",
                 f"--num_envs_per_worker={args.num_envs_per_worker}", *args.extra]
        kind = "raw" if key == "python_raw" else "sampler"
        run = run_json_child("bench.throughput", [f"--child={kind}", f"--seconds={args.seconds}", "--raw_processes=0",
                                                  "--raw_envs_per_process=1"], flags, key, workdir, cwd=workdir,
                             env=env, timeout=timeout)
    if run.result is None:
        return {"status": "failed", "fps": float("nan"), "reason": f"exit {run.returncode}", "log": tail(run.log_path, 20)}
    return run.result


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.child:
        result = (child_vector(args) if args.child == "vector"
                  else child_envpool(args, asynchronous=args.child == "envpool_async"))
        write_result(args.child_result, result)
        return 0
    keys = list(args.only or KEYS)
    if args.env.startswith("procgen_"):  # EnvPool is its only backend
        keys = [k for k in keys if k not in ("python_raw", "sampler_python")]
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="sfx_bench_envpool_") as tmp:
        for key in keys:
            results[key] = run_row(key, args, Path(tmp))
            print(f"{key}: {fmt_count(results[key]['fps'])} FPS", flush=True)
    fps = {k: r["fps"] for k, r in results.items()}
    ratios = {
        "sampler_envpool / envpool_async": ratio(fps.get("sampler_envpool", float("nan")),
                                                 fps.get("envpool_async", float("nan"))),
        "sampler_envpool / sampler_python": ratio(fps.get("sampler_envpool", float("nan")),
                                                  fps.get("sampler_python", float("nan"))),
        "envpool_async / python_raw": ratio(fps.get("envpool_async", float("nan")), fps.get("python_raw", float("nan"))),
        "envpool_async / envpool_sync": ratio(fps.get("envpool_async", float("nan")),
                                              fps.get("envpool_sync", float("nan"))),
    }
    rows = [[k, fmt_count(r["fps"]), r.get("status", "")] for k, r in results.items()]
    print(f"\n{args.env}, {cores()} cores, {args.num_workers} workers x {args.num_envs_per_worker} envs, "
          f"{args.seconds:.0f} s per row, {time.strftime('%Y-%m-%d')}")
    print(format_columns([["row", "FPS (frames/s)", "status"], *rows], "lrl"))
    for name, value in ratios.items():
        print(f"  {name}: {value:.2f}" if value == value else f"  {name}: -")
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "envpool_throughput.json").write_text(json.dumps(
        {"env": args.env, "cores": cores(), "date": time.strftime("%Y-%m-%d"), "args": vars(args) | {"extra": args.extra},
         "rows": results, "ratios": ratios}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
