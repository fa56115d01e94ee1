"""The ``multitask`` env: several envs trained together, one task each (PopArt's setting).

``--env=multitask --multitask_envs=atari_pong,atari_breakout,atari_space_invaders``: every env
instance plays one of the listed envs for its whole life; task ``i`` is the ``i``-th listed env.
The env follows the task protocol of :mod:`sfx.envs` (``task_names``, ``task_id``), so the engine
tags every sample with its task (per-task PopArt statistics, ``task/<name>/*`` curves).

Which env instance plays which task (``--multitask_assignment``, K listed envs):

* ``env`` (the default): ``(worker_index * num_envs_per_worker + vector_index) % K``. Consecutive
  envs play consecutive tasks, so every task is sampled once ``num_workers * num_envs_per_worker
  >= K`` (e.g. 3 games on 2 workers of 2 envs), each task gets the same number of envs give or take
  one, and one slow task does not slow a whole worker down. A worker then runs several games at once
  (memory: K emulators per worker at most).
* ``worker``: ``worker_index % K``, all envs of a worker play one task (as ``dmlab_30`` does by
  default: one level per worker); needs ``num_workers >= K`` and is even for multiples of K.

A run in which some task would never be played (``num_workers * num_envs_per_worker < K`` with
``env``, ``num_workers < K`` with ``worker``) is refused with an error naming the tasks left out:
their value heads and curves would stay empty, and the fix is one flag. Uneven coverage is a
warning. The coordinator's probe env (``worker_index`` -1) plays task 0.

Task names (``task_names``, in list order) are the env names as typed; an env whose rewards are
scaled gets ``_x<scale>`` (``gym_CartPole-v1_x1000``), a name listed again gets ``_2``, ``_3``...,
and characters a TensorBoard tag cannot keep (spaces, slashes) become ``_``. A single listed env is
allowed: one task, the same as ``--env=<that env>`` plus the multitask flags.

The listed envs' families add their flags (``--atari_*`` when an ``atari_`` env is listed: pass
``--multitask_envs`` with ``--help`` to see them) and their default overrides (where two listed
families set one flag differently, the first listed env's default holds). Every listed env must have
the same observation space, action space and number of agents: the probe env makes one env of each
and a mismatch is an error naming both envs and both spaces. Atari games differ in their minimal
action sets, so with more than one ``atari_`` game ``--atari_full_action_set`` defaults to True (all 18
actions for every game).

``--multitask_reward_scales=1,1000`` multiplies each task's rewards (step rewards and the episode
statistics' ``reward``) by its factor: PopArt's demonstration is the same CartPole twice, x1 and
x1000. With any scale other than 1, ``--reward_clip`` defaults to the listed envs' own default times
the largest scale, so the learner does not clip the scaling away.
"""

from __future__ import annotations

import argparse
import copy
import logging
from typing import Any

from sfx.envs.multi_agent import MultiAgentEnv
from sfx.envs.multitask.env import (ASSIGNMENTS, MultitaskEnv, envs_per_task, parse_env_list, parse_reward_scales,
                                    task_for, task_names_of)
from sfx.envs.registry import Composition, EnvFamily, find_family, make_env, register_env
from sfx.errors import ConfigError

log = logging.getLogger(__name__)

__all__ = ["ASSIGNMENTS", "ENV_NAME", "MultitaskEnv", "add_multitask_params", "compose_multitask", "envs_per_task",
           "make_multitask_env", "parse_env_list", "parse_reward_scales", "register_family", "task_for",
           "task_names_of", "validate_multitask_cfg"]

ENV_NAME = "multitask"

# families whose envs differ in a space unless a flag makes them agree: that flag's default when
# more than one env of the family is listed, and the hint a space mismatch gives when it is off
SHARED_SPACE_DEFAULTS: dict[str, dict[str, Any]] = {
    "atari_": {"atari_full_action_set": True},  # minimal action sets differ between games; the full set has 18
}


