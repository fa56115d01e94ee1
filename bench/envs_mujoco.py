"""Throughput of the mujoco_ family alone (no trainer): random actions on mujoco_halfcheetah."""

from __future__ import annotations

import time

ENV = "mujoco_halfcheetah"


def bench_env_alone(seconds: float) -> dict:
    """Step ``mujoco_halfcheetah`` (float32 obs wrapper and auto-reset included) with random actions
    for about ``seconds``; returns ``{'env', 'steps_per_sec'}`` (agent steps = env frames here)."""
    from sfx.cfg import default_cfg
    from sfx.envs import make_env

    env = make_env(default_cfg(ENV, seed=0))
    env.reset()
    # sample actions up front so the figure is the env's, not the action space's sampler
    actions = [[env.action_space.sample()] for _ in range(1000)]
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(100):  # check the clock once per 100 steps
            env.step(actions[steps % len(actions)])
            steps += 1
    elapsed = time.perf_counter() - start
    env.close()
    return {"env": ENV, "steps_per_sec": steps / elapsed}


if __name__ == "__main__":
    print(bench_env_alone(3.0))
