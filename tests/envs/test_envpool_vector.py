"""EnvPool as a backend (sfx.envs.envpool) on the real EnvPool: its episode semantics translated to sfx's, alignment
with the Python envs where EnvPool claims it, the documented differences, and the one-line errors."""

import sys

import numpy as np
import pytest

envpool = pytest.importorskip("envpool", reason="the envpool extra is not installed (pip install -e .[envpool])")

from sfx.cfg import ConfigError  # noqa: E402
from sfx.registries import default_cfg  # noqa: E402
from sfx.envs import make_env  # noqa: E402
from sfx.envs.atari import atari_options  # noqa: E402
from sfx.envs.envpool.vector import EnvPoolVector  # noqa: E402
from sfx.envs.vector import make_vector_env  # noqa: E402

DETERMINISTIC = {"atari_sticky_actions": False}


def configs(n):
    return [{"worker_index": 0, "vector_index": e, "env_id": e} for e in range(n)]


def vector(env="atari_breakout", n=2, **flags):
    cfg = default_cfg(env, **{"seed": 1, "env_backend": "envpool", **flags})
    v = make_vector_env(cfg, configs(n))
    assert isinstance(v, EnvPoolVector)
    return v


def random_rows(rng, n, num_actions):
    return rng.integers(num_actions, size=(n, 1)).astype(np.float32)


def test_python_stays_the_default_backend():
    cfg = default_cfg("atari_breakout", seed=1)
    assert cfg.env_backend == "python"
    v = make_vector_env(cfg, configs(1))
    try:
        assert not isinstance(v, EnvPoolVector)
    finally:
        v.close()


def test_the_call_envpool_spends_on_a_reset_is_hidden():
    """Next to a bare EnvPool env fed the same actions: where it ends an episode and then spends one call (its
    action discarded) on the reset, the vector's same step already returns that reset's first observation and the
    ended episode's last one as final_obs; afterwards both go on in step."""
    flags = {**DETERMINISTIC, "atari_episodic_life": False, "atari_max_episode_frames": 4 * 60}
    v = vector(n=1, **flags)
    task, options = atari_options(default_cfg("atari_breakout", env_backend="envpool", **flags))
    bare = envpool.make_gymnasium(task, num_envs=1, batch_size=1, num_threads=1, seed=v.seeds[0],
                                  env_seed=[v.seeds[0]], **options)
    try:
        obs = v.reset([None])  # None: the seed the vector drew when it was made, which the bare env has too
        bare_obs, _ = bare.reset()
        assert np.array_equal(obs[0], bare_obs[0])
        rng = np.random.default_rng(0)
        ends = 0
        for t in range(150):
            rows = random_rows(rng, 1, 4)
            step = v.step(rows)
            bare_obs, bare_rew, bare_term, bare_trunc, _ = bare.step(rows[:, 0].astype(np.int32))
            assert step.rewards[0] == bare_rew[0]
            assert (step.terminated[0], step.truncated[0]) == (bare_term[0], bare_trunc[0])
            if bare_term[0] or bare_trunc[0]:
                ends += 1
                event = step.events[0]
                assert np.array_equal(event.final_obs, bare_obs[0])  # the episode's last observation
                bare_obs, bare_rew, bare_term, bare_trunc, info = bare.step(np.zeros(1, np.int32))  # EnvPool's reset
                assert info["elapsed_step"][0] == 0 and bare_rew[0] == 0
                # the new episode's first observation: a stack of one frame, not a step on from the last one
                assert all(np.array_equal(step.obs[0][k], step.obs[0][0]) for k in range(4))
            else:
                assert not step.events
            assert np.array_equal(step.obs[0], bare_obs[0]), t
        assert ends >= 2
        assert v.pool_steps == 150 and v.pool_resets == ends
    finally:
        v.close()
        bare.close()


def test_time_limit_truncates_with_final_obs_and_every_step_is_counted():
    """A 60-step limit: every episode is truncated after exactly 60 of the vector's steps (none lost to resets),
    not terminated, with its last observation as final_obs, and the next step starts a new game."""
    v = vector(n=3, **DETERMINISTIC, atari_episodic_life=False, atari_max_episode_frames=4 * 60,
               atari_noop_max=1)
    try:
        v.reset([1, 2, 3])
        rng = np.random.default_rng(1)
        lens, steps = [], 0
        for _ in range(180):
            prev = v.step(random_rows(rng, 3, 4))  # Breakout: a random player rarely loses 5 lives in 60 steps
            steps += 1
            for e, event in prev.events.items():
                lens.append(event.episode["len"])
                assert prev.truncated[e] and not prev.terminated[e]
                assert event.final_obs.shape == (4, 84, 84)
                assert not np.array_equal(event.final_obs, prev.obs[e])
        assert lens == [60] * 9
        assert v.pool_steps == steps == 180 and v.pool_resets == 9
    finally:
        v.close()


