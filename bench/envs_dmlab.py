"""DeepMind Lab alone: steps/s of one ``dmlab_`` env with random actions (for bench/bench_envs.py).

    python -m bench.envs_dmlab [--seconds=10] [--env=dmlab_explore_goal_locations_small]

DeepMind Lab must be built from source; without it ``bench_env_alone`` raises the family's
ConfigError (with the build steps), which bench_envs.py reports as "skipped". Setting
``SFX_DMLAB_STANDIN=1`` benchmarks the test stand-in (tests/envs/dmlab_standin) instead: a
figure for the wrapper's own overhead, not DeepMind Lab's speed.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from bench.env_timing import time_env

DEFAULT_ENV = "dmlab_explore_goal_locations_small"
STANDIN_DIR = Path(__file__).resolve().parents[1] / "tests" / "envs" / "dmlab_standin"


def bench_env_alone(seconds: float, env_name: str = DEFAULT_ENV) -> dict:
    """Step one env with random actions for ``seconds`` -> ``{'env', 'steps_per_sec', 'frames_per_sec', ...}``.

    Raises:
        ConfigError: DeepMind Lab (the ``deepmind_lab`` module) is not installed.
    """
    if os.environ.get("SFX_DMLAB_STANDIN") == "1" and str(STANDIN_DIR) not in sys.path:
        sys.path.insert(0, str(STANDIN_DIR))
    result = time_env(env_name, seconds, cfg_overrides={"num_workers": 30})
    import deepmind_lab

    result["standin"] = getattr(deepmind_lab, "_VERSION", "").endswith("standin")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--env", default=DEFAULT_ENV)
    args = parser.parse_args(argv)
    from sfx.cfg import ConfigError

    try:
        result = bench_env_alone(args.seconds, args.env)
    except ConfigError as e:
        print(f"DeepMind Lab is not installed: {e}")
        return 1
    print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
