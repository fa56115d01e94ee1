"""dmlab_ family against the deepmind_lab stand-in (tests/envs/dmlab_standin): env protocol, action sets,
frame skip, episode ends, instructions, level cache, human-normalised scores, level assignment, errors."""

import sys
from pathlib import Path

import gymnasium
import numpy as np
import pytest

from sfx.cfg import ConfigError
from sfx.registries import default_cfg, parse_args
from sfx.envs import make_env

STANDIN = str(Path(__file__).resolve().parent / "dmlab_standin")


@pytest.fixture
def lab(monkeypatch):
    """The stand-in deepmind_lab module, importable for the test's duration."""
    monkeypatch.syspath_prepend(STANDIN)
    monkeypatch.delitem(sys.modules, "deepmind_lab", raising=False)
    import deepmind_lab

    assert deepmind_lab.__file__.startswith(STANDIN)
    yield deepmind_lab
    sys.modules.pop("deepmind_lab", None)


def cfg_of(env, **overrides):
    overrides.setdefault("seed", 1)
    return default_cfg(env, **overrides)


def test_make_reset_step_random_actions(lab):
    cfg = cfg_of("dmlab_rooms_collect_good_objects_train")
    env = make_env(cfg)
    assert env.observation_space.shape == (3, 72, 96) and env.observation_space.dtype == np.uint8
    assert env.action_space.n == 9
    obs, _ = env.reset()
    assert obs[0].shape == (3, 72, 96) and obs[0].dtype == np.uint8 and env.observation_space.contains(obs[0])
    for _ in range(50):
        obs, rew, term, trunc, _ = env.step([env.action_space.sample()])
        assert env.observation_space.contains(obs[0]) and isinstance(rew[0], float)
    env.close()


def test_defaults_and_resolution_flags(lab):
    cfg = cfg_of("dmlab_rooms_watermaze")
    assert (cfg.env_frameskip, cfg.encoder_subtype, cfg.dmlab_res_w, cfg.dmlab_res_h) == (4, "resnet_impala", 96, 72)
    env = make_env(cfg_of("dmlab_rooms_watermaze", dmlab_res_w=64, dmlab_res_h=48))
    obs, _ = env.reset()
    assert obs[0].shape == (3, 48, 64) and env.observation_space.shape == (3, 48, 64)


def test_action_sets_map_to_native_7_int_vectors(lab):
    from sfx.envs.dmlab import EXTENDED_ACTIONS, IMPALA_ACTIONS, action_table

    impala, extended = action_table(False), action_table(True)
    assert impala.shape == (9, 7) and extended.shape == (15, 7)
    assert impala.dtype == np.intc and extended.dtype == np.intc
    # IMPALA: forward, backward, strafe l/r, look l/r 20, forward + look l/r 20, fire
    assert impala.tolist() == [[0, 0, 0, 1, 0, 0, 0], [0, 0, 0, -1, 0, 0, 0], [0, 0, -1, 0, 0, 0, 0],
                               [0, 0, 1, 0, 0, 0, 0], [-20, 0, 0, 0, 0, 0, 0], [20, 0, 0, 0, 0, 0, 0],
                               [-20, 0, 0, 1, 0, 0, 0], [20, 0, 0, 1, 0, 0, 0], [0, 0, 0, 0, 1, 0, 0]]
    assert EXTENDED_ACTIONS["large_look_left"] == (-60, 0, 0, 0, 0, 0, 0)
    assert EXTENDED_ACTIONS["look_up"] == (0, -10, 0, 0, 0, 0, 0)
    assert EXTENDED_ACTIONS["forward_small_look_right"] == (10, 0, 0, 1, 0, 0, 0)
    assert len(set(map(tuple, extended.tolist()))) == 15 and len(IMPALA_ACTIONS) == 9
    # every row is accepted by the engine's action spec (the stand-in checks bounds strictly)
    probe = lab.Lab("seekavoid_arena_01", [])
    spec = probe.action_spec()
    for row in np.concatenate([impala, extended]):
        assert all(s["min"] <= v <= s["max"] for v, s in zip(row.tolist(), spec))

    env = make_env(cfg_of("dmlab_seekavoid_arena_01", dmlab_extended_action_set=True))
    assert env.action_space.n == 15
    env.reset()
    sent = []
    real_step = env.env.lab.step

    def recording_step(action, num_steps=1):
        sent.append((action.copy(), num_steps))
        return real_step(action, num_steps)

    env.env.lab.step = recording_step
    for a in range(15):
        env.step([a])
    assert [s[0].tolist() for s in sent] == extended.tolist()
    assert all(s[0].dtype == np.intc and s[0].shape == (7,) and s[1] == 4 for s in sent)


