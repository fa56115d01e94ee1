"""Training throughput with 1 rank and with 2 ranks (torchrun), and the cost of the ranks' gradient all-reduce.

    python -m bench.ranks_scaling [--seconds=40] [--env=gym_CartPole-v1] [--total_workers=2]
                                  [--allreduce_steps=20] [--out_dir=bench/results] [--tiny] [-- extra sfx.train flags]

1. Two trainings of ``--env`` on the CPU, one after the other, each in a fresh train_dir and stopped by
   ``--train_for_seconds``: one rank with ``--num_workers=total_workers``, then two ranks
   (``python -m torch.distributed.run --standalone --nproc_per_node=2``) with ``total_workers / 2``
   workers each; the other flags (per env, :data:`ENV_FLAGS`) are the same. Each rank writes
   ``run_training``'s result as JSON; the figure of a run is the sum of its ranks' ``samples_per_sec``
   (each rank counts its own samples, over its whole session, start-up included). Rank 0's
   ``env_steps / elapsed_sec`` (every rank's steps together) is printed as a cross-check.
2. ``GradientGroup.sum_gradients`` (one flat gloo all-reduce of every gradient, what a learner step
   of several ranks adds) for the doom benchmark model (``bench.learner_step.build``: convnet_simple
   + LSTM 512, 128x72) and, when ``--env`` is another one, for that env's model: two ranks spawned with
   torch.multiprocessing (file:// rendezvous in a temporary folder, one torch thread each), random
   gradients, 2 warm-up calls, then ``--allreduce_steps`` timed calls; rank 0 reports ms per call.
   Next to it, one single-rank learner step of the doom model (``bench.learner_step``, float32,
   batch 2048, rollout 32, one thread) when ``--learner_steps`` > 0.

A table on stdout, and ``ranks_scaling.json`` in ``--out_dir``. Figures only; nothing passes or fails
on a number (the exit status is 1 only when a run failed).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.procs import split_extra, stop_group
from bench.throughput_common import REPO_ROOT, child_env, fmt_count, format_columns, ratio, tail, write_result

# env -> (sfx.train flags of the benchmark, num_envs_per_worker)
ENV_FLAGS: dict[str, tuple[list[str], int]] = {
    "gym_CartPole-v1": (["--use_rnn=False", "--batch_size=512"], 8),
    # bench.throughput's doom settings
    "doom_basic": (["--res_w=128", "--res_h=72", "--wide_aspect_ratio=False", "--env_frameskip=4",
                    "--use_rnn=True", "--rnn_type=lstm", "--hidden_size=512", "--rollout=32", "--recurrence=32",
                    "--batch_size=2048", "--worker_num_splits=2"], 16),
}
TINY_FLAGS = {"gym_CartPole-v1": ["--batch_size=128"],
              "doom_basic": ["--batch_size=256", "--rollout=16", "--recurrence=16", "--hidden_size=64"]}
DOOM_MODEL_ENV = "doom_basic"
STARTUP_LIMIT_SEC = 300


def parse_bench_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog="Arguments after -- are passed to every sfx.train run.")
    p.add_argument("--seconds", type=float, default=40, help="--train_for_seconds of each training")
    p.add_argument("--env", default="gym_CartPole-v1", choices=sorted(ENV_FLAGS))
    p.add_argument("--total_workers", type=int, default=2, help="rollout workers of all ranks together (even)")
    p.add_argument("--allreduce_steps", type=int, default=20, help="timed sum_gradients calls (after 2 warm-ups)")
    p.add_argument("--learner_steps", type=int, default=2,
                   help="timed single-rank learner steps of the doom model for comparison (0: none)")
    p.add_argument("--out_dir", default=str(REPO_ROOT / "bench" / "results"))
    p.add_argument("--tiny", action="store_true", help="a few seconds per figure, small batches (a smoke run)")
    p.add_argument("--verbose", action="store_true", help="show the trainings' own output")
    p.add_argument("--child_result", help=argparse.SUPPRESS)  # internal: one rank of a training
    own, extra = split_extra(list(sys.argv[1:] if argv is None else argv))
    args = p.parse_args(own)
    args.extra = extra
    if args.total_workers < 2 or args.total_workers % 2:
        p.error("--total_workers must be even and at least 2 (split over 2 ranks)")
    if args.tiny:
        args.seconds = min(args.seconds, 6)
        args.allreduce_steps = min(args.allreduce_steps, 3)
        args.learner_steps = 0
    return args


# --------------------------------------------------------------------------- 1. trainings

def rank_result_path(result_path: str, rank: int) -> Path:
    return Path(f"{result_path}.rank{rank}.json")


def run_child(train_argv: list[str], result_path: str) -> None:
    """Inside one rank (or the only one): train, then write run_training's result for the parent."""
    from sfx.registries import parse_args
    from sfx.train import run_training

    result = run_training(parse_args(train_argv))
    write_result(rank_result_path(result_path, int(os.environ.get("RANK", "0"))), result)


