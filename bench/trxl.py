"""Transformer-XL against LSTM on the image benchmark model: acting, learning, shared memory, RSS.

    python -m bench.trxl [--threads=1] [--steps=3] [--mem_lens=64,512] [--brain_agent] [--skip_e2e]
                         [--only_e2e] [--device=cpu|cuda] [--profile]

The model is sfx's own (``create_actor_critic``) with ``bench.throughput``'s sfx training settings
(doom_basic, 128x72 RGB frames, convnet_simple, ``--hidden_size=512``, rollout 32, batch 2048, 2
workers x 16 envs; the encoder in bf16 where the hardware has native bfloat16, as
``--mixed_precision=auto`` picks it, the cores in float32), one row per core:

- ``lstm 512``: the benchmark model itself (``--rnn_type=lstm``);
- ``trxl mem N``: ``--rnn_type=trxl --mem_len=N`` with sfx's default TrXL flags (``--n_layer=2
  --n_heads=4 --d_head=64 --d_inner=1024``, 512 wide), one row per ``--mem_lens`` value;
- with ``--brain_agent``: Brain Agent's DMLab-30 core (``--hidden_size=256 --mem_len=512 --n_layer=12
  --n_heads=8 --d_head=64 --d_inner=2048``), which is slow on a CPU.

Measured, in this process, one row after the other:

1. **Acting**: the policy worker's own ``PolicyWorker.process`` (``sfx.engine.policy_worker``) on one
   request of ``B`` agents (``--batch_sizes``, 32 and 128): gathering their uint8 frames and states
   from shared trajectory slots and, for TrXL, each agent's memory ``[B, mem_len + 1, n_layer x
   hidden]`` from the shared ``[A, mem_len + 1, W]`` agent memory by agent index (the agents in a
   random order, ``A`` = the largest batch), the ``for_inference`` model under ``inference_mode``,
   sampling, and every write-back (actions, states, the memory entry). Every agent's memory is full
   (``valid = mem_len``), the worst case, though the core computes over every row whatever the mask.
   Printed as ms per batch and agent-steps/s, and, timed on their own with the same tensors: the
   memory gather, the entry write-back, the encoder, the core, and the part of the core that grows
   with ``mem_len`` (per layer: layer norm of ``[memory, step]`` and the K/V projection of it).
2. **Learning**: the learner's own ``learning_step`` on a synthetic minibatch of ``--batch_size /
   --rollout`` trajectories shaped like the trajectory buffers (``bench.learner_step``'s, plus each
   trajectory's memory before step 0 for TrXL); ``--recurrence`` = rollout. Printed as ms per step
   and the learner's sample limit (batch / step time: agent steps, x frameskip 4 for env frames).
3. **Memory**: the shared memory ``bench.throughput``'s sfx training would allocate
   (``trajectory_buffer_bytes`` with the slots ``num_trajectory_slots`` gives: 2 workers x 16 envs =
   32 agents, batch 2048 / rollout 32, ``--traj_buffers_excess_ratio`` 2, process mode), split into
   the core's memory (one per slot and one per agent) and the rest; and this process's RSS after
   building the acting model and after the learning step (rough: shared pages touched count, and
   memory freed by an earlier row may not go back to the system).
4. **End to end** (``--skip_e2e`` leaves it out): ``bench.throughput``'s sfx training command,
   exactly, for LSTM and for ``--rnn_type=trxl --mem_len=64`` (``--e2e_mem_len``), each timed as
   ``bench.throughput`` times it (slope of consumed frames over ``--e2e_seconds`` after
   ``--e2e_warmup``); FPS and the ratio. Two trainings in turn: about 4-5 minutes with the defaults.

How to read it: the ratios to the ``lstm 512`` row are the figures; the absolute numbers depend on
the machine and on whatever else runs. Each timing is given as wall time and as this process's CPU
time (all its threads, system time included: page faults of fresh large tensors count); on a shared
machine wall time includes waiting for a core and CPU time does not, so on the CPU the rates, the
ratios and the parts are taken on CPU time (with ``--threads=1`` it is the work of one core). Run it
twice; trust ratios within a run more than numbers across runs. ``--threads`` is torch's intra-op
threads (1: a policy worker's or a learner's share of a small machine). Acting figures take
``--acting_reps`` calls, fewer where ``--budget_sec`` runs out. Figures only; nothing passes or fails.

On a GPU machine pass ``--device=cuda``: the model, the inference and the learner's minibatch go to
the GPU (the shared buffers stay in CPU memory, as in training, so the memory gather and its copy to
the GPU are part of acting); timings synchronize the device. ``--profile`` adds torch.profiler's top
operators for each TrXL row's acting at the largest batch (CPU activity only).
"""

