"""The timed loop shared by the ``bench/envs_<family>.py`` benchmarks: one env, random actions."""

from __future__ import annotations

import time
from typing import Any


def time_random_steps(env: Any, seconds: float, warmup_steps: int = 0, clock_every: int = 50,
                      presample_actions: int = 0) -> dict:
    """Step a one-agent :class:`~sfx.envs.multi_agent.MultiAgentEnv` (already reset) with random
    actions for about ``seconds``.

    The clock is read once per ``clock_every`` steps so that the timer is not what is measured;
    ``presample_actions`` > 0 draws that many actions up front, for envs so fast that the action
    sampler would dominate. Returns ``{'steps', 'episodes', 'elapsed'}``; an episode counts when the
    env reports one (``'episode'`` in the agent's info), so a lost Atari life does not.
    """
    space = env.action_space
    pool = [space.sample() for _ in range(presample_actions)]

    def action(i: int) -> Any:
        return pool[i % len(pool)] if pool else space.sample()

    for i in range(warmup_steps):
        env.step([action(i)])
    steps = episodes = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(clock_every):
            _, _, _, _, infos = env.step([action(steps)])
            steps += 1
            episodes += "episode" in infos[0]
    return {"steps": steps, "episodes": episodes, "elapsed": time.perf_counter() - start}
