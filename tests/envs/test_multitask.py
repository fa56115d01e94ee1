"""The ``multitask`` env: task assignment, the task protocol (task_names / task_id), the listed envs'
flags and defaults, space checks, bad lists, reward scales, --help, resume."""

import json

import gymnasium
import numpy as np
import pytest

from sfx.cfg import ConfigError
from sfx.registries import default_cfg, parse_args
from sfx.cfg.cfg_json import cfg_to_dict
from sfx.envs import MultiAgentEnv, make_env, register_env_family, unregister_env_family
from sfx.envs.multitask import (MultitaskEnv, envs_per_task, parse_env_list, parse_reward_scales, task_for,
                                task_names_of)

GAMES = "atari_pong,atari_breakout,atari_space_invaders"
PROBE = {"worker_index": -1, "vector_index": 0, "env_id": -1}


def cfg_of(envs, **overrides):
    overrides.setdefault("num_workers", 2)
    overrides.setdefault("num_envs_per_worker", 2)
    overrides.setdefault("seed", 1)
    return default_cfg("multitask", multitask_envs=envs, **overrides)


def env_config(w, v, num_envs=2):
    return {"worker_index": w, "vector_index": v, "env_id": w * num_envs + v}


def test_round_robin_assignment_per_env_and_per_worker():
    # K=3 tasks, 3 workers of 2 envs: (worker, vector) -> task
    by_env = {(w, v): task_for("env", 3, 2, env_config(w, v)) for w in range(3) for v in range(2)}
    assert by_env == {(0, 0): 0, (0, 1): 1, (1, 0): 2, (1, 1): 0, (2, 0): 1, (2, 1): 2}
    by_worker = {(w, v): task_for("worker", 3, 2, env_config(w, v)) for w in range(4) for v in range(2)}
    assert by_worker == {(0, 0): 0, (0, 1): 0, (1, 0): 1, (1, 1): 1, (2, 0): 2, (2, 1): 2, (3, 0): 0, (3, 1): 0}
    # the probe env plays task 0; a re-made env (same worker and vector index) keeps its task
    assert task_for("env", 3, 2, PROBE) == task_for("worker", 3, 2, PROBE) == 0
    assert task_for("env", 3, 2, env_config(1, 0)) == task_for("env", 3, 2, {"worker_index": 1, "vector_index": 0})
    assert envs_per_task("env", 3, 3, 2) == [2, 2, 2]
    assert envs_per_task("env", 3, 1, 2) == [1, 1, 0]
    assert envs_per_task("worker", 3, 4, 2) == [4, 2, 2]


def test_task_names_are_env_names_made_unique_and_tag_safe():
    assert task_names_of(["atari_pong", "atari_breakout"], [1.0, 1.0]) == ("atari_pong", "atari_breakout")
    assert task_names_of(["gym_CartPole-v1"] * 2, [1.0, 1000.0]) == ("gym_CartPole-v1", "gym_CartPole-v1_x1000")
    assert task_names_of(["gym_CartPole-v1"] * 3, [1.0] * 3) == ("gym_CartPole-v1", "gym_CartPole-v1_2",
                                                                 "gym_CartPole-v1_3")
    assert task_names_of(["gym_a", "gym_a"], [0.5, 1e6]) == ("gym_a_x0.5", "gym_a_x1e06")
    # gymnasium namespaces have slashes, module:id names colons; a TensorBoard tag keeps neither readable
    assert task_names_of(["gym_ALE/Pong-v5", "gym_my pkg:Env-v0"], [1.0, 1.0]) == ("gym_ALE_Pong-v5",
                                                                                   "gym_my_pkg_Env-v0")


def test_env_list_and_scale_parsing_errors():
    assert parse_env_list(" atari_pong , atari_breakout ") == ("atari_pong", "atari_breakout")
    assert parse_env_list(None) == parse_env_list(" ") == ()
    with pytest.raises(ConfigError, match=r"--multitask_envs=atari_pong, has an empty item"):
        parse_env_list("atari_pong,")
    assert parse_reward_scales(None, 3) == (1.0, 1.0, 1.0)
    assert parse_reward_scales("1, 1e3", 2) == (1.0, 1000.0)
    with pytest.raises(ConfigError, match=r"--multitask_reward_scales=1 has 1 values for 2 listed envs"):
        parse_reward_scales("1", 2)
    for bad in ("1,0", "1,-2", "1,abc", "1,inf", "1,nan"):
        with pytest.raises(ConfigError, match=f"--multitask_reward_scales={bad}: .* is not a positive finite"):
            parse_reward_scales(bad, 2)


