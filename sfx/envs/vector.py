"""The vector seam: a rollout worker's split of envs stepped as one vector, results as arrays.

A rollout worker owns ``--num_envs_per_worker`` envs in ``--worker_num_splits`` splits; each split is one
:class:`VectorEnv`. Its agents are numbered env-major (agent ``e * num_agents + j`` is agent ``j`` of env
``e``), and every step returns one array per quantity over all of them, so the worker writes a whole split
into the trajectory slots with a few array operations. What is rare (an episode that ended, an env that
crashed) comes per agent in :attr:`VectorStep.events`.

Semantics are gymnasium's, with sfx's auto-reset (see :mod:`sfx.envs.multi_agent`):

* ``obs[a]`` after a step is the observation agent ``a`` acts on next: where its episode ended on this step,
  the first observation of its next episode, and ``events[a].final_obs`` the last one of the episode
  that ended (a truncated step bootstraps from it);
* terminated: a terminal state (no bootstrap); truncated: cut short (time limit); an agent may be both
  (then it counts as terminated);
* every call to :meth:`VectorEnv.step` is one env step of every agent: a backend whose envs spend a call
  on their reset (EnvPool) hides that call, so env steps are counted by the caller as
  ``num_agents_total`` per step;
* ``events[a].episode`` summarises the episode that ended: at least ``reward`` (the raw reward sum of the
  whole game, unscaled and unclipped) and ``len`` (agent steps), plus any statistics of the env's own.

Implementations: :class:`PythonVectorEnv` (the family's Python envs, one after the other in this process)
and, for the families it serves, EnvPool's C++ pool (:mod:`sfx.envs.envpool`). A family chooses through
its ``make_vector_fn`` (see :func:`make_vector_env`).
"""

from __future__ import annotations

import logging
import time
import traceback
from typing import Any, Callable, NamedTuple

import gymnasium
import numpy as np

from sfx.envs.multi_agent import MultiAgentEnv

log = logging.getLogger(__name__)

Obs = Any  # one agent's observation: an array, or a dict of arrays for a Dict space
ObsBatch = Any  # np.ndarray [n, *shape], or {key: np.ndarray [n, *shape]} for a Dict observation space


class AgentEvent(NamedTuple):
    """Something rare that happened to one agent on a step."""

    final_obs: Obs = None      # the last observation of the episode that ended (None: the env crashed)
    episode: dict | None = None  # the ended episode's statistics (None: no statistics, e.g. a crash)
    crashed: bool = False      # the agent's env raised and was made anew: its episode is dropped


class VectorStep(NamedTuple):
    """One step of every agent of a :class:`VectorEnv` (``n = num_agents_total`` rows each).

    The arrays may be views of the vector's own buffers: valid until its next ``step`` or ``reset``."""

    obs: ObsBatch
    rewards: np.ndarray      # float32 [n]
    terminated: np.ndarray   # bool [n]
    truncated: np.ndarray    # bool [n]
    active: np.ndarray | None  # bool [n]: agents that act and are trained on (None: all of them)
    events: dict[int, AgentEvent]  # agent index -> what ended on this step (episode end or crash)


class VectorEnv:
    """Base class (and documentation) of the seam; see the module docstring.

    Attributes:
        num_envs: envs in the vector.
        num_agents: agents per env (the same for every env).
        observation_space, action_space: one agent's.
        task_ids: ``int64 [num_envs]``, each env's task (see :class:`~sfx.envs.multi_agent.MultiAgentEnv`;
            0 for a single task); may change when a crashed env is made anew.
        env_errors: envs that crashed and were made anew so far; ``last_env_error`` the last one's exception
            in one line.
    """

    num_envs: int
    num_agents: int
    observation_space: gymnasium.Space
    action_space: gymnasium.Space
    task_ids: np.ndarray
    env_errors: int = 0
    last_env_error: str | None = None
    # True: step_async returns while the envs step in threads of their own (a native pool), so the caller can serve
    # another split meanwhile; False: the step runs in step_async's caller, in step_wait
    asynchronous: bool = False
    # seconds spent inside the envs' own step calls so far (the rest of a step is the vector's bookkeeping); None: not
    # told apart (a native pool's calls are all env time)
    env_sec: float | None = None

    @property
    def num_agents_total(self) -> int:
        return self.num_envs * self.num_agents

    def reset(self, seeds: list[int | None]) -> ObsBatch:
        """Start every env's episodes (``seeds[e]`` for env ``e``) -> the first observations ``[n, ...]``."""
        raise NotImplementedError

    def step(self, actions: np.ndarray) -> VectorStep:
        """One step of every agent. ``actions``: ``[n, k]`` float32 rows as a trajectory slot stores them
        (:func:`sfx.algo.distributions.action_to_env` says how a row maps to an env's action)."""
        raise NotImplementedError

    def step_async(self, actions: np.ndarray) -> None:
        """Start :meth:`step` with ``actions``; :meth:`step_wait` returns it. Here the actions are only kept (a
        vector that is not :attr:`asynchronous` steps in ``step_wait``)."""
        self._async_actions = actions

    def step_wait(self) -> VectorStep:
        """The step :meth:`step_async` started."""
        actions, self._async_actions = self._async_actions, None
        return self.step(actions)

    def set_reward_shaping(self, weights: dict[str, float], agent: int) -> None:
        """PBT: agent ``agent``'s reward-shaping weights from now on (envs without shaping ignore it)."""

    def get_reward_shaping(self) -> dict[str, float] | None:
        """The envs' named reward components and weights, or None."""
        return None

    def close(self) -> None:
        """Release every env."""


