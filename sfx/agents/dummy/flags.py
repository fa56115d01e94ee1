"""The dummy sampler's flags (when to stop) and their validation."""

from __future__ import annotations

import argparse
from typing import Any

from sfx.cfg.flag_types import int_like
from sfx.errors import ConfigError

__all__ = ["add_dummy_sampler_flags", "validate_dummy_sampler_cfg"]


def add_dummy_sampler_flags(g: argparse._ActionsContainer) -> None:
    g.add_argument("--sample_env_frames", type=int_like, default=1_000_000,
                   help="stop after this many env frames (agent steps x --env_frameskip, every agent counted); "
                        "lifted when only --timeout_seconds is given")
    g.add_argument("--timeout_seconds", type=float, default=None,
                   help="stop after sampling this long, counted from the moment every rollout worker steps "
                        "(env creation excluded); None = only --sample_env_frames stops")


def validate_dummy_sampler_cfg(cfg: Any) -> None:
    if cfg.sample_env_frames <= 0:
        raise ConfigError(f"--sample_env_frames={cfg.sample_env_frames} must be a positive integer (> 0)")
    if cfg.timeout_seconds is not None and not cfg.timeout_seconds > 0:
        raise ConfigError(f"--timeout_seconds={cfg.timeout_seconds} must be > 0")
