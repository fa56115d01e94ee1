"""Seeded serial trainings whose every loss statistic and final weights are recorded: the proof that a refactor of
the agents leaves training bit for bit unchanged.

Each run is a ``--serial_mode`` training of a few iterations on the CPU (one rollout worker, a fixed seed, one
torch thread): every statistic each minibatch step returns (``Agent.step``'s, recorded by wrapping the registered
agent class's ``step``), and every tensor of the final checkpoint (the weights and the learning state: optimizer
moments, target networks, running statistics) as a SHA-256 of its bytes and as float64 sums.

    python -m tests.agents.bitwise_runs /tmp/before.json             # record every run
    python -m tests.agents.bitwise_runs /tmp/after.json --compare /tmp/before.json   # record and compare, exactly

tests/agents/test_bitwise_runs.py compares against the committed reference tests/agents/bitwise_reference.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

import torch

QUEUE_STANDARD = json.dumps([{"type": "queue", "capacity": 1, "sample_ratio": 0.5},
                             {"type": "standard", "capacity": 40, "sample_ratio": 0.5}])

_APPO = dict(env="gym_CartPole-v1", num_workers=1, num_envs_per_worker=2, worker_num_splits=2, rollout=16,
             recurrence=8, batch_size=64, hidden_size=32, train_for_env_steps=640)

# name -> default_cfg overrides (besides the seed, the folder and the serial CPU layout)
RUNS: dict[str, dict[str, Any]] = {
    "appo_ff": {**_APPO, "use_rnn": False},
    "appo_rnn": {**_APPO, "use_rnn": True, "rnn_type": "gru"},
    "appo_lstm_epochs": {**_APPO, "use_rnn": True, "rnn_type": "lstm", "ppo_epochs": 2,
                         "num_batches_per_iteration": 2, "batch_size": 32, "train_for_env_steps": 512},
    "appo_popart": {**_APPO, "use_rnn": False, "popart": True, "popart_beta": 0.05},
    "appo_replay": {**_APPO, "use_rnn": True, "replay_parameters": QUEUE_STANDARD, "clear_policy_coeff": 0.01,
                    "clear_value_coeff": 0.005, "train_for_env_steps": 960},
    "appo_vmpo_transitions": {**_APPO, "use_rnn": False, "policy_loss": "vmpo", "minibatch_unit": "transitions",
                              "ppo_epochs": 2, "batch_size": 32, "advantage_estimator": "gae",
                              "train_for_env_steps": 512},
    "appo_kl_adaptive": {**_APPO, "use_rnn": False, "lr_schedule": "kl_adaptive_minibatch", "kl_loss_coeff": 0.1,
                         "exploration_loss": "symmetric_kl"},
    "r2d2": dict(env="gym_CartPole-v1", algo="R2D2", num_workers=1, num_envs_per_worker=4, rollout=16,
                 recurrence=16, burn_in=8, batch_size=64, hidden_size=32, use_rnn=True, rnn_type="gru",
                 replay_ratio=2.0, replay_buffer_size=4000, learning_starts=160, target_update_period=5,
                 learning_rate=1e-3, train_for_env_steps=960),
    "sac": dict(env="gym_Pendulum-v1", algo="SAC", num_workers=1, num_envs_per_worker=2, rollout=16,
                batch_size=64, hidden_size=32, learning_starts=100, replay_ratio=16.0, replay_buffer_size=5000,
                train_for_env_steps=480),
}


def tensor_digest(t: torch.Tensor) -> dict[str, Any]:
    t = t.detach().cpu().contiguous()
    d = {"sha256": hashlib.sha256(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"").hexdigest(),
         "dtype": str(t.dtype), "shape": list(t.shape)}
    if t.is_floating_point():
        x = t.double()
        d["sum"], d["abs_sum"], d["numel"] = float(x.sum()), float(x.abs().sum()), t.numel()
    return d


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Every tensor (and number) of a checkpoint's nested dicts / lists, by dotted path."""
    out: dict[str, Any] = {}
    if isinstance(tree, dict):
        for k in sorted(tree, key=str):
            out.update(flatten(tree[k], f"{prefix}{k}."))
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            out.update(flatten(v, f"{prefix}{i}."))
    elif isinstance(tree, torch.Tensor):
        out[prefix[:-1]] = tensor_digest(tree)
    elif isinstance(tree, (int, float, bool)) or tree is None:
        out[prefix[:-1]] = tree
    return out


# checkpoint entries that are bookkeeping of the run, not what it learned (time, paths, the random streams
# of processes: Python's is seeded by nothing the training reads)
_NOT_LEARNED = ("time", "wall", "sec", "cfg", "path", "rng")


