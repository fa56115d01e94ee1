"""The multi-agent env protocol every sfx env follows, and the adapter for single-agent gymnasium envs.

Every env is multi-agent: lists indexed by agent, all agents sharing one observation space and
one action space. Envs reset themselves: when agent ``i``'s episode ends, ``obs[i]`` is already
the first observation of its next episode, ``infos[i]['final_obs']`` is the last observation of
the one that ended, and ``infos[i]['episode']`` summarises it (raw, unscaled, unclipped rewards).
"""

from __future__ import annotations

from typing import Any

import gymnasium


class MultiAgentEnv:
    """Base class (and documentation) of the protocol.

    Attributes:
        num_agents: agents in the env (fixed for its lifetime).
        observation_space: one agent's observation space.
        action_space: one agent's action space.

    Tasks (optional; multi-task training, e.g. PopArt's per-task value normalisation): an env of a
    training with several tasks has

        task_names: ``tuple[str, ...]``, every task of the training in task-id order, the same on
            every env made from the same cfg (the engine reads it once, from the probe env). Names
            are env names as a user types them (``atari_pong``, ``dmlab_rooms_watermaze``), made
            unique where two tasks would share one (``gym_CartPole-v1_x1000``, ``atari_pong_2``),
            without spaces or slashes (they appear in TensorBoard tags ``task/<name>/...``).
        task_id: ``int`` in ``[0, len(task_names))``, this env's task, fixed for its whole life (every
            agent, every episode). The engine reads it when the env is made; the same
            ``worker_index`` / ``vector_index`` must give the same task again (a crashed env is re-made).

    Without ``task_names``, or with one name, the training has a single task (id 0). Examples:
    ``--env=multitask`` (:mod:`sfx.envs.multitask`) and ``--env=dmlab_30``.
    """

    num_agents: int = 1
    observation_space: gymnasium.Space
    action_space: gymnasium.Space

    def reset(self, seed: int | None = None) -> tuple[list[Any], list[dict]]:
        """Start new episodes for all agents -> ``(obs_list, info_list)``."""
        raise NotImplementedError

    def step(self, actions: list[Any]) -> tuple[list[Any], list[float], list[bool], list[bool], list[dict]]:
        """One step of every agent -> ``(obs, rewards, terminated, truncated, infos)`` lists of ``num_agents``.

        Terminated means the episode reached a terminal state (no bootstrap); truncated means it was
        cut short (time limit: the learner bootstraps from ``infos[i]['final_obs']``).
        """
        raise NotImplementedError

    def render(self) -> Any:
        """Whatever the underlying env's ``render()`` returns (an RGB array for ``render_mode='rgb_array'``)."""
        return None

    def get_reward_shaping(self) -> dict[str, float] | None:
        """The env's named reward components and their weights, or None if it has none.

        Optional. An env that returns a dict here lets population-based training mutate the
        weights per policy (it then calls :meth:`set_reward_shaping`).
        """
        return None

    def set_reward_shaping(self, weights: dict[str, float], agent_idx: int) -> None:
        """Use ``weights`` for agent ``agent_idx``'s rewards from now on (see :meth:`get_reward_shaping`)."""

    def close(self) -> None:
        """Release the env's resources."""

    def __enter__(self) -> "MultiAgentEnv":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SingleAgentEnvAdapter(MultiAgentEnv):
    """A gymnasium env seen as a one-agent :class:`MultiAgentEnv` that resets itself.

    Episode statistics are the raw reward sum and the number of agent steps; an env may add its own
    by putting a dict under ``info['episode_extra_stats']`` on the last step of an episode.

    Args:
        env: the gymnasium env (wrappers included).
        seed: used by the first :meth:`reset` that gets no seed of its own; later automatic
            resets continue the env's random stream.
    """

    num_agents = 1

    def __init__(self, env: gymnasium.Env, seed: int | None = None) -> None:
        self.env = env
        self.observation_space = env.observation_space
        self.action_space = env.action_space
        self.default_seed = seed
        self.seeded = False
        self.episode_reward = 0.0
        self.episode_len = 0

    def reset(self, seed: int | None = None) -> tuple[list[Any], list[dict]]:
        if seed is None and not self.seeded:
            seed = self.default_seed
        if seed is not None:
            # the action space has its own generator (random policies, benchmarks)
            self.action_space.seed(seed)
            self.seeded = True
        obs, info = self.env.reset(seed=seed)
        self.episode_reward, self.episode_len = 0.0, 0
        return [obs], [dict(info)]

    def step(self, actions: list[Any]) -> tuple[list[Any], list[float], list[bool], list[bool], list[dict]]:
        if len(actions) != 1:
            raise ValueError(f"a single-agent env takes a list of 1 action, got {len(actions)}")
        obs, reward, terminated, truncated, info = self.env.step(actions[0])
        reward = float(reward)
        self.episode_reward += reward
        self.episode_len += 1
        info = dict(info)
        if terminated or truncated:
            episode = {"reward": self.episode_reward, "len": self.episode_len}
            episode.update(info.pop("episode_extra_stats", None) or {})
            info["final_obs"] = obs
            info["episode"] = episode
            obs, reset_info = self.env.reset()
            info["reset_info"] = reset_info
            self.episode_reward, self.episode_len = 0.0, 0
        return [obs], [reward], [bool(terminated)], [bool(truncated)], [info]

    def render(self) -> Any:
        return self.env.render()

    def get_reward_shaping(self) -> dict[str, float] | None:
        get = getattr(self.env.unwrapped, "get_reward_shaping", None)
        return get() if callable(get) else None

    def set_reward_shaping(self, weights: dict[str, float], agent_idx: int) -> None:
        set_ = getattr(self.env.unwrapped, "set_reward_shaping", None)
        if callable(set_):
            set_(weights)

    def close(self) -> None:
        self.env.close()

    def __repr__(self) -> str:
        return f"SingleAgentEnvAdapter({self.env})"
