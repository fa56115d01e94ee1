"""The Stable-Baselines3 reference side of sfx's comparisons (R2D2 vs DQN, SAC vs SAC, APPO vs PPO on HalfCheetah
and on Atari): SB3 trained with the RL Zoo's published hyperparameters, measured the way sfx measures itself.

Runs only under its own venv (SB3 + rl_zoo3 + gymnasium with MuJoCo and ale-py; never a dependency of sfx, not in
CI)::

    bash bench/setup_sb3.sh                                      # once: creates bench/sb3_venv (idempotent)
    nice -n 5 bench/sb3_venv/bin/python bench/sb3_baseline.py --algo=dqn --env=CartPole-v1 \\
        --seeds=0,1,2 --threshold=400                            # R2D2's reference (issue 27)
    nice -n 5 bench/sb3_venv/bin/python bench/sb3_baseline.py --algo=sac --env=HalfCheetah-v4 \\
        --seeds=0,1,2 --threshold=3000 --max_steps=300000        # SAC's reference (issue 28)
    nice -n 5 bench/sb3_venv/bin/python bench/sb3_baseline.py --algo=sac --env=Pendulum-v1 --seeds=0 \\
        --threshold=-200                                         # a SAC smoke run (~1 minute)
    nice -n 5 bench/sb3_venv/bin/python bench/sb3_baseline.py --algo=ppo --env=HalfCheetah-v5 \\
        --hyperparams_from=HalfCheetah-v4 --seeds=0,1,2 --max_steps=1000000  # APPO's PPO reference (issue 39)
    nice -n 5 bench/sb3_venv/bin/python bench/sb3_baseline.py --algo=ppo --env=PongNoFrameskip-v4 --seeds=0 \
        --max_frames=10000000 --threads=2 --checkpoint_every=1000000 --out=bench/results/sb3_ppo_pong_s0
                                                                 # APPO's Atari reference (issue 54), resumable:
    nice -n 5 bench/sb3_venv/bin/python bench/sb3_baseline.py --resume=bench/results/sb3_ppo_pong_s0
    bench/sb3_venv/bin/python bench/sb3_baseline.py --algo=dqn --env=CartPole-v1 --updates_per_step
                                                                 # only print hyperparameters and the UTD ratio

Flags: ``--algo`` any of rl_zoo3's algorithms (dqn, sac, td3, ddpg, qrdqn, tqc, ppo, a2c, ...); ``--env`` a
gymnasium id; ``--seeds=0,1,2``; ``--threshold=R`` (optional: without it every seed runs to ``--max_steps``);
``--max_steps=N`` env steps per seed, SB3's timesteps: agent steps summed over ``n_envs`` (default: the zoo's
``n_timesteps``); ``--max_frames=F`` instead, Atari only: emulator frames (below); ``--out=DIR`` (default
``bench/results/sb3_<algo>_<env>_<timestamp>``); ``--hyperparams_from=ENV_ID`` takes another entry of the
same YAML (e.g. ``--env=HalfCheetah-v5 --hyperparams_from=HalfCheetah-v4``: the zoo only lists v4, and sfx's
``mujoco_halfcheetah`` is v5); ``--threads=1`` torch threads; ``--device=cpu``; ``--curve_every=1000``;
``--window=100`` the finished episodes the average counts (sfx's ``--stats_avg``); ``--checkpoint_every=F``,
``--resume=DIR`` (below).

Hyperparameters: the entry for ``--env`` in the installed package's ``rl_zoo3/hyperparams/<algo>.yml``
(printed: file, the entry exactly as the zoo gives it, then every constructor argument in effect, SB3's
defaults included). The zoo's special keys are resolved as its ``train.py`` does: ``n_timesteps``,
``n_envs`` (DummyVecEnv, make_vec_env with a Monitor per env), ``normalize`` (VecNormalize; its gamma
follows the algorithm's), ``frame_stack`` (VecFrameStack), ``env_wrapper`` / ``vec_env_wrapper``,
``env_kwargs``, ``monitor_kwargs``, ``policy_kwargs`` / ``replay_buffer_kwargs`` strings, schedules
``lin_<x>`` for learning_rate / clip_range / clip_range_vf, ``noise_type`` / ``noise_std``, list
``train_freq``, dotted ``policy`` names. Refused with a line that says why: ``callback`` (changes what
is timed), ``replay_buffer_class`` (HER: goal envs).

Atari (an env whose entry point is ale-py's AtariEnv, the zoo's own test): the env's entry if the YAML has one,
else the zoo's ``atari`` entry (its read_hyperparameters order: own entry, ``atari``, ``default``); for ppo.yml
that is AtariWrapper, frame_stack 4, CnnPolicy, n_envs 8, n_steps 128, n_epochs 4, batch_size 256, lin_2.5e-4
learning rate, lin_0.1 clip range, ent_coef 0.01, vf_coef 0.5, n_timesteps 1e7 (printed from the installed YAML at
every run). The envs are built as the zoo's train.py builds them (create_envs: make_vec_env with the entry's
env_wrapper as wrapper_class, which is what SB3's make_atari_env also does; then VecFrameStack(4); SB3 adds
VecTransposeImage): per env ``gym.make(id)`` -> ``Monitor`` -> ``AtariWrapper`` (NoopResetEnv(30) ->
MaxAndSkipEnv(4) -> EpisodicLifeEnv -> FireResetEnv -> WarpFrame(84) -> ClipRewardEnv, read in SB3's
atari_wrappers.py). The Monitor wraps the ALE env itself, inside every AtariWrapper layer, so the reward curve is
the whole game's raw score: it sums unclipped rewards (ClipRewardEnv is outside it), its episode ends only when the
game does (EpisodicLifeEnv's life-loss ``terminated`` is raised outside it, and after a lost life EpisodicLifeEnv
steps on instead of resetting the ALE), and its length counts every emulator frame. ``PongNoFrameskip-v4`` /
``BreakoutNoFrameskip-v4``: ale-py's v4 registration, no sticky actions (repeat_action_probability 0), the
minimal action set, frameskip 1 (AtariWrapper skips), 108,000-frame game cap: CleanRL's protocol.

Units, Atari: SB3's timesteps are agent steps summed over the envs; one agent step is 4 emulator frames
(AtariWrapper's frame_skip on a NoFrameskip env: ``frames_per_step``, computed from the entry and the env's spec).
Figures in frames, sfx's unit (its env steps count frames) and CleanRL's ("10M timesteps" = 40M frames), sit
beside the timesteps: per seed ``frames``, ``frames_per_sec``, ``frames_to_threshold``, ``window_full_at_frames``,
``curve_frames`` (each curve point's frames); in the report ``frames_per_step``, ``max_frames``,
``schedule_horizon_frames``; in the table ``frames_to_thr``, ``frames``, ``frames/s``. ``--max_steps`` and
``--curve_every`` stay in timesteps; ``--max_frames`` and ``--checkpoint_every`` count frames. ``emulator_frames``
is ALE's own count, a little more than timesteps x 4 (the no-op starts and FIRE / life-loss reset steps). The
zoo's schedules span its n_timesteps = 1e7 timesteps = 40M frames, so a 10M-frame run is the first quarter of
the zoo's run (its learning rate ends at 0.75 x 2.5e-4), the rule below. Per update (Atari) ``schedule``:
(timesteps, progress remaining, learning rate, clip range) of every PPO update.

Checkpoints and resume (on-policy algorithms on Atari, the runs that take hours): ``--checkpoint_every=F`` saves
every F frames, between two rollouts (after an update: the model, the envs and the counters agree there), to
``<out>/checkpoint_seed<N>/``: ``model.zip`` (SB3's save: weights, Adam's state, num_timesteps, the last
observation and episode starts, the progress), ``env.pkl`` (the DummyVecEnv with every env's gym wrappers and
their state, i.e. the Monitor's game so far and EpisodicLifeEnv's lives; each emulator's ALE state with its RNG
and the AtariEnv's np_random, which pickling alone would lose; VecFrameStack's stacked frames), ``rng.pkl``
(torch's, numpy's and Python's global RNGs: action sampling and the minibatch order) and ``state.json`` (the
reward window, the curve so far, the schedule, the learning seconds so far). Written to a ``.tmp`` folder and
swapped in, so a cut during a save leaves the previous one. ``--resume=<out>`` continues every unfinished seed of
that run with its settings (``<out>/run.json``; only ``--max_steps`` / ``--max_frames``, ``--threads`` and
``--checkpoint_every`` may be given again, e.g. a longer budget: a finished seed then continues from its last
checkpoint): SB3's load with ``force_reset=False`` (the envs stay mid-game), then the env state and the RNGs
put back (load reseeds both), and ``learn(reset_num_timesteps=False)``. SB3 then adds num_timesteps to the total
it is given and computes ``_current_progress_remaining = 1 - num_timesteps / total``; here the progress is
``1 - num_timesteps / the zoo's n_timesteps`` whatever the total (make_progress_clamped), so the learning rate and
clip range of every update after a resume are those of the uncut run. ``seconds`` and ``curve_seconds`` count
learning time across sessions (``sessions`` lists where each began). bench/sb3_resume_check.py checks it: a run
killed after its checkpoint and resumed equals an uncut run (curve, games, schedule, emulator frames, the final
weights' sha256): equal on 2026-12-02 (Pong, 2 x 2,048 timesteps, bench/results/sb3_resume_check_20261202).

Measured (2026-12-02, this 2-core machine, PPO on PongNoFrameskip-v4, ``--threads=2``, nice 5, never alone:
another training or the lead's test suite beside it): 226 timesteps/s = 904 frames/s (3,072 timesteps, load
average 1.4-1.8) and 190 timesteps/s = 762 frames/s (4,096 timesteps, load ~3); under the slow test suite (load
6-9, nice 0 beside nice 5) 20 timesteps/s = 79 frames/s, and a 102,400-timestep timing run had not reached 51,200
timesteps in 20 minutes (stopped). Projected for 10M frames (2.5M timesteps, the issue-54 budget): ~3.1-3.7 hours
at 760-900 frames/s on a machine this quiet, ~35 hours under that contention: run it when the machine is
otherwise idle, with ``--checkpoint_every`` so a cut session resumes.


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
import os
import pickle
import random
import shutil
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


# with --resume these may be given again (a longer or shorter budget, another thread count or checkpoint
# period); every other setting comes from the run being resumed (<out>/run.json)
RESUME_OVERRIDES = ("max_steps", "max_frames", "threads", "checkpoint_every")
RUN_FILE = "run.json"


def build_parser(suppress: bool = False) -> argparse.ArgumentParser:
    """The flags; ``suppress=True``: no defaults, so parsing yields only the flags given (for --resume)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                argument_default=argparse.SUPPRESS if suppress else None)

    def add(*names, default=None, **kw):
        p.add_argument(*names, **kw, **({} if suppress else {"default": default}))

    add("--algo", help="an rl_zoo3 algorithm: dqn, sac, td3, qrdqn, tqc, ppo, ... (required unless --resume)")
    add("--env", help="gymnasium env id, e.g. CartPole-v1, HalfCheetah-v4, PongNoFrameskip-v4 (required unless "
                      "--resume)")
    add("--seeds", default="0", help="comma-separated seeds, run one after the other (default 0)")
    add("--threshold", type=float, help="stop a seed when its last-100-episode average reaches this (default: none)")
    add("--max_steps", type=int, help="SB3 timesteps per seed: agent steps summed over n_envs (default: the zoo's "
                                      "n_timesteps)")
    add("--max_frames", type=int, help="Atari only: emulator frames per seed (agent steps x frames per step); "
                                       "instead of --max_steps")
    add("--out", help="output folder (default bench/results/sb3_<algo>_<env>_<time>)")
    add("--hyperparams_from",
        help="use this env id's entry of the zoo's YAML instead of --env's (e.g. HalfCheetah-v4)")
    add("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    add("--device", default="cpu", help="torch device for SB3 (default cpu)")
    add("--curve_every", type=int, default=1000, help="reward-curve resolution in SB3 timesteps (agent steps)")
    add("--window", type=int, default=100,
        help="finished episodes the average counts (default 100, sfx's --stats_avg default)")
    add("--checkpoint_every", type=int,
        help="on-policy Atari runs: save a checkpoint to <out>/checkpoint_seed<N> every this many emulator frames")
    add("--resume", help="continue the run in this output folder from its checkpoints (the same seeds and settings)")
    p.add_argument("--updates_per_step", action="store_true",
                   help="only print the hyperparameters and SB3's gradient steps per env step, then exit")
    return p


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = build_parser()
    args = p.parse_args(argv)
    args.given = set(vars(build_parser(suppress=True).parse_args(argv))) - {"updates_per_step"}
    if args.resume is None and (args.algo is None or args.env is None):
        p.error("--algo and --env are required (or --resume=<out dir> of a run with checkpoints)")
    if args.resume is not None:
        fixed = sorted(args.given - set(RESUME_OVERRIDES) - {"resume"})
        if fixed:
            again = ", ".join("--" + k for k in RESUME_OVERRIDES)
            p.error(f"--resume takes its settings from the run it continues; only {again} may be given again, "
                    f"not --{', --'.join(fixed)}")
    try:
        args.seed_list = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        p.error(f"--seeds must be comma-separated integers, got {args.seeds!r}")
    if not args.seed_list:
        p.error("--seeds is empty")
    if args.max_steps is not None and args.max_frames is not None:
        p.error("--max_steps (SB3 timesteps) and --max_frames (emulator frames) say the same thing: give one")
    for name in ("max_steps", "max_frames", "checkpoint_every"):
        if getattr(args, name) is not None and getattr(args, name) <= 0:
            p.error(f"--{name} must be > 0")
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
    try:  # ale-py's ids (PongNoFrameskip-v4, ALE/Pong-v5) exist once registered, as rl_zoo3's import_envs does
        import ale_py
    except ImportError:
        pass
    else:
        gymnasium.register_envs(ale_py)
    return gymnasium, numpy, rl_zoo3, stable_baselines3, torch, yaml


def is_atari(gymnasium, env_id: str) -> bool:
    """The zoo's test (ExperimentManager.is_atari): the env's entry point is ale-py's AtariEnv."""
    return "AtariEnv" in str(gymnasium.spec(env_id).entry_point)


def load_zoo_entry(rl_zoo3, yaml, algo: str, env_id: str, entry_id: str | None,
                   atari: bool = False) -> tuple[Path, str, dict]:
    """(yaml file, entry name, the entry exactly as the zoo gives it). The zoo's order (read_hyperparameters):
    the env's own entry, else ``atari`` for an Atari env, else ``default``."""
    path = Path(rl_zoo3.__file__).parent / "hyperparams" / f"{algo}.yml"
    if not path.is_file():
        have = sorted(p.stem for p in path.parent.glob("*.yml"))
        raise BenchError(f"rl_zoo3 {rl_zoo3.__version__} has no {path.name} (it has: {', '.join(have)})")
    with open(path) as f:
        entries = yaml.safe_load(f)
    name = entry_id or env_id
    if name in entries:
        return path, name, dict(entries[name])
    if atari and entry_id is None:
        if "atari" not in entries:
            raise BenchError(f"{path} has no entry for {name} and no 'atari' entry")
        return path, "atari", dict(entries["atari"])
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


def atari_wrapper_kwargs(env_wrapper) -> dict | None:
    """AtariWrapper's keyword arguments in a zoo entry's ``env_wrapper`` (a name, or a list of names and
    ``{name: kwargs}`` dicts, as rl_zoo3's get_wrapper_class reads it): ``{}`` when named without arguments,
    None when the entry has no AtariWrapper."""
    items = env_wrapper if isinstance(env_wrapper, list) else [env_wrapper] if env_wrapper else []
    for item in items:
        name, kwargs = (item, {}) if isinstance(item, str) else next(iter(dict(item).items()))
        if str(name).rsplit(".", 1)[-1] == "AtariWrapper":
            return dict(kwargs or {})
    return None


def frames_per_step(base_frameskip, wrapper_kwargs: dict | None, wrapper_default_skip: int) -> int:
    """Emulator frames per SB3 timestep (agent step): the env's own frameskip (1 for ``*NoFrameskip-v4``, 4 for
    ``ALE/*-v5``) times AtariWrapper's ``frame_skip`` (its MaxAndSkipEnv, applied when > 1)."""
    if isinstance(base_frameskip, bool) or not isinstance(base_frameskip, int) or base_frameskip < 1:
        raise BenchError(f"the env's frameskip is {base_frameskip!r} (stochastic or not an integer): frames per "
                         "agent step are not fixed; use a *NoFrameskip-v4 id, as the zoo's AtariWrapper expects")
    skip = 1 if wrapper_kwargs is None else int(wrapper_kwargs.get("frame_skip", wrapper_default_skip))
    return base_frameskip * max(1, skip)


def steps_for_frames(frames: int, per_step: int) -> int:
    """SB3 timesteps that cover ``frames`` emulator frames (rounded up)."""
    return -(-int(frames) // int(per_step))


def make_env(recipe: dict, env_id: str, seed: int, numpy):
    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env(env_id, n_envs=recipe["n_envs"], seed=seed, env_kwargs=recipe["env_kwargs"] or None,
                       wrapper_class=recipe["env_wrapper"], monitor_kwargs=recipe["monitor_kwargs"] or None)
    return wrap_vec_env(recipe, env)


def wrap_vec_env(recipe: dict, env):
    """The zoo's VecEnv wrappers around the DummyVecEnv, in train.py's order (create_envs): vec_env_wrapper,
    VecNormalize, VecFrameStack (the algorithm adds VecTransposeImage for image observations)."""
    from stable_baselines3.common.vec_env import VecFrameStack, VecNormalize

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


CHECKPOINT_FILES = ("model.zip", "env.pkl", "rng.pkl", "state.json")  # state.json last: its presence = complete


def checkpoint_dir(out: Path, seed: int) -> Path:
    return out / f"checkpoint_seed{seed}"


def vec_layers(env) -> tuple[list, object]:
    """The VecEnvWrappers around ``env`` from the outside in, and the base VecEnv (the DummyVecEnv)."""
    from stable_baselines3.common.vec_env import VecEnvWrapper

    layers = []
    while isinstance(env, VecEnvWrapper):
        layers.append(env)
        env = env.venv
    return layers, env


def env_state(env) -> dict:
    """What the VecEnv must carry across a cut, Atari's. The DummyVecEnv pickles with every env's gym wrappers and
    their state (the Monitor's game so far, EpisodicLifeEnv's lives, ...), but ale-py's AtariEnv pickles as its
    constructor arguments, i.e. a fresh emulator: each emulator's state (RNG included) and the AtariEnv's
    np_random (NoopResetEnv's draws) are saved beside it. The VecEnvWrappers (VecFrameStack's stacked frames)
    are saved as their attributes."""
    layers, base = vec_layers(env)
    return {"layers": [(type(layer).__name__, {k: v for k, v in vars(layer).items()
                                               if k not in ("venv", "class_attributes")}) for layer in layers],
            "base": base,
            "ale": [e.unwrapped.ale.cloneState(include_rng=True) for e in base.envs],
            "np_random": [e.unwrapped.np_random.bit_generator.state for e in base.envs],
            "base_seeds": (base._seeds, base._options)}


def restore_env(recipe: dict, saved: dict):
    """The VecEnv of ``env_state``: the base unpickled, the emulators restored, the zoo's wrappers rebuilt around
    it and their saved attributes put back."""
    base = saved["base"]
    for e, ale_state, rng in zip(base.envs, saved["ale"], saved["np_random"]):
        e.unwrapped.ale.restoreState(ale_state)
        e.unwrapped.np_random.bit_generator.state = rng
    env = wrap_vec_env(recipe, base)
    layers, _ = vec_layers(env)
    names = [type(layer).__name__ for layer in layers]
    if names != [name for name, _ in saved["layers"]]:
        raise BenchError(f"the checkpoint's VecEnv wrappers {[n for n, _ in saved['layers']]} are not this recipe's "
                         f"{names}")
    for layer, (_, attrs) in zip(layers, saved["layers"]):
        layer.__dict__.update(attrs)
    return env


def emulator_frames(env) -> int:
    """Frames the emulators ran (ALE's own count: no-op starts and FIRE / life-loss reset steps included)."""
    _, base = vec_layers(env)
    return int(sum(e.unwrapped.ale.getFrameNumber() for e in base.envs))


def policy_digest(model) -> str:
    """sha256 of the policy's final weights (two runs that learned the same have the same digest)."""
    import hashlib

    h = hashlib.sha256()
    for name, tensor in sorted(model.policy.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def rng_state(torch, numpy) -> dict:
    state = {"torch": torch.get_rng_state(), "numpy": numpy.random.get_state(), "random": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict, torch, numpy) -> None:
    torch.set_rng_state(state["torch"])
    numpy.random.set_state(state["numpy"])
    random.setstate(state["random"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def complete_checkpoint(path: Path) -> Path | None:
    """``path`` if it holds a whole checkpoint, else the previous one (``<path>.old``, left by a cut during a save),
    else None."""
    for p in (path, path.with_name(path.name + ".old")):
        if all((p / f).is_file() for f in CHECKPOINT_FILES):
            return p
    return None


def save_checkpoint(path: Path, model, env, callback_state: dict, torch, numpy) -> None:
    """Written to ``<path>.tmp``, then swapped in (the previous one kept as ``<path>.old`` until the swap is done),
    so a cut at any moment leaves one whole checkpoint."""
    tmp, old = path.with_name(path.name + ".tmp"), path.with_name(path.name + ".old")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save(tmp / "model.zip")
    with open(tmp / "env.pkl", "wb") as f:
        pickle.dump(env_state(env), f)
    with open(tmp / "rng.pkl", "wb") as f:
        pickle.dump(rng_state(torch, numpy), f)
    (tmp / "state.json").write_text(json.dumps(callback_state, indent=1))
    if path.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(path, old)
    os.replace(tmp, path)
    shutil.rmtree(old, ignore_errors=True)


def make_callback(threshold: float | None, curve_every: int, max_steps: int, window: int = 100,
                  frames_per_step: int | None = None, checkpoint=None):
    """``frames_per_step`` (Atari): the curve's points also in frames, and the schedule's values per update.
    ``checkpoint``: (every SB3 timesteps, a function saving the callback's state with the model and env)."""
    from stable_baselines3.common.callbacks import BaseCallback

    class RewardWindow(BaseCallback):
        """The last-``window``-episode average return, the threshold crossing and a reward curve."""

        def __init__(self) -> None:
            super().__init__(verbose=0)
            self.window: collections.deque = collections.deque(maxlen=window)
            self.episodes = 0
            self.curve: list[tuple[int, float]] = []
            self.curve_seconds: list[float] = []  # each curve point's seconds from the start of learn
            self.curve_frames: list[int] = []  # each curve point's emulator frames (Atari)
            self.full_at: int | None = None  # env steps when the window first held `window` episodes
            self.next_point = curve_every
            self.hit: tuple[int, float] | None = None
            self.t0 = 0.0
            self.elapsed_before = 0.0  # learning seconds of the sessions before a resume
            self.schedule: list[list] = []  # (timesteps, progress_remaining, lr, clip_range) per update
            self.updates_seen = 0
            self.sessions: list[dict] = []
            self.next_checkpoint = checkpoint[0] if checkpoint else None

        def mean(self) -> float | None:
            return sum(self.window) / len(self.window) if self.window else None

        def state(self) -> dict:
            return {"num_timesteps": int(self.num_timesteps), "elapsed": round(time.perf_counter() - self.t0, 3),
                    "window": list(self.window), "episodes": self.episodes, "curve": self.curve,
                    "curve_seconds": self.curve_seconds, "curve_frames": self.curve_frames, "full_at": self.full_at,
                    "next_point": self.next_point, "schedule": self.schedule, "updates_seen": self.updates_seen,
                    "sessions": self.sessions, "next_checkpoint": self.next_checkpoint, "saved_at": time.time()}

        def load_state(self, state: dict) -> None:
            self.window.extend(state["window"])
            self.episodes = state["episodes"]
            self.curve = [tuple(p) for p in state["curve"]]
            self.curve_seconds = list(state["curve_seconds"])
            self.curve_frames = list(state["curve_frames"])
            self.full_at = state["full_at"]
            self.next_point = state["next_point"]
            self.schedule = [list(p) for p in state["schedule"]]
            self.updates_seen = state["updates_seen"]
            self.sessions = list(state["sessions"])
            self.next_checkpoint = state["next_checkpoint"]
            self.elapsed_before = float(state["elapsed"])

        def _on_training_start(self) -> None:
            self.t0 = time.perf_counter() - self.elapsed_before
            self.sessions.append({"from_timesteps": int(self.num_timesteps), "elapsed_before": self.elapsed_before,
                                  "started_at": time.strftime("%Y-%m-%d %H:%M:%S")})

        def _on_rollout_start(self) -> None:
            # called after the previous rollout's update: the model, the env and num_timesteps agree here
            model = self.model
            updates = int(getattr(model, "_n_updates", 0))
            if frames_per_step is not None and updates > self.updates_seen:
                progress = float(model._current_progress_remaining)
                clip = model.clip_range(progress) if callable(getattr(model, "clip_range", None)) else None
                self.schedule.append([int(self.num_timesteps), round(progress, 8),
                                      float(model.policy.optimizer.param_groups[0]["lr"]),
                                      None if clip is None else float(clip)])
                self.updates_seen = updates
            if checkpoint and self.num_timesteps >= self.next_checkpoint:
                every, save = checkpoint
                self.next_checkpoint = (self.num_timesteps // every + 1) * every
                save(self.state())

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
                    if frames_per_step is not None:
                        self.curve_frames.append(steps * frames_per_step)
                self.next_point = (steps // curve_every + 1) * curve_every
            if (threshold is not None and self.hit is None and len(self.window) == self.window.maxlen
                    and self.mean() >= threshold):
                self.hit = (steps, time.perf_counter() - self.t0)
                return False
            # exactly max_steps: SB3's learn() checks its total only between rollouts (train_freq steps)
            return steps < max_steps

    return RewardWindow()


def run_seed(algo_cls, recipe: dict, env_id: str, seed: int, max_steps: int, args, numpy,
             frames_per_step: int | None = None, out: Path | None = None, resume: bool = False, torch=None) -> dict:
    """One seed. ``frames_per_step`` (Atari): figures in frames beside SB3's timesteps. With
    ``args.checkpoint_every`` a checkpoint goes to ``<out>/checkpoint_seed<seed>``; ``resume`` continues from it."""
    model_cls = make_progress_clamped(algo_cls, recipe["n_timesteps"])
    ckpt = checkpoint_dir(out, seed) if out is not None else None
    source = complete_checkpoint(ckpt) if resume and ckpt is not None else None
    saved_state = None
    if source is not None:
        with open(source / "env.pkl", "rb") as f:
            saved_env = pickle.load(f)  # our own checkpoint (pickle: load only checkpoints you wrote)
        env = restore_env(recipe, saved_env)
        schedules = {k: v for k, v in recipe["algo_kwargs"].items() if k in ZOO_SCHEDULE_KEYS}
        # force_reset=False keeps the saved last observation (the env is mid-game, not reset); the fresh schedule
        # objects replace the pickled ones; load() reseeds the global RNGs and the VecEnv: both put back after
        model = model_cls.load(source / "model.zip", env=env, device=args.device, force_reset=False,
                               custom_objects=schedules)
        _, base = vec_layers(env)
        base._seeds, base._options = saved_env["base_seeds"]
        with open(source / "rng.pkl", "rb") as f:
            set_rng_state(pickle.load(f), torch, numpy)
        saved_state = json.loads((source / "state.json").read_text())
        print(f"seed {seed}: resuming from {source} at {model.num_timesteps} timesteps"
              + (f" ({model.num_timesteps * frames_per_step} frames)" if frames_per_step else "")
              + f", {saved_state['elapsed']:.0f} s of learning so far", flush=True)
    else:
        env = make_env(recipe, env_id, seed, numpy)
        kwargs = dict(recipe["algo_kwargs"])
        noise = action_noise(recipe, env, numpy)
        if noise is not None:
            kwargs["action_noise"] = noise
        model = model_cls(env=env, seed=seed, device=args.device, verbose=0, **kwargs)
    checkpoint = None
    if args.checkpoint_every and ckpt is not None:
        every = steps_for_frames(args.checkpoint_every, frames_per_step or 1)

        def save(state: dict) -> None:
            t = time.perf_counter()
            save_checkpoint(ckpt, model, env, state, torch, numpy)
            print(f"seed {seed}: checkpoint at {state['num_timesteps']} timesteps"
                  + (f" ({state['num_timesteps'] * frames_per_step} frames)" if frames_per_step else "")
                  + f", {state['elapsed']:.0f} s, saved in {time.perf_counter() - t:.1f} s", flush=True)

        checkpoint = (every, save)
    callback = make_callback(args.threshold, args.curve_every, max_steps, args.window, frames_per_step, checkpoint)
    if saved_state is not None:
        callback.load_state(saved_state)
    start = time.perf_counter()
    done_before = int(model.num_timesteps)
    if done_before < max_steps:
        # a resumed learn counts on: SB3 adds num_timesteps to the total when reset_num_timesteps=False, and the
        # schedules' progress is 1 - num_timesteps / the zoo's n_timesteps (make_progress_clamped) either way
        model.learn(total_timesteps=max_steps - done_before, callback=callback,
                    reset_num_timesteps=saved_state is None)
    seconds = callback.elapsed_before + time.perf_counter() - start
    steps = int(model.num_timesteps)
    curve, curve_seconds, curve_frames = list(callback.curve), list(callback.curve_seconds), list(callback.curve_frames)
    final = callback.mean()
    if final is not None and (not curve or curve[-1][0] != steps):
        curve.append((steps, round(final, 4)))
        curve_seconds.append(round(seconds, 3))
        if frames_per_step is not None:
            curve_frames.append(steps * frames_per_step)
    grad_steps = gradient_steps_made(model)
    row = {"seed": seed,
           "steps_to_threshold": callback.hit[0] if callback.hit else None,
           "seconds_to_threshold": round(callback.hit[1], 3) if callback.hit else None,
           "final": round(final, 4) if final is not None else None,
           "final_window": len(callback.window), "episodes": callback.episodes,
           "env_steps": steps, "seconds": round(seconds, 3), "steps_per_sec": round(steps / seconds, 1),
           "gradient_steps": grad_steps, "measured_updates_per_step": round(grad_steps / max(steps, 1), 4),
           "window_full_at": callback.full_at, "curve": curve, "curve_seconds": curve_seconds}
    if frames_per_step is not None:
        hit = callback.hit[0] if callback.hit else None
        row.update({"frames": steps * frames_per_step, "frames_per_sec": round(steps * frames_per_step / seconds, 1),
                    "frames_to_threshold": None if hit is None else hit * frames_per_step,
                    "window_full_at_frames": None if callback.full_at is None else callback.full_at * frames_per_step,
                    "emulator_frames": emulator_frames(env), "policy_sha256": policy_digest(model),
                    "curve_frames": curve_frames,
                    "schedule": callback.schedule, "sessions": callback.sessions})
    if checkpoint is not None or source is not None:
        row["checkpoint"] = str(ckpt)
    env.close()
    return row


def fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table(rows: list[dict], threshold: float | None, frames_per_step: int | None = None) -> str:
    """The seeds' figures; with ``frames_per_step`` (Atari) also in emulator frames."""
    head = (f"{'seed':>4}  {'steps_to_thr':>12}  {'sec_to_thr':>10}  {'final':>9}  {'episodes':>8}  "
            f"{'env_steps':>9}  {'seconds':>8}  {'steps/s':>8}  {'upd/step':>8}")
    if frames_per_step:
        head += f"  {'frames_to_thr':>13}  {'frames':>10}  {'frames/s':>8}"
    lines = [head, "-" * len(head)]
    for r in rows:
        line = (f"{r['seed']:>4}  {fmt(r['steps_to_threshold'], 'd'):>12}  "
                f"{fmt(r['seconds_to_threshold'], '.1f'):>10}  {fmt(r['final'], '.1f'):>9}  {r['episodes']:>8}  "
                f"{r['env_steps']:>9}  {r['seconds']:>8.1f}  {r['steps_per_sec']:>8.1f}  "
                f"{r['measured_updates_per_step']:>8.3f}")
        if frames_per_step:
            line += (f"  {fmt(r.get('frames_to_threshold'), 'd'):>13}  {fmt(r.get('frames'), 'd'):>10}  "
                     f"{fmt(r.get('frames_per_sec'), '.1f'):>8}")
        lines.append(line)
    hits = [r for r in rows if r["steps_to_threshold"] is not None]
    if threshold is not None:
        lines.append(f"reached {threshold:g}: {len(hits)}/{len(rows)} seeds")
        if hits:
            steps = sorted(r["steps_to_threshold"] for r in hits)
            secs = sorted(r["seconds_to_threshold"] for r in hits)
            lines.append(f"  steps to {threshold:g}: mean {sum(steps) / len(steps):.0f}, median {median(steps):.0f}; "
                         f"seconds: mean {sum(secs) / len(secs):.1f}, median {median(secs):.1f} (reached seeds only)")
    if frames_per_step:
        lines.append(f"units: steps are SB3 timesteps (agent steps over all envs); frames = steps x {frames_per_step}")
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


def apply_resume(args: argparse.Namespace) -> dict:
    """``--resume=DIR``: the run's own settings from DIR/run.json, with the overrides given now."""
    out = Path(args.resume)
    run_file = out / RUN_FILE
    if not run_file.is_file():
        raise BenchError(f"--resume={out}: no {RUN_FILE} there (a run started with --checkpoint_every writes it)")
    saved = json.loads(run_file.read_text())
    for key, value in saved["args"].items():
        if key not in args.given:
            setattr(args, key, value)
    if "max_steps" in args.given:
        args.max_frames = None
    elif "max_frames" in args.given:
        args.max_steps = None
    args.out = str(out)
    args.seed_list = [int(s) for s in str(args.seeds).split(",") if s.strip()]
    return saved


def run(args: argparse.Namespace) -> int:
    saved_run = apply_resume(args) if args.resume is not None else None
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
        hint = ""
        if ("NoFrameskip" in args.env or args.env.startswith("ALE/")) and "ale_py" not in sys.modules:
            hint = " (an Atari id: this venv has no ale-py; rerun bash bench/setup_sb3.sh)"
        raise BenchError(f"--env={args.env}: {e}{hint}")
    atari = is_atari(gymnasium, args.env)
    path, entry_name, entry = load_zoo_entry(rl_zoo3, yaml, algo, args.env, args.hyperparams_from, atari)
    recipe = resolve(entry, algo_cls, torch)
    eff = effective_kwargs(algo_cls, recipe["algo_kwargs"])
    utd = updates_per_step(algo_cls, eff, recipe["n_envs"])
    fps = None  # emulator frames per SB3 timestep (Atari)
    wrapper_kwargs = None
    if atari:
        from ale_py.env import AtariEnv
        from stable_baselines3.common.atari_wrappers import AtariWrapper

        spec_kwargs = gymnasium.spec(args.env).kwargs
        base_skip = spec_kwargs.get("frameskip", inspect.signature(AtariEnv.__init__).parameters["frameskip"].default)
        wrapper_kwargs = atari_wrapper_kwargs(entry.get("env_wrapper"))
        fps = frames_per_step(base_skip, wrapper_kwargs,
                              inspect.signature(AtariWrapper.__init__).parameters["frame_skip"].default)
        if wrapper_kwargs is not None:  # in effect: the entry's, then AtariWrapper's defaults
            wrapper_kwargs = {**{k: v.default for k, v in inspect.signature(AtariWrapper.__init__).parameters.items()
                                 if k not in ("self", "env")}, **wrapper_kwargs}
    if args.max_frames is not None and fps is None:
        raise BenchError("--max_frames is for Atari envs (frames per agent step fixed by the frameskip): "
                         "use --max_steps")
    max_steps = (steps_for_frames(args.max_frames, fps) if args.max_frames is not None else
                 args.max_steps or recipe["n_timesteps"])
    if args.checkpoint_every is not None or args.resume is not None:
        from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm

        if not (atari and issubclass(algo_cls, OnPolicyAlgorithm)):
            raise BenchError("--checkpoint_every / --resume: on-policy algorithms (ppo, a2c) on Atari envs only "
                             "(an off-policy run would need its replay buffer, another env its simulator's state)")
    torch.set_num_threads(args.threads)

    versions = {"stable_baselines3": sb3.__version__, "rl_zoo3": rl_zoo3.__version__, "torch": torch.__version__,
                "gymnasium": gymnasium.__version__, "numpy": numpy.__version__, "python": sys.version.split()[0]}
    for package in ("mujoco", "ale-py"):
        try:
            versions[package.replace("-", "_")] = version(package)
        except Exception:  # an optional package: its version is recorded when installed
            pass
    print(f"SB3 {versions['stable_baselines3']}, rl_zoo3 {versions['rl_zoo3']}, torch {versions['torch']}, "
          f"gymnasium {versions['gymnasium']}" + (f", ale-py {versions['ale_py']}" if "ale_py" in versions else ""))
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
    if atari:
        wrapped = ("AtariWrapper(" + ", ".join(f"{k}={v!r}" for k, v in wrapper_kwargs.items()) + ")"
                   if wrapper_kwargs is not None else "no AtariWrapper")
        print(f"  Atari: gym.make({args.env}) {show(spec_kwargs)} -> Monitor (raw game score, whole games) -> "
              f"{wrapped} -> DummyVecEnv -> VecFrameStack -> VecTransposeImage; {fps} emulator frames per SB3 "
              f"timestep (frames = timesteps x {fps})")
    print(f"updates per env step: {utd['ratio'] if utd['ratio'] is None else format(utd['ratio'], 'g')} ({utd['note']})"
          + (f"; learning starts after {utd['learning_starts']} env steps" if utd.get("learning_starts") else ""))
    if args.updates_per_step:
        return 0
    in_frames = f" = {max_steps * fps} frames" if fps else ""
    horizon_frames = f" = {recipe['n_timesteps'] * fps} frames" if fps else ""
    schedule_note = ("" if max_steps <= recipe["n_timesteps"] else
                     f"; schedules end at the zoo's {recipe['n_timesteps']} steps and hold their final value after")
    print(f"run: seeds {args.seed_list}, threshold {args.threshold}, max_steps {max_steps}{in_frames} (zoo n_timesteps "
          f"{recipe['n_timesteps']}{horizon_frames}{schedule_note}), torch.set_num_threads({args.threads}) (the zoo "
          f"sets none), device {args.device}"
          + (f", a checkpoint every {args.checkpoint_every} frames" if args.checkpoint_every else ""))

    out = Path(args.out or Path(__file__).resolve().parent / "results"
               / f"sb3_{algo}_{args.env.replace('/', '_')}_{time.strftime('%Y%m%d_%H%M%S')}")
    json_path = out / f"sb3_{algo}_{args.env.replace('/', '_')}.json"
    if saved_run is None and any(complete_checkpoint(checkpoint_dir(out, s)) for s in args.seed_list):
        raise BenchError(f"{out} holds checkpoints of a run: --resume={out} continues it; or pass another --out")
    out.mkdir(parents=True, exist_ok=True)
    report = {"algo": algo, "env": args.env, "threshold": args.threshold, "max_steps": max_steps,
              "reward_definition": f"mean return of the last {args.window} finished episodes (threshold: full "
                                   "window only)", "window": args.window,
              "hyperparams_file": str(path), "hyperparams_entry": entry_name, "hyperparams_zoo": show(entry),
              "hyperparams_effective": show(eff), "n_envs": recipe["n_envs"], "normalize": recipe["normalize"],
              "frame_stack": recipe["frame_stack"], "schedule_horizon": recipe["n_timesteps"],
              "updates_per_step": utd, "torch_threads": args.threads, "device": args.device,
              "versions": versions, "seeds": []}
    if atari:
        report.update({
            "reward_definition": f"mean raw game score of the last {args.window} finished games (the Monitor sits "
                                 "inside AtariWrapper: whole games, every life, unclipped rewards; threshold: full "
                                 "window only)",
            "frames_per_step": fps, "max_frames": max_steps * fps,
            "schedule_horizon_frames": recipe["n_timesteps"] * fps,
            "units": "SB3 timesteps (env_steps, max_steps, curve's x) are agent steps summed over n_envs; frames "
                     f"(frames, curve_frames, max_frames) = timesteps x {fps} (AtariWrapper's frame skip on a "
                     "NoFrameskip env), the count sfx and CleanRL call frames; emulator_frames: ALE's own count, "
                     "which adds the no-op starts and the FIRE / life-loss reset steps",
            "atari_wrapper_kwargs": wrapper_kwargs, "env_spec_kwargs": show(spec_kwargs)})
    if saved_run is not None and json_path.is_file():
        previous = json.loads(json_path.read_text())
        report["seeds"] = [row for row in previous["seeds"] if row["seed"] in args.seed_list]
        report["resumes"] = previous.get("resumes", []) + [time.strftime("%Y-%m-%d %H:%M:%S")]
    if args.checkpoint_every is not None:
        keep = ("algo", "env", "seeds", "threshold", "max_steps", "max_frames", "hyperparams_from", "threads",
                "device", "curve_every", "window", "checkpoint_every")
        run_info = {"args": {k: getattr(args, k) for k in keep}, "argv": sys.argv[1:]}
        if saved_run is not None:  # the first command line stays; each resume's is added
            run_info.update(argv=saved_run.get("argv"), resume_argv=saved_run.get("resume_argv", []) + [sys.argv[1:]])
        (out / RUN_FILE).write_text(json.dumps(run_info, indent=1))
    done = {row["seed"] for row in report["seeds"] if row.get("env_steps", 0) >= max_steps
            or row.get("steps_to_threshold") is not None}
    for seed in args.seed_list:
        if seed in done:
            print(f"seed {seed}: done before this resume ({json_path})")
            continue
        resume = saved_run is not None and complete_checkpoint(checkpoint_dir(out, seed)) is not None
        row = run_seed(algo_cls, recipe, args.env, seed, max_steps, args, numpy, fps, out, resume, torch)
        report["seeds"] = [r for r in report["seeds"] if r["seed"] != seed] + [row]
        report["seeds"].sort(key=lambda r: args.seed_list.index(r["seed"]))
        status = (f"reached {args.threshold:g} at {row['steps_to_threshold']} steps, "
                  f"{row['seconds_to_threshold']:.1f} s" if row["steps_to_threshold"] is not None else
                  ("no threshold" if args.threshold is None else f"did not reach {args.threshold:g}"))
        frames = f" = {row['frames']} frames ({row['frames_per_sec']:.0f} frames/s)" if fps else ""
        print(f"seed {seed}: {status}; final {fmt(row['final'], '.1f')} over {row['final_window']} episodes, "
              f"{row['env_steps']} steps{frames} in {row['seconds']:.1f} s ({row['steps_per_sec']:.0f} steps/s)",
              flush=True)
        json_path.write_text(json.dumps(report, indent=1))  # after every seed: a killed run keeps what it did
    print()
    print(table(report["seeds"], args.threshold, fps))
    print(f"json: {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