def test_frameskip_counts_frames_in_the_engine(lab):
    env = make_env(cfg_of("dmlab_seekavoid_arena_01", env_frameskip=3))
    env.reset()
    for _ in range(5):
        env.step([0])
    assert env.env.lab.num_steps() == 15


def test_episode_ends_terminated_with_stats_and_auto_resets(lab):
    env = make_env(cfg_of("dmlab_explore_goal_locations_small"))
    env.reset()
    frames = lab._level_frames("contributed/dmlab30/explore_goal_locations_small")
    rewards = []
    for t in range(10_000):
        obs, rew, term, trunc, infos = env.step([t % 9])
        rewards.append(rew[0])
        if term[0] or trunc[0]:
            break
    assert term == [True] and trunc == [False]
    assert t + 1 == -(-frames // 4)  # ceil: the last step stops at the episode's last frame
    ep = infos[0]["episode"]
    assert ep["len"] == t + 1 and ep["reward"] == pytest.approx(sum(rewards))
    assert ep["dmlab_raw_score"] == pytest.approx(sum(rewards))
    human, random = 267.5, 7.66
    assert ep["dmlab_human_normalized_score"] == pytest.approx(100 * (sum(rewards) - random) / (human - random))
    assert ep["dmlab_target_objective"] == pytest.approx(sum(rewards))  # single level: the raw score
    assert infos[0]["final_obs"].shape == (3, 72, 96)
    assert env.env.lab.is_running() and env.env.lab.num_steps() == 0  # already the next episode
    env.step([0])


def test_seeded_envs_replay_episodes(lab):
    def frames(seed, env_id):
        env = make_env(cfg_of("dmlab_rooms_watermaze", seed=seed), {"worker_index": 0, "vector_index": 0,
                                                                      "env_id": env_id})
        obs, _ = env.reset()
        out = [obs[0]]
        for t in range(20):
            out.append(env.step([t % 9])[0][0])
        return np.stack(out)

    assert np.array_equal(frames(7, 0), frames(7, 0))
    assert not np.array_equal(frames(7, 0), frames(7, 1))


def test_instructions_in_obs_and_info_and_tokenizer(lab):
    from sfx.envs.dmlab import InstructionTokenizer

    env = make_env(cfg_of("dmlab_language_select_located_object"))
    assert isinstance(env.observation_space, gymnasium.spaces.Dict)
    obs, infos = env.reset()
    instr = infos[0]["instr"]
    assert instr.startswith("Pick the ")
    tokens = obs[0]["instr"]
    assert tokens.dtype == np.int32 and tokens.shape == (16,)
    assert tokens.tolist() == InstructionTokenizer(1000, 16)(instr).tolist() and tokens[0] > 0
    assert env.observation_space.contains(obs[0])
    obs, _, _, _, infos = env.step([0])
    assert infos[0]["instr"] == instr and obs[0]["instr"].tolist() == tokens.tolist()
    # single non-language levels see frames alone unless asked; dmlab_30 always has the key
    plain = make_env(cfg_of("dmlab_rooms_watermaze"))
    obs, infos = plain.reset()
    assert "instr" not in infos[0] and isinstance(obs[0], np.ndarray)
    asked = make_env(cfg_of("dmlab_rooms_watermaze", dmlab_use_instructions=True, dmlab_instruction_max_len=4))
    obs, _ = asked.reset()
    assert obs[0]["instr"].tolist() == [0, 0, 0, 0]  # no instruction: all padding
    suite = make_env(cfg_of("dmlab_30"), {"worker_index": 3, "vector_index": 0, "env_id": 3})
    assert set(suite.observation_space.spaces) == {"obs", "instr"}

    tok = InstructionTokenizer(vocab_size=1000, max_len=8)
    ids = tok("Pick the red hat, in the BLUE room!")
    assert ids.dtype == np.int32 and ids.shape == (8,)
    words = ["pick", "the", "red", "hat", "in", "the", "blue", "room"]
    assert ids.tolist() == [tok.word_id(w) for w in words]
    assert ids[1] == ids[5] and all(1 <= i < 1000 for i in ids)
    assert tok("a b")[2:].tolist() == [0] * 6  # padding
    assert tok(" ".join(["x"] * 20)).shape == (8,)  # cut at max_len
    # stable across instances (and processes: a keyed hash, not Python's salted hash)
    assert InstructionTokenizer(1000, 8)("pick the red hat").tolist() == ids[:4].tolist() + [0] * 4
    with pytest.raises(ValueError):
        InstructionTokenizer(vocab_size=1)


def test_level_cache_fetch_and_write(lab, tmp_path):
    from sfx.envs.dmlab import DirectoryLevelCache

    cache_dir = tmp_path / "cache"
    cfg = cfg_of("dmlab_explore_goal_locations_small", dmlab_level_cache_dir=str(cache_dir))
    env = make_env(cfg)
    cache = env.env.lab._level_cache
    assert isinstance(cache, DirectoryLevelCache)
    env.reset()
    assert (cache.hits, cache.misses) == (0, 1)
    stored = [p for p in cache_dir.iterdir() if not p.name.startswith(".")]
    assert len(stored) == 1 and stored[0].read_bytes().startswith(b"PK3-STANDIN")
    # a second env with the same seed compiles the same map: it comes from the cache
    env2 = make_env(cfg)
    env2.reset()
    cache2 = env2.env.lab._level_cache
    assert (cache2.hits, cache2.misses) == (1, 0)
    assert not [p for p in cache_dir.iterdir() if p.name.startswith(".")]  # no temp files left

    # the protocol itself
    direct = DirectoryLevelCache(tmp_path / "direct")
    pk3 = tmp_path / "map.pk3"
    pk3.write_bytes(b"abc")
    assert direct.fetch("k1", str(tmp_path / "out.pk3")) is False
    direct.write("k1", str(pk3))
    pk3.write_bytes(b"changed")
    direct.write("k1", str(pk3))  # an existing key is kept
    assert direct.fetch("k1", str(tmp_path / "out.pk3")) is True
    assert (tmp_path / "out.pk3").read_bytes() == b"abc"
    with pytest.raises(ValueError):
        direct.fetch("../escape", str(tmp_path / "x"))


def test_human_normalized_score_arithmetic():
    from sfx.envs.dmlab import BASELINES, DMLAB30_LEVELS, dmlab30_score, human_normalized_score, target_objective

    assert len(DMLAB30_LEVELS) == 30 and len(set(DMLAB30_LEVELS)) == 30 and len(BASELINES) == 30
    # human score -> 100, random score -> 0, halfway -> 50
    assert human_normalized_score("rooms_watermaze", 54.0) == pytest.approx(100.0)
    assert human_normalized_score("rooms_watermaze", 4.065) == pytest.approx(0.0)
    assert human_normalized_score("rooms_watermaze", (54.0 + 4.065) / 2) == pytest.approx(50.0)
    # the _train level is scored with its _test level's baselines
    assert human_normalized_score("rooms_collect_good_objects_train", 10.0) == pytest.approx(100.0)
    assert human_normalized_score("rooms_collect_good_objects_train", 20.0, cap=100.0) == 100.0
    assert human_normalized_score("seekavoid_arena_01", 5.0) is None
    assert target_objective("rooms_watermaze", 200.0, "hns_capped") == 100.0
    assert target_objective("rooms_watermaze", 200.0, "raw") == 200.0
    assert target_objective("seekavoid_arena_01", 3.0, "hns_capped") == 3.0

    humans = {lv: BASELINES.get(lv, BASELINES.get(lv.replace("_train", "_test")))[0] for lv in DMLAB30_LEVELS}
    assert dmlab30_score(humans) == pytest.approx(100.0)
    doubled = {k: 2 * v for k, v in humans.items()}
    assert dmlab30_score(doubled) == pytest.approx(100.0)  # capped per level
    assert dmlab30_score(doubled, cap=None) > 150.0
    with pytest.raises(ValueError, match="rooms_watermaze"):
        dmlab30_score({k: v for k, v in humans.items() if k != "rooms_watermaze"})


def test_dmlab30_assigns_one_level_per_worker(lab):
    from sfx.envs.dmlab import DMLAB30_LEVELS, level_for_env

    cfg = cfg_of("dmlab_30", num_workers=60)
    levels = [level_for_env("dmlab_30", cfg, {"worker_index": w, "vector_index": v, "env_id": w * 4 + v})
              for w in range(60) for v in range(4)]
    assert levels[0:4] == ["rooms_collect_good_objects_train"] * 4  # all envs of worker 0
    assert [levels[4 * w] for w in range(30)] == list(DMLAB30_LEVELS)
    assert levels[4 * 30] == DMLAB30_LEVELS[0] and levels[4 * 59] == DMLAB30_LEVELS[29]

    by_env = cfg_of("dmlab_30", dmlab30_level_assignment="env")
    assert [level_for_env("dmlab_30", by_env, {"worker_index": 0, "vector_index": i, "env_id": i})
            for i in range(30)] == list(DMLAB30_LEVELS)
    test_cfg = cfg_of("dmlab_30", dmlab_use_test_levels=True)
    test_level = level_for_env("dmlab_30", test_cfg, {"worker_index": 1, "env_id": 1})
    assert test_level == "rooms_exploit_deferred_effects_test"

    env = make_env(cfg, {"worker_index": 33, "vector_index": 1, "env_id": 133})
    assert env.env.level == DMLAB30_LEVELS[3] and env.env.objective == "hns_capped"
    env.reset()
    assert env.env.lab._level == "contributed/dmlab30/rooms_watermaze"


def test_missing_module_is_a_config_error_with_build_hint(monkeypatch):
    monkeypatch.delitem(sys.modules, "deepmind_lab", raising=False)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if "dmlab_standin" not in p])
    with pytest.raises(ConfigError) as e:
        default_cfg("dmlab_rooms_watermaze")
    msg = str(e.value)
    assert "deepmind_lab" in msg and "bazel build" in msg and "github.com/google-deepmind/lab" in msg
    assert "\n" not in msg


