"""The Stable-Baselines3 reference side of sfx's off-policy comparisons (R2D2 vs DQN, SAC vs SAC): SB3 trained
with the RL Zoo's published hyperparameters, measured the way sfx measures itself.

Runs only under its own venv (SB3 + rl_zoo3 + gymnasium with MuJoCo; never a dependency of sfx, not in CI)::

    bash bench/setup_sb3.sh                                      # once: creates bench/sb3_venv (idempotent)
    nice -n 5 bench/sb3_venv/bin/python bench/sb3_baseline.py --algo=dqn --env=CartPole-v1 \\
        --seeds=0,1,2 --threshold=400                            # R2D2's reference (issue 27)
    nice -n 5 bench/sb3_venv/bin/python bench/sb3_baseline.py --algo=sac --env=HalfCheetah-v4 \\
        --seeds=0,1,2 --threshold=3000 --max_steps=300000        # SAC's reference (issue 28)
    nice -n 5 bench/sb3_venv/bin/python bench/sb3_baseline.py --algo=sac --env=Pendulum-v1 --seeds=0 \\
        --threshold=-200                                         # a SAC smoke run (~1 minute)
    nice -n 5 bench/sb3_venv/bin/python bench/sb3_baseline.py --algo=ppo --env=HalfCheetah-v5 \\
        --hyperparams_from=HalfCheetah-v4 --seeds=0,1,2 --max_steps=1000000  # APPO's PPO reference (issue 39)
    bench/sb3_venv/bin/python bench/sb3_baseline.py --algo=dqn --env=CartPole-v1 --updates_per_step
                                                                 # only print hyperparameters and the UTD ratio

Flags: ``--algo`` any of rl_zoo3's algorithms (dqn, sac, td3, ddpg, qrdqn, tqc, ppo, a2c, ...); ``--env`` a
gymnasium id; ``--seeds=0,1,2``; ``--threshold=R`` (optional: without it every seed runs to ``--max_steps``);
``--max_steps=N`` env steps per seed (default: the zoo's ``n_timesteps``); ``--out=DIR`` (default
``bench/results/sb3_<algo>_<env>_<timestamp>``); ``--hyperparams_from=ENV_ID`` takes another entry of the
same YAML (e.g. ``--env=HalfCheetah-v5 --hyperparams_from=HalfCheetah-v4``: the zoo only lists v4, and sfx's
``mujoco_halfcheetah`` is v5); ``--threads=1`` torch threads; ``--device=cpu``; ``--curve_every=1000``;
``--window=100`` the finished episodes the average counts (sfx's ``--stats_avg``).

Hyperparameters: the entry for ``--env`` in the installed package's ``rl_zoo3/hyperparams/<algo>.yml``
(printed: file, the entry exactly as the zoo gives it, then every constructor argument in effect, SB3's
defaults included). The zoo's special keys are resolved as its ``train.py`` does: ``n_timesteps``,
``n_envs`` (DummyVecEnv, make_vec_env with a Monitor per env), ``normalize`` (VecNormalize; its gamma
follows the algorithm's), ``frame_stack`` (VecFrameStack), ``env_wrapper`` / ``vec_env_wrapper``,
``env_kwargs``, ``monitor_kwargs``, ``policy_kwargs`` / ``replay_buffer_kwargs`` strings, schedules
``lin_<x>`` for learning_rate / clip_range / clip_range_vf, ``noise_type`` / ``noise_std``, list
``train_freq``, dotted ``policy`` names. Refused with a line that says why: ``callback`` (changes what
is timed), ``replay_buffer_class`` (HER: goal envs), Atari entries (no ale-py in this venv).

Schedules (the learning rate's ``lin_``, DQN's exploration over ``exploration_fraction``) always span the
zoo's ``n_timesteps``, whatever ``--max_steps`` is: a shorter run is a prefix of the zoo's run, and a longer
one holds every schedule at its final value after ``n_timesteps`` (a ``lin_`` learning rate is then 0).

What is measured, per seed (an SB3 callback of our own reading the Monitor's finished episodes):

- ``reward``: the average return of the last 100 (``--window``) finished episodes, the same as sfx's
  ``reward`` (``--stats_avg=100``). The threshold counts only once the window is full (as sfx's
  ``--stop_at_reward`` does); the curve averages what has finished so far (up to the window);
  ``window_full_at``: the env steps when it first was full.
- ``steps_to_threshold`` / ``seconds_to_threshold``: env steps (summed over ``n_envs``) and wall seconds
  from the start of ``model.learn`` (model construction and replay allocation excluded) to the first step
  where that average reaches ``--threshold``; the seed stops there. None if never within ``--max_steps``
  (a seed stops at exactly ``--max_steps`` env steps, x n_envs granularity).
- ``final``: the window's average when the seed stopped; ``steps_per_sec``: env steps / wall seconds of
  the whole learn call (gradient steps included); ``gradient_steps``: the updates SB3 actually made.
- ``curve``: (env_steps, average) pairs every ``--curve_every`` env steps, plus the last step;
  ``curve_seconds``: each point's wall seconds from the start of ``model.learn``.

The update-to-data ratio (``updates_per_step``, printed and in the JSON): gradient steps per env step once
learning has started = gradient_steps / (train_freq x n_envs) (``gradient_steps=-1`` means one per env step;
``train_freq`` in episodes has no fixed ratio, the measured one is in each seed's figures). Each gradient
step uses ``batch_size`` transitions. Note for DQN: SB3's DQN is plain (not double) DQN with a Huber loss,
and its ``target_update_interval`` counts env steps (``_on_step``), not gradient steps.

torch runs on ``torch.set_num_threads(--threads)`` (default 1: the zoo's train.py leaves torch's default
unless ``--num-threads`` is given, so the zoo does not prescribe it) and ``--device=cpu`` by default.
Output: a table on stdout and ``<out>/sb3_<algo>_<env>.json`` (per seed the figures above, the
hyperparameters, SB3 / rl_zoo3 / torch / gymnasium versions). Run one training at a time (``nice -n 5`` on a
shared machine): the seeds run one after the other in this process. ``python -m bench.sb3_tb <json>
--dir=<train_dir>`` (in sfx's venv) writes each seed's curve as an experiment folder, so ``sfx.tb plot`` and
``sfx.tb table`` show SB3 beside sfx.
"""

