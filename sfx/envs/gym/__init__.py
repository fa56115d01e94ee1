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
from sfx.envs.registry import env_seed, register_env_family, sfx_names_for_gym_id
from sfx.envs.wrappers import FrameSkip

PREFIX = "gym_"

# Sample Factory's width for gym envs (its MLP encoder's default 512, 512, and a core of 512): with
# standardized inputs (--normalize_input, the default) a 64-unit MLP stays at Acrobot's -500 on about
# half the seeds in sfx (5 of 10, main-job settings, 300k steps) and in Sample Factory 2.1.1 alike
# (--encoder_mlp_layers 64 64), where 512 units learned on 10 of 10. MuJoCo keeps 64 (its own family).
DEFAULT_OVERRIDES = {"encoder_type": "mlp", "encoder_subtype": "mlp_mujoco", "hidden_size": 512}

# R2D2 on classic control: the README's CartPole settings (tests/agents/test_r2d2_learning.py: 400 within ~50K env
# steps). R2D2's own defaults are SEED RL's, for Atari over hundreds of millions of frames; these follow the RL Zoo's
# classic-control DQN practice: a high update-to-data ratio (8 trained samples per fresh one), a target renewed
# often (every 50 learner steps), gamma .99, a short n (3), sequences of 16 steps after an 8-step burn-in, a
# 64-wide GRU, and a small replay (32,000 samples, learning from 800).
AGENT_DEFAULTS = {
    "R2D2": {"rollout": 16, "recurrence": 16, "burn_in": 8, "batch_size": 256, "use_rnn": True, "rnn_type": "gru",
             "hidden_size": 64, "replay_ratio": 8.0, "replay_buffer_size": 32_000, "learning_starts": 800,
             "target_update_period": 50, "learning_rate": 1e-3, "gamma": 0.99, "n_step": 3},
}


def gym_id(full_env_name: str) -> str:
    """``gym_CartPole-v1`` -> ``CartPole-v1``."""
    return full_env_name[len(PREFIX):]


def served_hint(name: str) -> str:
    """``"; did you mean --env=minigrid_MemoryS7? ..."`` where an sfx family serves the gymnasium id ``name``
    under its own name, else ``""``."""
    served = sfx_names_for_gym_id(name)
    if not served:
        return ""
    family = served[0].split("_")[0] + "_"
    return f"; did you mean --env={served[0]}? (sfx's {family} family serves this env, with its own defaults)"


def _registering_package(spec: Any) -> str:
    """The top-level package of a registered id's entry point (``gymnasium``, ``minigrid``, ``ale_py`` ...)."""
    entry = spec.entry_point
    module = entry if isinstance(entry, str) else getattr(entry, "__module__", "") or ""
    return module.split(":")[0].split(".")[0]


def check_gym_id(env_id: str) -> None:
    """:class:`ConfigError` unless gymnasium knows ``env_id`` (close matches suggested).

    An id that another package registers only when imported (MiniGrid's, ale-py's, ViZDoom's) and that
    an sfx family serves is refused with that family's name, whether or not something in this process
    happened to import the package: what ``gym_MiniGrid-MemoryS7-v0`` does must not depend on import
    order. ``gym_minigrid:MiniGrid-MemoryS7-v0`` (gymnasium's ``module:id`` form) still makes the raw env."""
    module, _, name = env_id.rpartition(":")
    if module:
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise ConfigError(f"--env={PREFIX}{env_id}: cannot import module {module!r} that should register "
                              f"{name!r}: {e}") from None
    spec = gymnasium.registry.get(name)
    if spec is not None and (module or _registering_package(spec) == "gymnasium"):
        return
    hint = served_hint(name)
    if spec is not None:
        if not hint:
            return  # registered by the user's own import
        package = _registering_package(spec)
        raise ConfigError(f"--env={PREFIX}{env_id}: {name!r} is not one of gymnasium's own envs ({package} registers "
                          f"it when imported){hint}; --env={PREFIX}{package}:{name} makes the raw env")
    if hint:
        raise ConfigError(f"--env={PREFIX}{env_id}: gymnasium has no env {name!r}{hint}")
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
    try:
        return make_gymnasium_as_agent(env_id, cfg, env_config, render_mode, cfg.gym_max_episode_steps)
    except (ImportError, gymnasium.error.Error) as e:
        # registered but not makeable here: a deprecated version, a package gymnasium points to elsewhere
        name = env_id.rpartition(":")[2]
        raise ConfigError(f"--env={full_env_name}: gymnasium cannot make {name!r}: {e}{served_hint(name)}") from None


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
                        default_overrides=DEFAULT_OVERRIDES, agent_defaults=AGENT_DEFAULTS, validate_fn=validate_gym_cfg)