def test_bad_level_names_and_flags(lab, tmp_path):
    with pytest.raises(ConfigError, match="did you mean: dmlab_rooms_watermaze"):
        default_cfg("dmlab_rooms_watermaz")
    with pytest.raises(ConfigError, match="unknown DeepMind Lab level 'no_such_level'"):
        parse_args(["--env=dmlab_no_such_level", f"--train_dir={tmp_path}"])
    with pytest.raises(ConfigError, match="--dmlab_res_w=0"):
        default_cfg("dmlab_rooms_watermaze", dmlab_res_w=0)
    with pytest.raises(ConfigError, match="dmlab_dataset_path"):
        default_cfg("dmlab_rooms_watermaze", dmlab_dataset_path=str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="invalid choice"):
        parse_args(["--env=dmlab_30", "--dmlab_renderer=opengl", f"--train_dir={tmp_path}"])
    # own levels are allowed with a level directory (the engine then decides)
    cfg = default_cfg("dmlab_my_level", dmlab_level_directory=str(tmp_path))
    assert cfg.env == "dmlab_my_level"


def test_standin_raises_like_deepmind_lab_on_misuse(lab):
    with pytest.raises(TypeError, match="must be list"):
        lab.Lab("seekavoid_arena_01", None)
    with pytest.raises(TypeError, match="must be dict"):
        lab.Lab("seekavoid_arena_01", [], ["wrongconfig"])
    with pytest.raises(TypeError):
        lab.Lab("seekavoid_arena_01", [], {"width": 3})
    with pytest.raises(ValueError, match="Unknown observation"):
        lab.Lab("seekavoid_arena_01", ["NOPE"])
    with pytest.raises(RuntimeError, match="renderer"):
        lab.Lab("seekavoid_arena_01", [], renderer="opengl")
    with pytest.raises(RuntimeError, match="Failed to init"):
        lab.Lab("no_such_level", [])
    env = lab.Lab("seekavoid_arena_01", ["RGB_INTERLEAVED", "RGB", "INSTR"], {"width": "32", "height": "24"})
    noop = np.zeros(7, dtype=np.intc)
    with pytest.raises(RuntimeError, match="wrong status to advance"):
        env.step(noop)  # not reset yet
    with pytest.raises(ValueError, match="'seed' must be int or None"):
        env.reset(seed="1")
    assert env.reset(seed=3) is True and env.is_running()
    obs = env.observations()
    assert obs["RGB_INTERLEAVED"].shape == (24, 32, 3) and obs["RGB"].shape == (3, 24, 32)
    assert np.array_equal(obs["RGB"].transpose(1, 2, 0), obs["RGB_INTERLEAVED"]) and obs["INSTR"] == ""
    with pytest.raises(ValueError, match="shape"):
        env.step(np.zeros(6, dtype=np.intc))
    with pytest.raises(ValueError, match="dtype"):
        env.step(np.zeros(7, dtype=np.int64))
    with pytest.raises(TypeError):
        env.step([0] * 7)
    assert isinstance(env.step(noop, num_steps=4), float) and env.num_steps() == 4
    while env.is_running():
        env.step(noop, num_steps=100)
    with pytest.raises(RuntimeError, match="wrong status"):
        env.observations()
    assert env.events()[-1] == ("LOG", ["Episode ended"])
    assert env.close() is True and env.close() is False
    with pytest.raises(RuntimeError):
        env.action_spec()


