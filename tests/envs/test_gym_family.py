"""gym_ family through the single-agent adapter: auto-reset, final_obs, episode stats, truncation, seeding."""

import re

import gymnasium
import numpy as np
import pytest

from sfx.cfg import ConfigError
from sfx.registries import default_cfg
from sfx.envs import SingleAgentEnvAdapter, make_env
from sfx.envs.gym import check_gym_id


def run_until_done(env, actions=lambda t: t % 2, limit=10_000):
    """Step agent 0 until its episode ends; returns (steps, rewards, last step's outputs)."""
    rewards = []
    for t in range(limit):
        obs, rew, term, trunc, infos = env.step([actions(t)])
        rewards.append(rew[0])
        if term[0] or trunc[0]:
            return t + 1, rewards, (obs, rew, term, trunc, infos)
    raise AssertionError("episode did not end")


def test_cartpole_protocol_and_auto_reset():
    env = make_env(default_cfg(seed=1))
    assert env.num_agents == 1
    assert env.observation_space.shape == (4,) and env.action_space.n == 2
    obs, infos = env.reset()
    assert len(obs) == 1 and len(infos) == 1 and env.observation_space.contains(obs[0])

    steps, rewards, (obs, rew, term, trunc, infos) = run_until_done(env, actions=lambda t: 0)
    assert term == [True] and trunc == [False]
    final = infos[0]["final_obs"]
    # always pushing left ends when the pole falls: |angle| past 12 degrees (0.2095 rad)
    assert abs(final[2]) > 0.2 or abs(final[0]) > 2.4
    # obs is already the next episode's first one: CartPole starts every state within +-0.05
    assert np.all(np.abs(obs[0]) <= 0.05)
    assert infos[0]["episode"] == {"reward": float(sum(rewards)), "len": steps}
    assert sum(rewards) == steps  # reward 1 per step

    # the next episode's statistics start from zero
    steps2, rewards2, (_, _, _, _, infos2) = run_until_done(env, actions=lambda t: 1)
    assert infos2[0]["episode"] == {"reward": float(steps2), "len": steps2}
    env.close()


def test_no_episode_info_in_the_middle_of_an_episode():
    env = make_env(default_cfg(seed=1))
    env.reset()
    _, _, term, trunc, infos = env.step([0])
    assert not term[0] and not trunc[0]
    assert "episode" not in infos[0] and "final_obs" not in infos[0]


def test_time_limit_truncates():
    env = make_env(default_cfg(seed=3, gym_max_episode_steps=5))
    env.reset()
    steps, _, (_, _, term, trunc, infos) = run_until_done(env)  # alternating actions keep the pole up
    assert (steps, term, trunc) == (5, [False], [True])
    assert infos[0]["episode"]["len"] == 5
    assert infos[0]["final_obs"].shape == (4,)


def test_frameskip_repeats_actions():
    env = make_env(default_cfg(seed=3, gym_max_episode_steps=10, env_frameskip=2))
    env.reset()
    steps, rewards, (_, _, _, trunc, infos) = run_until_done(env)
    assert steps == 5 and trunc == [True]
    assert rewards == [2.0] * 5 and infos[0]["episode"]["reward"] == 10.0


def test_seeding_per_env_id():
    def first_obs(seed, env_id):
        env = make_env(default_cfg(seed=seed), {"worker_index": 0, "vector_index": 0, "env_id": env_id})
        obs, _ = env.reset()
        return obs[0]

    assert np.array_equal(first_obs(42, 0), first_obs(42, 0))
    assert not np.array_equal(first_obs(42, 0), first_obs(42, 1))
    assert np.array_equal(first_obs(42, 1), first_obs(43, 0))  # seed + env_id


def test_explicit_reset_seed_wins():
    a = make_env(default_cfg(seed=1))
    b = make_env(default_cfg(seed=2))
    assert np.array_equal(a.reset(seed=9)[0][0], b.reset(seed=9)[0][0])


def test_render_rgb_array():
    env = make_env(default_cfg(), render_mode="rgb_array")
    env.reset(seed=0)
    frame = env.render()
    assert frame.ndim == 3 and frame.shape[2] == 3 and frame.dtype == np.uint8
    env.close()