def add_multitask_params(parser: argparse.ArgumentParser) -> None:
    """The ``--multitask_*`` flags."""
    g = parser.add_argument_group("multitask env (--env=multitask)")
    g.add_argument("--multitask_envs", default=None, metavar="ENV,ENV,...",
                   help="the envs trained together, comma-separated; task i is the i-th env, e.g. "
                        "atari_pong,atari_breakout,atari_space_invaders. Their families' flags join this list "
                        "(give --multitask_envs together with --help to see them)")
    g.add_argument("--multitask_assignment", choices=ASSIGNMENTS, default="env",
                   help="which listed env each env instance plays (K listed envs): env = "
                        "(worker_index * num_envs_per_worker + vector_index) %% K, every worker plays several "
                        "tasks; worker = worker_index %% K, all envs of a worker play one task")
    g.add_argument("--multitask_reward_scales", default=None, metavar="X,X,...",
                   help="one reward multiplier per listed env, comma-separated (step rewards and episode "
                        "rewards alike), e.g. 1,1000; None = all 1")


def _families_of(env_names: tuple[str, ...], text: Any) -> list[EnvFamily]:
    families = []
    for name in env_names:
        try:
            family = find_family(name)
        except ConfigError as e:
            raise ConfigError(f"--multitask_envs={text}: {name!r} is no env: {e}") from None
        if family.compose_fn is not None:
            raise ConfigError(f"--multitask_envs={text}: {name!r} is itself made of other envs; list plain envs "
                              f"(multitask envs do not nest)")
        families.append(family)
    return families


def compose_multitask(values: argparse.Namespace) -> Composition:
    """The listed envs (their families' flags join the parser) and the defaults the list implies."""
    text = values.multitask_envs
    env_names = parse_env_list(text)
    if not env_names:  # validation says what is missing; --help still works
        return Composition((), {})
    families = _families_of(env_names, text)
    defaults: dict[str, Any] = {}
    for prefix, flags in SHARED_SPACE_DEFAULTS.items():
        if len({n for n, f in zip(env_names, families) if f.prefix == prefix}) > 1:
            defaults.update(flags)
    scales = parse_reward_scales(values.multitask_reward_scales, len(env_names))
    if any(s != 1.0 for s in scales):
        base = families[0].defaults_for(env_names[0]).get("reward_clip", values.reward_clip)
        defaults["reward_clip"] = float(base) * max(scales)
    return Composition(tuple(dict.fromkeys(env_names)), defaults)


def _as_listed(cfg: Any, env_name: str) -> Any:
    """``cfg`` as the listed env's family sees it: ``env`` is that env's name (a shallow copy)."""
    listed = copy.copy(cfg)
    listed.env = env_name
    return listed


def _is_evaluation(cfg: Any) -> bool:
    return hasattr(cfg, "max_num_episodes")  # only a cfg parsed for sfx.enjoy has the evaluation flags


def validate_multitask_cfg(cfg: argparse.Namespace) -> None:
    """Check the list, the scales and the assignment; run each listed env's family validation."""
    text = cfg.multitask_envs
    env_names = parse_env_list(text)
    if not env_names:
        raise ConfigError("--env=multitask needs --multitask_envs: the envs to train together, comma-separated, "
                          "e.g. --multitask_envs=atari_pong,atari_breakout (one env = one task)")
    families = _families_of(env_names, text)
    scales = parse_reward_scales(cfg.multitask_reward_scales, len(env_names))
    if cfg.multitask_assignment not in ASSIGNMENTS:
        raise ConfigError(f"--multitask_assignment={cfg.multitask_assignment} is not one of: {', '.join(ASSIGNMENTS)}")
    for name, family in dict(zip(env_names, families)).items():
        if family.validate_fn is None:
            continue
        try:
            family.validate_fn(_as_listed(cfg, name))
        except ConfigError as e:
            raise ConfigError(f"--multitask_envs lists {name}: {e}") from None
    names = task_names_of(env_names, scales)
    if not _is_evaluation(cfg):
        _check_coverage(cfg, names)
    if max(scales) > 1.0 and cfg.reward_clip < max(scales):
        log.warning("--multitask_reward_scales=%s with --reward_clip=%g: the learner clips scaled rewards to "
                    "[-%g, %g], which removes much of the scaling", cfg.multitask_reward_scales, cfg.reward_clip,
                    cfg.reward_clip, cfg.reward_clip)


