"""football_ on EnvPool's Google Research Football (the family's default backend, no engine build): the stacked
maps against the pool's own maps stacked by a plain loop, time limits, episode statistics, the one-env form, a
short training, and the one-line errors for what only gfootball's Python package serves."""

import json
import subprocess
import sys

import numpy as np
import pytest

from sfx.cfg import ConfigError
from sfx.registries import default_cfg

pytest.importorskip("envpool", reason="the envpool extra is not installed (pip install -e .[envpool])")

from sfx.envs import make_env
from sfx.envs.envpool.vector import EnvPoolVector
from sfx.envs.football.on_envpool import _channels_first, football_options, make_football_pool
from sfx.envs.vector import make_vector_env

SCENARIO = "football_academy_empty_goal_close"


def configs(n):
    return [{"worker_index": 0, "vector_index": e, "env_id": e} for e in range(n)]


def test_envpool_is_the_default_and_serves_every_scenario_of_the_family():
    cfg = default_cfg(SCENARIO)
    assert cfg.env_backend == "envpool"
    task, options = football_options(cfg)
    assert task == "gfootball/academy_empty_goal_close-v1"
    assert options == {"max_episode_steps": 399}  # the scenario's 400 steps, see test_a_time_limit_...
    from sfx.envs.football import SCENARIOS
    for scenario in SCENARIOS:
        football_options(default_cfg(f"football_{scenario}"))  # no scenario of the family is refused


@pytest.mark.parametrize("flag, value, allowed", [
    ("football_representation", "simple115v2", "extracted (the super mini map; EnvPool has no 115-float state)"),
    ("football_rewards", "scoring,checkpoints", "scoring (EnvPool has no checkpoint reward)"),
    ("football_smm_size", "large", "default (EnvPool draws 96x72 maps)"),
    ("football_left_players", 2, "1 (EnvPool controls one player)"),
    ("env_frameskip", 2, "1 (SEED RL's setting; EnvPool does not repeat actions)"),
])
def test_what_only_the_python_backend_serves_is_one_line_naming_it(flag, value, allowed):
    with pytest.raises(ConfigError) as e:
        football_options(default_cfg(SCENARIO, **{flag: value}))
    assert str(e.value) == (f"--{flag}={value} is not served by --env_backend=envpool; allowed there: {allowed}; or "
                            f"--env_backend=python (gfootball built by scripts/install_football.sh)")


def test_the_trainer_refuses_it_before_any_process_starts(tmp_path):
    r = subprocess.run([sys.executable, "-m", "sfx.train", f"--env={SCENARIO}", "--football_rewards=scoring,checkpoints",
                        "--experiment=x", f"--train_dir={tmp_path}"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr
    lines = [line for line in r.stderr.strip().splitlines() if not line.startswith("[")]
    assert len(lines) == 1 and "--football_rewards=scoring,checkpoints is not served by --env_backend=envpool" \
        in lines[0], r.stderr


def test_rendering_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"rendering \(sfx.enjoy --save_video\) is not served by "
                                          r"--env_backend=envpool"):
        make_env(default_cfg(SCENARIO), {"worker_index": 0, "vector_index": 0, "env_id": 0}, render_mode="rgb_array")


def test_stacked_maps_are_the_pools_own_maps_stacked_oldest_first():
    """The same seeds and actions through a stacked vector and a bare pool: each observation is the last four maps
    of the bare pool's episode (its first map repeated at the start), each ended episode's final_obs its last four,
    and the rewards and flags the pool's."""
    cfg = default_cfg(SCENARIO, seed=5)
    stacked = make_vector_env(cfg, configs(2))
    task, options = football_options(cfg)
    bare = EnvPoolVector(task, [5, 6], options, 1, obs_fn=_channels_first)
    assert stacked.observation_space.shape == (16, 72, 96) and stacked.observation_space.dtype == np.uint8
    history = [[m] for m in bare.reset([5, 6])]   # per env: this episode's maps so far
    obs = stacked.reset([5, 6])

    def expected_stack(maps):
        last = ([maps[0]] * 4 + maps)[-4:]
        return np.concatenate(last, axis=0)

    for e in range(2):
        np.testing.assert_array_equal(obs[e], expected_stack(history[e]))
    assert set(np.unique(obs).tolist()) <= {0, 255}
    rng = np.random.default_rng(0)
    ended = 0
    for _ in range(160):
        actions = rng.integers(0, 19, (2, 1)).astype(np.float32)
        got, want = stacked.step(actions), bare.step(actions)
        np.testing.assert_array_equal(got.rewards, want.rewards)
        np.testing.assert_array_equal(got.terminated, want.terminated)
        np.testing.assert_array_equal(got.truncated, want.truncated)
        for e in range(2):
            if e in want.events:
                ended += 1
                np.testing.assert_array_equal(got.events[e].final_obs,
                                              expected_stack(history[e] + [want.events[e].final_obs]))
                episode = got.events[e].episode
                assert {k: episode[k] for k in ("reward", "len")} == want.events[e].episode
                history[e] = [want.obs[e]]
            else:
                history[e].append(want.obs[e])
            np.testing.assert_array_equal(got.obs[e], expected_stack(history[e]))
    assert ended >= 1, "no episode ended in 160 random steps: the episode-start path was not checked"
    stacked.close()
    bare.close()


def test_a_time_limit_ends_the_episode_as_truncated_after_the_scenarios_steps():
    """EnvPool truncates one step after its max_episode_steps, so the pool gets game_duration - 1: with a limit
    of 12 that way, the 12th step (not the 13th) is the truncated one and the episode has 12 steps."""
    task, _ = football_options(default_cfg(SCENARIO))
    pool = EnvPoolVector(task, [3], {"max_episode_steps": 11}, 1, obs_fn=_channels_first)
    pool.reset([3])
    for step in range(1, 13):
        out = pool.step(np.zeros((1, 1), np.float32))  # idle: the ball stays in play this long
        if step < 12:
            assert not (out.terminated[0] or out.truncated[0]), step
    assert out.truncated[0] and not out.terminated[0]
    assert out.events[0].episode["len"] == 12
    pool.close()


def test_episode_statistics_carry_the_goal_difference():
    vec = make_football_pool(default_cfg(SCENARIO, seed=2), configs(2), stack=True)
    vec.reset([2, 3])
    rng = np.random.default_rng(1)
    episodes = []
    while len(episodes) < 2:
        out = vec.step(rng.integers(0, 19, (2, 1)).astype(np.float32))
        episodes += [ev.episode for ev in out.events.values()]
    for ep in episodes:
        # the scoring reward is the change of the goal difference: its sum over an episode is the episode's score
        assert ep["football_score"] == ep["reward"], ep
    vec.close()


def test_a_short_serial_training_on_the_default_backend(tmp_path):
    r = subprocess.run([sys.executable, "-m", "sfx.train", f"--env={SCENARIO}", "--experiment=fb",
                        f"--train_dir={tmp_path}", "--device=cpu", "--serial_mode", "--num_workers=1",
                        "--num_envs_per_worker=4", "--worker_num_splits=2", "--rollout=16", "--recurrence=16",
                        "--batch_size=64", "--hidden_size=32", "--train_for_env_steps=256", "--seed=1"],
                       capture_output=True, text=True, timeout=280)
    assert r.returncode == 0, r.stderr[-3000:]
    cfg = json.loads((tmp_path / "fb" / "cfg.json").read_text())
    assert cfg["env_backend"] == "envpool" and cfg["encoder_subtype"] == "resnet_impala"
    assert list((tmp_path / "fb" / "checkpoint_p0").glob("*.pth")), "no checkpoint written"