def train_argv(args: argparse.Namespace, workdir: Path, ranks: int) -> list[str]:
    flags, envs_per_worker = ENV_FLAGS[args.env]
    tiny = TINY_FLAGS[args.env] if args.tiny else []
    return [f"--env={args.env}", f"--experiment=ranks_{ranks}", f"--train_dir={workdir / f'train_dir_{ranks}'}",
            f"--train_for_seconds={args.seconds:g}", f"--num_workers={args.total_workers // ranks}",
            f"--num_envs_per_worker={envs_per_worker}", "--device=cpu", "--save_every_sec=100000",
            *flags, *tiny, *args.extra]


def run_training_ranks(args: argparse.Namespace, workdir: Path, ranks: int) -> dict:
    """One training of ``ranks`` ranks in fresh processes; its ranks' results and the summed figure."""
    argv = train_argv(args, workdir, ranks)
    result_path = workdir / f"ranks_{ranks}"
    launcher = ([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}"]
                if ranks > 1 else [sys.executable])
    cmd = [*launcher, "-m", "bench.ranks_scaling", f"--child_result={result_path}", "--", *argv]
    print(f"running {ranks} rank(s): sfx.train {' '.join(argv)}", flush=True)
    log_path = workdir / f"ranks_{ranks}.log"
    started = time.monotonic()
    with open(log_path, "w") as log:
        out = None if args.verbose else log
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=child_env(), stdout=out,
                                stderr=subprocess.STDOUT if out else None, start_new_session=True)
        try:
            rc: int | str = proc.wait(timeout=args.seconds + STARTUP_LIMIT_SEC)
        except subprocess.TimeoutExpired:
            rc = "timeout"
        finally:
            stop_group(proc)
    wall = time.monotonic() - started
    per_rank = []
    for r in range(ranks):
        p = rank_result_path(str(result_path), r)
        per_rank.append(json.loads(p.read_text()) if p.exists() else None)
    row = {"ranks": ranks, "workers_per_rank": args.total_workers // ranks, "returncode": rc, "wall_sec": wall,
           "per_rank": per_rank, "command": cmd}
    if rc != 0 or any(r is None or r.get("status") != "done" for r in per_rank):
        last = "" if args.verbose else tail(log_path, 30)
        print(f"{ranks} rank(s): the run failed (exit {rc}); last lines of its output:\n{last}", file=sys.stderr)
        row.update(status="failed", samples_per_sec=float("nan"), rank0_env_steps_per_sec=float("nan"))
        return row
    r0 = per_rank[0]
    row.update(status="done", samples_per_sec=sum(float(r["samples_per_sec"]) for r in per_rank),
               rank_samples_per_sec=[float(r["samples_per_sec"]) for r in per_rank],
               env_steps=int(r0["env_steps"]), elapsed_sec=float(r0["elapsed_sec"]),
               rank0_env_steps_per_sec=ratio(float(r0["env_steps"]), float(r0["elapsed_sec"])),
               train_steps=[r["train_step"][0] for r in per_rank])
    return row


