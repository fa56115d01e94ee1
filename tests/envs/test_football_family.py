"""The football_ family (Google Research Football). Names, flags and the missing-package line are checked
always; everything else runs the real gfootball engine (scripts/install_football.sh builds it) and skips,
saying so, where it is not installed."""

import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest

from sfx.cfg import ConfigError
from sfx.registries import default_cfg
from sfx.envs import find_family, make_env
from sfx.envs.football import DEFAULT_OVERRIDES, SCENARIOS, check_scenario, observation_space

HAVE_GFOOTBALL = importlib.util.find_spec("gfootball_engine") is not None and \
    importlib.util.find_spec("gfootball") is not None
needs_engine = pytest.mark.skipif(not HAVE_GFOOTBALL, reason="gfootball is not installed: scripts/install_football.sh "
                                                             "builds its engine (about 30 min on 2 cores)")

SCENARIO = "football_academy_empty_goal_close"


def _env(name: str = SCENARIO, **flags):
    """gfootball's own env (the Python backend; EnvPool's has tests/envs/test_football_envpool.py)."""
    return make_env(default_cfg(name, env_backend="python", **flags), {"worker_index": 0, "vector_index": 0,
                                                                       "env_id": 0})


# -- without the engine ---------------------------------------------------------------------------------------------

def test_an_unknown_scenario_is_one_line_listing_the_allowed_ones():
    with pytest.raises(ConfigError) as e:
        check_scenario("football_academy_empty_goal_clos")
    message = str(e.value)
    assert "\n" not in message
    assert "did you mean football_academy_empty_goal_close" in message
    for name in SCENARIOS:
        assert f"football_{name}" in message


def test_the_family_sets_seeds_defaults():
    family = find_family(SCENARIO)
    assert family.prefix == "football_"
    assert family.defaults_for(SCENARIO) == DEFAULT_OVERRIDES
    assert DEFAULT_OVERRIDES["env_frameskip"] == 1  # SEED RL: "Only action repeat of 1 is supported"


@needs_engine
def test_family_defaults_reach_the_cfg_and_the_user_still_wins():
    cfg = default_cfg(SCENARIO)
    for key, value in DEFAULT_OVERRIDES.items():
        assert getattr(cfg, key) == value, key
    assert (cfg.football_representation, cfg.football_rewards, cfg.football_smm_size) == \
        ("extracted", "scoring", "default")
    assert default_cfg(SCENARIO, hidden_size=64).hidden_size == 64


def test_observation_spaces_of_each_representation():
    assert observation_space("extracted", True, "default").shape == (16, 72, 96)
    assert observation_space("extracted", False, "default").shape == (4, 72, 96)
    assert observation_space("extracted", True, "large").shape == (16, 108, 144)
    assert observation_space("extracted", True, "default").dtype == np.uint8
    assert observation_space("simple115", False, "default").shape == (115,)
    assert observation_space("simple115v2", True, "default").shape == (460,)
    assert observation_space("simple115v2", False, "default").dtype == np.float32


