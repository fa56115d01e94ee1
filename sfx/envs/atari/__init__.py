"""The ``atari_`` family: Atari 2600 games through ale-py (ROMs bundled), e.g. ``--env=atari_breakout``.

Any ale-py ROM id in snake_case is a game (``atari_space_invaders``, ``atari_montezuma_revenge``);
:data:`ATARI_57` lists the usual 57-game benchmark. Observations are ``uint8 (4, 84, 84)``: the last
4 agent steps, each the max of its last two grayscale frames, downsampled to 84x84. One agent step is
``--env_frameskip`` (default 4) emulator frames, and env steps are counted in frames.

Protocol choices (each a flag):

- Sticky actions on, p=0.25 (Machado et al. 2018; ale-py's own v5 default): with probability p each
  emulator frame repeats the previous action, so an open-loop memorised sequence does not pay.
  ``--atari_sticky_actions=False`` gives the older deterministic protocol (``*NoFrameskip-v4``, used by
  DQN, IMPALA and Sample Factory 1.x papers) for comparisons with their numbers.
- Up to 30 no-op frames at the start of a game, FIRE as the first step of games that have it.
- Episodic life while training: a lost life ends the agent's episode (terminated, no bootstrap) but not
  the game; episode statistics (``reward``, ``len``) are always those of the whole game, raw score.
  sfx.enjoy (a cfg with evaluation flags) always plays whole games.
- Games are cut at 108,000 frames (30 minutes of play): truncated, so the learner bootstraps.
- ``--env_backend=envpool`` steps each rollout worker split as one EnvPool pool (C++) with the same flags;
  docs/environments/envpool.md says what differs (FIRE for one frame, the no-op draws, the frame cap's count).
- Reward clipping lives in the engine, not in the env: this family sets ``--reward_clip=1.0``, and the
  learner's clamp to [-1, 1] equals sign() on Atari's integer scores. The env itself returns raw scores,
  which is what the statistics report.
"""

from __future__ import annotations

import argparse
from typing import Any

from sfx.cfg.flag_types import add_bool_arg
from sfx.errors import ConfigError
from sfx.envs.atari.games import ATARI_57, PREFIX, all_rom_ids, check_game, game_name
from sfx.envs.envpool import add_backend_params, check_envpool_cfg, not_served, pool_threads, require_envpool, uses_envpool
from sfx.envs.envpool.families import NO_LIMIT, is_evaluation, seeds_for
from sfx.envs.atari.wrappers import (EpisodicLifeEnv, FireReset, FrameStack, MaxPoolFrameSkip, NoopReset,
                                     ResizeFrame, action_index)
from sfx.envs.registry import env_seed, gym_id_stem, register_env_family

__all__ = ["ATARI_57", "DEFAULT_OVERRIDES", "EpisodicLifeEnv", "FireReset", "FrameStack", "MaxPoolFrameSkip",
           "NoopReset", "ResizeFrame", "add_atari_params", "all_rom_ids", "check_game", "game_name",
           "make_atari_env", "register_family", "validate_atari_cfg"]

OBS_SIZE = 84
NUM_STACKED_FRAMES = 4

# 4 frames per agent step, the classic Atari conv net on 84x84 uint8 frames, sign-like reward clipping
DEFAULT_OVERRIDES = {
    "env_frameskip": 4,
    "encoder_type": "conv",
    "encoder_subtype": "convnet_simple",
    "obs_scale": 255.0,
    "hidden_size": 512,
    "reward_clip": 1.0,
}


