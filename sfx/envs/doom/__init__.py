"""The ``doom_`` family: VizDoom scenarios bundled with the ``vizdoom`` package, played headless.

``--env=doom_basic`` (the list is in :mod:`sfx.envs.doom.scenarios`; ``doom_benchmark`` is the
fixed-cost scenario for throughput runs). Flags of the family:

* ``--res_w --res_h`` (128x72): observation size. VizDoom renders only its native resolutions, so
  the frame is rendered at the smallest native one at least as large and resized.
* ``--resize_interpolation`` (linear): that resize's filter: ``linear`` (two-by-two neighbours), ``area``
  (footprint averages, no aliasing; a quarter of a step's time on 160x120 -> 128x72) or ``nearest``
  (Sample Factory's; learned less on doom_basic). An experiment saved before the flag existed (trained on
  area) resumes and is evaluated with area.
* ``--wide_aspect_ratio`` (False): render 16:9 (256x144 for 128x72, a wider field of view)
  instead of 4:3 (160x120, the scenarios' own field of view, faster).
* ``--pixel_format`` (rgb): ``rgb`` -> ``(3, H, W)`` or ``gray`` -> ``(1, H, W)``, uint8.
* ``--doom_action_space`` (discrete): ``discrete`` = one Discrete over all combinations of button
  groups; ``tuple`` = a Tuple of one Discrete per group; ``single`` = none or one button at a time
  (see :mod:`sfx.envs.doom.actions`).
* ``--doom_measurements`` (False): game variables in the observation (``obs['measurements']``) (see :mod:`sfx.envs.doom.env`).
* ``--doom_render`` (the scenario's .cfg): VizDoom render options over the .cfg's, ``name=on|off,...``
  (hud, crosshair, weapon, decals, particles, ...). Sample Factory ships its own copies of the scenario files,
  which render differently (its basic.cfg: ``hud=on,decals=off,particles=off``); ``bench.learning`` runs sfx
  with Sample Factory's rendering so both learn from the same frames.
* ``--doom_reward_shaping`` (off): ``name=weight,...`` over health_delta, armor_delta, ammo_delta,
  kill, item, damage, death (see :mod:`sfx.envs.doom.reward_shaping`).

Multiplayer: ``doom_duel``, ``doom_duel_bots``, ``doom_deathmatch``, ``doom_deathmatch_bots`` are
multi-agent envs, one agent per player of a networked match (see :mod:`sfx.envs.doom.multiplayer`).
Their flags: ``--doom_num_agents`` and ``--doom_num_bots`` (default: the scenario's),
``--doom_bot_difficulty`` (0-100, every bot's aiming/perfection/reaction/isp; default: vizdoom's
bundled mix of bots), ``--doom_timelimit_min`` (4.0: match = episode length in game minutes),
``--doom_match_timeout_sec`` (10: a step without answer restarts the match).

Defaults changed for this family (``--help`` with a ``doom_`` env shows them; the command line wins):
``--env_frameskip=4``, ``--encoder_type=conv``, ``--encoder_subtype=convnet_simple``, and Sample
Factory's VizDoom settings ``--ppo_clip_value=0.2 --exploration_loss=symmetric_kl
--exploration_loss_coeff=0.001`` with its APPO's ``--with_vtrace=False --gae_lambda=0.95
--value_loss_coeff=1.0 --advantage_normalization=minibatch`` (GAE: APPO's auto ``--batches_ahead``
is 1), and the scale its encoders train from, ``--encoder_initialization=kaiming_uniform``. Scenarios set
``--doom_action_space`` (basic: ``single``, Sample Factory's idle / left / right / attack; else ``discrete``).
Rewards are the scenario's own and can be large (basic: +101 for the kill), so each scenario sets its default
``--reward_scale`` (the table in :mod:`sfx.envs.doom.scenarios`; basic 0.01 as in Sample Factory). Episode
statistics stay in the scenario's own units.

Your own scenario: :func:`register_doom_scenario` makes ``--env=doom_<name>`` play a
:class:`DoomScenario` of yours (your ``.cfg``, optionally a bundled or own ``.wad``) with every flag
above (see ``sfx_examples/train_custom_doom_scenario.py``).

Where files go: each game runs in its own temporary directory (``_vizdoom.ini``, ``_vizdoom/``),
deleted when the env closes (see :mod:`sfx.envs.doom.game`).
"""

