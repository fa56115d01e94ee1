"""Throughput of the doom_ family alone: one env, random actions, no learning (``bench_env_alone``).

``doom_benchmark`` (deathmatch.wad, invulnerable player, full 4200-tic episodes) keeps the cost
of a step the same whatever the actions, so figures compare across runs. Steps are agent steps
of 4 frames (``--env_frameskip=4``), at 128x72 RGB rendered 160x120, the family's defaults.
The process pins itself to one core first, as sfx's rollout workers do (VizDoom runs about
twice as fast pinned).

    python -m bench.envs_doom [seconds]
"""

from __future__ import annotations

import os
import sys

from bench.env_timing import time_env

ENV_NAME = "doom_benchmark"


def bench_env_alone(seconds: float) -> dict:
    """Agent steps per second of ``doom_benchmark`` alone with random actions for about ``seconds``."""
    if hasattr(os, "sched_setaffinity"):
        old_affinity = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {max(old_affinity)})
    try:
        # warm-up steps fill the engine's caches before timing
        return time_env(ENV_NAME, seconds, warmup_steps=50)
    finally:
        if hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, old_affinity)


if __name__ == "__main__":
    print(bench_env_alone(float(sys.argv[1]) if len(sys.argv) > 1 else 10.0))
