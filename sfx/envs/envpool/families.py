"""Each served family's flags translated into EnvPool's config, and its ``make_vector_fn``.

A family's ``make_vector_fn`` returns None unless ``--env_backend=envpool``, so the Python envs stay the default
where the family has them. The ``*_options`` functions raise :class:`ConfigError` for a value EnvPool cannot serve;
the families' ``validate_fn`` call them, so that bad input fails before any process starts.
"""

from __future__ import annotations

from typing import Any, Callable

import gymnasium
import numpy as np

from sfx.envs.envpool import check_envpool_cfg, not_served, pool_threads, require_envpool, uses_envpool
from sfx.envs.envpool.vector import EnvPoolVector
from sfx.envs.multi_agent import MultiAgentEnv
from sfx.envs.registry import env_seed
from sfx.errors import ConfigError

# a time limit of "none": EnvPool counts elapsed steps in an int32
NO_LIMIT = 2 ** 31 - 1


def _is_evaluation(cfg: Any) -> bool:
    # only a cfg parsed for sfx.enjoy has the evaluation flags
    return hasattr(cfg, "max_num_episodes")


def _seeds(cfg: Any, env_configs: list[dict]) -> list[int | None]:
    return [env_seed(cfg, c) for c in env_configs]


def _check_no_frameskip(cfg: Any, why: str) -> None:
    if cfg.env_frameskip != 1:
        raise not_served("--env_frameskip", cfg.env_frameskip, f"1 ({why})")


# ------------------------------------------------------------------------------------ atari_

def atari_task_id(game: str) -> str:
    """ale-py's ROM id -> EnvPool's task: ``space_invaders`` -> ``SpaceInvaders-v5``."""
    return "".join(part.capitalize() for part in game.split("_")) + "-v5"


def atari_served() -> list[str]:
    """The ``atari_`` names EnvPool serves."""
    from sfx.envs.atari.games import PREFIX, all_rom_ids

    tasks = set(require_envpool().list_all_envs())
    return [PREFIX + rom for rom in all_rom_ids() if atari_task_id(rom) in tasks]


def atari_options(cfg: Any) -> tuple[str, dict[str, Any]]:
    """``--env`` and the ``--atari_*`` flags -> (EnvPool task, its config); :class:`ConfigError` where EnvPool
    cannot do what a flag says."""
    from sfx.envs.atari.games import check_game

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


def make_atari_vector(cfg: Any, env_configs: list[dict]) -> EnvPoolVector | None:
    """The ``atari_`` family's ``make_vector_fn``."""
    if not uses_envpool(cfg):
        return None
    task, options = atari_options(cfg)
    episodic_life = bool(cfg.atari_episodic_life) and not _is_evaluation(cfg)
    return EnvPoolVector(task, _seeds(cfg, env_configs), options, pool_threads(cfg, len(env_configs)),
                         episodic_life=episodic_life, name=f"envpool {task}")


# ------------------------------------------------------------------------------------ mujoco_

def mujoco_options(cfg: Any) -> tuple[str, dict[str, Any]]:
    """``--env`` and the ``--mujoco_*`` flags -> (EnvPool task, its config)."""
    from sfx.envs.mujoco import MUJOCO_ENVS, PREFIX, mujoco_id

    task = mujoco_id(cfg.env)
    check_envpool_cfg(cfg, task, sorted(PREFIX + n for n in MUJOCO_ENVS))
    _check_no_frameskip(cfg, "EnvPool's MuJoCo frame_skip is the physics substeps of one env step, not an action "
                             "repeat")
    options: dict[str, Any] = {}
    if cfg.mujoco_max_episode_steps is not None:
        options["max_episode_steps"] = int(cfg.mujoco_max_episode_steps)
    return task, options


def _float32_obs(raw: np.ndarray) -> np.ndarray:
    return raw.astype(np.float32)


def _float32_space(space: gymnasium.spaces.Box) -> gymnasium.spaces.Box:
    return gymnasium.spaces.Box(space.low.astype(np.float32), space.high.astype(np.float32), shape=space.shape,
                                dtype=np.float32)


def make_mujoco_vector(cfg: Any, env_configs: list[dict]) -> EnvPoolVector | None:
    """The ``mujoco_`` family's ``make_vector_fn``: observations as float32, like the Python envs'."""
    if not uses_envpool(cfg):
        return None
    task, options = mujoco_options(cfg)
    space = _float32_space(require_envpool().make_spec(task, **options).observation_space)
    return EnvPoolVector(task, _seeds(cfg, env_configs), options, pool_threads(cfg, len(env_configs)),
                         observation_space=space, obs_fn=_float32_obs, name=f"envpool {task}")


# ------------------------------------------------------------------------------------ minigrid_

def minigrid_options(cfg: Any) -> tuple[str, dict[str, Any]]:
    """``--env`` and the ``--minigrid_*`` flags -> (EnvPool task, its config)."""
    from sfx.envs.minigrid import PREFIX, minigrid_env_ids, minigrid_id, short_name

    task = minigrid_id(cfg.env)
    served = set(require_envpool().list_all_envs())
    check_envpool_cfg(cfg, task, [PREFIX + short_name(i) for i in minigrid_env_ids() if i in served])
    _check_no_frameskip(cfg, "the EnvPool backend does not repeat MiniGrid actions")
    options: dict[str, Any] = {}
    if cfg.minigrid_agent_view_size is not None:
        options["agent_view_size"] = int(cfg.minigrid_agent_view_size)
    return task, options