def test_three_atari_games_play_with_the_full_action_set():
    cfg = cfg_of(GAMES, num_workers=1, num_envs_per_worker=3, worker_num_splits=1)
    # the listed family's flags and defaults, and the full action set by default (several games)
    assert cfg.atari_full_action_set is True and cfg.encoder_type == "conv" and cfg.reward_clip == 1.0
    assert "atari_full_action_set" not in cfg.explicit_args
    probe = make_env(cfg, PROBE)
    names = ("atari_pong", "atari_breakout", "atari_space_invaders")
    assert isinstance(probe, MultitaskEnv) and probe.task_names == names and probe.task_id == 0
    assert probe.action_space == gymnasium.spaces.Discrete(18) and probe.observation_space.shape == (4, 84, 84)
    probe.close()
    for v in range(3):
        env = make_env(cfg, env_config(0, v, 3))
        assert env.task_names == names and env.task_id == v and env.num_agents == 1
        assert env.env.env.unwrapped._game == names[v][len("atari_"):]
        assert env.episodic_life is True  # other attributes are the listed env's
        obs, _ = env.reset()
        for t in range(30):
            obs, rewards, terminated, truncated, infos = env.step([t % 18])
            assert env.observation_space.contains(obs[0]) and isinstance(rewards[0], float)
        env.close()
    # one game (listed twice) keeps its minimal action set: nothing to agree on
    one = cfg_of("atari_pong,atari_pong", multitask_reward_scales="1,2")
    assert one.atari_full_action_set is False


def test_atari_full_action_set_turned_off_is_a_space_mismatch_with_the_hint(tmp_path):
    cfg = parse_args(["--env=multitask", "--multitask_envs=atari_pong,atari_breakout", "--atari_full_action_set=False",
                      "--num_workers=2", f"--train_dir={tmp_path}"])
    assert cfg.atari_full_action_set is False
    with pytest.raises(ConfigError) as e:
        make_env(cfg, PROBE)
    msg = str(e.value)
    assert "atari_pong and atari_breakout have different action spaces (Discrete(6) and Discrete(4))" in msg
    assert "use --atari_full_action_set=True" in msg and "\n" not in msg


def test_different_observation_spaces_name_both_envs_and_spaces():
    cfg = cfg_of("gym_CartPole-v1,gym_Acrobot-v1")
    with pytest.raises(ConfigError, match=r"gym_CartPole-v1 and gym_Acrobot-v1 have different observation spaces "
                                          r"\(Box\(.*\(4,\), float32\) and Box\(.*\(6,\), float32\)\)") as e:
        make_env(cfg, PROBE)
    assert "full_action_set" not in str(e.value)
    # only the probe compares: a worker's env is made without making the others
    assert make_env(cfg, env_config(0, 1)).task_names == ("gym_CartPole-v1", "gym_Acrobot-v1")


def test_unknown_empty_and_nested_lists_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"--multitask_envs=nope_x,atari_pong: 'nope_x' is no env: .*matches no env "
                                          r"family; .*atari_, .*gym_"):
        cfg_of("nope_x,atari_pong")
    with pytest.raises(ConfigError, match=r"--multitask_envs lists atari_pongg: .*did you mean: atari_pong"):
        cfg_of("atari_pong,atari_pongg")
    with pytest.raises(ConfigError, match=r"--multitask_envs lists gym_NoSuchEnv-v0: .*gymnasium has no env"):
        cfg_of("gym_NoSuchEnv-v0")
    with pytest.raises(ConfigError, match=r"--env=multitask needs --multitask_envs"):
        parse_args(["--env=multitask", f"--train_dir={tmp_path}"])
    with pytest.raises(ConfigError, match=r"--env=multitask needs --multitask_envs"):
        cfg_of("")
    with pytest.raises(ConfigError, match=r"has an empty item"):
        cfg_of("atari_pong,,atari_breakout")
    with pytest.raises(ConfigError, match=r"'multitask' is itself made of other envs"):
        cfg_of("multitask,atari_pong")
    with pytest.raises(ConfigError, match=r"has 3 values for 2 listed envs"):
        cfg_of("gym_CartPole-v1,gym_CartPole-v1", multitask_reward_scales="1,2,3")
    with pytest.raises(ConfigError, match="invalid choice"):
        parse_args(["--env=multitask", "--multitask_envs=gym_CartPole-v1", "--multitask_assignment=level",
                    f"--train_dir={tmp_path}"])


