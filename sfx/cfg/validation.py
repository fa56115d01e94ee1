"""Checks on a parsed cfg: every problem is one ConfigError line naming the value and what is allowed."""

from __future__ import annotations

import logging
import math
import os
import tempfile
from pathlib import Path, PurePath
from typing import Any, Collection

from sfx.cfg.arguments import TRAIN_FOREVER
from sfx.cfg.core_names import check_rnn_type
from sfx.errors import ConfigError

log = logging.getLogger(__name__)

# Counts and sizes that make no sense at zero or below.
POSITIVE_INTS = (
    "num_workers", "num_envs_per_worker", "worker_num_splits", "rollout", "recurrence", "batch_size",
    "hidden_size", "rnn_num_layers", "num_policies", "max_nan_batches",
    "policy_workers_per_policy", "keep_checkpoints", "max_policy_lag", "stats_avg", "env_frameskip",
    "train_for_env_steps", "train_for_seconds",
)
POSITIVE_FLOATS = (
    "learning_rate", "adam_eps", "obs_scale", "report_every_sec", "traj_buffers_excess_ratio",
    "reward_scale", "save_every_sec", "experiment_summaries_interval",
)
EVAL_POSITIVE_INTS = ("max_num_episodes", "max_num_frames")


def validate_cfg(cfg: Any, evaluation: bool = False, check_paths: bool = True,
                 batch_of_trajectories: bool = True, explicit: Collection[str] = ()) -> None:
    """Raise :class:`ConfigError` on the first invalid value of ``cfg``.

    ``check_paths`` also makes sure ``--train_dir`` exists (it is created) and is writable.
    ``batch_of_trajectories``: ``--algo``'s batches are whole trajectories (``Agent.batch_of_trajectories``, the
    parser's to say: the agents' room sits above cfg), so ``--batch_size`` must be a multiple of ``--rollout``.
    ``explicit``: the flags given on the command line (a bare parser's cfg: none).
    One value is fitted instead of rejected: a --worker_num_splits not given on the command line
    that exceeds --num_envs_per_worker becomes --num_envs_per_worker (logged).
    """
    check_experiment_name(cfg.experiment, cfg.train_dir)
    if check_paths or evaluation:
        check_same_algo(cfg, explicit)
    _check_values(cfg)
    _fit_default_splits(cfg, explicit)
    _check_layout(cfg, batch_of_trajectories)
    if cfg.with_pbt:
        _check_pbt(cfg, check_paths)
    if not str(cfg.experiment).strip():
        raise ConfigError("--experiment must not be empty")
    if evaluation:
        _check_evaluation(cfg)
    if check_paths:
        check_writable_dir(cfg.train_dir, "--train_dir")


def _check_values(cfg: Any) -> None:
    """Each flag's own range."""
    for name in POSITIVE_INTS:
        value = getattr(cfg, name)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ConfigError(f"--{name}={value} must be a positive integer (> 0)")
    for name in POSITIVE_FLOATS:
        value = getattr(cfg, name)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
            raise ConfigError(f"--{name}={value} must be > 0")

    check_rnn_type(cfg.rnn_type)
    if not 0.0 < cfg.gamma <= 1.0:
        raise ConfigError(f"--gamma={cfg.gamma} must be in (0, 1]")
    for name in ("adam_beta1", "adam_beta2"):
        value = getattr(cfg, name)
        if not 0.0 <= value < 1.0:
            raise ConfigError(f"--{name}={value} must be in [0, 1)")
    if cfg.max_component_restarts < 0:
        raise ConfigError(f"--max_component_restarts={cfg.max_component_restarts} must be >= 0")
    if cfg.reset_timeout_seconds <= 0:
        raise ConfigError(f"--reset_timeout_seconds={cfg.reset_timeout_seconds} must be > 0")
    if cfg.decorrelate_experience_max_seconds < 0:
        raise ConfigError(f"--decorrelate_experience_max_seconds={cfg.decorrelate_experience_max_seconds} must be "
                          f">= 0 (0 = no delay)")
    if cfg.heartbeat_timeout_sec <= 0:
        raise ConfigError(f"--heartbeat_timeout_sec={cfg.heartbeat_timeout_sec} must be > 0")
    if cfg.batches_ahead < -1:
        raise ConfigError(f"--batches_ahead={cfg.batches_ahead} must be >= 0 (0 = only the trajectory slots bound "
                          f"sampling) or -1 (the algorithm's choice)")
    if cfg.learner_main_loop_num_cores < 0:
        raise ConfigError(f"--learner_main_loop_num_cores={cfg.learner_main_loop_num_cores} must be >= 0 (0 = auto)")
    if cfg.save_milestones_sec <= 0 and cfg.save_milestones_sec != -1:
        raise ConfigError(f"--save_milestones_sec={cfg.save_milestones_sec} must be > 0, or -1 for never")
    if not math.isfinite(cfg.obs_subtract_mean):
        raise ConfigError(f"--obs_subtract_mean={cfg.obs_subtract_mean} must be a finite number")
    if cfg.eval_every_env_steps < 0:
        raise ConfigError(f"--eval_every_env_steps={cfg.eval_every_env_steps} must be >= 0 (0 = no evaluator)")
    if cfg.eval_every_env_steps > 0:
        for name in ("eval_episodes", "eval_num_envs"):
            if getattr(cfg, name) <= 0:
                raise ConfigError(f"--{name}={getattr(cfg, name)} must be a positive integer (> 0)")
    if cfg.eval_video_every < 0:
        raise ConfigError(f"--eval_video_every={cfg.eval_video_every} must be >= 0 (0 = no videos)")
    if cfg.eval_video_every > 0 and cfg.eval_every_env_steps <= 0:
        raise ConfigError(f"--eval_video_every={cfg.eval_video_every} records evaluations: set --eval_every_env_steps "
                          f"(e.g. 100000)")
    if cfg.eval_video_max_frames < 1:
        raise ConfigError(f"--eval_video_max_frames={cfg.eval_video_max_frames} must be >= 1")
    if cfg.save_best_metric != "none" and cfg.eval_every_env_steps <= 0:
        raise ConfigError(f"--save_best_metric={cfg.save_best_metric} needs evaluations: set --eval_every_env_steps "
                          f"(e.g. 100000)")
    check_lr_schedule(cfg)
    if cfg.seed is not None and cfg.seed < 0:
        raise ConfigError(f"--seed={cfg.seed} must be >= 0 (or left out for a random run)")


