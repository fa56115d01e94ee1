"""EnvPool's C++ pool behind sfx's vector seam, with its semantics translated to sfx's.

EnvPool (1.2.x) steps many envs in C++ threads and hands back one batch per quantity, like
:class:`~sfx.envs.vector.VectorEnv` wants. Its episode handling differs from sfx's in three ways, each
hidden here (measured on EnvPool 1.2.5; tests/envs/test_envpool_vector.py checks every one):

* **Reset on the next call.** When an env's episode ends, EnvPool returns the terminal observation and
  resets that env on the *next* call to ``step``, discarding that call's action (its ``elapsed_step`` goes
  back to 0 and the observation is the new episode's first). In sfx the step that ends an episode already
  returns the next episode's first observation (the ended one's last goes to the event). So right after a
  step in which some envs ended, this class resets just those envs (``pool.reset(env_ids)``, one extra C++
  round trip for the few envs that ended) and writes their first observations into the batch: no
  transition joins a terminal observation to the next episode's first, and no call of the caller's is spent
  on a reset, so every ``step`` is one env step of every agent.
* **Time limits.** EnvPool reports an episode cut by its step limit as truncated (not terminated); its
  observation is the last one of the episode, which becomes ``events[a].final_obs``, so the learner
  bootstraps from it as from a Python env's.
* **Episodic life** (Atari). EnvPool's own ``episodic_life`` ends the episode at a lost life and then runs a
  new no-op start and FIRE in the same game, which sfx's Python envs do not. So the pool runs whole games and
  this class ends the *agent's* episode itself where ``info['lives']`` went down in a game that goes on
  (terminated, ``final_obs`` = the observation, no statistics), as :class:`sfx.envs.atari.EpisodicLifeEnv`
  does. Episode statistics are always the whole game's: ``reward`` the raw score, ``len`` the agent steps.

The caller's action rows (``[n, k]`` float32, as trajectory slots store them) become EnvPool's action array in
one array operation (an integer cast for Discrete, a clip to the bounds for Box). :meth:`step_async` /
:meth:`step_wait` split a step in two (EnvPool's ``send`` / ``recv``), so a caller may do other work while the
pool's threads step the envs.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import gymnasium
import numpy as np

from sfx.envs.vector import AgentEvent, VectorEnv, VectorStep

log = logging.getLogger(__name__)

ObsFn = Callable[[Any], Any]  # EnvPool's observation batch -> sfx's (an array [n, ...])
# (env ids that ended, their final observations as sfx sees them, their rewards, terminated, EnvPool's info)
# -> per env id a dict of extra episode statistics
ExtraStatsFn = Callable[[np.ndarray, Any, np.ndarray, np.ndarray, dict], list[dict]]

_SEED_LIMIT = 2 ** 31  # EnvPool's seeds are int32


def draw_seeds(seeds: list[int | None]) -> list[int]:
    """Per-env seeds for EnvPool: each given seed as it is (mod 2**31), a fresh random one for each None."""
    fresh = np.random.SeedSequence().generate_state(len(seeds), dtype=np.uint32)
    return [int(s) % _SEED_LIMIT if s is not None else int(f) % _SEED_LIMIT for s, f in zip(seeds, fresh)]


class EnvPoolVector(VectorEnv):
    """``num_envs`` envs of one EnvPool task stepped as one vector (one agent per env).

    Args:
        task_id: EnvPool's task id (``Breakout-v5``, ``HalfCheetah-v5``, ``StarpilotEasy-v0`` ...).
        seeds: one per env (None: random); EnvPool fixes seeds when the pool is made, so a :meth:`reset` with
            other seeds makes the pool anew.
        options: EnvPool's config for the task (``frame_skip``, ``max_episode_steps`` ...), already translated
            from sfx's flags by the family.
        num_threads: EnvPool's worker threads for this pool.
        observation_space: sfx's observation space where ``obs_fn`` changes EnvPool's (None: EnvPool's own).
        obs_fn: EnvPool's observation batch -> sfx's (None: EnvPool's arrays as they are).
        episodic_life: end the agent's episode where ``info['lives']`` went down and the game goes on.
        extra_stats_fn: extra episode statistics of the envs that ended (e.g. MiniGrid's ``success``).
        name: for log lines.
    """

    asynchronous = True  # EnvPool's threads step the pool between send and recv

    def __init__(self, task_id: str, seeds: list[int | None], options: dict[str, Any], num_threads: int = 1,
                 observation_space: gymnasium.Space | None = None, obs_fn: ObsFn | None = None,
                 episodic_life: bool = False, extra_stats_fn: ExtraStatsFn | None = None,
                 name: str = "envpool") -> None:
        self.task_id = task_id
        self.options = dict(options)
        self.num_threads = int(num_threads)
        self.name = name
        self.num_envs = len(seeds)
        self.num_agents = 1
        self.obs_fn = obs_fn
        self.episodic_life = bool(episodic_life)
        self.extra_stats_fn = extra_stats_fn
        self.task_ids = np.zeros(self.num_envs, dtype=np.int64)
        self.env_errors = 0
        self.last_env_error = None
        self.seeds = draw_seeds(seeds)
        self.pool = self._make_pool(self.seeds)
        self.observation_space = observation_space if observation_space is not None else self.pool.observation_space
        self.action_space = _float32_box(self.pool.action_space)
        self._pool_action_space = self.pool.action_space
        n = self.num_envs
        self._env_ids = np.arange(n, dtype=np.int32)
        self.episode_reward = np.zeros(n, dtype=np.float64)
        self.episode_len = np.zeros(n, dtype=np.int64)
        self.lives = np.zeros(n, dtype=np.int64)
        self.pool_steps = 0  # EnvPool step calls of every env (the caller's steps), resets not counted
        self.pool_resets = 0  # envs reset after their episode ended (the calls EnvPool would have discarded)
        self._sent = False

    def _make_pool(self, seeds: list[int]) -> Any:
        import envpool

        n = len(seeds)
        return envpool.make_gymnasium(self.task_id, num_envs=n, batch_size=n, num_threads=self.num_threads,
                                      seed=seeds[0], env_seed=list(seeds), **self.options)

    # ------------------------------------------------------------------ seam

    def reset(self, seeds: list[int | None]) -> Any:
        if len(seeds) != self.num_envs:
            raise ValueError(f"{self.name}: reset got {len(seeds)} seeds for {self.num_envs} envs")
        if self._sent:
            self.pool.recv()  # a step in flight: its results belong to the episodes this reset ends
            self._sent = False
        if any(s is not None for s in seeds):
            wanted = draw_seeds(seeds)
            if wanted != self.seeds:  # EnvPool takes seeds only when a pool is made
                self.pool.close()
                self.seeds = wanted
                self.pool = self._make_pool(wanted)
        raw, info = self.pool.reset()
        order = _order(info["env_id"], self.num_envs)
        self.episode_reward[:] = 0.0
        self.episode_len[:] = 0
        if self.episodic_life:
            self.lives[:] = _take(info["lives"], order)
        return self._obs(_take(raw, order))

    def step(self, actions: np.ndarray) -> VectorStep:
        self.step_async(actions)
        return self.step_wait()

    def step_async(self, actions: np.ndarray) -> None:
        """Hand every env its action (EnvPool's ``send``); :meth:`step_wait` returns the step."""
        if self._sent:
            raise RuntimeError(f"{self.name}: step_async called twice without step_wait")
        self.pool.send(self._pool_actions(actions))
        self._sent = True

    def step_wait(self) -> VectorStep:
        """The step :meth:`step_async` started, in sfx's semantics (see the module docstring)."""
        if not self._sent:
            raise RuntimeError(f"{self.name}: step_wait called without step_async")
        raw, rew, term, trunc, info = self.pool.recv()
        self._sent = False
        self.pool_steps += 1
        order = _order(info["env_id"], self.num_envs)
        if order is not None:
            raw, rew, term, trunc = (_take(x, order) for x in (raw, rew, term, trunc))
            info = {k: _take(v, order) for k, v in info.items() if isinstance(v, np.ndarray)}
        rewards = np.asarray(rew, dtype=np.float32)
        terminated = np.asarray(term, dtype=bool)
        truncated = np.asarray(trunc, dtype=bool) & ~terminated  # terminated wins where both are set
        self.episode_reward += rewards
        self.episode_len += 1
        obs = self._obs(raw)
        done = terminated | truncated
        events: dict[int, AgentEvent] = {}
        if self.episodic_life:
            lives = np.asarray(info["lives"], dtype=np.int64)
            # only a decrease counts (some games add lives or set the counter a few frames in)
            life_lost = (lives < self.lives) & ~done
            self.lives[:] = lives
            if life_lost.any():
                terminated = terminated | life_lost
                for e in np.flatnonzero(life_lost).tolist():
                    events[e] = AgentEvent(_copy_row(obs, e), None)
        if done.any():
            ended = np.flatnonzero(done)
            extra = (self.extra_stats_fn(ended, _rows(obs, ended), rewards[ended], terminated[ended], info)
                     if self.extra_stats_fn is not None else None)
            for i, e in enumerate(ended.tolist()):
                episode = {"reward": float(self.episode_reward[e]), "len": int(self.episode_len[e])}
                if extra is not None:
                    episode.update(extra[i])
                events[e] = AgentEvent(_copy_row(obs, e), episode)
            obs = self._reset_ended(ended, obs)
        return VectorStep(obs, rewards, terminated, truncated, None, events)

    def _reset_ended(self, ended: np.ndarray, obs: Any) -> Any:
        """Reset the envs ``ended`` now (instead of on EnvPool's next step) and put their first observations
        into ``obs``."""
        raw, info = self.pool.reset(ended.astype(np.int32))
        self.pool_resets += len(ended)
        ids = np.asarray(info["env_id"], dtype=np.int64)
        first = self._obs(raw)
        obs = _writable(obs)
        _put_rows(obs, ids, first)
        self.episode_reward[ids] = 0.0
        self.episode_len[ids] = 0
        if self.episodic_life:
            self.lives[ids] = np.asarray(info["lives"], dtype=np.int64)
        return obs

    def close(self) -> None:
        pool, self.pool = getattr(self, "pool", None), None
        if pool is not None:
            try:
                if self._sent:
                    pool.recv()
                pool.close()
            except Exception:  # noqa: BLE001 - closing must not hide the shutdown's own error
                log.exception("%s: closing the EnvPool pool failed", self.name)

    # ------------------------------------------------------------------ conversions

    def _obs(self, raw: Any) -> Any:
        return self.obs_fn(raw) if self.obs_fn is not None else raw

    def _pool_actions(self, rows: np.ndarray) -> np.ndarray:
        """Stored rows ``[n, k]`` -> EnvPool's action array, in one operation."""
        space = self._pool_action_space
        if isinstance(space, gymnasium.spaces.Discrete):
            acts = rows[:, 0].astype(np.int32)
            return acts + np.int32(space.start) if space.start else acts
        if isinstance(space, gymnasium.spaces.Box):
            shaped = rows.reshape((len(rows), *space.shape))
            return np.clip(shaped, space.low, space.high).astype(space.dtype, copy=False)
        raise TypeError(f"{self.name}: EnvPool action space {space} is not served (Discrete or Box)")


def _float32_box(space: gymnasium.Space) -> gymnasium.Space:
    """EnvPool's float64 Box actions as float32 (sfx's trajectory slots store float32 rows; the pool casts back)."""
    if isinstance(space, gymnasium.spaces.Box) and space.dtype != np.float32:
        return gymnasium.spaces.Box(space.low.astype(np.float32), space.high.astype(np.float32), space.shape,
                                    np.float32)
    return space


def _order(env_ids: np.ndarray, n: int) -> np.ndarray | None:
    """None when EnvPool returned the envs in id order (sync mode does), else the permutation into it."""
    ids = np.asarray(env_ids)
    if len(ids) != n:
        raise RuntimeError(f"EnvPool returned {len(ids)} envs of {n}")
    if (ids == np.arange(n)).all():
        return None
    return np.argsort(ids)


def _take(x: Any, order: np.ndarray | None) -> Any:
    if order is None:
        return x
    if isinstance(x, dict):
        return {k: _take(v, order) for k, v in x.items()}
    return x[order]


def _rows(obs: Any, ids: np.ndarray) -> Any:
    return {k: v[ids] for k, v in obs.items()} if isinstance(obs, dict) else obs[ids]


def _copy_row(obs: Any, e: int) -> Any:
    return {k: v[e].copy() for k, v in obs.items()} if isinstance(obs, dict) else obs[e].copy()


def _writable(obs: Any) -> Any:
    if isinstance(obs, dict):
        return {k: _writable(v) for k, v in obs.items()}
    return obs if obs.flags.writeable else obs.copy()


def _put_rows(dst: Any, ids: np.ndarray, src: Any) -> None:
    if isinstance(dst, dict):
        for k, v in dst.items():
            v[ids] = src[k]
    else:
        dst[ids] = src
