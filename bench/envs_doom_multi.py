"""Throughput of a VizDoom multiplayer match alone: ``doom_duel`` (2 agents, no bots), random actions.

Each agent is a VizDoom engine of its own; the match process steps them in lockstep (every
player waits for the others at every tic), so a match step costs about the slowest player's
step plus the synchronisation. Figures are agent steps (2 per match step) of 4 frames at the
family's default 128x72. The sfx run uses 2 matches per worker (``SFX_ARGS``): each match is
3 processes, and a 2-core machine has little room for more.

    python -m bench.envs_doom_multi [seconds]
"""

from __future__ import annotations

import sys

from bench.env_timing import time_env

ENV_NAME = "doom_duel"
SFX_ARGS = ("--num_envs_per_worker=2", "--worker_num_splits=2")


def bench_env_alone(seconds: float) -> dict:
    """Agent steps per second of one ``doom_duel`` match with random actions for about ``seconds``."""
    return time_env(ENV_NAME, seconds, warmup_steps=20)


if __name__ == "__main__":
    print(bench_env_alone(float(sys.argv[1]) if len(sys.argv) > 1 else 10.0))
