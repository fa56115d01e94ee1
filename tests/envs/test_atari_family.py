"""atari_ family on real ale-py games: names, flags, the preprocessing stack, episodic life and statistics."""

import numpy as np
import pytest
import torch
from ale_py import roms

from sfx.cfg import ConfigError
from sfx.registries import default_cfg
from sfx.envs import make_env
from sfx.envs.atari import ATARI_57, EpisodicLifeEnv, NoopReset, check_game

CFG = {"atari_sticky_actions": False}  # deterministic emulator unless a test is about sticky actions


def atari(game="breakout", evaluation=False, **overrides):
    cfg = default_cfg(f"atari_{game}", evaluation=evaluation, **{"seed": 1, **CFG, **overrides})
    env = make_env(cfg)
    assert isinstance(env, EpisodicLifeEnv)
    return env


def ale(env):
    return env.env.unwrapped.ale


def find_wrapper(env, cls):
    e = env.env
    while not isinstance(e, cls):
        e = e.env
    return e


def test_defaults_of_the_family():
    cfg = default_cfg("atari_pong")
    assert cfg.env_frameskip == 4 and cfg.reward_clip == 1.0
    assert (cfg.encoder_type, cfg.encoder_subtype, cfg.obs_scale, cfg.hidden_size) == ("conv", "convnet_simple",
                                                                                      255.0, 512)
    assert cfg.atari_sticky_actions and cfg.atari_sticky_action_prob == 0.25
    assert cfg.atari_episodic_life and not cfg.atari_full_action_set
    assert (cfg.atari_noop_max, cfg.atari_max_episode_frames) == (30, 108_000)


@pytest.mark.parametrize("game,num_actions", [("breakout", 4), ("pong", 6), ("ms_pacman", 9)])
def test_random_play_gives_stacked_84x84_uint8_frames(game, num_actions):
    env = atari(game)
    assert env.observation_space.shape == (4, 84, 84) and env.observation_space.dtype == np.uint8
    assert env.action_space.n == num_actions
    obs, infos = env.reset()
    assert obs[0].shape == (4, 84, 84) and obs[0].dtype == np.uint8 and env.observation_space.contains(obs[0])
    previous = obs[0]
    changed = 0
    for _ in range(60):
        obs, rew, term, trunc, infos = env.step([env.action_space.sample()])
        assert obs[0].dtype == np.uint8 and obs[0].shape == (4, 84, 84)
        if "episode" not in infos[0]:  # a new game restarts the stack
            # newest frame last: this step's stack is the previous one shifted by one frame
            assert np.array_equal(obs[0][:3], previous[1:])
        changed += not np.array_equal(obs[0][3], previous[3])
        previous = obs[0]
    assert changed > 10  # the screen moves
    env.close()


def test_full_action_set_and_sticky_actions_flags():
    env = atari("breakout", atari_full_action_set=True, atari_sticky_actions=True)
    assert env.action_space.n == 18
    assert ale(env).getFloat("repeat_action_probability") == pytest.approx(0.25)
    assert ale(env).getInt("max_num_frames_per_episode") == 108_000
    env.close()
    env = atari("breakout")
    assert ale(env).getFloat("repeat_action_probability") == 0.0
    env.close()


def test_frameskip_comes_from_env_frameskip():
    for skip in (4, 2):
        env = atari("pong", env_frameskip=skip, atari_noop_max=0)
        env.reset()
        before = ale(env).getEpisodeFrameNumber()
        env.step([0])
        assert ale(env).getEpisodeFrameNumber() - before == skip
        env.close()


def test_noop_and_fire_reset_frames():
    env = atari("pong", atari_noop_max=30)  # pong has FIRE
    noop = find_wrapper(env, NoopReset)
    seen = set()
    for _ in range(6):
        _, infos = env.reset()
        # n no-op frames, then FIRE held for one agent step of 4 frames
        assert infos[0]["episode_frame_number"] == noop.last_num_noops + 4
        seen.add(noop.last_num_noops)
    assert len(seen) > 1 and all(1 <= n <= 30 for n in seen)
    env.close()
    env = atari("pong", atari_noop_max=0, atari_fire_reset=False)
    _, infos = env.reset()
    assert infos[0]["episode_frame_number"] == 0
    env.close()


def lives_lost_in(env, steps):
    env.reset()
    lost = 0
    for _ in range(steps):
        _, _, term, _, infos = env.step([0])  # NOOP only
        lost += bool(term[0])
    return lost


def test_fire_reset_launches_the_ball_in_breakout():
    # with NOOP only, breakout's ball is launched only by the FIRE of the reset: it then falls past
    # the idle paddle and a life is lost; without the FIRE nothing ever moves
    assert lives_lost_in(atari("breakout"), 150) >= 1
    assert lives_lost_in(atari("breakout", atari_fire_reset=False), 150) == 0


def play_full_game(env, limit=20_000):
    """Random play until the game's 'episode' info; returns (per-step records, that info)."""
    env.reset()
    records = []
    for _ in range(limit):
        _, rew, term, trunc, infos = env.step([env.action_space.sample()])
        records.append((rew[0], term[0], trunc[0], infos[0]))
        if "episode" in infos[0]:
            return records, infos[0]
        assert not trunc[0]
    raise AssertionError("the game did not end")


