"""The Atari preprocessing stack, one small wrapper per step, and the agent-level episodic-life env.

The order the family builds (innermost first) and why it is that order:

1. ``ale_py.env.AtariEnv`` with ``frameskip=1`` and grayscale screens: every emulator frame is visible,
   so the max-pool below can see the last two of each agent step.
2. :class:`NoopReset`: random no-ops at the emulator-frame level (one no-op = one frame).
3. :class:`MaxPoolFrameSkip`: one agent step = ``skip`` frames, max over the last two.
4. :class:`FireReset`: presses FIRE as the first agent step of a game.
5. :class:`ResizeFrame`: 210x160 -> 84x84.
6. :class:`FrameStack`: the last 4 frames, channels first -> ``uint8 (4, 84, 84)``.

Episodic life is not a gymnasium wrapper: a life loss must end the *agent's* episode (terminated, so
the learner does not bootstrap through it) without ending the *game* and without producing episode
statistics; that decision belongs where auto-reset and statistics live, :class:`EpisodicLifeEnv`.
"""

from __future__ import annotations

from typing import Any

import cv2
import gymnasium
import numpy as np

from sfx.envs.multi_agent import SingleAgentEnvAdapter
from sfx.envs.wrappers import FrameSkip


def action_index(env: gymnasium.Env, meaning: str) -> int | None:
    """Index of the action called ``meaning`` (``"NOOP"``, ``"FIRE"``) in the env's action set, or None."""
    meanings = env.unwrapped.get_action_meanings()
    return meanings.index(meaning) if meaning in meanings else None


class NoopReset(gymnasium.Wrapper):
    """Start each game with 1..``noop_max`` random no-op frames.

    Why: Atari games are deterministic from power-on; without a random start an agent can memorise one
    open-loop action sequence. The no-op start (Mnih et al. 2015) gives up to 30 different initial states.
    Draws come from the env's seeded ``np_random``, so a seeded run is reproducible.
    """

    def __init__(self, env: gymnasium.Env, noop_max: int = 30) -> None:
        super().__init__(env)
        if noop_max < 0:
            raise ValueError(f"noop_max must be >= 0, got {noop_max}")
        self.noop_max = noop_max
        noop = action_index(env, "NOOP")
        self.noop_action = 0 if noop is None else noop
        self.last_num_noops = 0  # read by tests and curious users

    def reset(self, **kwargs: Any):
        obs, info = self.env.reset(**kwargs)
        if self.noop_max == 0:
            self.last_num_noops = 0
            return obs, info
        num_noops = int(self.np_random.integers(1, self.noop_max + 1))
        self.last_num_noops = num_noops
        for _ in range(num_noops):
            obs, _, terminated, truncated, info = self.env.step(self.noop_action)
            if terminated or truncated:  # only with tiny frame caps: start over, without more no-ops
                obs, info = self.env.reset()
        return obs, info


class MaxPoolFrameSkip(FrameSkip):
    """Repeat the action ``skip`` frames, sum the rewards, return the pixel-wise max of the last two frames.

    Why the max: the Atari draws some sprites only on every other frame (flicker); the max of two
    consecutive frames shows all of them. Why here and not ALE's frameskip: ALE's frameskip hides the
    intermediate frames. Stops early (no max over a frame of the next game) when the game ends mid-skip.
    """

    def combine_frames(self, previous: Any, last: Any) -> Any:
        return last if previous is None else np.maximum(previous, last)


class FireReset(gymnasium.Wrapper):
    """Press FIRE as the first agent step of every game.

    Why: games such as Breakout or Space Invaders wait for FIRE before anything moves; an untrained
    agent would otherwise spend its early experience on a frozen screen. Only the game start is covered:
    relaunching after a lost life is left to the agent (FIRE is one of its actions).
    """

    def __init__(self, env: gymnasium.Env) -> None:
        super().__init__(env)
        fire = action_index(env, "FIRE")
        if fire is None:
            raise ValueError(f"{env.unwrapped} has no FIRE action: FireReset does not apply")
        self.fire_action = fire

    def reset(self, **kwargs: Any):
        self.env.reset(**kwargs)
        obs, _, terminated, truncated, info = self.env.step(self.fire_action)
        if terminated or truncated:  # only with tiny frame caps
            obs, info = self.env.reset()
        return obs, info