# --------------------------------------------------------------------------- 2. all-reduce

def build_model(env: str):
    """The benchmark model of ``env`` (doom: bench.learner_step's), in train mode."""
    import torch

    if env == DOOM_MODEL_ENV:
        from bench.learner_step import build

        a = argparse.Namespace(env=env, rollout=32, batch_size=2048)
        model, _ = build(a, "off")
        return model
    from sfx.registries import parse_args
    from sfx.engine.coordinator import probe_env
    from sfx.models import create_actor_critic

    cfg = parse_args([f"--env={env}", f"--train_dir={tempfile.gettempdir()}", *ENV_FLAGS[env][0]], resume=False)
    info = probe_env(cfg)
    torch.manual_seed(0)
    return create_actor_critic(cfg, info.observation_space, info.action_space).train()


def allreduce_rank(rank: int, world: int, init_file: str, env: str, steps: int, out_file: str) -> None:
    """One of the spawned ranks: time ``sum_gradients`` over the model's (random) gradients."""
    import torch
    import torch.distributed as dist

    from sfx.engine.data_parallel import GradientGroup

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    try:
        model = build_model(env)
        params = [p for p in model.parameters() if p.requires_grad]
        g = torch.Generator().manual_seed(rank)
        group = GradientGroup()
        times = []
        for i in range(2 + steps):
            for p in params:
                p.grad = torch.randn(p.shape, generator=g)
            dist.barrier()
            t0 = time.perf_counter()
            group.sum_gradients(model.parameters())
            if i >= 2:
                times.append(time.perf_counter() - t0)
        if rank == 0:
            floats = sum(p.numel() for p in params)
            write_result(out_file, {"env": env, "floats": floats, "mb": floats * 4 / 2**20, "calls": steps,
                                    "ms_per_call": 1e3 * sum(times) / len(times), "ms_min": 1e3 * min(times),
                                    "ms_max": 1e3 * max(times), "tensors": len(params)})
    finally:
        dist.destroy_process_group()


def measure_allreduce(env: str, steps: int, workdir: Path) -> dict:
    import torch.multiprocessing as mp

    init_file = workdir / f"rendezvous_{env}"
    out_file = workdir / f"allreduce_{env}.json"
    try:
        mp.spawn(allreduce_rank, args=(2, str(init_file), env, steps, str(out_file)), nprocs=2, join=True)
        result = json.loads(out_file.read_text())
        result["status"] = "done"
        return result
    except Exception as e:  # a figure that could not be measured, not a crash of the whole bench
        print(f"all-reduce for {env}: failed: {e}", file=sys.stderr)
        return {"env": env, "status": "failed", "reason": str(e)[-500:], "ms_per_call": float("nan")}