def make_minigrid_vector(cfg: Any, env_configs: list[dict]) -> EnvPoolVector | None:
    """The ``minigrid_`` family's ``make_vector_fn``: EnvPool's dict observations flattened as the Python envs'
    (:func:`sfx.envs.minigrid.flat_views`), and the ``success`` statistic."""
    if not uses_envpool(cfg):
        return None
    from sfx.envs.minigrid import flat_view_space, flat_views

    task, options = minigrid_options(cfg)
    kind = cfg.minigrid_obs
    view = require_envpool().make_spec(task, **options).observation_space["image"].shape[:2]

    def obs_fn(raw: dict) -> np.ndarray:
        return flat_views(raw["image"], raw["direction"], kind)

    return EnvPoolVector(task, _seeds(cfg, env_configs), options, pool_threads(cfg, len(env_configs)),
                         observation_space=flat_view_space(view, kind), obs_fn=obs_fn,
                         extra_stats_fn=_minigrid_success, name=f"envpool {task}")


def _minigrid_success(ended: np.ndarray, final_obs: Any, rewards: np.ndarray, terminated: np.ndarray,
                      info: dict) -> list[dict]:
    # as the Python envs': 1 when the episode ended on a terminal step with a positive reward
    return [{"success": float(t and r > 0)} for t, r in zip(terminated.tolist(), rewards.tolist())]


# ------------------------------------------------------------------------------------ procgen_

def procgen_task_id(game: str, mode: str) -> str:
    """``starpilot``, ``easy`` -> ``StarpilotEasy-v0``."""
    return f"{game.capitalize()}{mode.capitalize()}-v0"


def procgen_options(cfg: Any) -> tuple[str, dict[str, Any]]:
    """``--env`` and the ``--procgen_*`` flags -> (EnvPool task, its config)."""
    from sfx.envs.procgen import PREFIX, PROCGEN_GAMES, check_game, distribution_modes

    game = check_game(cfg.env)
    mode = cfg.procgen_distribution_mode
    modes = distribution_modes(game)
    if mode not in modes:
        raise ConfigError(f"--procgen_distribution_mode={mode} is not one of {cfg.env}'s; allowed: {', '.join(modes)}")
    task = procgen_task_id(game, mode)
    check_envpool_cfg(cfg, task, [PREFIX + g for g in PROCGEN_GAMES])
    _check_no_frameskip(cfg, "Procgen's agent step is one game frame and the EnvPool backend does not repeat actions")
    return task, {"num_levels": int(cfg.procgen_num_levels), "start_level": int(cfg.procgen_start_level)}


def _procgen_level_complete(ended: np.ndarray, final_obs: Any, rewards: np.ndarray, terminated: np.ndarray,
                            info: dict) -> list[dict]:
    # EnvPool's prev_level_complete is 1 on the step that completed the level (0 at a death or the time limit)
    return [{"success": float(c)} for c in np.asarray(info["prev_level_complete"])[ended].tolist()]


def make_procgen_vector(cfg: Any, env_configs: list[dict]) -> EnvPoolVector:
    """The ``procgen_`` family's ``make_vector_fn`` (EnvPool is its only backend)."""
    task, options = procgen_options(cfg)
    return EnvPoolVector(task, _seeds(cfg, env_configs), options, pool_threads(cfg, len(env_configs)),
                         extra_stats_fn=_procgen_level_complete, name=f"envpool {task}")


# ------------------------------------------------------------------------------------ one env

class VectorAsEnv(MultiAgentEnv):
    """A one-env :class:`EnvPoolVector` as a one-agent :class:`~sfx.envs.multi_agent.MultiAgentEnv` (the probe env,
    the evaluator's and sfx.enjoy's envs of a family whose only backend is EnvPool).

    ``render()`` (``rgb_array``) returns the last observation as an ``H x W x 3`` frame: Procgen's observation is the
    game's picture."""

    num_agents = 1

    def __init__(self, make_vector: Callable[[list[dict]], EnvPoolVector], env_config: dict) -> None:
        self.vector = make_vector([env_config])
        self.observation_space = self.vector.observation_space
        self.action_space = self.vector.action_space
        self.default_seed = self.vector.seeds[0]
        self.last_obs: Any = None

    def reset(self, seed: int | None = None) -> tuple[list[Any], list[dict]]:
        obs = self.vector.reset([seed if seed is not None else self.default_seed])
        self.last_obs = obs[0].copy()
        return [self.last_obs], [{}]

    def step(self, actions: list[Any]) -> tuple[list[Any], list[float], list[bool], list[bool], list[dict]]:
        if len(actions) != 1:
            raise ValueError(f"a single-agent env takes a list of 1 action, got {len(actions)}")
        row = np.asarray(actions[0], dtype=np.float32).reshape(1, -1)
        if isinstance(self.action_space, gymnasium.spaces.Discrete) and self.action_space.start:
            row = row - np.float32(self.action_space.start)  # the vector adds start back, as to a stored row
        step = self.vector.step(row)
        info: dict = {}
        event = step.events.get(0)
        if event is not None:
            info["final_obs"] = event.final_obs
            if event.episode is not None:
                info["episode"] = event.episode
        self.last_obs = step.obs[0].copy()
        return [self.last_obs], [float(step.rewards[0])], [bool(step.terminated[0])], [bool(step.truncated[0])], [info]

    def render(self) -> Any:
        if self.last_obs is None or self.last_obs.ndim != 3:
            return None
        return np.ascontiguousarray(np.moveaxis(self.last_obs, 0, -1)) if self.last_obs.shape[0] == 3 else self.last_obs

    def close(self) -> None:
        self.vector.close()
