"""Throughput of the mujoco_ family alone (no trainer): random actions on mujoco_halfcheetah."""

from __future__ import annotations


from bench.env_timing import time_random_steps

ENV = "mujoco_halfcheetah"


def bench_env_alone(seconds: float) -> dict:
    """Step ``mujoco_halfcheetah`` (float32 obs wrapper and auto-reset included) with random actions
    for about ``seconds``; returns ``{'env', 'steps_per_sec'}`` (agent steps = env frames here)."""
    from sfx.cfg import default_cfg
    from sfx.envs import make_env

    env = make_env(default_cfg(ENV, seed=0))
    env.reset()
    try:
        # actions drawn up front: the figure is the env's, not the action space's sampler
        timed = time_random_steps(env, seconds, clock_every=100, presample_actions=1000)
    finally:
        env.close()
    steps, elapsed = timed["steps"], timed["elapsed"]
    return {"env": ENV, "steps_per_sec": steps / elapsed}


if __name__ == "__main__":
    print(bench_env_alone(3.0))
