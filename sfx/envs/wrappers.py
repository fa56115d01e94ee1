"""Generic gymnasium wrappers shared by env families."""

from __future__ import annotations

from typing import Any

import gymnasium


class FrameSkip(gymnasium.Wrapper):
    """Repeat each action ``skip`` times, summing the rewards (so one agent step = ``skip`` frames).

    Stops early when the episode ends inside the repeat. The info of the last frame is returned.
    """

    def __init__(self, env: gymnasium.Env, skip: int) -> None:
        super().__init__(env)
        if skip < 1:
            raise ValueError(f"frame skip must be >= 1, got {skip}")
        self.skip = skip

    def step(self, action: Any):
        total = 0.0
        previous = obs = None
        for _ in range(self.skip):
            previous = obs
            obs, reward, terminated, truncated, info = self.env.step(action)
            total += float(reward)
            if terminated or truncated:
                break
        return self.combine_frames(previous, obs), total, terminated, truncated, info

    def combine_frames(self, previous: Any, last: Any) -> Any:
        """The observation of one agent step from its last two frames (``previous`` is None when
        the step lasted one frame). Plain frame skip keeps the last one."""
        return last