def test_episodic_life_ends_the_agents_episode_but_statistics_cover_the_whole_game():
    env = atari("breakout")
    env.action_space.seed(3)
    records, last = play_full_game(env)
    life_ends = [i for i, (_, term, _, info) in enumerate(records) if term and "episode" not in info]
    assert len(life_ends) == 4  # breakout: 5 lives, the fifth loss is the game over
    for i in life_ends:
        info = records[i][3]
        assert info["life_lost"] and info["final_obs"].shape == (4, 84, 84)
        assert "episode" not in info
    assert records[-1][1]  # game over: terminated
    # the statistics are those of the whole game: every step and the raw score since the reset
    assert last["episode"]["len"] == len(records)
    assert last["episode"]["reward"] == pytest.approx(sum(r for r, *_ in records))
    assert last["lives"] == 0 and last["reset_info"]["lives"] == 5

    # the game goes on after a lost life: no new game (the frame counter keeps running)
    i = life_ends[0]
    assert records[i + 1][3]["episode_frame_number"] > records[i][3]["episode_frame_number"]


def test_without_episodic_life_only_the_game_over_terminates():
    for env in (atari("breakout", atari_episodic_life=False), atari("breakout", evaluation=True)):
        env.action_space.seed(3)
        records, last = play_full_game(env)
        assert [term for _, term, *_ in records].count(True) == 1 and records[-1][1]
        assert last["episode"]["len"] == len(records)
        env.close()


def test_reward_clipping_lives_in_the_engine_and_statistics_are_raw():
    cfg = default_cfg("atari_breakout")
    raw = torch.tensor([-7.0, -1.0, 0.0, 1.0, 4.0, 7.0])  # breakout's bricks are worth 1, 4 and 7
    # the learner's clipping with the family's defaults (sfx/engine/learner.py) is sign() on integer scores
    clipped = (raw * cfg.reward_scale).clamp(-cfg.reward_clip, cfg.reward_clip)
    assert torch.equal(clipped, torch.sign(raw))
    # the env returns raw scores: 'pong' scores are +-1 per point, so a game to 21 sums to <= -21 + 20
    env = atari("pong", atari_max_episode_frames=4000)
    env.reset()
    total = 0.0
    for _ in range(1000):
        _, rew, _, _, infos = env.step([0])
        total += rew[0]
        if "episode" in infos[0]:
            assert infos[0]["episode"]["reward"] == total
            break
    assert total < 0  # the idle agent lost points; each one reported as raw -1
    env.close()


def test_frame_cap_truncates_the_game():
    env = atari("pong", atari_max_episode_frames=200)
    env.reset()
    for steps in range(1, 200):
        obs, _, term, trunc, infos = env.step([0])
        if term[0] or trunc[0]:
            break
    info = infos[0]
    assert trunc == [True] and term == [False]
    assert info["episode_frame_number"] == 200
    assert info["episode"]["len"] == steps and steps <= 50
    assert info["final_obs"].shape == (4, 84, 84)
    assert obs[0].shape == (4, 84, 84)  # already the next game's first observation
    env.close()


def test_seeded_envs_are_reproducible_with_sticky_actions():
    def trajectory(seed):
        env = atari("pong", seed=seed, atari_sticky_actions=True)
        obs, _ = env.reset()
        out = [obs[0]]
        for t in range(40):
            obs, *_ = env.step([t % 6])
            out.append(obs[0])
        env.close()
        return np.stack(out)

    a, b, c = trajectory(5), trajectory(5), trajectory(6)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


def test_all_57_benchmark_games_are_bundled_roms():
    assert len(ATARI_57) == 57 and len(set(ATARI_57)) == 57
    for game in ATARI_57:
        assert check_game(f"atari_{game}") == game
        path = roms.get_rom_path(game)  # checks the ROM file's md5 against ale-py's list
        assert path is not None and path.is_file()


@pytest.mark.parametrize("name,suggestion", [("atari_breakot", "atari_breakout"),
                                             ("atari_SpaceInvaders", "atari_space_invaders"),
                                             ("atari_montezuma", "atari_montezuma_revenge")])
def test_unknown_game_suggests_close_names(name, suggestion):
    with pytest.raises(ConfigError, match=suggestion):
        default_cfg(name)


def test_bad_atari_flags_are_config_errors():
    with pytest.raises(ConfigError, match="no Atari game 'not_a_game_at_all'"):
        default_cfg("atari_not_a_game_at_all")
    with pytest.raises(ConfigError, match="atari_sticky_action_prob"):
        default_cfg("atari_pong", atari_sticky_action_prob=1.5)
    with pytest.raises(ConfigError, match="atari_noop_max"):
        default_cfg("atari_pong", atari_noop_max=-1)
    with pytest.raises(ConfigError, match="atari_max_episode_frames"):
        default_cfg("atari_pong", atari_max_episode_frames=-5)
