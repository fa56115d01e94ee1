"""Atari alone: steps/s of one ``atari_`` env with random actions (for bench/bench_envs.py).

    python -m bench.envs_atari [--seconds=10] [--env=atari_breakout]

The env is the family's full training stack (sticky actions, no-op/FIRE resets, max-pool over
frameskip 4, 84x84 resize, 4-frame stack, episodic life), so the figure is what one rollout
worker's env can give; ``frames_per_sec`` counts emulator frames (steps x ``--env_frameskip``).
"""

from __future__ import annotations

import argparse

from bench.env_timing import time_env

DEFAULT_ENV = "atari_breakout"


def bench_env_alone(seconds: float, env_name: str = DEFAULT_ENV) -> dict:
    """Step one env with random actions for ``seconds``.

    Returns ``{'env', 'steps_per_sec', 'frames_per_sec', 'steps', 'games', 'seconds'}`` (``games``:
    whole games finished, a lost life is not counted).
    """
    result = time_env(env_name, seconds)
    result["games"] = result.pop("episodes")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--env", default=DEFAULT_ENV)
    args = parser.parse_args(argv)
    result = bench_env_alone(args.seconds, args.env)
    print(", ".join(f"{k}: {v:.1f}" if isinstance(v, float) else f"{k}: {v}" for k, v in result.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