class ResizeFrame(gymnasium.ObservationWrapper):
    """Grayscale ``(H, W)`` frame -> ``(size, size)`` with area interpolation.

    Why: 84x84 is the resolution of the standard Atari networks (the conv strides assume it); area
    interpolation averages pixels instead of skipping them, so thin objects (bullets, the Pong ball)
    do not vanish from the downsampled frame.
    """

    def __init__(self, env: gymnasium.Env, size: int = 84) -> None:
        super().__init__(env)
        self.size = size
        self.observation_space = gymnasium.spaces.Box(0, 255, (size, size), np.uint8)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return cv2.resize(observation, (self.size, self.size), interpolation=cv2.INTER_AREA)


class FrameStack(gymnasium.Wrapper):
    """Stack the last ``num_frames`` frames on a new first axis: ``(num_frames, H, W)``, oldest first.

    Why: one frame has no velocities (which way does the ball move?); a short stack gives them to a
    feed-forward encoder. After a reset the stack holds copies of the first frame, so no black frames
    from a previous game leak into the next one. Each observation returned is a fresh array.
    """

    def __init__(self, env: gymnasium.Env, num_frames: int = 4) -> None:
        super().__init__(env)
        if num_frames < 1:
            raise ValueError(f"num_frames must be >= 1, got {num_frames}")
        space = env.observation_space
        self.frames = np.zeros((num_frames, *space.shape), dtype=space.dtype)
        self.observation_space = gymnasium.spaces.Box(0, 255, self.frames.shape, space.dtype)

    def reset(self, **kwargs: Any):
        obs, info = self.env.reset(**kwargs)
        self.frames[:] = obs
        return self.frames.copy(), info

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.frames[:-1] = self.frames[1:]  # numpy copies overlapping slices correctly
        self.frames[-1] = obs
        return self.frames.copy(), reward, terminated, truncated, info


class EpisodicLifeEnv(SingleAgentEnvAdapter):
    """A single-agent Atari env as a one-agent MultiAgentEnv where a lost life ends the agent's episode.

    On a life loss (``info['lives']`` went down, the game goes on) the step says ``terminated=True``
    so the value target does not bootstrap across the lost life (Mnih et al. 2015), but the game is
    *not* reset: the returned observation continues the same game (it is also ``info['final_obs']``)
    and no ``info['episode']`` is produced. Statistics come only at the real game over (or at the frame
    cap: truncated), from the base adapter, so ``episode['reward']`` and ``episode['len']`` are the raw
    score and the agent steps of the whole game, as in the published Atari results.

    ``info['life_lost'] = True`` marks the steps that end a life and not the game. With
    ``episodic_life=False`` this is the plain adapter (evaluation plays whole games).

    Args:
        env: the wrapped Atari env (its step info carries ``lives``).
        seed: see :class:`SingleAgentEnvAdapter`.
        episodic_life: end the agent's episode at every lost life.
    """

    def __init__(self, env: gymnasium.Env, seed: int | None = None, episodic_life: bool = True) -> None:
        super().__init__(env, seed=seed)
        self.episodic_life = episodic_life
        self.lives = 0

    def reset(self, seed: int | None = None) -> tuple[list[Any], list[dict]]:
        obs, infos = super().reset(seed=seed)
        self.lives = int(infos[0].get("lives", 0))
        return obs, infos

    def step(self, actions: list[Any]) -> tuple[list[Any], list[float], list[bool], list[bool], list[dict]]:
        obs, rewards, terminated, truncated, infos = super().step(actions)
        info = infos[0]
        if terminated[0] or truncated[0]:
            # the base adapter reported the game and started a new one
            self.lives = int(info.get("reset_info", {}).get("lives", 0))
            return obs, rewards, terminated, truncated, infos
        lives = int(info.get("lives", self.lives))
        # only a decrease counts: some games add lives (bonus) or set the counter a few frames in
        if self.episodic_life and lives < self.lives:
            info["life_lost"] = True
            info["final_obs"] = obs[0]
            terminated = [True]
        self.lives = lives
        return obs, rewards, terminated, truncated, infos

    def __repr__(self) -> str:
        return f"EpisodicLifeEnv({self.env}, episodic_life={self.episodic_life})"
