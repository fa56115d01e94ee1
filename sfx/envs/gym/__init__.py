"""The ``gym_`` family: any registered gymnasium env, e.g. ``--env=gym_CartPole-v1``.

``--env=gym_mypkg.envs:MyEnv-v0`` imports ``mypkg.envs`` first (gymnasium's ``module:id`` form),
so envs registered by your own package work too.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
from typing import Any, Callable

import gymnasium

from sfx.errors import ConfigError
from sfx.envs.multi_agent import SingleAgentEnvAdapter
from sfx.envs.registry import env_seed, register_env_family
from sfx.envs.wrappers import FrameSkip

PREFIX = "gym_"

# Sample Factory's width for gym envs (its MLP encoder's default 512, 512, and a core of 512): with
# standardized inputs (--normalize_input, the default) a 64-unit MLP stays at Acrobot's -500 on about
# half the seeds in sfx (5 of 10, main-job settings, 300k steps) and in Sample Factory 2.1.1 alike
# (--encoder_mlp_layers 64 64), where 512 units learned on 10 of 10. MuJoCo keeps 64 (its own family).
DEFAULT_OVERRIDES = {"encoder_type": "mlp", "encoder_subtype": "mlp_mujoco", "hidden_size": 512}


def gym_id(full_env_name: str) -> str:
    """``gym_CartPole-v1`` -> ``CartPole-v1``."""
    return full_env_name[len(PREFIX):]


def check_gym_id(env_id: str) -> None:
    """:class:`ConfigError` unless gymnasium knows ``env_id`` (close matches suggested)."""
    module, _, name = env_id.rpartition(":")
    if module:
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise ConfigError(f"--env={PREFIX}{env_id}: cannot import module {module!r} that should register "
                              f"{name!r}: {e}") from None
    if name in gymnasium.registry:
        return
    close = difflib.get_close_matches(name, list(gymnasium.registry), n=3, cutoff=0.6)
    hint = f"; did you mean: {', '.join(close)}?" if close else "; gymnasium.pprint_registry() lists the known ids"
    raise ConfigError(f"--env={PREFIX}{env_id}: gymnasium has no env {name!r}{hint}")


def add_gym_params(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("gym_ envs")
    g.add_argument("--gym_max_episode_steps", type=int, default=None,
                   help="time limit in env steps (episode truncated); None = the env's registered limit")


def validate_gym_cfg(cfg: argparse.Namespace) -> None:
    check_gym_id(gym_id(cfg.env))
    limit = cfg.gym_max_episode_steps
    if limit is not None and limit <= 0:
        raise ConfigError(f"--gym_max_episode_steps={limit} must be a positive integer (or None)")


def make_gym_env(full_env_name: str, cfg: Any, env_config: dict | None = None,
                 render_mode: str | None = None) -> SingleAgentEnvAdapter:
    """Make the gymnasium env, with frame skip when ``cfg.env_frameskip > 1``, seen as one agent."""
    env_id = gym_id(full_env_name)
    check_gym_id(env_id)
    return make_gymnasium_as_agent(env_id, cfg, env_config, render_mode, cfg.gym_max_episode_steps)


def make_gymnasium_as_agent(env_id: str, cfg: Any, env_config: dict | None, render_mode: str | None,
                            max_episode_steps: int | None = None,
                            wrap: Callable[[gymnasium.Env], gymnasium.Env] | None = None) -> SingleAgentEnvAdapter:
    """``gymnasium.make(env_id)`` (optionally wrapped by ``wrap``), with ``cfg.env_frameskip``, seen as one agent.

    Shared by the families built on gymnasium's registry (``gym_``, ``mujoco_``).
    """
    # the passive checker re-validates every step through an extra wrapper layer; sfx checks spaces itself
    kwargs: dict[str, Any] = {"render_mode": render_mode, "disable_env_checker": True}
    if max_episode_steps is not None:
        kwargs["max_episode_steps"] = max_episode_steps
    env = gymnasium.make(env_id, **kwargs)
    if wrap is not None:
        env = wrap(env)
    frameskip = cfg.env_frameskip
    if frameskip > 1:
        env = FrameSkip(env, frameskip)
    return SingleAgentEnvAdapter(env, seed=env_seed(cfg, env_config))


def register_family() -> None:
    register_env_family(PREFIX, make_gym_env, add_params_fn=add_gym_params,
                        default_overrides=DEFAULT_OVERRIDES, validate_fn=validate_gym_cfg)