def measure_learner_step(steps: int) -> dict:
    """bench.learner_step's float32 channels_last learner step of the doom model, one thread, batch 2048."""
    import torch

    from bench.learner_step import synthetic_batch, time_variant

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a = argparse.Namespace(env=DOOM_MODEL_ENV, rollout=32, batch_size=2048)
        from bench.learner_step import build

        model, cfg = build(a, "off")
        mb, valids = synthetic_batch(model, a.batch_size // a.rollout, a.rollout)
        train, _ = time_variant(model, cfg, mb, valids, steps)
        return {"status": "done", "ms_per_step": train * 1e3, "batch_size": a.batch_size, "steps": steps,
                "threads": 1}
    except Exception as e:
        print(f"learner step: failed: {e}", file=sys.stderr)
        return {"status": "failed", "reason": str(e)[-500:], "ms_per_step": float("nan")}
    finally:
        torch.set_num_threads(threads)


# --------------------------------------------------------------------------- report

def format_training_table(rows: list[dict]) -> str:
    lines = [("ranks", "workers/rank", "samples/s", "per rank", "rank 0 env steps/s", "vs 1 rank", "status")]
    base = next((r["samples_per_sec"] for r in rows if r["ranks"] == 1), float("nan"))
    for r in rows:
        rel = ratio(r["samples_per_sec"], base)
        lines.append((str(r["ranks"]), str(r["workers_per_rank"]), fmt_count(r["samples_per_sec"]),
                      " + ".join(fmt_count(x) for x in r.get("rank_samples_per_sec", [])) or "-",
                      fmt_count(r["rank0_env_steps_per_sec"]), f"{rel:.2f}x" if rel == rel else "-", r["status"]))
    return format_columns(lines, "rrrrrrl")


def format_allreduce_table(results: list[dict], learner: dict | None) -> str:
    lines = [("model", "floats", "MB", "ms/all-reduce", "min", "max", "vs learner step", "status")]
    step_ms = learner["ms_per_step"] if learner else float("nan")
    for r in results:
        ok = r["status"] == "done"
        rel = ratio(r["ms_per_call"], step_ms) if r["env"] == DOOM_MODEL_ENV else float("nan")
        lines.append((r["env"], fmt_count(r["floats"]) if ok else "-", f"{r['mb']:.2f}" if ok else "-",
                      f"{r['ms_per_call']:.2f}" if ok else "-", f"{r['ms_min']:.2f}" if ok else "-",
                      f"{r['ms_max']:.2f}" if ok else "-", f"{100 * rel:.1f}%" if rel == rel else "-", r["status"]))
    return format_columns(lines, "lrrrrrrl")


def main(argv: list[str] | None = None) -> int:
    args = parse_bench_args(argv)
    if args.child_result:
        run_child(args.extra, args.child_result)
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"bench.ranks_scaling {datetime.date.today().isoformat()}: {args.env}, {args.total_workers} workers in "
          f"all, {args.seconds:g} s per training{' (tiny)' if args.tiny else ''}, device cpu, {cores} CPU cores",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="sfx_bench_ranks_") as tmp:
        workdir = Path(tmp)
        rows = [run_training_ranks(args, workdir, ranks) for ranks in (1, 2)]
        envs = [DOOM_MODEL_ENV] + ([args.env] if args.env != DOOM_MODEL_ENV else [])
        print("timing the all-reduce of 2 gloo ranks: " + ", ".join(envs), flush=True)
        allreduce = [measure_allreduce(env, args.allreduce_steps, workdir) for env in envs]
    learner = measure_learner_step(args.learner_steps) if args.learner_steps > 0 else None

    speedup = ratio(rows[1]["samples_per_sec"], rows[0]["samples_per_sec"])
    print()
    print(f"training throughput, {args.env}, {args.total_workers} rollout workers in all, "
          f"{ENV_FLAGS[args.env][1]} envs/worker, device cpu, {args.seconds:g} s per run (start-up included)")
    print(format_training_table(rows))
    print(f"2 ranks / 1 rank: {speedup:.2f}x" if speedup == speedup else "2 ranks / 1 rank: -")
    print()
    print(f"GradientGroup.sum_gradients, 2 gloo ranks on this machine, {args.allreduce_steps} calls after 2 warm-ups"
          + (f"; one doom learner step (float32, batch 2048, 1 thread): {learner['ms_per_step']:.0f} ms"
             if learner and learner["status"] == "done" else ""))
    print(format_allreduce_table(allreduce, learner))

    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = {"date": datetime.date.today().isoformat(), "cores": cores,
               "args": {k: v for k, v in vars(args).items() if k != "child_result"},
               "trainings": rows, "speedup_2_ranks": speedup, "allreduce": allreduce, "learner_step": learner}
    path = out_dir / "ranks_scaling.json"
    path.write_text(json.dumps(summary, indent=2, default=float))
    print(f"wrote {path}")
    return 0 if all(r["status"] == "done" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