def add_atari_params(parser: argparse.ArgumentParser) -> None:
    """The ``--atari_*`` flags."""
    g = parser.add_argument_group("atari_ envs")
    add_bool_arg(g, "atari_sticky_actions", True,
                 "sticky actions (Machado et al. 2018): each frame repeats the previous action with probability "
                 "--atari_sticky_action_prob; False = deterministic *NoFrameskip-v4 protocol")
    g.add_argument("--atari_sticky_action_prob", type=float, default=0.25,
                   help="repeat probability of sticky actions, in [0, 1)")
    add_bool_arg(g, "atari_full_action_set", False, "all 18 joystick actions instead of the game's minimal set")
    add_bool_arg(g, "atari_episodic_life", True,
                 "while training, a lost life ends the agent's episode (not the game; statistics stay per game)")
    g.add_argument("--atari_noop_max", type=int, default=30,
                   help="a game starts with 1..N random no-op frames; 0 = none")
    add_bool_arg(g, "atari_fire_reset", True, "press FIRE as the first step of games that have a FIRE action")
    g.add_argument("--atari_max_episode_frames", type=int, default=108_000,
                   help="a game is truncated after this many emulator frames (108000 = 30 min); 0 = no limit")
    add_backend_params(g)


def validate_atari_cfg(cfg: argparse.Namespace) -> None:
    """:class:`ConfigError` for an unknown game or a bad ``--atari_*`` value."""
    check_game(cfg.env)
    prob = cfg.atari_sticky_action_prob
    if not 0.0 <= prob < 1.0:
        raise ConfigError(f"--atari_sticky_action_prob={prob} must be in [0, 1)")
    noop_max = cfg.atari_noop_max
    if not isinstance(noop_max, int) or noop_max < 0:
        raise ConfigError(f"--atari_noop_max={noop_max} must be an integer >= 0")
    cap = cfg.atari_max_episode_frames
    if not isinstance(cap, int) or cap < 0:
        raise ConfigError(f"--atari_max_episode_frames={cap} must be an integer >= 0 (0 = no limit)")
    skip = cfg.env_frameskip
    if not isinstance(skip, int) or skip < 1:
        raise ConfigError(f"--env_frameskip={skip} must be a positive integer for Atari")
    if uses_envpool(cfg):
        atari_options(cfg)


def _is_evaluation(cfg: Any) -> bool:
    # only a cfg parsed for sfx.enjoy has the evaluation flags
    return hasattr(cfg, "max_num_episodes")


def make_atari_env(full_env_name: str, cfg: Any, env_config: dict | None = None,
                   render_mode: str | None = None) -> EpisodicLifeEnv:
    """The Atari game of ``full_env_name`` with the standard preprocessing, as a one-agent MultiAgentEnv.

    Reads ``cfg.env_frameskip`` and the ``--atari_*`` flags (a cfg parsed for an ``atari_`` env has them all).
    """
    import cv2
    from ale_py.env import AtariEnv  # imported here: sfx.envs.atari imports without building anything

    game = check_game(full_env_name)
    # one rollout worker = one core: cv2's own thread pool only adds contention (and costs ~40% per resize)
    cv2.setNumThreads(1)
    sticky = cfg.atari_sticky_action_prob if cfg.atari_sticky_actions else 0.0
    cap = cfg.atari_max_episode_frames
    env = AtariEnv(game, obs_type="grayscale", frameskip=1, repeat_action_probability=float(sticky),
                   full_action_space=bool(cfg.atari_full_action_set),
                   max_num_frames_per_episode=cap if cap > 0 else None, render_mode=render_mode)
    noop_max = cfg.atari_noop_max
    if noop_max > 0:
        env = NoopReset(env, noop_max)
    env = MaxPoolFrameSkip(env, max(1, int(cfg.env_frameskip)))
    if cfg.atari_fire_reset and action_index(env, "FIRE") is not None:
        env = FireReset(env)
    env = ResizeFrame(env, OBS_SIZE)
    env = FrameStack(env, NUM_STACKED_FRAMES)
    episodic_life = bool(cfg.atari_episodic_life) and not _is_evaluation(cfg)
    return EpisodicLifeEnv(env, seed=env_seed(cfg, env_config), episodic_life=episodic_life)