def _check_layout(cfg: Any, batch_of_trajectories: bool) -> None:
    """Envs, splits, trajectories, batches and BPTT chunks that fit into one another."""
    if cfg.num_envs_per_worker % cfg.worker_num_splits != 0:
        raise ConfigError(f"--num_envs_per_worker={cfg.num_envs_per_worker} must be a multiple of "
                          f"--worker_num_splits={cfg.worker_num_splits}")
    if cfg.batch_size % cfg.rollout != 0 and batch_of_trajectories:
        raise ConfigError(f"--batch_size={cfg.batch_size} must be a multiple of --rollout={cfg.rollout}")
    if cfg.use_rnn and cfg.rollout % cfg.recurrence != 0:
        raise ConfigError(f"--rollout={cfg.rollout} must be a multiple of --recurrence={cfg.recurrence} "
                          f"(with --use_rnn=True)")


def _check_pbt(cfg: Any, check_paths: bool) -> None:
    """Population-based training's flags (with --with_pbt)."""
    if cfg.pbt_population_dir:
        if cfg.num_policies != 1:
            raise ConfigError(f"--pbt_population_dir makes this experiment one member of a population of "
                              f"experiments: --num_policies={cfg.num_policies} must be 1")
        if check_paths:
            check_writable_dir(cfg.pbt_population_dir, "--pbt_population_dir")
        name = cfg.pbt_member_name or cfg.experiment
        if "/" in str(name) or str(name).startswith("."):
            raise ConfigError(f"--pbt_member_name={name!r} must be a plain folder name (no '/', not hidden)")
        if cfg.pbt_member_stale_sec <= 0:
            raise ConfigError(f"--pbt_member_stale_sec={cfg.pbt_member_stale_sec} must be > 0")
    elif cfg.num_policies < 2:
        raise ConfigError(f"--with_pbt needs a population: --num_policies={cfg.num_policies} must be >= 2, "
                          f"or --pbt_population_dir for PBT across experiments")
    if not 0.0 < cfg.pbt_replace_fraction <= 0.5:
        raise ConfigError(f"--pbt_replace_fraction={cfg.pbt_replace_fraction} must be in (0, 0.5]")
    if not 0.0 <= cfg.pbt_mutation_rate <= 1.0:
        raise ConfigError(f"--pbt_mutation_rate={cfg.pbt_mutation_rate} must be in [0, 1]")
    if not 1.0 < cfg.pbt_perturb_min <= cfg.pbt_perturb_max:
        raise ConfigError(f"--pbt_perturb_min={cfg.pbt_perturb_min} and --pbt_perturb_max={cfg.pbt_perturb_max} "
                          f"must satisfy 1 < min <= max")
    if cfg.pbt_period_env_steps <= 0:
        raise ConfigError(f"--pbt_period_env_steps={cfg.pbt_period_env_steps} must be > 0")
    if cfg.pbt_start_mutation < 0:
        raise ConfigError(f"--pbt_start_mutation={cfg.pbt_start_mutation} must be >= 0")
    if cfg.pbt_replace_reward_gap < 0 or cfg.pbt_replace_reward_gap_absolute < 0:
        raise ConfigError(f"--pbt_replace_reward_gap={cfg.pbt_replace_reward_gap} and "
                          f"--pbt_replace_reward_gap_absolute={cfg.pbt_replace_reward_gap_absolute} must be >= 0")


