"""A synthetic image env for throughput benchmarks: ``--env=bench_image_128x72``.

It measures the engine with image observations, not a game. Each step the env shows a striped
background that scrolls sideways and a bright square in one of four quadrants; the action that
names the square's quadrant earns reward 1 and anything else 0. The square moves to a random
quadrant every 8 to 32 steps, so a convolutional policy can learn it, but learning is not the
point: the frames cost a slice and a small copy to make, so samples/s shows what sfx itself
(buffers, inference, the learner) sustains with image observations of the size Doom and Atari
runs use.

Observations are uint8, channels first ``(3, H, W)`` as sfx's image envs store them;
``render()`` gives the same frame as ``(H, W, 3)`` RGB. Episodes last 1000 steps and end
truncated (a time limit). Actions: ``Discrete(4)``.

Registering: importing this module registers the ``bench_image_`` family. Worker processes of
the engine import it when ``SFX_EXTRA_ENV_MODULES=bench.image_env`` is set in the environment
(with the repository root importable), which ``bench/bench_throughput.py`` does.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

import gymnasium
import numpy as np

from sfx.errors import ConfigError
from sfx.envs.registry import register_env_family

PREFIX = "bench_image_"
EPISODE_STEPS = 1000
NUM_ACTIONS = 4
_SIZE_RE = re.compile(r"^(\d+)x(\d+)$")

# image obs: the conv encoder (sfx's defaults, spelled out so a changed default does not move the benchmark)
DEFAULT_OVERRIDES = {"encoder_type": "conv", "encoder_subtype": "convnet_simple"}


def parse_size(full_env_name: str) -> tuple[int, int]:
    """``bench_image_128x72`` -> ``(width, height)``; :class:`ConfigError` on any other form."""
    match = _SIZE_RE.match(full_env_name[len(PREFIX):])
    width, height = (int(match.group(1)), int(match.group(2))) if match else (0, 0)
    if not match or not (16 <= width <= 1024 and 16 <= height <= 1024):
        raise ConfigError(f"--env={full_env_name}: expected {PREFIX}WIDTHxHEIGHT with sides in [16, 1024], "
                          f"e.g. {PREFIX}128x72")
    return width, height


class ScrollingTargetEnv(gymnasium.Env):
    """The benchmark env (see the module docstring).

    Args:
        width, height: frame size in pixels.
        render_mode: ``"rgb_array"`` or ``None``.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(self, width: int = 128, height: int = 72, render_mode: str | None = None) -> None:
        self.width, self.height = width, height
        self.render_mode = render_mode
        self.observation_space = gymnasium.spaces.Box(0, 255, (3, height, width), dtype=np.uint8)
        self.action_space = gymnasium.spaces.Discrete(NUM_ACTIONS)
        # one period of the background, twice as wide as the frame so that any window of it is a slice
        x = np.arange(2 * width)
        y = np.arange(height)[:, None]
        stripes = (np.sin(2 * np.pi * x / width * 3) * 0.5 + 0.5)[None, :] * (0.6 + 0.4 * np.cos(y / 7.0))
        self._background = np.stack([96 * stripes, 64 * stripes[:, ::-1], 48 + 32 * stripes]).astype(np.uint8)
        self._square = max(4, min(width, height) // 6)
        self._frame = np.empty((3, height, width), dtype=np.uint8)
        self._t = 0
        self._offset = 0
        self._target = 0
        self._next_switch = 0

    def _draw(self) -> np.ndarray:
        np.copyto(self._frame, self._background[:, :, self._offset:self._offset + self.width])
        row, col = divmod(self._target, 2)
        s = self._square
        y0 = (self.height // 2 - s) // 2 + row * (self.height // 2)
        x0 = (self.width // 2 - s) // 2 + col * (self.width // 2)
        self._frame[:, y0:y0 + s, x0:x0 + s] = 255
        return self._frame.copy()

    def _maybe_move_target(self) -> None:
        if self._t >= self._next_switch:
            self._target = int(self.np_random.integers(NUM_ACTIONS))
            self._next_switch = self._t + int(self.np_random.integers(8, 33))

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._t = 0
        self._offset = int(self.np_random.integers(self.width))
        self._next_switch = 0
        self._maybe_move_target()
        return self._draw(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        reward = 1.0 if int(action) == self._target else 0.0
        self._t += 1
        self._offset = (self._offset + 2) % self.width
        self._maybe_move_target()
        return self._draw(), reward, False, self._t >= EPISODE_STEPS, {}

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        return np.ascontiguousarray(self._frame.transpose(1, 2, 0))


def make_bench_image_env(full_env_name: str, cfg: Any, env_config: dict | None = None,
                         render_mode: str | None = None) -> gymnasium.Env:
    """The registry's factory: a :class:`ScrollingTargetEnv` of the size in the env name."""
    width, height = parse_size(full_env_name)
    # no window to open: "human" (enjoy's default) plays without showing anything
    return ScrollingTargetEnv(width, height, render_mode="rgb_array" if render_mode == "rgb_array" else None)


def _validate(cfg: argparse.Namespace) -> None:
    parse_size(cfg.env)


def register_family() -> None:
    """Register the ``bench_image_`` family (idempotent)."""
    register_env_family(PREFIX, make_bench_image_env, default_overrides=DEFAULT_OVERRIDES, validate_fn=_validate)


register_family()

__all__ = ["PREFIX", "ScrollingTargetEnv", "make_bench_image_env", "parse_size", "register_family"]