def run_one(name: str, overrides: dict[str, Any], train_dir: Path) -> dict[str, Any]:
    """One seeded serial training: ``{"steps": [stats of each step], "checkpoint": {path: digest}}``."""
    from sfx.agents import find_agent
    from sfx.registries import default_cfg
    from sfx.engine import run_training
    from sfx.experiment import load_latest_checkpoint

    cfg = default_cfg(**{"experiment": name, "train_dir": str(train_dir), "serial_mode": True, "seed": 7,
                         "device": "cpu", "learner_main_loop_num_cores": 1, "save_every_sec": 10_000,
                         "experiment_summaries_interval": 10_000, "report_every_sec": 10_000, **overrides})
    agent = find_agent(cfg.algo)
    steps: list[dict[str, float]] = []
    original: Callable = agent.step

    def recording_step(self: Any, mb: Any, valids: Any) -> Any:
        out = original(self, mb, valids)
        stats = getattr(out, "stats", out)
        steps.append({k: float(v) for k, v in sorted(stats.items())})
        return out

    agent.step = recording_step
    threads = torch.get_num_threads()
    try:
        result = run_training(cfg)
    finally:
        agent.step = original
        torch.set_num_threads(threads)
    if result["status"] != "done":
        raise RuntimeError(f"run {name} ended {result['status']}: {result.get('stop_reason')}")
    ckpt = load_latest_checkpoint(cfg, 0)
    learned = {k: v for k, v in ckpt.items() if not any(w in k for w in _NOT_LEARNED)}
    return {"steps": steps, "checkpoint": flatten(learned), "env_steps": result["env_steps"]}


def fingerprint() -> dict[str, Any]:
    """What must match for two records to be comparable bit for bit: the CPU, its kernels, torch."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "cpu": model or platform.processor(), "python": platform.python_version()}


def record(names: list[str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"fingerprint": fingerprint(), "runs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names or list(RUNS):
            out["runs"][name] = run_one(name, RUNS[name], Path(tmp))
    return out


def differences(a: dict[str, Any], b: dict[str, Any], rtol: float = 0.0, atol: float = 0.0,
                bitwise: bool = True) -> list[str]:
    """Where two records of one run differ: every step's statistics, then every checkpoint entry. ``bitwise``:
    the statistics exactly and the tensors by their hashes; else each statistic within ``atol + rtol`` times its
    largest magnitude over ``b``'s steps, each tensor's sum within that of its sum of absolute values, and other
    numbers within that of themselves."""
    bad: list[str] = []

    def close(x: float, y: float, scale: float) -> bool:
        if bitwise:
            return x == y or (math.isnan(x) and math.isnan(y))
        return math.isclose(x, y, rel_tol=0.0, abs_tol=atol + rtol * scale)

    # a statistic's scale: its largest magnitude over the run (a KL of 1e-9 at one step is noise on its 1e-3)
    scales: dict[str, float] = {}
    for stats in b["steps"]:
        for k, v in stats.items():
            scales[k] = max(scales.get(k, 0.0), abs(v)) if math.isfinite(v) else scales.get(k, 0.0)
    if len(a["steps"]) != len(b["steps"]):
        bad.append(f"{len(a['steps'])} steps, expected {len(b['steps'])}")
    for i, (sa, sb) in enumerate(zip(a["steps"], b["steps"])):
        if set(sa) != set(sb):
            bad.append(f"step {i}: statistics {sorted(set(sa) ^ set(sb))} differ")
        for k in sorted(set(sa) & set(sb)):
            if not close(sa[k], sb[k], scales[k]):
                bad.append(f"step {i}: {k} = {sa[k]!r}, expected {sb[k]!r}")
    ca, cb = a["checkpoint"], b["checkpoint"]
    if set(ca) != set(cb):
        bad.append(f"checkpoint entries {sorted(set(ca) ^ set(cb))} differ")
    for k in sorted(set(ca) & set(cb)):
        x, y = ca[k], cb[k]
        if isinstance(y, dict):
            if not isinstance(x, dict) or x["shape"] != y["shape"] or x["dtype"] != y["dtype"]:
                bad.append(f"checkpoint {k}: shape/dtype differ")
            elif bitwise:
                if x["sha256"] != y["sha256"]:
                    bad.append(f"checkpoint {k}: weights differ (sum {x.get('sum')!r}, expected {y.get('sum')!r})")
            elif "sum" in y and not close(x["sum"], y["sum"], y["abs_sum"]):
                bad.append(f"checkpoint {k}: sum {x['sum']!r}, expected {y['sum']!r}")
            elif "sum" not in y and x["sha256"] != y["sha256"]:
                bad.append(f"checkpoint {k}: integer tensor differs")
        elif isinstance(y, float) and isinstance(x, float) and not bitwise:
            if not close(x, y, abs(y)):
                bad.append(f"checkpoint {k} = {x!r}, expected {y!r}")
        elif x != y:
            bad.append(f"checkpoint {k} = {x!r}, expected {y!r}")
    return bad


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="JSON file the records are written to")
    p.add_argument("--compare", default=None, help="a record to compare with, bit for bit")
    p.add_argument("--only", action="append", choices=list(RUNS), help="these runs only")
    args = p.parse_args(argv)
    rec = record(args.only)
    Path(args.out).write_text(json.dumps(rec, indent=1, sort_keys=True))
    if args.compare is None:
        return 0
    ref = json.loads(Path(args.compare).read_text())
    failed = False
    for name, run in rec["runs"].items():
        bad = differences(run, ref["runs"][name])
        failed |= bool(bad)
        print(f"{name}: {len(run['steps'])} steps, {len(run['checkpoint'])} checkpoint entries: "
              f"{'IDENTICAL' if not bad else 'DIFFERENT'}")
        for line in bad[:10]:
            print("   ", line)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
