"""The multitask env: one of the listed envs, with the task protocol (``task_names``, ``task_id``).

Pure helpers (which task an env instance plays, the tasks' names, the reward scales) and the
wrapper :class:`MultitaskEnv`; the family around them is in :mod:`sfx.envs.multitask`.
"""

from __future__ import annotations

import math
import re
from typing import Any, Sequence

from sfx.envs.multi_agent import MultiAgentEnv
from sfx.errors import ConfigError

ASSIGNMENTS = ("env", "worker")

# what a TensorBoard tag task/<name>/reward keeps readable: no spaces, no slashes (a slash nests tags)
_TAG_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]")


def parse_env_list(text: str | None) -> tuple[str, ...]:
    """``"atari_pong, atari_breakout"`` -> ``("atari_pong", "atari_breakout")``; None or blank -> ``()``.

    An empty item (``a,,b`` or a trailing comma) is a :class:`ConfigError`.
    """
    if text is None or not str(text).strip():
        return ()
    names = tuple(item.strip() for item in str(text).split(","))
    if not all(names):
        raise ConfigError(f"--multitask_envs={text} has an empty item; list env names separated by commas, "
                          f"e.g. --multitask_envs=atari_pong,atari_breakout")
    return names


def parse_reward_scales(text: str | None, num_envs: int) -> tuple[float, ...]:
    """``--multitask_reward_scales``: one positive finite float per listed env; None -> all 1."""
    if text is None or not str(text).strip():
        return (1.0,) * num_envs
    items = [item.strip() for item in str(text).split(",")]
    scales = []
    for item in items:
        try:
            value = float(item)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value > 0):
            raise ConfigError(f"--multitask_reward_scales={text}: {item!r} is not a positive finite number; "
                              f"give one multiplier per listed env, e.g. --multitask_reward_scales=1,1000")
        scales.append(value)
    if len(scales) != num_envs:
        raise ConfigError(f"--multitask_reward_scales={text} has {len(scales)} values for {num_envs} listed envs "
                          f"(--multitask_envs); give one per env, in the same order")
    return tuple(scales)


def _scale_suffix(scale: float) -> str:
    return "_x" + f"{scale:g}".replace("+", "")


def task_names_of(env_names: Sequence[str], scales: Sequence[float]) -> tuple[str, ...]:
    """One name per listed env, in order: the env name as typed; ``_x<scale>`` appended when its
    rewards are scaled (``gym_CartPole-v1_x1000``); characters a TensorBoard tag cannot keep
    (spaces, slashes, ...) become ``_``; an env listed again under the same name gets ``_2``, ``_3``..."""
    names: list[str] = []
    for env_name, scale in zip(env_names, scales):
        base = _TAG_UNSAFE.sub("_", env_name) + (_scale_suffix(scale) if scale != 1.0 else "")
        name, n = base, 1
        while name in names:
            n += 1
            name = f"{base}_{n}"
        names.append(name)
    return tuple(names)


def task_for(assignment: str, num_tasks: int, num_envs_per_worker: int, env_config: dict | None) -> int:
    """The task (index into the listed envs) of the env instance ``env_config`` describes.

    ``env``: ``(worker_index * num_envs_per_worker + vector_index) % num_tasks``; ``worker``:
    ``worker_index % num_tasks``. The probe env (``worker_index`` -1) plays task 0. The same
    worker and vector index always give the same task (a re-made crashed env keeps its task).
    """
    env_config = env_config or {}
    worker = int(env_config.get("worker_index", 0))
    if worker < 0:
        return 0
    if assignment == "env":
        index = worker * int(num_envs_per_worker) + int(env_config.get("vector_index", 0))
    elif assignment == "worker":
        index = worker
    else:
        raise ConfigError(f"--multitask_assignment={assignment} is not one of: {', '.join(ASSIGNMENTS)}")
    return index % num_tasks


def envs_per_task(assignment: str, num_tasks: int, num_workers: int, num_envs_per_worker: int) -> list[int]:
    """How many env instances play each task (all ranks alike)."""
    counts = [0] * num_tasks
    for w in range(num_workers):
        for v in range(num_envs_per_worker):
            counts[task_for(assignment, num_tasks, num_envs_per_worker, {"worker_index": w, "vector_index": v})] += 1
    return counts


class MultitaskEnv(MultiAgentEnv):
    """One listed env playing one task of a multitask run.

    Everything is the wrapped env's (agents, spaces, reset, step, render, reward shaping, any other
    attribute) except: ``task_names`` and ``task_id`` (the task protocol, see :mod:`sfx.envs`), and
    rewards multiplied by the task's ``reward_scale``, in the step rewards and in the episode
    statistics' ``reward`` alike (the scaled return is the task's return).

    Args:
        env: the listed env (a :class:`MultiAgentEnv` or one that follows its protocol).
        task_names: every task of the run, in task-id order.
        task_id: this env's task, an index into ``task_names``.
        reward_scale: the task's reward multiplier.
    """

    def __init__(self, env: Any, task_names: Sequence[str], task_id: int, reward_scale: float = 1.0) -> None:
        if not 0 <= task_id < len(task_names):
            raise ValueError(f"task_id {task_id} is not in [0, {len(task_names)})")
        self.env = env
        self.task_names = tuple(task_names)
        self.task_id = int(task_id)
        self.reward_scale = float(reward_scale)
        self.num_agents = env.num_agents
        self.observation_space = env.observation_space
        self.action_space = env.action_space

    @property
    def task_name(self) -> str:
        return self.task_names[self.task_id]

    def reset(self, seed: int | None = None) -> tuple[list[Any], list[dict]]:
        return self.env.reset(seed=seed)

    def step(self, actions: list[Any]) -> tuple[list[Any], list[float], list[bool], list[bool], list[dict]]:
        obs, rewards, terminated, truncated, infos = self.env.step(actions)
        scale = self.reward_scale
        if scale != 1.0:
            rewards = [float(r) * scale for r in rewards]
            infos = [_scaled_episode(info, scale) for info in infos]
        return obs, rewards, terminated, truncated, infos

    def render(self) -> Any:
        return self.env.render()

    def get_reward_shaping(self) -> dict[str, float] | None:
        get = getattr(self.env, "get_reward_shaping", None)
        return get() if callable(get) else None

    def set_reward_shaping(self, weights: dict[str, float], agent_idx: int) -> None:
        set_ = getattr(self.env, "set_reward_shaping", None)
        if callable(set_):
            set_(weights, agent_idx)

    @property
    def metadata(self) -> dict:
        # sfx.enjoy reads render_fps here; the one-agent adapter keeps it on its gymnasium env
        inner = getattr(self.env, "metadata", None) or getattr(getattr(self.env, "env", None), "metadata", None)
        return inner or {}

    def close(self) -> None:
        self.env.close()

    def __getattr__(self, name: str) -> Any:
        # only reached for attributes not found above: pass the wrapped env's through (is_multiagent, unwrapped ...)
        if name == "env":  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.env, name)

    def __repr__(self) -> str:
        return f"MultitaskEnv(task {self.task_id} {self.task_name!r}, {self.env!r})"


def _scaled_episode(info: dict, scale: float) -> dict:
    episode = info.get("episode")
    if not isinstance(episode, dict) or "reward" not in episode:
        return info
    info = dict(info)  # the wrapped env may keep its dicts
    info["episode"] = {**episode, "reward": float(episode["reward"]) * scale}
    return info