def test_unknown_gym_id():
    with pytest.raises(ConfigError, match=r"gymnasium has no env 'Cartpole-v1'; did you mean: CartPole-v1"):
        default_cfg("gym_Cartpole-v1")


@pytest.mark.parametrize("env_id,sfx_name", [
    ("MiniGrid-MemoryS7-v0", "minigrid_MemoryS7"),          # ids minigrid registers only when imported
    ("BabyAI-GoToLocal-v0", "minigrid_BabyAI-GoToLocal"),
    ("ALE/SpaceInvaders-v5", "atari_space_invaders"),       # ale-py's ids, also without it imported
    ("BreakoutNoFrameskip-v4", "atari_breakout"),
    ("VizdoomDefendCenter-v1", "doom_defend_the_center"),   # ViZDoom's spelling differs from sfx's
    ("VizdoomHealthGathering-v1", "doom_health_gathering"),
])
def test_a_gym_id_an_sfx_family_serves_names_the_sfx_spelling(env_id, sfx_name):
    # gymnasium has no such env of its own; whether the package that registers it was imported in this
    # process (by another test, or by the lookup itself) changes only the first words
    with pytest.raises(ConfigError, match=rf"'{re.escape(env_id)}'.*; did you mean --env={sfx_name}\?"):
        check_gym_id(env_id)
    # the bare gymnasium id (no family prefix) gets the same line
    with pytest.raises(ConfigError,
                       match=rf"--env={re.escape(env_id)} matches no env family; .*did you mean --env={sfx_name}\?"):
        default_cfg(env_id)


def test_a_registered_gym_id_that_gymnasium_cannot_make_is_a_config_error():
    """gymnasium keeps the mujoco-py versions in its registry but raises ImportError on make."""
    with pytest.raises(ConfigError, match=r"--env=gym_HalfCheetah-v3: gymnasium cannot make 'HalfCheetah-v3': .*"
                                          r"did you mean --env=mujoco_halfcheetah\?"):
        make_env(default_cfg("gym_HalfCheetah-v3"))


def test_the_raw_env_of_a_served_id_stays_reachable_with_the_module_form():
    import minigrid  # noqa: F401  (registers the MiniGrid ids in this process)

    with pytest.raises(ConfigError, match=r"'MiniGrid-Empty-5x5-v0' is not one of gymnasium's own envs \(minigrid "
                                          r"registers it when imported\); did you mean --env=minigrid_Empty-5x5\?"):
        check_gym_id("MiniGrid-Empty-5x5-v0")
    check_gym_id("minigrid:MiniGrid-Empty-5x5-v0")  # the user asked for the raw env: no error


def test_a_bare_gymnasium_id_suggests_the_gym_family():
    with pytest.raises(ConfigError, match=r"did you mean --env=gym_CartPole-v1\?"):
        default_cfg("CartPole-v1")


def test_module_prefixed_id_that_cannot_be_imported():
    with pytest.raises(ConfigError, match=r"cannot import module 'no_such_pkg_xyz'"):
        default_cfg("gym_no_such_pkg_xyz:Env-v0")


class BigRewards(gymnasium.Env):
    """Three steps of reward 100, then terminal; reports an extra statistic."""

    observation_space = gymnasium.spaces.Box(0, 10, (1,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        done = self.t == 3
        info = {"episode_extra_stats": {"score": 7}} if done else {}
        return np.full(1, self.t, np.float32), 100.0, done, False, info


def test_rewards_are_not_clipped_and_extra_stats_are_kept():
    env = SingleAgentEnvAdapter(BigRewards())
    env.reset()
    steps, rewards, (obs, _, _, _, infos) = run_until_done(env)
    assert steps == 3 and rewards == [100.0] * 3
    assert infos[0]["episode"] == {"reward": 300.0, "len": 3, "score": 7}
    assert "episode_extra_stats" not in infos[0]
    assert infos[0]["final_obs"][0] == 3.0 and obs[0][0] == 0.0


def test_adapter_rejects_wrong_number_of_actions():
    env = SingleAgentEnvAdapter(BigRewards())
    env.reset()
    with pytest.raises(ValueError, match="1 action, got 2"):
        env.step([0, 1])
