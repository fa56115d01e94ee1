"""The ``football_`` family: Google Research Football (gfootball 2.10.2) scenarios, e.g.
``--env=football_academy_empty_goal_close`` or ``--env=football_11_vs_11_stochastic``.

Names are ``football_<scenario>`` for gfootball's scenarios (:data:`SCENARIOS`: the 11 vs 11 games,
``5_vs_5``, ``1_vs_1_easy`` and the 11 academy scenarios); any other name is a one-line ConfigError
listing them.

Defaults follow SEED RL's football setup (``seed_rl/football/env.py``): the stacked super mini map
("extracted" representation, 4 planes x 4 frames at 96x72, ``--football_smm_size``), one engine step
per action (``--env_frameskip=1``), the ``scoring`` reward (``--football_rewards=scoring,checkpoints``
adds gfootball's checkpoint reward, which SEED offers as its other choice and the Football paper
uses for its academy results), and an IMPALA ResNet over the planes. ``--football_representation``
``simple115`` / ``simple115v2`` gives gfootball's 115-float state vector instead (an MLP then encodes it).

Multi-agent: ``--football_left_players=N`` controls N left-team players, each an sfx agent with its
own observation (its player marked as the active one) and its own action; the built-in AI plays the
rest. See :class:`FootballEnv` for rewards, episode ends and seeding.

Backends (``--env_backend``): ``envpool`` (the default) steps the engine in EnvPool's C++ threads, installed from
PyPI with no build (:mod:`sfx.envs.football.on_envpool`: the stacked maps, the scoring reward, one player);
``python`` runs gfootball's own Python package, which compiles a C++ engine (``scripts/install_football.sh``,
the ``football`` extra's install step; without it that backend is a one-line error naming the script) and
serves everything below.
Rendering (``sfx.enjoy --save_video``) uses the engine's OpenGL view: without ``DISPLAY`` it renders
off-screen through EGL (Mesa's llvmpipe without a GPU; dark frames), under ``xvfb-run`` through GLX (the
game's colours); see docs/environments/football.md.
"""

from __future__ import annotations

import argparse
from typing import Any

from sfx.cfg.flag_types import add_bool_arg
from sfx.envs.envpool import add_backend_params, uses_envpool
from sfx.envs.football.env import (REPRESENTATIONS, REWARDS, SMM_SIZES, FootballEnv, import_gfootball,
                                   observation_space)
from sfx.envs.football.scenarios import PREFIX, SCENARIOS, Scenario, check_scenario, scenario_name
from sfx.envs.registry import env_seed, register_env_family
from sfx.errors import ConfigError

__all__ = ["DEFAULT_OVERRIDES", "FootballEnv", "PREFIX", "REPRESENTATIONS", "REWARDS", "SCENARIOS", "SMM_SIZES",
           "Scenario", "add_football_params", "check_scenario", "import_gfootball", "make_football_env", "make_football_vector",
           "observation_space", "register_family", "scenario_name", "validate_football_cfg"]

# SEED RL's football agent: one engine step per action, a ResNet over the SMM planes (0/255, scaled to 0/1)
DEFAULT_OVERRIDES: dict[str, Any] = {
    "env_frameskip": 1,
    "encoder_type": "resnet",
    "encoder_subtype": "resnet_impala",
    "obs_scale": 255.0,
    "hidden_size": 256,
}


def add_football_params(parser: argparse.ArgumentParser) -> None:
    """The ``--football_*`` flags."""
    g = parser.add_argument_group("football_ envs (Google Research Football)")
    add_backend_params(g, default="envpool")
    g.add_argument("--football_representation", choices=REPRESENTATIONS, default="extracted",
                   help="observation: extracted = the super mini map, 4 uint8 planes (left team, right team, ball, "
                        "active player; SEED RL's choice); simple115 / simple115v2 = gfootball's 115-float state "
                        "vector (v2 fixes the game-mode and direction encoding)")
    g.add_argument("--football_stacked", type=_auto_bool, default=None, metavar="BOOL",
                   help="stack the last 4 observations (16 SMM planes, or a 460-float vector); default: on for "
                        "extracted (SEED RL), off for simple115/simple115v2")
    g.add_argument("--football_rewards", choices=REWARDS, default="scoring",
                   help="scoring = +1/-1 per goal (SEED RL's default); scoring,checkpoints adds +0.1 for each of 10 "
                        "zones towards the opponent's goal first reached with the ball (the Football paper's "
                        "academy runs)")
    g.add_argument("--football_smm_size", choices=list(SMM_SIZES), default="default",
                   help="super mini map size (SEED RL's --smm_size): default 96x72, medium 120x90, large 144x108")
    g.add_argument("--football_left_players", type=int, default=1,
                   help="left-team players sfx controls, one agent each (multi-agent); the built-in AI plays the "
                        "others. At most the scenario's left players (11 in 11_vs_11_*, 2 in "
                        "academy_empty_goal_close, counting the keeper)")
    g.add_argument("--football_render_width", type=int, default=1280,
                   help="width of rendered frames (sfx.enjoy --save_video); height = 0.5625 x width")


