"""Atari preprocessing wrappers on synthetic envs whose every frame is known: max-pool, frame stack, resize."""

import gymnasium
import numpy as np
import pytest

from sfx.envs.atari import FrameStack, MaxPoolFrameSkip, NoopReset, ResizeFrame


class CountingFrames(gymnasium.Env):
    """Frame ``t`` (t = frames since reset) is a 2x2 image ``[[t, 0], [0, 100 - t]]``; reward 3 per frame;
    the game ends at frame ``end``. Records the actions it gets."""

    observation_space = gymnasium.spaces.Box(0, 255, (2, 2), np.uint8)
    action_space = gymnasium.spaces.Discrete(3)

    def __init__(self, end: int = 1000) -> None:
        self.end = end
        self.t = 0
        self.actions = []

    def frame(self) -> np.ndarray:
        return np.array([[self.t, 0], [0, 100 - self.t]], dtype=np.uint8)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.actions = []
        return self.frame(), {}

    def step(self, action):
        self.t += 1
        self.actions.append(int(action))
        return self.frame(), 3.0, self.t >= self.end, False, {}

    def get_action_meanings(self):
        return ["NOOP", "FIRE", "LEFT"]


def test_max_pool_takes_the_last_two_frames_of_the_skip():
    env = MaxPoolFrameSkip(CountingFrames(), skip=4)
    env.reset()
    obs, reward, terminated, truncated, _ = env.step(2)
    # frames 3 and 4: max([[3,0],[0,97]], [[4,0],[0,96]]) -- neither frame alone, nor frames 1..2
    assert obs.tolist() == [[4, 0], [0, 97]]
    assert reward == 12.0  # 4 frames of raw reward 3, unclipped
    assert env.unwrapped.actions == [2, 2, 2, 2]
    obs, *_ = env.step(0)
    assert obs.tolist() == [[8, 0], [0, 93]]


def test_max_pool_stops_at_game_over_inside_the_skip():
    env = MaxPoolFrameSkip(CountingFrames(end=6), skip=4)
    env.reset()
    env.step(0)
    obs, reward, terminated, _, _ = env.step(0)
    assert terminated and reward == 6.0  # frames 5 and 6 only
    assert obs.tolist() == [[6, 0], [0, 95]]
    assert env.unwrapped.t == 6

    one = MaxPoolFrameSkip(CountingFrames(end=5), skip=4)
    one.reset()
    one.step(0)
    obs, reward, terminated, _, _ = one.step(0)
    assert terminated and reward == 3.0 and obs.tolist() == [[5, 0], [0, 95]]  # a single frame: no max


def test_frame_stack_is_oldest_first_and_starts_with_copies_of_the_first_frame():
    env = FrameStack(CountingFrames(), num_frames=4)
    assert env.observation_space.shape == (4, 2, 2) and env.observation_space.dtype == np.uint8
    first, _ = env.reset()
    assert first[:, 0, 0].tolist() == [0, 0, 0, 0]
    seen = [first]
    for _ in range(5):
        obs, *_ = env.step(0)
        seen.append(obs)
    assert seen[2][:, 0, 0].tolist() == [0, 0, 1, 2]
    assert seen[5][:, 0, 0].tolist() == [2, 3, 4, 5]
    assert seen[5][:, 1, 1].tolist() == [98, 97, 96, 95]
    # each observation is its own array: later steps do not rewrite what the engine already holds
    assert seen[2][:, 0, 0].tolist() == [0, 0, 1, 2] and first[:, 0, 0].tolist() == [0, 0, 0, 0]
    again, _ = env.reset()
    assert again[:, 0, 0].tolist() == [0, 0, 0, 0]  # nothing of the previous game leaks in


class Screen(gymnasium.Env):
    """One 210x160 grayscale screen: black with a 1-pixel-wide white vertical line at column 81."""

    observation_space = gymnasium.spaces.Box(0, 255, (210, 160), np.uint8)
    action_space = gymnasium.spaces.Discrete(1)

    def reset(self, seed=None, options=None):
        screen = np.zeros((210, 160), np.uint8)
        screen[:, 81] = 255
        return screen, {}

    def step(self, action):
        return self.reset()[0], 0.0, False, False, {}


def test_resize_to_84_keeps_thin_objects():
    env = ResizeFrame(Screen(), 84)
    obs, _ = env.reset()
    assert obs.shape == (84, 84) and obs.dtype == np.uint8 and env.observation_space.shape == (84, 84)
    # area interpolation spreads the line over ~half a column instead of dropping it
    column_max = obs.max(axis=0)
    assert column_max.max() >= 100 and (column_max > 0).sum() <= 2
    assert obs.mean() == pytest.approx(255 / 160, rel=0.05)  # brightness is preserved


def test_noop_reset_plays_between_1_and_noop_max_frames():
    env = NoopReset(CountingFrames(), noop_max=5)
    counts = set()
    for seed in range(40):
        obs, _ = env.reset(seed=seed)
        n = env.last_num_noops
        assert 1 <= n <= 5 and env.unwrapped.t == n and obs[0, 0] == n
        assert env.unwrapped.actions == [0] * n  # NOOP only
        counts.add(n)
    assert counts == {1, 2, 3, 4, 5}
    env.reset(seed=7)
    n7 = env.last_num_noops
    env.reset(seed=7)
    assert env.last_num_noops == n7  # seeded: reproducible
