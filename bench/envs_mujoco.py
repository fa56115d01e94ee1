"""Throughput of the mujoco_ family alone (no trainer): random actions on mujoco_halfcheetah."""

from __future__ import annotations


from bench.env_timing import time_env

ENV = "mujoco_halfcheetah"


def bench_env_alone(seconds: float) -> dict:
    """Step ``mujoco_halfcheetah`` (float32 obs wrapper and auto-reset included) with random actions
    for about ``seconds``; returns :func:`bench.env_timing.time_env`'s figures (agent steps = env frames here)."""
    # actions drawn up front: the figure is the env's, not the action space's sampler
    return time_env(ENV, seconds, clock_every=100, presample_actions=1000)


if __name__ == "__main__":
    print(bench_env_alone(3.0))