# ------------------------------------------------------------------------------------ Python envs

MakeOneEnv = Callable[[int], MultiAgentEnv]  # env index in the vector -> a new env


def _batch_buffer(space: gymnasium.Space, n: int) -> ObsBatch:
    if isinstance(space, gymnasium.spaces.Dict):
        return {k: _batch_buffer(s, n) for k, s in space.spaces.items()}
    return np.zeros((n, *space.shape), dtype=space.dtype)


def _put(dst: ObsBatch, i: int, obs: Obs) -> None:
    if isinstance(dst, dict):
        for k, v in dst.items():
            v[i] = obs[k]
    else:
        dst[i] = obs


def env_actions(space: gymnasium.Space, rows: np.ndarray) -> list:
    """Stored action rows ``[n, k]`` -> the ``n`` actions ``env.step`` expects (one conversion for the
    common spaces, :func:`~sfx.algo.distributions.action_to_env` per row for the rest)."""
    from sfx.algo.distributions import action_to_env

    if isinstance(space, gymnasium.spaces.Discrete):
        return (rows[:, 0].astype(np.int64) + int(space.start)).tolist()
    if isinstance(space, gymnasium.spaces.Tuple) and all(isinstance(s, gymnasium.spaces.Discrete)
                                                         for s in space.spaces):
        starts = np.array([int(s.start) for s in space.spaces], dtype=np.int64)
        return [tuple(r) for r in (rows.astype(np.int64) + starts).tolist()]
    return [action_to_env(space, r) for r in rows]