def test_a_missing_gfootball_is_one_line_naming_the_install_script(tmp_path):
    r = subprocess.run([sys.executable, "-c",
                        "import sys; sys.modules['gfootball_engine'] = None\n"
                        "from sfx.train import main\n"
                        f"sys.exit(main(['--env={SCENARIO}', '--env_backend=python', '--experiment=x', '--train_dir={tmp_path}']))"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr
    # checked where the first env is made (so command lines parse without gfootball): after the run's first log lines
    assert "Traceback" not in r.stderr, r.stderr
    lines = [line for line in r.stderr.strip().splitlines() if not line.startswith("[")]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("sfx: error: env family football_ (--env=football_academy_empty_goal_close) needs "
                               "the optional package gfootball>=2.10.2")
    assert "scripts/install_football.sh" in lines[0] and "pip install -e .[football]" in lines[0]


def test_too_many_left_players_is_a_config_error(tmp_path):
    r = subprocess.run([sys.executable, "-m", "sfx.train", f"--env={SCENARIO}", "--football_left_players=3",
                        "--experiment=x", f"--train_dir={tmp_path}"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr
    assert "--football_left_players=3 must be between 1 and 2 (the left players of academy_empty_goal_close)" \
        in r.stderr


# -- with the real engine -------------------------------------------------------------------------------------------

def _play(env, steps: int, seed: int | None, policy_seed: int = 0):
    """Random play; the per-step observations, rewards and episode summaries."""
    rng = np.random.default_rng(policy_seed)
    obs, _ = env.reset(seed=seed)
    trace, episodes = [obs], []
    for _ in range(steps):
        actions = [int(a) for a in rng.integers(0, env.action_space.n, env.num_agents)]
        obs, rewards, terminated, truncated, infos = env.step(actions)
        trace.append((obs, rewards, terminated, truncated))
        episodes += [info["episode"] for info in infos if "episode" in info]
    return trace, episodes


@needs_engine
def test_reset_step_close_over_several_episodes():
    """Random play on the academy's shortest scenario: episodes end (a goal, the ball out or lost, or the
    400-step limit, which is a truncation), the env resets itself, observations stay in the space."""
    env = _env(seed=3)
    try:
        assert env.num_agents == 1 and env.observation_space.shape == (16, 72, 96)
        assert env.action_space.n == 19
        obs, infos = env.reset(seed=3)
        assert len(obs) == 1 and env.observation_space.contains(obs[0])
        episodes, ends = [], []
        steps = 0
        while len(episodes) < 3:
            actions = [env.action_space.sample()]
            obs, rewards, terminated, truncated, infos = env.step(actions)
            steps += 1
            assert env.observation_space.contains(obs[0])
            assert rewards[0] in (-1.0, 0.0, 1.0)
            if terminated[0] or truncated[0]:
                assert not (terminated[0] and truncated[0])
                assert env.observation_space.contains(infos[0]["final_obs"])
                episodes.append(infos[0]["episode"])
                ends.append("truncated" if truncated[0] else "terminated")
                # the stack of the next episode starts with 4 copies of its first SMM
                np.testing.assert_array_equal(obs[0][0:4], obs[0][12:16])
            assert steps <= 3 * 400, "episodes do not end"
        for episode, end in zip(episodes, ends):
            assert 1 <= episode["len"] <= 400
            assert (episode["len"] == 400) == (end == "truncated")
            assert episode["reward"] == episode["football_score"]  # scoring reward = goal difference
        # the SMM planes are 0/255 marks; the ball plane (2) marks one cell of 72x96
        assert set(np.unique(obs[0])) <= {0, 255}
        assert 1 <= np.count_nonzero(obs[0][2]) <= 4
    finally:
        env.close()


@needs_engine
def test_the_same_seed_replays_the_same_games_and_another_seed_does_not():
    def run(seed):
        env = _env()
        try:
            return _play(env, 150, seed)
        finally:
            env.close()

    (a, ep_a), (b, ep_b), (c, _) = run(11), run(11), run(12)
    assert ep_a == ep_b and len(ep_a) >= 1
    for x, y in zip(a[1:], b[1:]):
        np.testing.assert_array_equal(x[0][0], y[0][0])
        assert x[1:] == y[1:]
    differs = any(not np.array_equal(x[0][0], y[0][0]) for x, y in zip(a[1:], c[1:]))
    assert differs, "seeds 11 and 12 played the same games"


@needs_engine
@pytest.mark.parametrize("representation,stacked,shape,dtype", [
    ("extracted", True, (16, 72, 96), np.uint8), ("extracted", False, (4, 72, 96), np.uint8),
    ("simple115", False, (115,), np.float32), ("simple115v2", False, (115,), np.float32),
    ("simple115v2", True, (460,), np.float32)])
def test_observation_shapes_of_each_representation(representation, stacked, shape, dtype):
    env = _env("football_11_vs_11_easy_stochastic", football_representation=representation,
               football_stacked=stacked, seed=0)
    try:
        assert env.observation_space.shape == shape and env.observation_space.dtype == dtype
        obs, _ = env.reset(seed=0)
        for _ in range(5):
            obs, *_ = env.step([env.action_space.sample()])
        assert obs[0].shape == shape and obs[0].dtype == dtype
        if representation != "extracted":
            # simple115: the ball's x, y, z first; then at index 9 onwards the one-hot of who owns it
            assert np.isfinite(obs[0]).all() and abs(obs[0][0]) <= 1.1
    finally:
        env.close()


@needs_engine
def test_several_left_players_are_agents_with_their_own_views_and_actions():
    """academy_3_vs_1_with_keeper: 3 attackers (plus the keeper) on the left; sfx controls 3 of them."""
    env = _env("football_academy_3_vs_1_with_keeper", football_left_players=3, football_rewards="scoring,checkpoints",
               seed=5)
    try:
        assert env.num_agents == 3
        obs, infos = env.reset(seed=5)
        assert len(obs) == 3 and len(infos) == 3
        for o in obs:
            assert o.shape == (16, 72, 96)
        # plane 3 of each agent's SMM marks its own active player: three different players
        active = [tuple(np.argwhere(o[3])[0]) for o in obs]
        assert len(set(active)) == 3, active
        # the left-team plane (0) is the same picture for all three
        np.testing.assert_array_equal(obs[0][0], obs[1][0])
        ended = 0
        for _ in range(400):
            obs, rewards, terminated, truncated, infos = env.step([5, 5, 5])  # all run right
            assert len(obs) == len(rewards) == len(terminated) == len(truncated) == len(infos) == 3
            if terminated[0] or truncated[0]:
                assert terminated == [terminated[0]] * 3 and truncated == [truncated[0]] * 3
                assert all("episode" in info for info in infos)
                ended += 1
                break
        assert ended == 1, "no episode ended in 400 steps"
    finally:
        env.close()


@needs_engine
def test_short_training_through_the_trainer(tmp_path):
    """python -m sfx.train on an academy scenario with two small workers exits 0 and leaves a checkpoint."""
    r = subprocess.run([sys.executable, "-m", "sfx.train", f"--env={SCENARIO}", "--env_backend=python",
                        "--experiment=fb", f"--train_dir={tmp_path}", "--device=cpu", "--num_workers=2", "--num_envs_per_worker=2",
                        "--worker_num_splits=2", "--rollout=32", "--recurrence=32", "--batch_size=128",
                        "--train_for_env_steps=1024", "--seed=1", "--hidden_size=64"],
                       capture_output=True, text=True, timeout=280)
    assert r.returncode == 0, r.stderr[-3000:]
    exp = tmp_path / "fb"
    cfg = json.loads((exp / "cfg.json").read_text())
    assert cfg["encoder_subtype"] == "resnet_impala" and cfg["env_frameskip"] == 1
    assert list((exp / "checkpoint_p0").glob("*.pth")), "no checkpoint written"


@needs_engine
def test_frameskip_repeats_actions():
    """Standing still (idle) until the episode ends: with 4 engine steps per action the same game (same seed) ends
    after a quarter of the steps, rounded up, and its length is counted in agent steps."""
    def idle_episode(frameskip):
        env = _env(env_frameskip=frameskip, football_representation="simple115v2")
        try:
            env.reset(seed=2)
            for step in range(1, 401):
                obs, rewards, terminated, truncated, infos = env.step([0])
                if terminated[0] or truncated[0]:
                    return step, infos[0]["episode"], terminated[0]
            raise AssertionError("no episode end in 400 steps")
        finally:
            env.close()

    steps_1, episode_1, terminated_1 = idle_episode(1)
    steps_4, episode_4, terminated_4 = idle_episode(4)
    assert steps_1 < 400 and terminated_1, "the keeper should take the ball before the time limit"
    assert steps_4 == -(-steps_1 // 4) and episode_4["len"] == steps_4 and episode_1["len"] == steps_1
    assert terminated_4 and episode_4["football_score"] == episode_1["football_score"]