from __future__ import annotations

import argparse
import collections
import inspect
import json
import math
import sys
import time
from pathlib import Path

ZOO_SCHEDULE_KEYS = ("learning_rate", "clip_range", "clip_range_vf", "delta_std")
REFUSED_KEYS = {
    "callback": "the zoo's callbacks (e.g. ParallelTrainCallback) change what is timed; not supported here",
    "replay_buffer_class": "custom replay buffers (HER) need goal-conditioned envs; not supported here",
}


class BenchError(Exception):
    """A user error: printed as one line, exit code 2."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--algo", required=True, help="an rl_zoo3 algorithm: dqn, sac, td3, qrdqn, tqc, ...")
    p.add_argument("--env", required=True, help="gymnasium env id, e.g. CartPole-v1, HalfCheetah-v4")
    p.add_argument("--seeds", default="0", help="comma-separated seeds, run one after the other (default 0)")
    p.add_argument("--threshold", type=float, default=None,
                   help="stop a seed when its last-100-episode average reaches this (default: none)")
    p.add_argument("--max_steps", type=int, default=None, help="env steps per seed (default: the zoo's n_timesteps)")
    p.add_argument("--out", default=None, help="output folder (default bench/results/sb3_<algo>_<env>_<time>)")
    p.add_argument("--hyperparams_from", default=None,
                   help="use this env id's entry of the zoo's YAML instead of --env's (e.g. HalfCheetah-v4)")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    p.add_argument("--device", default="cpu", help="torch device for SB3 (default cpu)")
    p.add_argument("--curve_every", type=int, default=1000, help="reward-curve resolution in env steps")
    p.add_argument("--window", type=int, default=100,
                   help="finished episodes the average counts (default 100, sfx's --stats_avg default)")
    p.add_argument("--updates_per_step", action="store_true",
                   help="only print the hyperparameters and SB3's gradient steps per env step, then exit")
    args = p.parse_args(argv)
    try:
        args.seed_list = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        p.error(f"--seeds must be comma-separated integers, got {args.seeds!r}")
    if not args.seed_list:
        p.error("--seeds is empty")
    if args.max_steps is not None and args.max_steps <= 0:
        p.error("--max_steps must be > 0")
    if args.curve_every <= 0:
        p.error("--curve_every must be > 0")
    if args.window <= 0:
        p.error("--window must be > 0")
    return args


def import_stack():
    """The SB3 stack, with a clear line when this is not the sb3 venv."""
    try:
        import gymnasium
        import numpy
        import rl_zoo3
        import stable_baselines3
        import torch
        import yaml
    except ImportError as e:
        raise BenchError(f"{e}: run this with bench/sb3_venv/bin/python (create it with bash bench/setup_sb3.sh)")
    if "sfx" in sys.modules:
        raise BenchError("sfx got imported: this script must run in bench/sb3_venv, apart from sfx")
    return gymnasium, numpy, rl_zoo3, stable_baselines3, torch, yaml


def load_zoo_entry(rl_zoo3, yaml, algo: str, env_id: str, entry_id: str | None) -> tuple[Path, str, dict]:
    """(yaml file, entry name, the entry exactly as the zoo gives it)."""
    path = Path(rl_zoo3.__file__).parent / "hyperparams" / f"{algo}.yml"
    if not path.is_file():
        have = sorted(p.stem for p in path.parent.glob("*.yml"))
        raise BenchError(f"rl_zoo3 {rl_zoo3.__version__} has no {path.name} (it has: {', '.join(have)})")
    with open(path) as f:
        entries = yaml.safe_load(f)
    name = entry_id or env_id
    if name in entries:
        return path, name, dict(entries[name])
    if "NoFrameskip" in name or name.startswith("ALE/"):
        raise BenchError(f"{name} is an Atari env (the zoo's 'atari' entry): not supported, this venv has no ale-py")
    near = [k for k in entries if k.split("-")[0].lower() == name.split("-")[0].lower()]
    hint = f"; entries for the same env: {', '.join(near)} (pass --hyperparams_from=one of them)" if near else ""
    if "default" in entries and entry_id is None and not near:
        return path, "default", dict(entries["default"])  # what the zoo's train.py falls back to
    # with another version of the same env listed, its 'default' would silently differ (HalfCheetah-v5 would
    # get learning_starts=100, not v4's 10000): make the choice explicit (--hyperparams_from=default works too)
    raise BenchError(f"{path} has no entry for {name}{hint}")


def eval_zoo_string(text: str, torch) -> object:
    """The zoo writes policy_kwargs & co. as Python expressions (``dict(net_arch=[256, 256])``)."""
    import numpy as np
    return eval(text, {"__builtins__": {}}, {"dict": dict, "list": list, "tuple": tuple, "nn": torch.nn,
                                             "th": torch, "torch": torch, "np": np, "float": float, "int": int})


def resolve(entry: dict, algo_cls, torch) -> dict:
    """The zoo entry -> constructor kwargs and the env recipe, as rl_zoo3's train.py would build them."""
    from rl_zoo3.utils import get_class_by_name, get_wrapper_class, linear_schedule

    hp = dict(entry)
    for key, why in REFUSED_KEYS.items():
        if key in hp:
            raise BenchError(f"the zoo entry sets {key}={hp[key]!r}: {why}")
    out = {"n_timesteps": int(float(hp.pop("n_timesteps"))), "n_envs": int(hp.pop("n_envs", 1))}

    for key in ZOO_SCHEDULE_KEYS:
        if isinstance(hp.get(key), str):
            kind, _, value = hp[key].partition("_")
            if kind != "lin":
                raise BenchError(f"{key}={hp[key]!r}: only the zoo's 'lin_<x>' schedules are supported")
            hp[key] = linear_schedule(float(value))
    if isinstance(hp.get("train_freq"), list):
        hp["train_freq"] = tuple(hp["train_freq"])

    normalize = hp.pop("normalize", False)
    if isinstance(normalize, str):
        normalize = eval_zoo_string(normalize, torch)
    if normalize:
        kwargs = dict(normalize) if isinstance(normalize, dict) else {}
        if "gamma" in hp:
            kwargs["gamma"] = hp["gamma"]
        out["normalize"] = kwargs
    else:
        out["normalize"] = None

    for key in ("policy_kwargs", "replay_buffer_kwargs"):
        if isinstance(hp.get(key), str):
            hp[key] = eval_zoo_string(hp[key], torch)
    for key in ("env_kwargs", "monitor_kwargs"):
        value = hp.pop(key, None) or {}
        out[key] = eval_zoo_string(value, torch) if isinstance(value, str) else dict(value)

    out["frame_stack"] = hp.pop("frame_stack", None)
    out["env_wrapper"] = get_wrapper_class(hp)
    out["vec_env_wrapper"] = get_wrapper_class(hp, "vec_env_wrapper")
    hp.pop("env_wrapper", None)
    hp.pop("vec_env_wrapper", None)
    if isinstance(hp.get("policy"), str) and "." in hp["policy"]:
        hp["policy"] = get_class_by_name(hp["policy"])

    noise_type = hp.pop("noise_type", None)
    noise_std = hp.pop("noise_std", None)
    out["noise"] = (noise_type.strip(), float(noise_std)) if noise_type else None

    accepted = inspect.signature(algo_cls.__init__).parameters
    unknown = [k for k in hp if k not in accepted]
    if unknown:
        raise BenchError(f"the zoo entry has keys {algo_cls.__name__} does not take and this script does not "
                         f"resolve: {', '.join(unknown)}")
    out["algo_kwargs"] = hp
    return out