def served_gym_id(gym_id: str) -> str | None:
    """``ALE/SpaceInvaders-v5``, ``SpaceInvadersNoFrameskip-v4``, ``SpaceInvaders-v5`` -> ``atari_space_invaders``;
    None for an id that names no ALE game."""
    stem = gym_id_stem(gym_id).removesuffix("noframeskip").removesuffix("deterministic")
    games = {rom.replace("_", ""): rom for rom in all_rom_ids()}
    return PREFIX + games[stem] if stem in games else None



# ------------------------------------------------------------------------------------ on EnvPool (--env_backend)


def atari_task_id(game: str) -> str:
    """ale-py's ROM id -> EnvPool's task: ``space_invaders`` -> ``SpaceInvaders-v5``."""
    return "".join(part.capitalize() for part in game.split("_")) + "-v5"


def atari_served() -> list[str]:
    """The ``atari_`` names EnvPool serves."""
    tasks = set(require_envpool().list_all_envs())
    return [PREFIX + rom for rom in all_rom_ids() if atari_task_id(rom) in tasks]


def atari_options(cfg: Any) -> tuple[str, dict[str, Any]]:
    """``--env`` and the ``--atari_*`` flags -> (EnvPool task, its config); :class:`ConfigError` where EnvPool
    cannot do what a flag says."""
    game = check_game(cfg.env)
    task = atari_task_id(game)
    check_envpool_cfg(cfg, task, atari_served())
    skip = int(cfg.env_frameskip)
    if cfg.atari_noop_max < 1:
        # EnvPool 1.2.5 crashes (segmentation fault) at its first reset with noop_max=0
        raise not_served("--atari_noop_max", cfg.atari_noop_max, "an integer >= 1 (EnvPool always starts a game "
                         "with 1..N no-op frames)")
    cap = int(cfg.atari_max_episode_frames)
    if cap % skip:
        raise not_served("--atari_max_episode_frames", cap, f"a multiple of --env_frameskip={skip} (EnvPool counts "
                         "its time limit in agent steps), or 0 for no limit")
    sticky = float(cfg.atari_sticky_action_prob) if cfg.atari_sticky_actions else 0.0
    return task, {
        "frame_skip": skip,
        "repeat_action_probability": sticky,
        "full_action_space": bool(cfg.atari_full_action_set),
        "noop_max": int(cfg.atari_noop_max),
        "use_fire_reset": bool(cfg.atari_fire_reset),
        "max_episode_steps": cap // skip if cap > 0 else NO_LIMIT,
        # the Python stack's preprocessing: 4 stacked 84x84 grayscale frames, area-interpolated, max over the
        # last two frames of each step (EnvPool always max-pools)
        "stack_num": 4, "img_height": 84, "img_width": 84, "gray_scale": True, "use_inter_area_resize": True,
        # sfx clips rewards in the learner (--reward_clip) and ends lives itself (see EnvPoolVector)
        "reward_clip": False, "episodic_life": False, "zero_discount_on_life_loss": False,
    }


def make_atari_vector(cfg: Any, env_configs: list[dict]) -> Any:
    """The ``atari_`` family's ``make_vector_fn``."""
    if not uses_envpool(cfg):
        return None
    task, options = atari_options(cfg)
    episodic_life = bool(cfg.atari_episodic_life) and not is_evaluation(cfg)
    from sfx.envs.envpool.vector import EnvPoolVector

    return EnvPoolVector(task, seeds_for(cfg, env_configs), options, pool_threads(cfg, len(env_configs)),
                         episodic_life=episodic_life, name=f"envpool {task}")


def register_family() -> None:
    """Register the ``atari_`` family (called by the env registry on first use of an ``atari_`` name)."""
    register_env_family(PREFIX, make_atari_env, add_params_fn=add_atari_params,
                        default_overrides=DEFAULT_OVERRIDES, validate_fn=validate_atari_cfg,
                        gym_id_fn=served_gym_id, make_vector_fn=make_atari_vector)