from __future__ import annotations

import argparse
from typing import Any

import functools
import os

from sfx.cfg.flag_types import add_bool_arg
from sfx.errors import ConfigError
from sfx.envs.doom.actions import ACTION_SPACE_KINDS
from sfx.envs.doom.reward_shaping import COMPONENTS, parse_reward_shaping
from sfx.envs.doom.scenarios import (MULTIPLAYER_SCENARIOS, PREFIX, SCENARIOS, DoomScenario, multiplayer_scenario_of,
                                     scenario_of)
from sfx.envs.registry import env_seed, gym_id_stem, register_env, register_env_family

# Every doom_ env: Sample Factory's VizDoom settings (its doom_override_defaults, the values its paper's
# VizDoom experiments used: value clip 0.2, a symmetric-KL exploration penalty of 0.001, frameskip 4)
# and the convnet its VizDoom encoder uses. Its APPO as well: GAE(0.95) targets, not V-trace (so APPO's
# auto --batches_ahead keeps the workers one batch ahead: policy lag ~1), its value loss weight (its
# 0.5 x MSE is sfx's --value_loss_coeff=1.0: sfx halves the MSE) and advantages normalised per minibatch.
# Measured on doom_basic's published line (README, "Late learning"): 69.8 final at 800k frames on 3 seeds
# against 64.7 with sfx's generic defaults, where Sample Factory ends at 66-73.
# The encoder's initial weights: Sample Factory's orthogonal initialisation never reaches its conv encoder
# (a torch.jit.script module, whose layers its type check does not recognise), so that encoder trains from
# PyTorch's default weights (0.58x orthogonal's scale per layer) with zero biases; its heads are orthogonal.
# The same here (kaiming_uniform) ended doom_basic at 72.7 over 16 runs (two sets of 8 seeds: 73.2, 72.1;
# Sample Factory 72.5) against 70.2-70.4 with an orthogonal encoder (docs/benchmarks.md, "The encoder's initial
# scale").
DEFAULT_OVERRIDES = {"env_frameskip": 4, "encoder_type": "conv", "encoder_subtype": "convnet_simple",
                     "wide_aspect_ratio": False, "ppo_clip_value": 0.2, "exploration_loss": "symmetric_kl",
                     "exploration_loss_coeff": 0.001, "with_vtrace": False, "gae_lambda": 0.95,
                     "value_loss_coeff": 1.0, "advantage_normalization": "minibatch",
                     "encoder_initialization": "kaiming_uniform"}


def doom_default_overrides(env_name: str) -> dict:
    """The flag defaults of one ``doom_`` env: the family's, plus its scenario's ``--reward_scale`` and
    ``--doom_action_space``."""
    name = env_name[len(PREFIX):] if env_name.startswith(PREFIX) else env_name
    scenario = SCENARIOS.get(name)
    return {**DEFAULT_OVERRIDES, **(scenario_defaults(scenario) if scenario is not None else {})}


def scenario_defaults(scenario: DoomScenario) -> dict:
    """The flag defaults a scenario sets: its ``--reward_scale`` and ``--doom_action_space``."""
    return {"reward_scale": scenario.reward_scale, "doom_action_space": scenario.action_space}


__all__ = ["PREFIX", "SCENARIOS", "DoomScenario", "make_doom_env", "register_doom_scenario", "register_family",
           "scenario_of"]