def effective_kwargs(algo_cls, algo_kwargs: dict) -> dict:
    """Every constructor argument in effect: the zoo's, then SB3's defaults for the rest."""
    eff = {}
    for name, param in inspect.signature(algo_cls.__init__).parameters.items():
        if name in ("self", "env", "seed", "device", "verbose", "tensorboard_log", "_init_setup_model",
                    "stats_window_size") or param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
            continue
        if name in algo_kwargs:
            eff[name] = algo_kwargs[name]
        elif param.default is not inspect.Parameter.empty:
            eff[name] = param.default
    return eff


def gradient_steps_made(model) -> int:
    """The optimizer steps SB3 made. Off-policy algorithms and A2C count them in ``_n_updates``; PPO adds
    ``n_epochs`` per rollout there, one per pass, each pass being ``ceil(n_steps x n_envs / batch_size)`` minibatch
    steps (its last minibatch may be short)."""
    from stable_baselines3 import PPO

    updates = int(getattr(model, "_n_updates", 0))
    if isinstance(model, PPO):
        return updates * math.ceil(model.n_steps * model.n_envs / model.batch_size)
    return updates


def updates_per_step(algo_cls, eff: dict, n_envs: int) -> dict:
    """SB3's gradient steps per env step (off-policy algorithms) from train_freq / gradient_steps / n_envs."""
    from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm

    if not issubclass(algo_cls, OffPolicyAlgorithm):
        from stable_baselines3 import PPO

        if issubclass(algo_cls, PPO):
            # every n_steps x n_envs collected, n_epochs passes of ceil(n_steps x n_envs / batch_size) minibatches
            rollout = int(eff.get("n_steps", 2048)) * n_envs
            per_pass = math.ceil(rollout / int(eff.get("batch_size", 64)))
            return {"ratio": round(int(eff.get("n_epochs", 10)) * per_pass / rollout, 6), "n_envs": n_envs,
                    "n_steps": eff.get("n_steps"), "batch_size": eff.get("batch_size"), "n_epochs": eff.get("n_epochs"),
                    "note": "on-policy: each rollout is used n_epochs times, then dropped (no replay)"}
        return {"ratio": None, "note": f"{algo_cls.__name__} is on-policy: no replay ratio"}
    freq = eff.get("train_freq", 1)
    freq_n, unit = (freq, "step") if isinstance(freq, int) else (int(freq[0]), str(freq[1]))
    grad = int(eff.get("gradient_steps", 1))
    info = {"train_freq": freq_n, "train_freq_unit": unit, "gradient_steps": grad, "n_envs": n_envs,
            "batch_size": eff.get("batch_size"), "learning_starts": eff.get("learning_starts")}
    if unit != "step":
        info.update(ratio=None, note=f"training every {freq_n} episode(s): no fixed ratio (see measured)")
    elif grad < 0:
        info.update(ratio=1.0, note="gradient_steps=-1: one gradient step per env step collected")
    else:
        ratio = grad / (freq_n * n_envs)
        info.update(ratio=ratio, note=f"{grad} gradient steps every {freq_n} x {n_envs} env steps "
                                      f"= {ratio:g} per env step, each on a batch of {eff.get('batch_size')}")
    return info