from __future__ import annotations

import argparse
import gc
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from bench.throughput_common import format_columns

LSTM_FLAGS = ["--rnn_type=lstm", "--hidden_size=512"]
TRXL_DEFAULT_FLAGS = ["--rnn_type=trxl", "--hidden_size=512", "--n_layer=2", "--n_heads=4", "--d_head=64",
                      "--d_inner=1024"]
BRAIN_AGENT_FLAGS = ["--rnn_type=trxl", "--hidden_size=256", "--mem_len=512", "--n_layer=12", "--n_heads=8",
                     "--d_head=64", "--d_inner=2048"]
FRAMESKIP = 4


def mib(n_bytes: float) -> float:
    return n_bytes / 2**20


def rss_mib() -> float:
    from sfx.engine.resources import process_rss_mb

    return process_rss_mb({"bench": os.getpid()}).get("bench", float("nan"))


def rows_wanted(args: argparse.Namespace) -> list[tuple[str, list[str]]]:
    rows = [("lstm 512", LSTM_FLAGS)]
    rows += [(f"trxl mem {m}", [*TRXL_DEFAULT_FLAGS, f"--mem_len={m}"]) for m in args.mem_lens]
    if args.brain_agent:
        rows.append(("trxl brain agent", BRAIN_AGENT_FLAGS))
    return rows


def throughput_flags() -> list[str]:
    """``bench.throughput``'s sfx training command line (its defaults), without the train dir."""
    from bench.throughput import parse_bench_args, training_flags

    return [*training_flags(parse_bench_args([])), "--hidden_size=512"]


def make_cfg(row_flags: list[str], args: argparse.Namespace, learner: bool) -> Any:
    """The benchmark's cfg with this row's core; ``learner``: with this script's minibatch settings."""
    from sfx.registries import parse_args

    own = ([f"--batch_size={args.batch_size}", f"--rollout={args.rollout}", f"--recurrence={args.rollout}"]
           if learner else [])
    device = f"--device={'gpu' if args.device == 'cuda' else 'cpu'}"
    return parse_args([*throughput_flags(), *row_flags, *own, device, f"--train_dir={tempfile.gettempdir()}"],
                      resume=False)


def build(cfg: Any, info: Any) -> Any:
    from sfx.models import create_actor_critic

    torch.manual_seed(0)
    return create_actor_critic(cfg, info.observation_space, info.action_space)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], Any], reps: int, warmup: int, device: torch.device, budget_sec: float) -> dict[str, float]:
    """Seconds per call of ``fn`` after ``warmup`` calls: ``wall`` and ``cpu`` (this process's CPU time, all
    threads, system time included), the mean of ``reps`` calls or of as many as ``budget_sec`` allows (at
    least 2)."""
    for _ in range(warmup):
        fn()
    sync(device)
    w0, c0, n = time.perf_counter(), time.process_time(), 0
    while n < reps and (n < 2 or time.perf_counter() - w0 < budget_sec):
        fn()
        n += 1
    sync(device)
    return {"wall": (time.perf_counter() - w0) / n, "cpu": (time.process_time() - c0) / n}


# --------------------------------------------------------------------------- 3. shared memory