class PythonVectorEnv(VectorEnv):
    """``num_envs`` :class:`~sfx.envs.multi_agent.MultiAgentEnv` stepped one after the other in this process.

    An env that raises in ``step`` is closed and made anew (up to ``attempts`` tries): its agents' step is
    recorded as inactive and terminal with no statistics (``AgentEvent(crashed=True)``), so nothing is
    bootstrapped or trained across the crash; counted in ``env_errors``.
    """

    def __init__(self, make_env: MakeOneEnv, num_envs: int, name: str = "envs", attempts: int = 3) -> None:
        self.make_env = make_env
        self.name = name
        self.attempts = attempts
        self.envs: list = []
        try:
            for e in range(num_envs):
                self.envs.append(make_env(e))
        except BaseException:
            self.close()
            raise
        first = self.envs[0]
        self.num_envs = num_envs
        self.num_agents = int(first.num_agents)
        for e, env in enumerate(self.envs):
            if env.num_agents != self.num_agents:
                raise RuntimeError(f"{name}: env {e} has {env.num_agents} agents, env 0 has {self.num_agents}")
        self.observation_space = first.observation_space
        self.action_space = first.action_space
        self.task_ids = np.array([env_task_id(env) for env in self.envs], dtype=np.int64)
        n = self.num_agents_total
        self._obs = _batch_buffer(self.observation_space, n)
        self._rewards = np.zeros(n, dtype=np.float32)
        self._terminated = np.zeros(n, dtype=bool)
        self._truncated = np.zeros(n, dtype=bool)
        self._active = np.ones(n, dtype=bool)
        self.env_errors = 0
        self.last_env_error = None
        self.env_sec = 0.0

    def reset(self, seeds: list[int | None]) -> ObsBatch:
        nap = self.num_agents
        for e, env in enumerate(self.envs):
            obs, _ = env.reset(seed=seeds[e])
            for j in range(nap):
                _put(self._obs, e * nap + j, obs[j])
        return self._obs

    def step(self, actions: np.ndarray) -> VectorStep:
        acts = env_actions(self.action_space, actions)
        nap = self.num_agents
        obs_buf, rewards, terminated, truncated = self._obs, self._rewards, self._terminated, self._truncated
        active = self._active
        any_inactive = False
        events: dict[int, AgentEvent] = {}
        clock = time.perf_counter
        env_sec = 0.0
        for e, env in enumerate(self.envs):
            base = e * nap
            t0 = clock()
            try:
                obs, rew, term, trunc, infos = env.step(acts[base:base + nap])
            except Exception:  # noqa: BLE001 - an env crash costs its episode, not the run
                env_sec += clock() - t0
                self._replace_crashed(e, traceback.format_exc(), events)
                any_inactive = True
                continue
            env_sec += clock() - t0
            for j in range(nap):
                a = base + j
                _put(obs_buf, a, obs[j])
                info = infos[j]
                rewards[a] = rew[j]
                terminated[a] = term[j]
                truncated[a] = trunc[j]
                if "is_active" in info:
                    is_active = bool(info["is_active"])
                    active[a] = is_active
                    any_inactive |= not is_active
                else:
                    active[a] = True
                if term[j] or trunc[j]:
                    events[a] = AgentEvent(info.get("final_obs"), info.get("episode"))
        self.env_sec += env_sec
        return VectorStep(obs_buf, rewards, terminated, truncated, active if any_inactive else None, events)

    def _replace_crashed(self, e: int, error: str, events: dict[int, AgentEvent]) -> None:
        """Env ``e`` raised in ``step``: close it, make a new one and reset it; its agents' step becomes
        inactive and terminal with no statistics (see the class docstring)."""
        self.env_errors += 1
        self.last_env_error = error.strip().splitlines()[-1] if error.strip() else None
        log.error("%s: env %d crashed (%d env errors so far); recreating it, its episode is dropped:\n%s",
                  self.name, e, self.env_errors, error)
        try:
            self.envs[e].close()
        except Exception:  # noqa: BLE001 - a crashed env may not close cleanly; the new one matters
            log.warning("%s: closing crashed env %d failed too", self.name, e)
        last: Exception | None = None
        for attempt in range(self.attempts):
            try:
                env = self.make_env(e)
                obs, _ = env.reset()
                break
            except Exception as exc:  # noqa: BLE001
                last = exc
                log.warning("%s: recreating env %d failed (attempt %d/%d): %r", self.name, e, attempt + 1,
                            self.attempts, exc)
                time.sleep(1.0)
        else:
            raise RuntimeError(f"env {e} of {self.name} crashed and could not be recreated in {self.attempts} "
                               f"attempts: {last!r}")
        self.envs[e] = env
        self.task_ids[e] = env_task_id(env)
        nap = self.num_agents
        for j in range(nap):
            a = e * nap + j
            _put(self._obs, a, obs[j])
            self._rewards[a] = 0.0
            self._terminated[a] = True
            self._truncated[a] = False
            self._active[a] = False
            events[a] = AgentEvent(crashed=True)

    def set_reward_shaping(self, weights: dict[str, float], agent: int) -> None:
        e, j = divmod(agent, self.num_agents)
        self.envs[e].set_reward_shaping(dict(weights), j)

    def get_reward_shaping(self) -> dict[str, float] | None:
        return self.envs[0].get_reward_shaping()

    def close(self) -> None:
        for env in self.envs:
            try:
                env.close()
            except Exception:  # an env failing to close must not hide the real shutdown
                log.exception("%s: env close failed", self.name)
        self.envs = []


def env_task_id(env: Any) -> int:
    """The task of ``env`` (its ``task_id`` when it names its tasks, see sfx.envs); 0 for a single task."""
    return int(getattr(env, "task_id", 0)) if getattr(env, "task_names", None) else 0


# ------------------------------------------------------------------------------------ the seam

def native_vector_env(cfg: Any, env_configs: list[dict]) -> VectorEnv | None:
    """The env family's native vector for envs ``env_configs`` (its ``make_vector_fn``, e.g. EnvPool under
    ``--env_backend``), or None when the family has none or does not serve this cfg with it."""
    from sfx.envs.registry import find_family

    make_vector_fn = find_family(cfg.env).make_vector_fn
    return None if make_vector_fn is None else make_vector_fn(cfg, [dict(c) for c in env_configs])


def make_vector_env(cfg: Any, env_configs: list[dict], name: str = "envs") -> VectorEnv:
    """The vector for envs ``env_configs`` (one dict each: ``worker_index``, ``vector_index``, ``env_id``): the
    family's native one where it serves ``cfg`` (:func:`native_vector_env`), else its Python envs made by
    :func:`sfx.envs.registry.make_env`, stepped one after the other (:class:`PythonVectorEnv`)."""
    from sfx.envs.registry import make_env

    native = native_vector_env(cfg, env_configs)
    if native is not None:
        return native
    return PythonVectorEnv(lambda e: make_env(cfg, dict(env_configs[e])), len(env_configs), name=name)