def _check_evaluation(cfg: Any) -> None:
    """sfx.enjoy's flags."""
    for name in EVAL_POSITIVE_INTS:
        value = getattr(cfg, name)
        if value <= 0:
            raise ConfigError(f"--{name}={value} must be a positive integer (> 0)")
    if not 0 <= cfg.policy_index < cfg.num_policies:
        raise ConfigError(f"--policy_index={cfg.policy_index} must be in [0, {cfg.num_policies - 1}] "
                          f"(the experiment has --num_policies={cfg.num_policies})")
    if cfg.fps < 0:
        raise ConfigError(f"--fps={cfg.fps} must be >= 0 (0 = as fast as possible)")


def _fit_default_splits(cfg: Any, explicit: Collection[str]) -> None:
    """Fewer envs per worker than a --worker_num_splits nobody asked for: one split per env (in place).

    Sample Factory 1.x runs ``--num_envs_per_worker=1`` with its default of two splits (published dummy
    sampler lines do), so a split count that did not come from this command line gives way.
    A --worker_num_splits given on the command line is kept and checked like any other value.
    """
    if "worker_num_splits" in explicit or not 0 < cfg.num_envs_per_worker < cfg.worker_num_splits:
        return
    log.warning("--num_envs_per_worker=%d is fewer than --worker_num_splits=%d (not given on the command line): "
                "using --worker_num_splits=%d, one env per split", cfg.num_envs_per_worker, cfg.worker_num_splits,
                cfg.num_envs_per_worker)
    cfg.worker_num_splits = cfg.num_envs_per_worker


def check_lr_schedule(cfg: Any) -> None:
    """``--lr_schedule`` and ``--lr_decay_multiplier``: a linear decay needs the run's end in env steps."""
    if not 0.0 <= cfg.lr_decay_multiplier <= 1.0:
        raise ConfigError(f"--lr_decay_multiplier={cfg.lr_decay_multiplier} must be in [0, 1] (the final learning "
                          f"rate as a fraction of --learning_rate's)")
    if cfg.lr_schedule == "linear_decay" and cfg.train_for_env_steps >= TRAIN_FOREVER:
        raise ConfigError(f"--lr_schedule=linear_decay decays the learning rate until --train_for_env_steps, which is "
                          f"{cfg.train_for_env_steps:.0e} (no limit): set it to the run's length (e.g. "
                          f"--train_for_env_steps=2e6)")


def check_writable_dir(path: str | os.PathLike, flag: str) -> None:
    """Create ``path`` if needed and write a temp file into it, so a bad folder fails now, not in a worker."""
    p = Path(path).expanduser()
    try:
        p.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=p, prefix=".sfx_write_test_"):
            pass
    except OSError as e:
        reason = e.strerror or type(e).__name__
        raise ConfigError(f"{flag}={path} is not a writable folder: {reason}") from None


def check_experiment_name(experiment: Any, train_dir: Any) -> None:
    """``--experiment`` names a folder inside ``--train_dir`` (subfolders allowed): not an absolute path,
    no ``..``; else :class:`ConfigError` (a run must not write outside the folder the user chose)."""
    name = str(experiment)
    parts = PurePath(name).parts
    if PurePath(name).is_absolute() or name.startswith("~") or ".." in parts:
        raise ConfigError(f"--experiment={name} must be a folder name inside --train_dir={train_dir} (no absolute "
                          f"path, no '~', no '..'); to put experiments elsewhere, set --train_dir")


def check_same_algo(cfg: Any, explicit: Collection[str]) -> None:
    """Resuming an experiment with another ``--algo`` is one :class:`ConfigError` naming the change (the
    saved cfg's settings and checkpoints belong to the algorithm that wrote them), unless
    ``--restart_behavior`` starts afresh. ``explicit``: the flags given on the command line."""
    if cfg.restart_behavior != "resume" and "restart_behavior" in explicit:
        return  # a saved cfg's restart_behavior does not come back to skip this check
    path = Path(cfg.train_dir).expanduser() / str(cfg.experiment) / "cfg.json"
    if not path.is_file():
        return
    from sfx.cfg.cfg_json import load_cfg

    saved = load_cfg(path).get("algo")
    if saved is not None and saved != cfg.algo:
        raise ConfigError(f"--algo={cfg.algo} cannot resume experiment {path.parent}, trained with --algo={saved}: "
                          f"use another --experiment, or --restart_behavior=restart (keeps the old folder as "
                          f"{cfg.experiment}_old_<time>) or --restart_behavior=overwrite (deletes it)")