def _auto_bool(text: str) -> bool:
    lowered = str(text).lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not a boolean; allowed: True or False")


def stacked(cfg: Any) -> bool:
    """``--football_stacked``, or by default: on for the SMM planes, off for the 115-float vectors."""
    if cfg.football_stacked is not None:
        return bool(cfg.football_stacked)
    return cfg.football_representation == "extracted"


def validate_football_cfg(cfg: argparse.Namespace) -> None:
    """Check the scenario name and the football flags. Whether gfootball imports is checked where an env is made
    (the trainer's probe env, before any worker starts), so command lines parse where it is not installed."""
    scenario = check_scenario(cfg.env)
    if not 1 <= cfg.football_left_players <= scenario.left_players:
        raise ConfigError(f"--football_left_players={cfg.football_left_players} must be between 1 and "
                          f"{scenario.left_players} (the left players of {scenario_name(cfg.env)})")
    if not 64 <= cfg.football_render_width <= 3840:
        raise ConfigError(f"--football_render_width={cfg.football_render_width} must be between 64 and 3840 pixels")
    if cfg.env_frameskip < 1:
        raise ConfigError(f"--env_frameskip={cfg.env_frameskip} must be >= 1")
    if uses_envpool(cfg):
        from sfx.envs.football.on_envpool import football_options

        football_options(cfg)


def make_football_env(full_env_name: str, cfg: Any, env_config: dict | None = None,
                      render_mode: str | None = None) -> Any:
    """The env of ``full_env_name``, seeded with sfx's per-env seed on its first reset (on EnvPool: a one-env
    pool, for the probe, the evaluator and sfx.enjoy; rollout workers step whole pools)."""
    check_scenario(full_env_name)
    if uses_envpool(cfg):
        if render_mode is not None:
            raise ConfigError(f"--env={full_env_name}: rendering (sfx.enjoy --save_video) is not served by "
                              f"--env_backend=envpool (EnvPool draws no picture of the game); use "
                              f"--env_backend=python (gfootball built by scripts/install_football.sh)")
        from sfx.envs.envpool.families import VectorAsEnv
        from sfx.envs.football.on_envpool import make_football_pool

        config = dict(env_config or {"worker_index": 0, "vector_index": 0, "env_id": 0})
        return VectorAsEnv(lambda configs: make_football_pool(cfg, configs, stacked(cfg)), config)
    env = FootballEnv(scenario_name(full_env_name), representation=cfg.football_representation,
                      rewards=cfg.football_rewards, stacked=stacked(cfg), smm_size=cfg.football_smm_size,
                      left_players=cfg.football_left_players, frameskip=cfg.env_frameskip,
                      render_mode=render_mode, render_width=cfg.football_render_width, env_name=full_env_name,
                      seed=env_seed(cfg, env_config))
    return env


def make_football_vector(cfg: Any, env_configs: list[dict]) -> Any:
    """The family's ``make_vector_fn``: a split's envs as one EnvPool pool, or None (the Python envs)."""
    if not uses_envpool(cfg):
        return None
    from sfx.envs.football.on_envpool import make_football_pool

    return make_football_pool(cfg, env_configs, stacked(cfg))


def register_family() -> None:
    register_env_family(PREFIX, make_football_env, add_params_fn=add_football_params,
                        default_overrides=DEFAULT_OVERRIDES, validate_fn=validate_football_cfg,
                        make_vector_fn=make_football_vector)