def test_episodic_life_ends_the_agents_episode_and_the_statistics_are_the_whole_games():
    """Breakout's 5 lives: each lost life is a terminated step with final_obs and no statistics, the game goes on
    (no new stack), and the game over reports the raw score and the agent steps of the whole game."""
    v = vector(n=1, **DETERMINISTIC)
    try:
        obs = v.reset([5])
        rng = np.random.default_rng(2)
        lives_lost, score, steps, game = 0, 0.0, 0, None
        for _ in range(3000):
            prev = obs[0].copy()
            step = v.step(random_rows(rng, 1, 4))
            obs = step.obs
            steps += 1
            score += float(step.rewards[0])
            if 0 in step.events:
                event = step.events[0]
                assert step.terminated[0] and not step.truncated[0]
                if event.episode is None:  # a life lost: the same game, one frame on
                    lives_lost += 1
                    assert np.array_equal(event.final_obs, obs[0])
                    assert np.array_equal(obs[0][:3], prev[1:])
                else:
                    game = event.episode
                    break
            else:
                assert not step.terminated[0]
        assert lives_lost == 4
        assert game == {"reward": score, "len": steps}
    finally:
        v.close()


def test_without_sticky_actions_envpool_plays_the_python_stacks_frames():
    """No sticky actions, one no-op frame, no FIRE at the start: the same actions give the same 84x84x4 frames and
    rewards on both backends, through a game over and into the next game. The one documented difference: the newest
    frame of a game over's final observation (the Python stack stops its frame skip at the game over, EnvPool does
    not); a terminal observation is never bootstrapped from, so learning does not see it."""
    flags = {**DETERMINISTIC, "atari_noop_max": 1, "atari_fire_reset": False, "atari_episodic_life": False}
    py = make_env(default_cfg("atari_breakout", seed=3, **flags))
    v = vector(n=1, **flags)
    try:
        py_obs, _ = py.reset()
        obs = v.reset([3])
        assert np.array_equal(py_obs[0], obs[0])
        rng = np.random.default_rng(3)
        games = 0
        for _ in range(600):
            rows = random_rows(rng, 1, 4)
            py_obs, py_rew, py_term, _, py_info = py.step([int(rows[0, 0])])
            step = v.step(rows)
            assert np.array_equal(py_obs[0], step.obs[0])
            assert py_rew[0] == step.rewards[0] and py_term[0] == step.terminated[0]
            if py_term[0]:
                games += 1
                assert np.array_equal(py_info[0]["final_obs"][:3], step.events[0].final_obs[:3])
                assert py_info[0]["episode"] == step.events[0].episode
        assert games >= 1
    finally:
        py.close()
        v.close()


def test_fire_at_the_start_is_one_frame_on_envpool_and_one_agent_step_in_python():
    """The documented difference: with --atari_fire_reset the first frames differ (EnvPool presses FIRE for one
    emulator frame, the Python stack for one agent step of --env_frameskip frames)."""
    flags = {**DETERMINISTIC, "atari_noop_max": 1, "atari_fire_reset": True}
    py = make_env(default_cfg("atari_breakout", seed=3, **flags))
    v = vector(n=1, **flags)
    try:
        py_obs, _ = py.reset()
        obs = v.reset([3])
        assert not np.array_equal(py_obs[0], obs[0])
    finally:
        py.close()
        v.close()


def test_sticky_actions_reach_envpool():
    """--atari_sticky_action_prob is EnvPool's repeat_action_probability: with it two seeds play the same actions
    differently; without it they play them alike."""
    def frames(sticky, seed):
        v = vector(n=1, atari_sticky_actions=sticky, atari_sticky_action_prob=0.25, atari_noop_max=1)
        try:
            v.reset([seed])
            rng = np.random.default_rng(4)
            return np.stack([v.step(random_rows(rng, 1, 4)).obs[0].copy() for _ in range(120)])
        finally:
            v.close()

    assert np.array_equal(frames(False, 1), frames(False, 2))
    assert not np.array_equal(frames(True, 1), frames(True, 2))


