"""The timed loop shared by the ``bench/envs_<family>.py`` benchmarks: one env, random actions."""

from __future__ import annotations

import time
from typing import Any


def time_random_steps(env: Any, seconds: float, warmup_steps: int = 0, clock_every: int = 50,
                      presample_actions: int = 0) -> dict:
    """Step a :class:`~sfx.envs.multi_agent.MultiAgentEnv` (already reset) with random actions for
    every agent for about ``seconds``.

    The clock is read once per ``clock_every`` steps so that the timer is not what is measured;
    ``presample_actions`` > 0 draws that many actions up front, for envs so fast that the action
    sampler would dominate. Returns ``{'steps', 'episodes', 'elapsed'}``: ``steps`` are agent steps
    (env steps x ``num_agents``); an episode counts when the env reports one (``'episode'`` in an
    agent's info), so a lost Atari life does not.
    """
    n = getattr(env, "num_agents", 1)
    space = env.action_space
    pool = [space.sample() for _ in range(presample_actions)]

    def action(i: int) -> Any:
        return pool[i % len(pool)] if pool else space.sample()

    for i in range(warmup_steps):
        env.step([action(i * n + j) for j in range(n)])
    steps = episodes = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(clock_every):
            _, _, _, _, infos = env.step([action(steps + j) for j in range(n)])
            steps += n
            episodes += sum("episode" in info for info in infos)
    return {"steps": steps, "episodes": episodes, "elapsed": time.perf_counter() - start}


def time_env(env_name: str, seconds: float, cfg_overrides: dict | None = None, **timing: Any) -> dict:
    """Make ``env_name`` with sfx's defaults (seed 0, plus ``cfg_overrides``), reset it and time it with
    :func:`time_random_steps` (``timing``: its keyword arguments). Returns ``{'env', 'steps_per_sec',
    'frames_per_sec', 'steps', 'episodes', 'seconds', 'agents'}`` (frames = agent steps x frameskip)."""
    from sfx.registries import default_cfg
    from sfx.envs import make_env

    cfg = default_cfg(env_name, seed=0, **(cfg_overrides or {}))
    env = make_env(cfg, {"worker_index": 0, "vector_index": 0, "env_id": 0})
    try:
        env.reset()
        timed = time_random_steps(env, seconds, **timing)
    finally:
        env.close()
    steps, elapsed = timed["steps"], timed["elapsed"]
    return {"env": env_name, "steps_per_sec": steps / elapsed, "frames_per_sec": steps * cfg.env_frameskip / elapsed,
            "steps": steps, "episodes": timed["episodes"], "seconds": elapsed,
            "agents": getattr(env, "num_agents", 1)}