def _check_coverage(cfg: Any, names: tuple[str, ...]) -> None:
    by = cfg.multitask_assignment
    counts = envs_per_task(by, len(names), cfg.num_workers, cfg.num_envs_per_worker)
    missing = [n for n, c in zip(names, counts) if c == 0]
    if missing:
        need = ("--num_workers * --num_envs_per_worker" if by == "env" else "--num_workers") + f" >= {len(names)}"
        raise ConfigError(f"--multitask_assignment={by} with --num_workers={cfg.num_workers} "
                          f"--num_envs_per_worker={cfg.num_envs_per_worker} never plays "
                          f"{len(missing)} of the {len(names)} tasks ({', '.join(missing)}); use {need}"
                          + (" or --multitask_assignment=env" if by == "worker" else "")
                          + ", or list fewer envs")
    if len(set(counts)) > 1:
        log.warning("multitask: tasks get unequal numbers of envs (%s)%s", ", ".join(
            f"{n}: {c}" for n, c in zip(names, counts)),
            "; use a multiple of %d workers or --multitask_assignment=env" % len(names) if by == "worker" else "")


def _make_listed(env_name: str, cfg: Any, env_config: dict | None, render_mode: str | None) -> MultiAgentEnv:
    return make_env(_as_listed(cfg, env_name), env_config, render_mode=render_mode)


def _num_tasks_of(env: Any) -> int:
    return len(getattr(env, "task_names", None) or ())


def _check_spaces(env_names: tuple[str, ...], first: Any, cfg: Any, env_config: dict | None) -> None:
    """Every listed env has ``first``'s (task 0's) spaces and number of agents; ConfigError otherwise."""
    made = {env_names[0]: first}
    try:
        for name in env_names[1:]:
            if name not in made:
                made[name] = _make_listed(name, cfg, env_config, None)
        for name, env in made.items():
            if _num_tasks_of(env) > 1:
                raise ConfigError(f"--multitask_envs lists {name}, which has {_num_tasks_of(env)} tasks of its "
                                  f"own; list single-task envs")
            for what in ("observation_space", "action_space", "num_agents"):
                a, b = getattr(first, what), getattr(env, what)
                if a != b:
                    raise ConfigError(f"--multitask_envs: {env_names[0]} and {name} have different {_what(what)} "
                                      f"({_one_line(a)} and {_one_line(b)}); all listed envs must have equal "
                                      f"observation spaces, action spaces and numbers of agents"
                                      f"{_hint(env_names[0], name, cfg)}")
    finally:
        for name, env in made.items():
            if env is not first:
                env.close()


def _one_line(value: Any) -> str:
    return " ".join(str(value).split())  # Box bounds print as padded numpy arrays


def _what(attr: str) -> str:
    return {"observation_space": "observation spaces", "action_space": "action spaces",
            "num_agents": "numbers of agents"}[attr]


def _hint(a: str, b: str, cfg: Any) -> str:
    prefix_a, prefix_b = find_family(a).prefix, find_family(b).prefix
    if prefix_a != prefix_b:
        return ""
    off = [f"--{flag}={value}" for flag, value in SHARED_SPACE_DEFAULTS.get(prefix_a, {}).items()
           if getattr(cfg, flag) != value]
    return f" (use {' '.join(off)} so every {prefix_a} env has the same spaces)" if off else ""


def make_multitask_env(full_env_name: str, cfg: Any, env_config: dict | None = None,
                       render_mode: str | None = None) -> MultitaskEnv:
    """The listed env of this env instance's task (see :func:`task_for`), with the task protocol.

    The probe env (``worker_index`` -1) also makes one env of every other listed env, compares the
    spaces and closes them: a mismatch is a :class:`ConfigError` before any worker starts.
    """
    env_names = parse_env_list(cfg.multitask_envs)
    if not env_names:
        raise ConfigError("--env=multitask needs --multitask_envs (the envs to train together, comma-separated)")
    scales = parse_reward_scales(cfg.multitask_reward_scales, len(env_names))
    task = task_for(cfg.multitask_assignment, len(env_names), cfg.num_envs_per_worker, env_config)
    env = _make_listed(env_names[task], cfg, env_config, render_mode)
    if int((env_config or {}).get("worker_index", 0)) < 0:
        try:
            _check_spaces(env_names, env, cfg, env_config)
        except BaseException:
            env.close()
            raise
    return MultitaskEnv(env, task_names_of(env_names, scales), task, scales[task])


def register_family() -> None:
    """Register ``multitask`` (called by the env registry on first use of the name)."""
    register_env(ENV_NAME, make_multitask_env, add_params_fn=add_multitask_params,
                 validate_fn=validate_multitask_cfg, compose_fn=compose_multitask)