def shared_memory_split(cfg: Any, info: Any, model: Any) -> dict[str, float]:
    """Bytes ``bench.throughput``'s sfx run would put in shared memory (as ``sfx.engine.wiring.wire``
    computes them), split into the core's memory and the rest."""
    from sfx.agents.appo import APPO
    from sfx.algo.distributions import action_shape
    from sfx.engine.buffers import num_trajectory_slots
    from sfx.engine.resources import trajectory_buffer_bytes
    from sfx.models.obs import obs_spec

    agents = cfg.num_workers * cfg.num_envs_per_worker * info.num_agents
    slots = num_trajectory_slots(agents, APPO.trajectories_per_iteration(cfg), cfg.traj_buffers_excess_ratio,
                                 serial=False)
    memory_floats = int(model.memory_len) * int(model.memory_width)

    def total(floats: int) -> int:
        return trajectory_buffer_bytes(obs_spec(info.observation_space), cfg.rollout, max(1, model.rnn_state_size),
                                       action_shape(info.action_space), APPO.acting_rule(cfg, info.action_space).fields,
                                       slots, cfg.num_policies, agents, floats)

    rest = total(0)
    return {"agents": agents, "slots": slots, "rollout": cfg.rollout, "memory_core": total(memory_floats) - rest,
            "rest": rest}


# --------------------------------------------------------------------------- 1. acting

class _Inbox:
    """Stands in for a rollout worker's inbox: the answers are dropped."""

    def put(self, msg: Any) -> None:
        pass


def acting(cfg: Any, info: Any, args: argparse.Namespace, device: torch.device) -> tuple[dict, Any]:
    """Time ``PolicyWorker.process`` per batch size, and its parts on their own. Returns (figures, model)."""
    from sfx.agents.appo import APPO
    from sfx.algo.distributions import action_shape
    from sfx.engine.buffers import WeightsBuffer, allocate_agent_buffers, allocate_trajectory_buffers
    from sfx.engine.policy_worker import PolicyWorker
    from sfx.engine.protocol import REQ, REQUEST_COLUMNS, REQ_AGENT, REQ_SLOT, REQ_T, pack_request_rows
    from sfx.models.obs import obs_spec

    model = build(cfg, info)
    out: dict[str, Any] = {"rss_build": rss_mib(), "params": sum(p.numel() for p in model.parameters())}
    A, T = max(args.batch_sizes), cfg.rollout
    memory_shape = (int(model.memory_len), int(model.memory_width)) if model.memory_len else (0, 0)
    spec = obs_spec(info.observation_space)
    rnn_size = max(1, model.rnn_state_size)
    # one slot per agent; the slots' own memory copies are left out: a policy worker never reads them
    rule = APPO.acting_rule(cfg, info.action_space)
    traj = allocate_trajectory_buffers(A, T, spec, rnn_size, action_shape(info.action_space), rule.fields)
    agents = allocate_agent_buffers(A, spec, rnn_size, memory_shape)
    g = torch.Generator().manual_seed(1)
    for v in traj.obs.values():
        v.copy_(torch.randint(0, 256, v.shape, dtype=torch.uint8, generator=g) if v.dtype == torch.uint8
                else torch.randn(v.shape, generator=g).to(v.dtype))
    if model.memory_len:
        # every memory full (valid = mem_len), the ring at a random row per agent
        traj.rnn_states[..., 0] = float(model.memory_len - 1)
        traj.rnn_states[..., 1] = torch.randint(0, model.memory_len, (A, T + 1), generator=g).float()
        agents.memory.copy_(torch.randn(agents.memory.shape, generator=g))
    else:
        traj.rnn_states.copy_(torch.randn(traj.rnn_states.shape, generator=g) * 0.1)
    weights = WeightsBuffer.for_model(model)
    weights.publish(model, 0)
    worker = PolicyWorker(cfg, 0, 0, model, rule, traj, agents, weights, [_Inbox()], None, device)
    worker.update_weights()
    model = worker.model  # for_inference, on the device
    core = model.core
    perm = torch.randperm(A, generator=g)

    def t(fn: Callable[[], Any], warmup: int = 1) -> dict[str, float]:
        return timed(fn, args.acting_reps, warmup, device, args.budget_sec)

    for B in args.batch_sizes:
        ids = perm[:B]
        rows = np.full((B, REQUEST_COLUMNS), -1, dtype=np.int64)
        rows[:, REQ_SLOT] = ids.numpy()
        rows[:, REQ_AGENT] = ids.numpy()
        step = [0]

        def process() -> None:
            rows[:, REQ_T] = step[0] % T  # the state before that step is read, the next one written
            step[0] += 1
            worker.process([(REQ, 0, 0, pack_request_rows(rows))])

        fig = {"process": t(process, 2)}
        with torch.inference_mode():
            obs = {k: v[ids, 0].to(device) for k, v in traj.obs.items()}
            x = model.preprocess_obs(obs)
            fig["encoder"] = t(lambda: model.encoder(x))
            feats = model.encoder(x)
            states = traj.rnn_states[ids, 0].to(device)
            if model.memory_len:
                idx = ids.clone()
                fig["gather"] = t(lambda: agents.memory[idx].to(device))
                memory = agents.memory[idx].to(device)
                entry = torch.randn(B, model.memory_width)
                where = core.memory_index(states).cpu()

                def write() -> None:
                    agents.memory[idx, where] = entry

                fig["write"] = t(write)
                fig["core"] = t(lambda: core.forward_step(feats, states, memory))
                fig["core_memory_side"] = t(lambda: memory_side(core, feats, memory))
            else:
                fig["core"] = t(lambda: core.forward_step(feats, states))
        out[B] = fig
    if args.profile and model.memory_len:
        out["profile"] = profile_acting(worker, perm[:A], T, args.acting_reps)
    del worker, traj, agents, weights
    return out, model