def add_doom_params(parser: argparse.ArgumentParser) -> None:
    """The ``doom_`` family's flags."""
    # imported here: game.py imports vizdoom and cv2, which --help for other families does not need
    from sfx.envs.doom.game import INTERPOLATIONS, PIXEL_FORMATS, RENDER_OPTIONS

    g = parser.add_argument_group("doom_ envs")
    g.add_argument("--res_w", type=int, default=128, help="observation width in pixels")
    g.add_argument("--res_h", type=int, default=72, help="observation height in pixels")
    g.add_argument("--resize_interpolation", choices=tuple(INTERPOLATIONS), default="linear",
                   help="filter of the resize from VizDoom's native resolution to res_w x res_h: linear (two-by-two "
                        "neighbours), area (averages each output pixel's footprint, no aliasing; 1.36x linear's env "
                        "step time at 160x120 -> 128x72), nearest (Sample Factory's; learned less on doom_basic)")
    add_bool_arg(g, "wide_aspect_ratio", False,
                 "render 16:9 (wider field of view, e.g. 256x144) instead of 4:3 (e.g. 160x120) before resizing")
    g.add_argument("--pixel_format", choices=PIXEL_FORMATS, default="rgb",
                   help="observation channels: rgb (3, H, W) or gray (1, H, W), uint8")
    g.add_argument("--doom_action_space", choices=ACTION_SPACE_KINDS, default="discrete",
                   help="discrete: one Discrete over all button-group combinations; tuple: one Discrete per group; "
                        "single: one Discrete over none and each button alone (Sample Factory's doom_basic: idle, "
                        "left, right, attack)")
    add_bool_arg(g, "doom_measurements", False,
                 "observe the game variables (health, ammo, kills ...) too: a Dict observation {obs: frame, "
                 "measurements: float32 vector}, read by the model with a small MLP beside the image encoder")
    g.add_argument("--doom_render", default=None,
                   help=f"VizDoom render options set over the scenario's .cfg, as name=on|off,... (names: "
                        f"{', '.join(RENDER_OPTIONS)}); default: the .cfg's. The bundled basic.cfg renders no HUD, "
                        f"with decals and particles; Sample Factory's copy of it is hud=on,decals=off,particles=off")
    g.add_argument("--doom_reward_shaping", default=None,
                   help=f"extra reward components as name=weight,... (names: {', '.join(COMPONENTS)}); "
                        f"off by default")
    g.add_argument("--doom_num_agents", type=int, default=None,
                   help="multiplayer: players controlled by the env (default: the scenario's; duel 2, deathmatch 4, "
                        "*_bots 1)")
    g.add_argument("--doom_num_bots", type=int, default=None,
                   help="multiplayer: built-in bots in the match (default: the scenario's; duel_bots 1, "
                        "deathmatch_bots 7); agents + bots <= 2 on duel maps, <= 8 on deathmatch")
    g.add_argument("--doom_bot_difficulty", type=int, default=None,
                   help="multiplayer: 0-100, the skill fields (aiming, perfection, reaction, isp) of every bot; "
                        "default: vizdoom's bundled bots.cfg (a mix of skills)")
    g.add_argument("--doom_timelimit_min", type=float, default=4.0,
                   help="multiplayer: match length in game minutes (35 tics/s); the match end truncates the episode")
    g.add_argument("--doom_match_timeout_sec", type=float, default=10.0,
                   help="multiplayer: seconds a step may take before the match's processes are killed and the "
                        "match restarts (the episode ends as truncated)")


def validate_doom_cfg(cfg: argparse.Namespace) -> None:
    """:class:`ConfigError` for an unknown scenario or a bad family flag."""
    from sfx.envs.doom.multiplayer import validate_multiplayer_cfg

    if multiplayer_scenario_of(cfg.env) is not None:
        validate_multiplayer_cfg(cfg)
    else:
        scenario_of(cfg.env)
    validate_doom_flags(cfg)


def validate_doom_flags(cfg: argparse.Namespace) -> None:
    """:class:`ConfigError` for a bad flag shared by every doom env (size, shaping)."""
    from sfx.envs.doom.game import parse_render, render_resolution

    for flag in ("res_w", "res_h"):
        value = getattr(cfg, flag)
        if not 8 <= value <= 1920:
            raise ConfigError(f"--{flag}={value} must be in [8, 1920]")
    render_resolution(cfg.res_w, cfg.res_h, cfg.wide_aspect_ratio)
    parse_reward_shaping(cfg.doom_reward_shaping)
    parse_render(cfg.doom_render)


def make_doom_env(full_env_name: str, cfg: Any, env_config: dict | None = None, render_mode: str | None = None):
    """Make the env named by ``full_env_name``: a single-player :class:`~sfx.envs.doom.env.DoomEnv`, or a
    :class:`~sfx.envs.doom.multiplayer.DoomMultiplayerEnv` for the multiplayer names."""
    from sfx.envs.doom.multiplayer import make_multiplayer_env

    if multiplayer_scenario_of(full_env_name) is not None:
        return make_multiplayer_env(full_env_name, cfg, env_config, render_mode=render_mode)
    return make_scenario_env(scenario_of(full_env_name), full_env_name, cfg, env_config, render_mode)


