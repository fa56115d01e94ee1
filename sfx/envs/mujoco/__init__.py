"""The ``mujoco_`` family: gymnasium's MuJoCo locomotion and control tasks (v5), e.g. ``--env=mujoco_halfcheetah``.

Short names map to gymnasium ids (``mujoco_walker`` -> ``Walker2d-v5``); ``MUJOCO_ENVS`` lists them.
Observations are cast to float32 (gymnasium returns float64) with an exact float32 space, because the
trainer stores observations in shared memory with the space's dtype. Actions are continuous Boxes: the
trainer samples a diagonal Gaussian and clips each action to the Box bounds before ``env.step``.
``--env_backend=envpool`` steps each rollout worker split as one EnvPool pool (its MuJoCo v5 tasks in C++; see
docs/environments/envpool.md).
"""

from __future__ import annotations

import argparse
import difflib
from typing import Any

import gymnasium
import numpy as np

from sfx.errors import ConfigError
from sfx.envs.envpool import add_backend_params, check_envpool_cfg, pool_threads, require_envpool, uses_envpool
from sfx.envs.envpool.families import check_no_frameskip, seeds_for
from sfx.envs.gym import make_gymnasium_as_agent
from sfx.envs.multi_agent import SingleAgentEnvAdapter
from sfx.envs.registry import gym_id_stem, register_env_family

PREFIX = "mujoco_"

# short name (after the prefix) -> gymnasium id; a few spellings users type for the same task
MUJOCO_ENVS: dict[str, str] = {
    "halfcheetah": "HalfCheetah-v5",
    "hopper": "Hopper-v5",
    "walker": "Walker2d-v5",
    "walker2d": "Walker2d-v5",
    "ant": "Ant-v5",
    "humanoid": "Humanoid-v5",
    "humanoidstandup": "HumanoidStandup-v5",
    "swimmer": "Swimmer-v5",
    "reacher": "Reacher-v5",
    "pusher": "Pusher-v5",
    "invertedpendulum": "InvertedPendulum-v5",
    "doubleinvertedpendulum": "InvertedDoublePendulum-v5",
    "inverteddoublependulum": "InvertedDoublePendulum-v5",
}

# Small feed-forward policies on proprioceptive vectors, as in the usual MuJoCo PPO setups: no RNN,
# 64-unit tanh MLP, normalized observations and returns, several PPO epochs over each batch (the
# envs are cheap on CPU, so sample efficiency matters more than keeping the learner idle-free).
# exploration_loss_coeff 0: the Gaussian's learned log-std explores by itself, an entropy bonus on
# unbounded log-std only slows the policy down on these tasks.
# reward_clip: no clipping. These rewards are dense, bounded by the physics and summed over the frames of
# a step, and the returns are normalized; the global 10 capped the signal where it matters: HalfCheetah's
# reward is its forward speed (good policies run above 10 m/s), Humanoid's 5 + 1.25 x speed passes 10 near
# 4 m/s, and HumanoidStandup's height / timestep is 26-46 per frame already for a random policy (lying
# down) and about 470 standing, so every one of its rewards was clipped to the same 10 and it had nothing
# to learn from. Sample Factory's MuJoCo runs keep its default 1000; 1e6 also covers frameskip.
DEFAULT_OVERRIDES: dict[str, Any] = {
    "encoder_type": "mlp",
    "encoder_subtype": "mlp_mujoco",
    "hidden_size": 64,
    "nonlinearity": "tanh",
    "use_rnn": False,
    "rollout": 64,
    "recurrence": 64,
    "batch_size": 1024,
    "num_batches_per_iteration": 4,
    "ppo_epochs": 4,
    "learning_rate": 3e-4,
    "gamma": 0.99,
    "normalize_input": True,
    "normalize_returns": True,
    "exploration_loss_coeff": 0.0,
    "ppo_clip_ratio": 0.2,
    "max_grad_norm": 3.5,
    "reward_clip": 1e6,
    "num_envs_per_worker": 8,
    "worker_num_splits": 2,
}


# the RL Zoo's SAC on its MuJoCo locomotion entries: learning starts after 10,000 steps (SB3's own default, and
# SAC's here, is 100); the other tasks (reachers, pendulums) keep the agent's own
SAC_LOCOMOTION = ("halfcheetah", "hopper", "walker", "walker2d", "ant", "humanoid", "swimmer")


def agent_defaults(full_env_name: str) -> dict[str, dict[str, Any]]:
    """Per-agent defaults of ``mujoco_<task>``: SAC's ``--learning_starts`` on the locomotion tasks."""
    short = full_env_name[len(PREFIX):].lower()
    return {"SAC": {"learning_starts": 10_000}} if short in SAC_LOCOMOTION else {}