def test_an_env_with_tasks_of_its_own_cannot_be_listed():
    class Suite(MultiAgentEnv):
        num_agents = 1
        observation_space = gymnasium.spaces.Box(-1, 1, (3,), np.float32)
        action_space = gymnasium.spaces.Discrete(2)
        task_names = ("a", "b")
        task_id = 0

    register_env_family("tstsuite_", lambda *a, **k: Suite())
    try:
        with pytest.raises(ConfigError, match=r"lists tstsuite_x, which has 2 tasks of its own"):
            make_env(cfg_of("tstsuite_x"), PROBE)
    finally:
        unregister_env_family("tstsuite_")


def test_a_single_env_is_one_task():
    cfg = cfg_of("gym_CartPole-v1", num_workers=1, num_envs_per_worker=1)
    env = make_env(cfg, PROBE)
    assert env.task_names == ("gym_CartPole-v1",) and env.task_id == 0
    assert cfg.hidden_size == 512 and cfg.encoder_type == "mlp"  # the gym_ family's defaults


def test_tasks_never_played_are_refused():
    with pytest.raises(ConfigError, match=r"--multitask_assignment=worker with --num_workers=2 --num_envs_per_worker=4 "
                                          r"never plays 1 of the 3 tasks \(atari_space_invaders\); use --num_workers "
                                          r">= 3 or --multitask_assignment=env"):
        cfg_of(GAMES, num_workers=2, num_envs_per_worker=4, multitask_assignment="worker")
    with pytest.raises(ConfigError, match=r"never plays 1 of the 3 tasks .*--num_workers \* --num_envs_per_worker "
                                          r">= 3"):
        cfg_of(GAMES, num_workers=1, num_envs_per_worker=2)
    assert cfg_of(GAMES, num_workers=2, num_envs_per_worker=2).multitask_assignment == "env"  # uneven: a warning
    # sfx.enjoy plays one env: no coverage to check
    assert default_cfg("multitask", evaluation=True, multitask_envs=GAMES, num_workers=1,
                       num_envs_per_worker=1).num_workers == 1


def _episode_return(env, actions):
    env.reset()
    total = 0.0
    for a in actions:
        obs, rewards, terminated, truncated, infos = env.step([a])
        total += rewards[0]
        if terminated[0] or truncated[0]:
            return total, infos[0]["episode"]
    raise AssertionError("the episode did not end")


def test_reward_scales_multiply_rewards_and_episode_rewards():
    cfg = cfg_of("gym_CartPole-v1,gym_CartPole-v1", multitask_reward_scales="1,1000", num_workers=1,
                 num_envs_per_worker=2)
    # the learner must not clip the scaling away: the gym default clip (10) times the largest scale
    assert cfg.reward_clip == 10_000.0
    assert cfg_of("gym_CartPole-v1,gym_CartPole-v1", multitask_reward_scales="1,1000", num_workers=1,
                  num_envs_per_worker=2, reward_clip=5.0).reward_clip == 5.0
    # the same seed (env_id) for both: the same CartPole episode, rewarded x1 and x1000
    plain = make_env(cfg, {"worker_index": 0, "vector_index": 0, "env_id": 7})
    scaled = make_env(cfg, {"worker_index": 0, "vector_index": 1, "env_id": 7})
    assert (plain.task_id, scaled.task_id) == (0, 1)
    assert plain.task_names == scaled.task_names == ("gym_CartPole-v1", "gym_CartPole-v1_x1000")
    actions = [0, 1] * 250
    ret, episode = _episode_return(plain, actions)
    ret_scaled, episode_scaled = _episode_return(scaled, actions)
    assert ret > 5 and ret == episode["reward"] == episode["len"]  # CartPole: 1 per step
    assert ret_scaled == pytest.approx(1000 * ret) and episode_scaled["reward"] == pytest.approx(1000 * ret)
    assert episode_scaled["len"] == episode["len"]