def show(value) -> object:
    """JSON-able, readable form of a hyperparameter value (classes and schedules by name)."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): show(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [show(v) for v in value]
    if isinstance(value, type):
        return f"{value.__module__}.{value.__qualname__}"
    return repr(value)


def make_progress_clamped(algo_cls, horizon: int):
    """``algo_cls`` whose schedules span ``horizon`` env steps (the zoo's n_timesteps), held at their end after."""

    def _update_current_progress_remaining(self, num_timesteps: int, total_timesteps: int) -> None:
        self._current_progress_remaining = max(0.0, 1.0 - float(num_timesteps) / float(horizon))

    return type(f"ZooHorizon{algo_cls.__name__}", (algo_cls,),
                {"_update_current_progress_remaining": _update_current_progress_remaining})


def make_env(recipe: dict, env_id: str, seed: int, numpy):
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecFrameStack, VecNormalize

    env = make_vec_env(env_id, n_envs=recipe["n_envs"], seed=seed, env_kwargs=recipe["env_kwargs"] or None,
                       wrapper_class=recipe["env_wrapper"], monitor_kwargs=recipe["monitor_kwargs"] or None)
    if recipe["vec_env_wrapper"] is not None:
        env = recipe["vec_env_wrapper"](env)
    if recipe["normalize"] is not None:
        env = VecNormalize(env, **recipe["normalize"])
    if recipe["frame_stack"]:
        env = VecFrameStack(env, int(recipe["frame_stack"]))
    return env


def action_noise(recipe: dict, env, numpy):
    if recipe["noise"] is None:
        return None
    from stable_baselines3.common.noise import NormalActionNoise, OrnsteinUhlenbeckActionNoise

    kind, std = recipe["noise"]
    n = env.action_space.shape[0]
    classes = {"normal": NormalActionNoise, "ornstein-uhlenbeck": OrnsteinUhlenbeckActionNoise}
    if kind not in classes:
        raise BenchError(f"noise_type={kind!r}: only {', '.join(classes)} are supported")
    return classes[kind](mean=numpy.zeros(n), sigma=std * numpy.ones(n))


def make_callback(threshold: float | None, curve_every: int, max_steps: int, window: int = 100):
    from stable_baselines3.common.callbacks import BaseCallback

    class RewardWindow(BaseCallback):
        """The last-``window``-episode average return, the threshold crossing and a reward curve."""

        def __init__(self) -> None:
            super().__init__(verbose=0)
            self.window: collections.deque = collections.deque(maxlen=window)
            self.episodes = 0
            self.curve: list[tuple[int, float]] = []
            self.curve_seconds: list[float] = []  # each curve point's seconds from the start of learn
            self.full_at: int | None = None  # env steps when the window first held `window` episodes
            self.next_point = curve_every
            self.hit: tuple[int, float] | None = None
            self.t0 = 0.0

        def mean(self) -> float | None:
            return sum(self.window) / len(self.window) if self.window else None

        def _on_training_start(self) -> None:
            self.t0 = time.perf_counter()

        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                episode = info.get("episode")
                if episode is not None:
                    self.window.append(float(episode["r"]))
                    self.episodes += 1
            steps = self.num_timesteps
            if self.full_at is None and len(self.window) == self.window.maxlen:
                self.full_at = steps
            if steps >= self.next_point:
                if self.window:
                    self.curve.append((steps, round(self.mean(), 4)))
                    self.curve_seconds.append(round(time.perf_counter() - self.t0, 3))
                self.next_point = (steps // curve_every + 1) * curve_every
            if (threshold is not None and self.hit is None and len(self.window) == self.window.maxlen
                    and self.mean() >= threshold):
                self.hit = (steps, time.perf_counter() - self.t0)
                return False
            # exactly max_steps: SB3's learn() checks its total only between rollouts (train_freq steps)
            return steps < max_steps

    return RewardWindow()


def run_seed(algo_cls, recipe: dict, env_id: str, seed: int, max_steps: int, args, numpy) -> dict:
    env = make_env(recipe, env_id, seed, numpy)
    kwargs = dict(recipe["algo_kwargs"])
    noise = action_noise(recipe, env, numpy)
    if noise is not None:
        kwargs["action_noise"] = noise
    model = make_progress_clamped(algo_cls, recipe["n_timesteps"])(env=env, seed=seed, device=args.device,
                                                                   verbose=0, **kwargs)
    callback = make_callback(args.threshold, args.curve_every, max_steps, args.window)
    start = time.perf_counter()
    model.learn(total_timesteps=max_steps, callback=callback)
    seconds = time.perf_counter() - start
    steps = int(model.num_timesteps)
    curve, curve_seconds = list(callback.curve), list(callback.curve_seconds)
    final = callback.mean()
    if final is not None and (not curve or curve[-1][0] != steps):
        curve.append((steps, round(final, 4)))
        curve_seconds.append(round(seconds, 3))
    grad_steps = gradient_steps_made(model)
    env.close()
    return {"seed": seed,
            "steps_to_threshold": callback.hit[0] if callback.hit else None,
            "seconds_to_threshold": round(callback.hit[1], 3) if callback.hit else None,
            "final": round(final, 4) if final is not None else None,
            "final_window": len(callback.window), "episodes": callback.episodes,
            "env_steps": steps, "seconds": round(seconds, 3), "steps_per_sec": round(steps / seconds, 1),
            "gradient_steps": grad_steps, "measured_updates_per_step": round(grad_steps / max(steps, 1), 4),
            "window_full_at": callback.full_at, "curve": curve, "curve_seconds": curve_seconds}


def fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table(rows: list[dict], threshold: float | None) -> str:
    head = (f"{'seed':>4}  {'steps_to_thr':>12}  {'sec_to_thr':>10}  {'final':>9}  {'episodes':>8}  "
            f"{'env_steps':>9}  {'seconds':>8}  {'steps/s':>8}  {'upd/step':>8}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['seed']:>4}  {fmt(r['steps_to_threshold'], 'd'):>12}  "
                     f"{fmt(r['seconds_to_threshold'], '.1f'):>10}  {fmt(r['final'], '.1f'):>9}  {r['episodes']:>8}  "
                     f"{r['env_steps']:>9}  {r['seconds']:>8.1f}  {r['steps_per_sec']:>8.1f}  "
                     f"{r['measured_updates_per_step']:>8.3f}")
    hits = [r for r in rows if r["steps_to_threshold"] is not None]
    if threshold is not None:
        lines.append(f"reached {threshold:g}: {len(hits)}/{len(rows)} seeds")
        if hits:
            steps = sorted(r["steps_to_threshold"] for r in hits)
            secs = sorted(r["seconds_to_threshold"] for r in hits)
            lines.append(f"  steps to {threshold:g}: mean {sum(steps) / len(steps):.0f}, median {median(steps):.0f}; "
                         f"seconds: mean {sum(secs) / len(secs):.1f}, median {median(secs):.1f} (reached seeds only)")
    return "\n".join(lines)


def median(xs: list) -> float:
    n = len(xs)
    return float(xs[n // 2]) if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return run(args)
    except BenchError as e:
        print(f"sb3_baseline: error: {e}", file=sys.stderr)
        return 2


def run(args: argparse.Namespace) -> int:
    gymnasium, numpy, rl_zoo3, sb3, torch, yaml = import_stack()
    from importlib.metadata import version

    from rl_zoo3 import ALGOS

    algo = args.algo.lower()
    if algo not in ALGOS:
        raise BenchError(f"--algo={args.algo}: rl_zoo3 knows {', '.join(sorted(ALGOS))}")
    algo_cls = ALGOS[algo]
    try:
        gymnasium.spec(args.env)
    except Exception as e:  # gymnasium raises its own NameNotFound / VersionNotFound / ...
        raise BenchError(f"--env={args.env}: {e}")
    path, entry_name, entry = load_zoo_entry(rl_zoo3, yaml, algo, args.env, args.hyperparams_from)
    recipe = resolve(entry, algo_cls, torch)
    eff = effective_kwargs(algo_cls, recipe["algo_kwargs"])
    utd = updates_per_step(algo_cls, eff, recipe["n_envs"])
    max_steps = args.max_steps or recipe["n_timesteps"]
    torch.set_num_threads(args.threads)

    versions = {"stable_baselines3": sb3.__version__, "rl_zoo3": rl_zoo3.__version__, "torch": torch.__version__,
                "gymnasium": gymnasium.__version__, "numpy": numpy.__version__, "python": sys.version.split()[0]}
    try:
        versions["mujoco"] = version("mujoco")
    except Exception:
        pass
    print(f"SB3 {versions['stable_baselines3']}, rl_zoo3 {versions['rl_zoo3']}, torch {versions['torch']}, "
          f"gymnasium {versions['gymnasium']}")
    print(f"hyperparameters: {path}, entry {entry_name!r}"
          + (f" (borrowed for {args.env})" if entry_name != args.env else ""))
    print("  as the zoo gives them:")
    for k, v in entry.items():
        print(f"    {k}: {v!r}")
    print(f"  {algo_cls.__name__} arguments in effect (zoo + SB3 defaults):")
    for k, v in eff.items():
        print(f"    {k} = {show(v)!r}")
    print(f"  env: {args.env}, n_envs={recipe['n_envs']} (DummyVecEnv + Monitor), normalize={recipe['normalize']}, "
          f"frame_stack={recipe['frame_stack']}, env_kwargs={recipe['env_kwargs']}, action_noise={recipe['noise']}")
    print(f"updates per env step: {utd['ratio'] if utd['ratio'] is None else format(utd['ratio'], 'g')} ({utd['note']})"
          + (f"; learning starts after {utd['learning_starts']} env steps" if utd.get("learning_starts") else ""))
    if args.updates_per_step:
        return 0
    schedule_note = ("" if max_steps <= recipe["n_timesteps"] else
                     f"; schedules end at the zoo's {recipe['n_timesteps']} steps and hold their final value after")
    print(f"run: seeds {args.seed_list}, threshold {args.threshold}, max_steps {max_steps} (zoo n_timesteps "
          f"{recipe['n_timesteps']}{schedule_note}), torch.set_num_threads({args.threads}) (the zoo sets none), "
          f"device {args.device}")

    out = Path(args.out or Path(__file__).resolve().parent / "results"
               / f"sb3_{algo}_{args.env.replace('/', '_')}_{time.strftime('%Y%m%d_%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    json_path = out / f"sb3_{algo}_{args.env.replace('/', '_')}.json"
    report = {"algo": algo, "env": args.env, "threshold": args.threshold, "max_steps": max_steps,
              "reward_definition": f"mean return of the last {args.window} finished episodes (threshold: full "
                                   "window only)", "window": args.window,
              "hyperparams_file": str(path), "hyperparams_entry": entry_name, "hyperparams_zoo": show(entry),
              "hyperparams_effective": show(eff), "n_envs": recipe["n_envs"], "normalize": recipe["normalize"],
              "frame_stack": recipe["frame_stack"], "schedule_horizon": recipe["n_timesteps"],
              "updates_per_step": utd, "torch_threads": args.threads, "device": args.device,
              "versions": versions, "seeds": []}
    for seed in args.seed_list:
        row = run_seed(algo_cls, recipe, args.env, seed, max_steps, args, numpy)
        report["seeds"].append(row)
        status = (f"reached {args.threshold:g} at {row['steps_to_threshold']} steps, {row['seconds_to_threshold']:.1f} s"
                  if row["steps_to_threshold"] is not None else
                  ("no threshold" if args.threshold is None else f"did not reach {args.threshold:g}"))
        print(f"seed {seed}: {status}; final {fmt(row['final'], '.1f')} over {row['final_window']} episodes, "
              f"{row['env_steps']} steps in {row['seconds']:.1f} s ({row['steps_per_sec']:.0f} steps/s)", flush=True)
        json_path.write_text(json.dumps(report, indent=1))  # after every seed: a killed run keeps what it did
    print()
    print(table(report["seeds"], args.threshold))
    print(f"json: {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
