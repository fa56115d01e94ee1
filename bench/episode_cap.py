"""Any single-agent env with its episodes cut after N agent steps: ``--env=bench_cap_<env> --bench_cap_steps=N``.

    SFX_EXTRA_ENV_MODULES=bench.episode_cap python -m sfx.dummy_sampler --env=bench_cap_doom_basic --bench_cap_steps=8

A trained doom_basic agent ends its episodes in 6-11 steps, a random one in ~47, and a reset costs a few
steps: sampling with random actions at a trained agent's episode length needs episodes cut short. No sfx
flag does that for every family (``gym_`` has ``--gym_max_episode_steps``, ``doom_`` has none), so this
composite family wraps the inner env (``<env>``: any env name of a family whose envs are gymnasium envs,
with all of that family's flags and defaults) in gymnasium's ``TimeLimit``: the N-th step of an
episode is truncated (the env resets itself as usual). An episode that ends earlier on its own is
unchanged, so the mean length is at most N. Worker processes register the family through
``SFX_EXTRA_ENV_MODULES=bench.episode_cap`` (bench.throughput sets it for its children).
"""

from __future__ import annotations

import argparse
import copy
from typing import Any

import gymnasium

from sfx.envs.multi_agent import SingleAgentEnvAdapter
from sfx.envs.registry import Composition, find_family, register_env_family
from sfx.errors import ConfigError

PREFIX = "bench_cap_"
MODULE = "bench.episode_cap"


def inner_env(env_name: str) -> str:
    """``bench_cap_doom_basic`` -> ``doom_basic``."""
    return env_name[len(PREFIX):]


def capped_name(env_name: str) -> str:
    """``doom_basic`` -> ``bench_cap_doom_basic``."""
    return PREFIX + env_name


def _add_params(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group(f"{PREFIX} envs (bench/episode_cap.py)")
    g.add_argument("--bench_cap_steps", type=int, default=None,
                   help="agent steps after which every episode is truncated (required)")


def _compose(values: argparse.Namespace) -> Composition:
    return Composition((inner_env(values.env),), {})


def _as_inner(cfg: Any) -> Any:
    inner = copy.copy(cfg)
    inner.env = inner_env(cfg.env)
    return inner


def _validate(cfg: argparse.Namespace) -> None:
    steps = cfg.bench_cap_steps
    if steps is None or steps < 1:
        raise ConfigError(f"--env={cfg.env} needs --bench_cap_steps=N with N >= 1 (agent steps per episode), "
                          f"got {steps}")
    family = find_family(inner_env(cfg.env))
    if family.validate_fn is not None:
        family.validate_fn(_as_inner(cfg))


def _make(full_env_name: str, cfg: Any, env_config: dict | None = None, render_mode: str | None = None) -> Any:
    name = inner_env(full_env_name)
    env = find_family(name).make_env_fn(name, _as_inner(cfg), env_config, render_mode=render_mode)
    if isinstance(env, SingleAgentEnvAdapter):  # a family that wraps its gymnasium envs itself (gym_)
        env.env = gymnasium.wrappers.TimeLimit(env.env, max_episode_steps=cfg.bench_cap_steps)
        return env
    if not isinstance(env, gymnasium.Env):
        raise ConfigError(f"--env={full_env_name}: {name} is a multi-agent env ({type(env).__name__}); "
                          f"{PREFIX} cuts the episodes of single-agent (gymnasium) envs only")
    return gymnasium.wrappers.TimeLimit(env, max_episode_steps=cfg.bench_cap_steps)


register_env_family(PREFIX, _make, add_params_fn=_add_params, validate_fn=_validate, compose_fn=_compose)