def test_same_seed_same_frames():
    def frames():
        v = vector(n=2)
        try:
            v.reset([7, 8])
            rng = np.random.default_rng(5)
            return np.stack([v.step(random_rows(rng, 2, 4)).obs.copy() for _ in range(60)])
        finally:
            v.close()

    assert np.array_equal(frames(), frames())


def test_full_action_set_and_frameskip_translate():
    v = vector("atari_pong", n=1, atari_full_action_set=True, env_frameskip=2, atari_max_episode_frames=2 * 30)
    try:
        assert v.action_space.n == 18
        v.reset([1])
        lens = []
        for _ in range(60):
            step = v.step(np.zeros((1, 1), np.float32))
            lens += [e.episode["len"] for e in step.events.values()]
        assert lens == [30, 30]  # 60 frames at 2 frames per step
    finally:
        v.close()


def test_mujoco_float32_observations_time_limit_and_clipped_actions():
    v = vector("mujoco_halfcheetah", n=2, mujoco_max_episode_steps=50)
    try:
        assert v.observation_space.dtype == np.float32 and v.observation_space.shape == (17,)
        assert v.action_space.dtype == np.float32 and v.action_space.shape == (6,)
        obs = v.reset([1, 2])
        assert obs.dtype == np.float32 and obs.shape == (2, 17)
        ends = []
        for t in range(100):
            step = v.step(np.full((2, 6), 5.0, np.float32))  # out of bounds: clipped to 1 like the Python envs'
            for e, event in step.events.items():
                assert step.truncated[e] and not step.terminated[e] and event.final_obs.dtype == np.float32
                ends.append((t, event.episode["len"]))
        assert ends == [(49, 50), (49, 50), (99, 50), (99, 50)]
    finally:
        v.close()


def test_minigrid_flat_observations_match_the_python_envs():
    """MiniGrid-Empty-5x5 starts the same every time: both backends give the same flat one-hot observations for
    the same actions, the same rewards, and the same success statistic."""
    for kind in ("onehot", "codes"):
        py = make_env(default_cfg("minigrid_Empty-5x5", seed=1, minigrid_obs=kind))
        v = vector("minigrid_Empty-5x5", n=1, minigrid_obs=kind)
        try:
            assert v.observation_space == py.observation_space
            py_obs, _ = py.reset()
            obs = v.reset([1])
            assert np.array_equal(py_obs[0], obs[0])
            # forward, forward, right, forward, forward reaches the goal of Empty-5x5; then some random steps
            actions = [2, 2, 1, 2, 2] + list(np.random.default_rng(6).integers(3, size=40))
            successes = []
            for a in actions:
                py_obs, py_rew, py_term, _, py_info = py.step([int(a)])
                step = v.step(np.array([[a]], np.float32))
                assert np.array_equal(py_obs[0], step.obs[0])
                assert py_rew[0] == pytest.approx(float(step.rewards[0]), abs=1e-6)
                if py_term[0]:
                    assert py_info[0]["episode"]["success"] == step.events[0].episode["success"]
                    successes.append(step.events[0].episode["success"])
            assert successes[0] == 1.0
        finally:
            py.close()
            v.close()


def test_bad_values_are_one_line_errors():
    cases = [
        ("atari_breakout", {"atari_noop_max": 0}, "--atari_noop_max=0 is not served by --env_backend=envpool"),
        ("atari_breakout", {"atari_max_episode_frames": 1001}, "a multiple of --env_frameskip=4"),
        ("atari_joust", {}, "it serves: atari_"),
        ("mujoco_hopper", {"env_frameskip": 2}, "--env_frameskip=2 is not served by --env_backend=envpool"),
        ("minigrid_MultiRoom-N4-S5", {}, "it serves: minigrid_"),
        ("atari_breakout", {"envpool_num_threads": -1}, "--envpool_num_threads=-1 must be an integer >= 0"),
    ]
    for env, flags, message in cases:
        with pytest.raises(ConfigError) as e:
            default_cfg(env, env_backend="envpool", **flags)
        assert message in str(e.value) and "\n" not in str(e.value), env


def test_missing_envpool_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "envpool", None)  # what Python does for a package that is not installed
    with pytest.raises(ConfigError) as e:
        default_cfg("atari_breakout", env_backend="envpool")
    assert "pip install -e .[envpool]" in str(e.value) and "\n" not in str(e.value)