def test_dmlab30_envs_carry_task_names_and_ids(lab):
    from sfx.envs.dmlab import DMLAB30_LEVELS

    names = tuple("dmlab_" + level for level in DMLAB30_LEVELS)
    by_worker = cfg_of("dmlab_30", num_workers=30, num_envs_per_worker=2)
    for w, v, task in [(0, 0, 0), (0, 1, 0), (3, 1, 3), (29, 0, 29), (31, 1, 1)]:
        env = make_env(by_worker, {"worker_index": w, "vector_index": v, "env_id": w * 2 + v})
        assert env.task_names == names and env.task_id == task
        assert env.env.level == DMLAB30_LEVELS[task]
        env.close()
    by_env = cfg_of("dmlab_30", num_workers=2, num_envs_per_worker=16, dmlab30_level_assignment="env")
    ids = [make_env(by_env, {"worker_index": w, "vector_index": v, "env_id": w * 16 + v}).task_id
           for w in range(2) for v in range(16)]
    assert ids == list(range(30)) + [0, 1]
    # held-out test levels: their names in the task list, at the _train levels' ids
    test_env = make_env(cfg_of("dmlab_30", dmlab_use_test_levels=True), {"worker_index": 1, "env_id": 1})
    assert test_env.task_id == 1 and test_env.task_names[1] == "dmlab_rooms_exploit_deferred_effects_test"
    assert test_env.task_names[0] == "dmlab_rooms_collect_good_objects_test" and len(test_env.task_names) == 30
    assert test_env.task_names[2:] == names[2:]
    # a single level is a single task: no task protocol
    single = make_env(cfg_of("dmlab_rooms_watermaze"))
    assert not hasattr(single, "task_names") and not hasattr(single, "task_id")


def test_help_lists_the_dmlab_flags(capsys):
    # a bare '%' in a help string made argparse's --help raise ValueError
    with pytest.raises(SystemExit) as e:
        parse_args(["--env=dmlab_30", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "--dmlab30_level_assignment" in out and "DMLAB30_LEVELS[worker_index % 30]" in out