def test_multi_agent_envs_and_reward_shaping_pass_through():
    class Pair(MultiAgentEnv):
        num_agents = 2
        observation_space = gymnasium.spaces.Box(-1, 1, (3,), np.float32)
        action_space = gymnasium.spaces.Discrete(2)
        is_multiagent = True

        def __init__(self):
            self.weights = {}

        def reset(self, seed=None):
            return [np.zeros(3, np.float32)] * 2, [{}, {}]

        def step(self, actions):
            infos = [{"episode": {"reward": 2.0, "len": 1, "kills": 3}}, {}]
            return [np.zeros(3, np.float32)] * 2, [1.0, -1.0], [True, False], [False, False], infos

        def get_reward_shaping(self):
            return {"kill": 1.0}

        def set_reward_shaping(self, weights, agent_idx):
            self.weights[agent_idx] = weights

    register_env_family("tstpair_", lambda *a, **k: Pair())
    try:
        cfg = cfg_of("tstpair_a,tstpair_b", multitask_reward_scales="1,10", num_workers=1)
        probe = make_env(cfg, PROBE)
        assert probe.num_agents == 2 and probe.is_multiagent and probe.get_reward_shaping() == {"kill": 1.0}
        env = make_env(cfg, env_config(0, 1))
        assert env.task_names == ("tstpair_a", "tstpair_b_x10") and env.task_id == 1
        env.set_reward_shaping({"kill": 2.0}, 1)
        assert env.env.weights == {1: {"kill": 2.0}}
        _, rewards, _, _, infos = env.step([0, 1])
        assert rewards == [10.0, -10.0]
        assert infos[0]["episode"] == {"reward": 20.0, "len": 1, "kills": 3}
    finally:
        unregister_env_family("tstpair_")


def test_help_shows_the_multitask_flags_and_the_listed_families_flags(capsys):
    from sfx.train import main

    with pytest.raises(SystemExit) as e:
        main(["--env=multitask", "--multitask_envs=atari_pong,gym_CartPole-v1", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--multitask_envs", "--multitask_assignment", "--multitask_reward_scales", "--atari_full_action_set",
                 "--atari_sticky_actions", "--gym_max_episode_steps"):
        assert flag in out
    assert "--dmlab_res_w" not in out and "--doom_" not in out
    # without the list: the multitask flags only (and how to see more)
    with pytest.raises(SystemExit):
        main(["--env=multitask", "--help"])
    out = capsys.readouterr().out
    assert "--multitask_envs" in out and "--atari_full_action_set" not in out and "with --help" in out


def test_resume_keeps_the_listed_families_flags(tmp_path):
    argv = ["--env=multitask", f"--multitask_envs={GAMES}", "--atari_noop_max=7", "--num_workers=3",
            f"--train_dir={tmp_path}", "--experiment=mt"]
    cfg = parse_args(argv)
    (tmp_path / "mt").mkdir()
    (tmp_path / "mt" / "cfg.json").write_text(json.dumps(cfg_to_dict(cfg)))
    resumed = parse_args(["--env=multitask", f"--train_dir={tmp_path}", "--experiment=mt"])
    assert (resumed.multitask_envs, resumed.atari_noop_max, resumed.atari_full_action_set) == (GAMES, 7, True)
    changed = parse_args(["--env=multitask", f"--train_dir={tmp_path}", "--experiment=mt", "--atari_noop_max=3"])
    assert changed.atari_noop_max == 3
    evaluation = parse_args(["--env=multitask", f"--train_dir={tmp_path}", "--experiment=mt"], evaluation=True)
    assert evaluation.atari_noop_max == 7 and evaluation.multitask_envs == GAMES