def mujoco_id(full_env_name: str) -> str:
    """``mujoco_halfcheetah`` -> ``HalfCheetah-v5``; :class:`ConfigError` (with close matches) if unknown."""
    short = full_env_name[len(PREFIX):] if full_env_name.startswith(PREFIX) else full_env_name
    key = short.lower()
    if key in MUJOCO_ENVS:
        return MUJOCO_ENVS[key]
    close = difflib.get_close_matches(key, list(MUJOCO_ENVS), n=3, cutoff=0.5)
    hint = f"; did you mean: {', '.join(PREFIX + c for c in close)}?" if close else ""
    raise ConfigError(f"--env={full_env_name} is not a MuJoCo task{hint} "
                      f"(allowed: {', '.join(PREFIX + n for n in sorted(MUJOCO_ENVS))})")


class Float32Observation(gymnasium.ObservationWrapper):
    """Cast a float Box observation to float32, with the same shape and bounds in a float32 space."""

    def __init__(self, env: gymnasium.Env) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gymnasium.spaces.Box):
            raise TypeError(f"Float32Observation needs a Box observation space, got {space}")
        self.observation_space = gymnasium.spaces.Box(space.low.astype(np.float32), space.high.astype(np.float32),
                                                      shape=space.shape, dtype=np.float32)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.asarray(observation, dtype=np.float32)


def add_mujoco_params(parser: argparse.ArgumentParser) -> None:
    """The family's own flags."""
    g = parser.add_argument_group("mujoco_ envs")
    g.add_argument("--mujoco_max_episode_steps", type=int, default=None,
                   help="time limit in env steps (episode truncated); None = the task's own limit (1000 for most)")
    add_backend_params(g)


def validate_mujoco_cfg(cfg: argparse.Namespace) -> None:
    """:class:`ConfigError` on an unknown task or a bad family flag."""
    mujoco_id(cfg.env)
    limit = cfg.mujoco_max_episode_steps
    if limit is not None and limit <= 0:
        raise ConfigError(f"--mujoco_max_episode_steps={limit} must be a positive integer (or None)")
    if uses_envpool(cfg):
        mujoco_options(cfg)


def make_mujoco_env(full_env_name: str, cfg: Any, env_config: dict | None = None,
                    render_mode: str | None = None) -> SingleAgentEnvAdapter:
    """Make the MuJoCo task with float32 observations (frame skip when ``cfg.env_frameskip > 1``), as one agent."""
    env_id = mujoco_id(full_env_name)
    return make_gymnasium_as_agent(env_id, cfg, env_config, render_mode,
                                   cfg.mujoco_max_episode_steps, wrap=Float32Observation)


def served_gym_id(gym_id: str) -> str | None:
    """``HalfCheetah-v4`` (any version) -> ``mujoco_halfcheetah``; None for an id this family does not serve."""
    stem = gym_id_stem(gym_id)
    return PREFIX + stem if stem in MUJOCO_ENVS else None



# ------------------------------------------------------------------------------------ on EnvPool (--env_backend)


def mujoco_options(cfg: Any) -> tuple[str, dict[str, Any]]:
    """``--env`` and the ``--mujoco_*`` flags -> (EnvPool task, its config)."""
    task = mujoco_id(cfg.env)
    check_envpool_cfg(cfg, task, sorted(PREFIX + n for n in MUJOCO_ENVS))
    check_no_frameskip(cfg, "EnvPool's MuJoCo frame_skip is the physics substeps of one env step, not an action "
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


def make_mujoco_vector(cfg: Any, env_configs: list[dict]) -> Any:
    """The ``mujoco_`` family's ``make_vector_fn``: observations as float32, like the Python envs'."""
    if not uses_envpool(cfg):
        return None
    task, options = mujoco_options(cfg)
    space = _float32_space(require_envpool().make_spec(task, **options).observation_space)
    from sfx.envs.envpool.vector import EnvPoolVector

    return EnvPoolVector(task, seeds_for(cfg, env_configs), options, pool_threads(cfg, len(env_configs)),
                         observation_space=space, obs_fn=_float32_obs, name=f"envpool {task}")


def register_family() -> None:
    """Register the ``mujoco_`` family (called by the registry on first use of a ``mujoco_`` name)."""
    register_env_family(PREFIX, make_mujoco_env, add_params_fn=add_mujoco_params,
                        default_overrides=DEFAULT_OVERRIDES, agent_defaults=agent_defaults,
                        validate_fn=validate_mujoco_cfg,
                        gym_id_fn=served_gym_id, make_vector_fn=make_mujoco_vector)