def memory_side(core: Any, feats: torch.Tensor, memory: torch.Tensor) -> None:
    """The part of a TrXL step that grows with ``mem_len``, as ``TrXLLayer.forward`` does it: per layer,
    layer norm over [memory, step] and the keys' and values' projection of every row (the step's own
    input stands in for each layer's, whose cost does not depend on the memory)."""
    h = core.input_proj(feats).unsqueeze(1)
    d = core.d_model
    for i, layer in enumerate(core.layers):
        z = layer.norm_att(torch.cat([memory[:, :, i * d:(i + 1) * d], h], dim=1))
        layer.attention.kv(z)


def profile_acting(worker: Any, ids: torch.Tensor, T: int, reps: int) -> str:
    from torch.profiler import ProfilerActivity, profile

    from sfx.engine.protocol import REQ, REQUEST_COLUMNS, REQ_AGENT, REQ_SLOT, REQ_T, pack_request_rows

    rows = np.full((len(ids), REQUEST_COLUMNS), -1, dtype=np.int64)
    rows[:, REQ_SLOT] = rows[:, REQ_AGENT] = ids.numpy()
    rows[:, REQ_T] = 0
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(max(1, reps // 2)):
            worker.process([(REQ, 0, 0, pack_request_rows(rows))])
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14)


# --------------------------------------------------------------------------- 2. learning

def learning(cfg: Any, info: Any, args: argparse.Namespace, device: torch.device) -> dict:
    from bench.learner_step import synthetic_batch
    from sfx.engine.buffers import tree_map
    from sfx.agents.appo import learning_step, make_optimizer

    model = build(cfg, info).train().to(device)
    n = args.batch_size // args.rollout
    mb, valids = synthetic_batch(model, n, args.rollout)
    if model.memory_len:
        # the memory before each trajectory, full; the state rows [valid, pos] with it
        g = torch.Generator().manual_seed(2)
        mb["memory"] = torch.randn(n, model.memory_len, model.memory_width, generator=g)
        mb["rnn_states"][..., 0] = float(model.memory_len - 1)
        mb["rnn_states"][..., 1] = torch.randint(0, model.memory_len, mb["rnn_states"].shape[:2], generator=g).float()
    mb = tree_map(lambda v: v.to(device), mb)
    valids = valids.to(device)
    opt = make_optimizer(cfg, model)
    step = timed(lambda: learning_step(model, opt, mb, valids, cfg), args.steps, 1, device, float("inf"))
    out = {"step": step, "rss_after": rss_mib()}
    del model, opt, mb
    return out


# --------------------------------------------------------------------------- 4. end to end

def end_to_end(args: argparse.Namespace) -> list[tuple[str, dict]]:
    from bench.throughput import measure_sfx_training, parse_bench_args

    results = []
    for label, extra in (("lstm 512", []), (f"trxl mem {args.e2e_mem_len}", ["--rnn_type=trxl",
                                                                              f"--mem_len={args.e2e_mem_len}"])):
        targs = parse_bench_args([f"--seconds={args.e2e_seconds}", f"--warmup={args.e2e_warmup}", "--", *extra])
        with tempfile.TemporaryDirectory(prefix="sfx_bench_trxl_") as tmp:
            r = measure_sfx_training(targs, Path(tmp))
        results.append((label, r))
        status = r["status"] if r["status"] == "done" else f"{r['status']}: {r.get('reason', '')}"
        print(f"  e2e {label}: {r['fps']:,.0f} FPS ({status})", flush=True)
        if r["status"] != "done":
            print(r.get("log", ""), flush=True)
    return results


# --------------------------------------------------------------------------- tables

def ratio(a: float, b: float) -> str:
    if not (b and a == a and b == b):
        return "-"
    return f"{a / b:.2f}x" if a / b >= 0.1 else f"{a / b:.3f}x"


def acting_table(results: list[tuple[str, dict]], batch_sizes: list[int], basis: str) -> str:
    lines = [("core", "B", "wall ms", "cpu ms", f"agent-steps/s ({basis})", "vs lstm", "mem gather", "entry write",
              "encoder", "core", "core: LN+K/V of mem")]
    base = {B: results[0][1]["acting"][B]["process"][basis] for B in batch_sizes}
    for label, r in results:
        for B in batch_sizes:
            f = r["acting"][B]
            p = f["process"]
            ms = [f"{f[k][basis] * 1e3:.2f}" if k in f else "-"
                  for k in ("gather", "write", "encoder", "core", "core_memory_side")]
            lines.append((label, str(B), f"{p['wall'] * 1e3:.1f}", f"{p['cpu'] * 1e3:.1f}", f"{B / p[basis]:,.0f}",
                          ratio(base[B], p[basis]), *ms))
    return format_columns(lines, "lrrrrrrrrrr")


def learning_table(results: list[tuple[str, dict]], batch_size: int, basis: str) -> str:
    lines = [("core", "wall ms", "cpu ms", "vs lstm", f"samples/s limit ({basis})", "frames/s limit")]
    base = results[0][1]["learning"]["step"][basis]
    for label, r in results:
        t = r["learning"]["step"]
        lines.append((label, f"{t['wall'] * 1e3:,.0f}", f"{t['cpu'] * 1e3:,.0f}", ratio(base, t[basis]),
                      f"{batch_size / t[basis]:,.0f}", f"{batch_size * FRAMESKIP / t[basis]:,.0f}"))
    return format_columns(lines, "lrrrrr")


def memory_table(results: list[tuple[str, dict]]) -> str:
    lines = [("core", "params", "shm: memory core MiB", "shm: rest MiB", "shm total MiB", "vs lstm",
              "RSS after build MiB", "RSS after learning MiB")]
    base = results[0][1]["shm"]
    base_total = base["memory_core"] + base["rest"]
    for label, r in results:
        s = r["shm"]
        total = s["memory_core"] + s["rest"]
        lines.append((label, f"{r['acting']['params'] / 1e6:.1f}M", f"{mib(s['memory_core']):,.0f}",
                      f"{mib(s['rest']):,.0f}", f"{mib(total):,.0f}", ratio(total, base_total),
                      f"{r['acting']['rss_build']:,.0f}", f"{r['learning']['rss_after']:,.0f}"
                      if "learning" in r else "-"))
    return format_columns(lines, "lrrrrrrr")


def e2e_table(results: list[tuple[str, dict]]) -> str:
    lines = [("core", "FPS", "vs lstm", "status")]
    base = results[0][1]["fps"]
    for label, r in results:
        lines.append((label, f"{r['fps']:,.0f}" if r["fps"] == r["fps"] else "-", ratio(r["fps"], base), r["status"]))
    return format_columns(lines, "lrrl")


# --------------------------------------------------------------------------- main

def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--steps", type=int, default=3, help="timed learner steps per row (after 1 warm-up step)")
    p.add_argument("--acting_reps", type=int, default=10,
                   help="timed calls of each acting figure (after 1-2 warm-up calls), fewer when --budget_sec runs out")
    p.add_argument("--budget_sec", type=float, default=4.0, help="time for each acting figure (at least 2 calls)")
    p.add_argument("--mem_lens", default="64,512", help="comma-separated --mem_len values of the TrXL rows")
    p.add_argument("--batch_sizes", default="32,128", help="comma-separated agents per policy-worker batch")
    p.add_argument("--batch_size", type=int, default=2048, help="learner minibatch (samples)")
    p.add_argument("--rollout", type=int, default=32, help="learner trajectory length (= --recurrence)")
    p.add_argument("--brain_agent", action="store_true", help="add Brain Agent's DMLab TrXL (12 layers, mem 512)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where the models run")
    p.add_argument("--profile", action="store_true", help="torch.profiler's top operators of TrXL acting")
    p.add_argument("--skip_e2e", action="store_true", help="leave out the end-to-end trainings")
    p.add_argument("--only_e2e", action="store_true", help="only the end-to-end trainings")
    p.add_argument("--e2e_seconds", type=float, default=60.0, help="measured window of each training")
    p.add_argument("--e2e_warmup", type=float, default=15.0, help="seconds after the first frames before it")
    p.add_argument("--e2e_mem_len", type=int, default=64, help="--mem_len of the end-to-end TrXL training")
    args = p.parse_args(argv)
    args.mem_lens = [int(m) for m in args.mem_lens.split(",") if m]
    args.batch_sizes = [int(b) for b in args.batch_sizes.split(",") if b]
    if args.batch_size % args.rollout:
        p.error(f"--batch_size={args.batch_size} is not a multiple of --rollout={args.rollout}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    print(f"bench.trxl: torch {torch.__version__}, {args.threads} thread(s), device {device}, "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}", flush=True)
    if not args.only_e2e:
        from sfx.engine.wiring import probe_env

        results: list[tuple[str, dict]] = []
        info = None
        for label, flags in rows_wanted(args):
            cfg = make_cfg(flags, args, learner=False)
            info = info or probe_env(cfg)
            t0 = time.perf_counter()
            if not results:
                from sfx.models.precision import encoder_uses_bf16

                print(f"  encoder in {'bf16' if encoder_uses_bf16(cfg) else 'float32'} (--mixed_precision="
                      f"{cfg.mixed_precision}), cores in float32", flush=True)
            act, model = acting(cfg, info, args, device)
            r = {"acting": act, "shm": shared_memory_split(cfg, info, model)}
            del model
            gc.collect()
            r["learning"] = learning(make_cfg(flags, args, learner=True), info, args, device)
            gc.collect()
            results.append((label, r))
            print(f"  {label}: {' '.join(flags)} ({time.perf_counter() - t0:.0f} s)", flush=True)
        shm = results[0][1]["shm"]
        basis = "cpu" if device.type == "cpu" else "wall"
        print(f"\nActing: PolicyWorker.process on one request of B agents, ms per batch; ratios, rates and the parts "
              f"(each timed on its own) in {basis} time\n{acting_table(results, args.batch_sizes, basis)}")
        print(f"\nLearning: learning_step on {args.batch_size // args.rollout} trajectories x {args.rollout} steps "
              f"(--recurrence={args.rollout}); limits = batch / {basis} time of a step "
              f"(frames: x frameskip {FRAMESKIP})\n{learning_table(results, args.batch_size, basis)}")
        print(f"\nMemory: shared memory of bench.throughput's sfx training ({shm['agents']} agents, {shm['slots']} "
              f"trajectory slots of {shm['rollout']} steps, 1 policy); RSS of this process (rough)\n"
              f"{memory_table(results)}")
        for label, r in results:
            if "profile" in r["acting"]:
                print(f"\nProfile of {label} acting, B = {max(args.batch_sizes)}:\n{r['acting']['profile']}")
    if not args.skip_e2e:
        print(f"\nEnd to end: bench.throughput's sfx training, {args.e2e_seconds:.0f} s measured after "
              f"{args.e2e_warmup:.0f} s warm-up", flush=True)
        print(e2e_table(end_to_end(args)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