def make_scenario_env(scenario: DoomScenario, full_env_name: str, cfg: Any, env_config: dict | None = None,
                      render_mode: str | None = None):
    """A single-player :class:`~sfx.envs.doom.env.DoomEnv` of ``scenario``, configured by the doom flags of ``cfg``."""
    from sfx.envs.doom.env import DoomEnv
    from sfx.envs.doom.game import GameSettings, parse_render

    settings = GameSettings(res_w=cfg.res_w, res_h=cfg.res_h,
                            wide_aspect_ratio=cfg.wide_aspect_ratio,
                            pixel_format=cfg.pixel_format, interpolation=cfg.resize_interpolation,
                            seed=env_seed(cfg, env_config), render=parse_render(cfg.doom_render))
    return DoomEnv(scenario, settings, frameskip=cfg.env_frameskip,
                   action_space=cfg.doom_action_space,
                   measurements=cfg.doom_measurements,
                   reward_shaping=parse_reward_shaping(cfg.doom_reward_shaping),
                   render_mode=render_mode)


def register_doom_scenario(scenario: DoomScenario, default_overrides: dict | None = None) -> str:
    """Make ``--env=doom_<scenario.name>`` play ``scenario`` with all the ``doom_`` flags; returns that name.

    ``default_overrides`` are flag defaults for this env on top of the family's and the scenario's
    ``reward_scale`` (e.g. a ``doom_reward_shaping`` or ``doom_measurements`` the scenario is meant
    for); the command line
    still wins. Call it at the top level of a module the worker processes import too (the main
    module, or one named in ``SFX_EXTRA_ENV_MODULES``) or before ``sfx.train.main``: the registered
    env travels to the workers with the run.
    """
    if not isinstance(scenario, DoomScenario):
        raise TypeError(f"register_doom_scenario takes a DoomScenario, got {type(scenario).__name__}")
    if not scenario.name or scenario.name in SCENARIOS or scenario.name in MULTIPLAYER_SCENARIOS:
        raise ValueError(f"doom scenario name {scenario.name!r} is empty or taken by a built-in one; choose another")
    for what, path in (("cfg", scenario.cfg_path()), ("wad", scenario.wad_path())):
        if path is not None and not os.path.isfile(path):
            raise ValueError(f"doom scenario {scenario.name!r}: its {what} file {path} does not exist")
    if scenario.action_space not in ACTION_SPACE_KINDS:
        raise ValueError(f"doom scenario {scenario.name!r}: action_space={scenario.action_space!r}; allowed: "
                         f"{', '.join(ACTION_SPACE_KINDS)}")
    env_name = PREFIX + scenario.name
    defaults = {**DEFAULT_OVERRIDES, **scenario_defaults(scenario), **(default_overrides or {})}
    register_env(env_name, functools.partial(_make_registered_scenario_env, scenario), add_params_fn=add_doom_params,
                 default_overrides=defaults, validate_fn=validate_doom_flags)
    return env_name


def _make_registered_scenario_env(scenario: DoomScenario, full_env_name: str, cfg: Any, env_config: dict | None = None,
                                  render_mode: str | None = None):
    return make_scenario_env(scenario, full_env_name, cfg, env_config, render_mode)


# ViZDoom's own gymnasium ids (``VizdoomDefendCenter-v1``) -> sfx's scenario names, where they are spelled
# differently; the others match once squashed (``VizdoomBasic`` -> ``basic``)
VIZDOOM_GYM_NAMES = {"defendcenter": "defend_the_center", "defendline": "defend_the_line"}


def served_gym_id(gym_id: str) -> str | None:
    """``VizdoomHealthGathering-v1`` -> ``doom_health_gathering``; None for an id this family does not serve."""
    stem = gym_id_stem(gym_id)
    if not stem.startswith("vizdoom"):
        return None
    stem = stem.removeprefix("vizdoom")
    names = {n.replace("_", ""): n for n in (*SCENARIOS, *MULTIPLAYER_SCENARIOS)}
    name = VIZDOOM_GYM_NAMES.get(stem) or names.get(stem)
    return PREFIX + name if name else None


def register_family() -> None:
    """Register the ``doom_`` family (called by the registry on the first ``doom_`` env name)."""
    from sfx.cfg.parsing import register_former_default

    register_former_default("resize_interpolation", "area")  # experiments saved before 2026-11-28 trained on it
    register_env_family(PREFIX, make_doom_env, add_params_fn=add_doom_params,
                        default_overrides=doom_default_overrides, validate_fn=validate_doom_cfg,
                        gym_id_fn=served_gym_id)
