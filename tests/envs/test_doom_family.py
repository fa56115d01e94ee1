"""doom_ family with the real vizdoom engine: every scenario, episode ends, actions, shaping, seeding, errors."""

import json
import os

import cv2
import gymnasium
import numpy as np
import pytest

from sfx.cfg import ConfigError
from sfx.registries import default_cfg
from sfx.registries import parse_args
from sfx.envs import make_env
from sfx.envs.doom import SCENARIOS, make_doom_env
from sfx.envs.doom.actions import DoomActions, button_groups
from sfx.envs.doom.game import FrameConverter, render_resolution
from sfx.envs.doom.reward_shaping import parse_reward_shaping


DISCRETE = "doom_basic_discrete"  # doom(DISCRETE): basic with the 6 combinations (1 = ATTACK alone), not its default 4


def doom(name="doom_basic", env_id=0, **overrides):
    """The 1-agent env the engine would make for ``name``."""
    if name == DISCRETE:
        name, overrides = "doom_basic", {"doom_action_space": "discrete", **overrides}
    cfg = default_cfg(name, **{"seed": 1, **overrides})
    return make_env(cfg, {"worker_index": 0, "vector_index": 0, "env_id": env_id})


def run_episode(env, policy, limit=3000):
    """Step until the episode ends -> (steps, rewards, infos of the last step, term, trunc)."""
    rewards = []
    for t in range(limit):
        _, rew, term, trunc, infos = env.step([policy(t)])
        rewards.append(rew[0])
        if term[0] or trunc[0]:
            return t + 1, rewards, infos[0], term[0], trunc[0]
    raise AssertionError(f"no episode end in {limit} steps")


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_scenario_makes_resets_and_steps(scenario):
    env = doom(f"doom_{scenario}")
    assert env.observation_space == gymnasium.spaces.Box(0, 255, (3, 72, 128), np.uint8)
    obs, _ = env.reset()
    assert obs[0].shape == (3, 72, 128) and obs[0].dtype == np.uint8 and obs[0].flags.c_contiguous
    assert obs[0].max() > obs[0].min()  # a rendered frame, not a blank buffer
    for _ in range(30):
        obs, rew, term, trunc, infos = env.step([env.action_space.sample()])
        assert env.observation_space.contains(obs[0]) and isinstance(rew[0], float)
    env.close()


def test_basic_timeout_is_a_truncation():
    env = doom()
    env.reset()
    # doing nothing never kills basic's monster: the 300-tic timeout ends it, 75 steps of 4 tics
    steps, rewards, info, term, trunc = run_episode(env, lambda t: 0, limit=200)
    assert (steps, term, trunc) == (75, False, True)
    assert sum(rewards) == pytest.approx(-300.0)  # living reward -1 per tic
    stats = info["episode"]
    assert stats["timeout"] == 1.0 and stats["died"] == 0.0 and stats["kills"] == 0.0
    assert stats["len"] == 75 and stats["reward"] == pytest.approx(-300.0)
    assert info["final_obs"].shape == (3, 72, 128)
    env.close()


def test_basic_kill_is_a_termination():
    env = doom(DISCRETE)
    env.reset()
    rng = np.random.default_rng(0)
    for _ in range(40):
        steps, rewards, info, term, trunc = run_episode(env, lambda t: int(rng.integers(6)), limit=200)
        if info["episode"]["kills"] > 0:
            break
    else:
        raise AssertionError("random actions never killed basic's monster in 40 episodes")
    assert term and not trunc and steps < 75
    assert info["episode"]["died"] == 0.0 and info["episode"]["timeout"] == 0.0
    assert rewards[-1] > 90  # the kill's +101, less a few tics of living reward
    env.close()


def test_death_is_a_termination():
    env = doom("doom_defend_the_center")
    env.reset()
    steps, rewards, info, term, trunc = run_episode(env, lambda t: 0)  # stand still: the monsters come
    assert term and not trunc and steps < 525
    assert info["episode"]["died"] == 1.0 and info["episode"]["health"] <= 0
    assert rewards[-1] == pytest.approx(-1.0)  # death penalty 1
    env.close()


def test_action_space_variants():
    buttons = ["MOVE_LEFT", "MOVE_RIGHT", "ATTACK", "MOVE_FORWARD", "MOVE_BACKWARD", "TURN_LEFT", "TURN_RIGHT"]
    assert button_groups(buttons) == [(0, 1), (2,), (3, 4), (5, 6)]
    discrete = DoomActions(buttons, "discrete")
    assert discrete.space == gymnasium.spaces.Discrete(3 * 2 * 3 * 3)
    assert discrete.to_buttons(0) == [0.0] * 7
    combos = {tuple(discrete.to_buttons(a)) for a in range(discrete.space.n)}
    assert len(combos) == 54  # every combination once
    assert all(not (c[0] and c[1]) and not (c[5] and c[6]) for c in combos)  # never both of a pair
    tup = DoomActions(buttons, "tuple")
    assert tup.space == gymnasium.spaces.Tuple([gymnasium.spaces.Discrete(n) for n in (3, 2, 3, 3)])
    assert tup.to_buttons((2, 1, 0, 1)) == [0, 1, 1, 0, 0, 1, 0]
    with pytest.raises(ConfigError, match="delta"):
        DoomActions(["TURN_LEFT_RIGHT_DELTA"], "discrete")
    single = DoomActions(["MOVE_LEFT", "MOVE_RIGHT", "ATTACK"], "single")  # Sample Factory's doom_basic
    assert single.space == gymnasium.spaces.Discrete(4)
    assert [single.to_buttons(a) for a in range(4)] == [[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]]
    with pytest.raises(ConfigError, match="allowed: discrete, tuple, single"):
        DoomActions(buttons, "combos")

    env = doom("doom_deadly_corridor", doom_action_space="tuple")
    assert env.action_space == tup.space
    env.reset()
    for _ in range(10):
        env.step([env.action_space.sample()])
    env.close()
    env = doom("doom_basic", doom_action_space="single")
    assert env.action_space == gymnasium.spaces.Discrete(4)
    env.reset()
    for action in range(4):
        env.step([action])
    env.close()


def test_reward_shaping_components():
    assert parse_reward_shaping("kill=1, ammo_delta=-0.5") == {"kill": 1.0, "ammo_delta": -0.5}
    assert parse_reward_shaping(None) == {} and parse_reward_shaping("off") == {}
    with pytest.raises(ConfigError, match="'kils=1'.*health_delta"):
        parse_reward_shaping("kils=1")
    with pytest.raises(ConfigError, match="weight 'x'"):
        parse_reward_shaping("kill=x")

    # the same seed and actions with and without shaping: rewards differ by weight x ammo change
    plain = doom(DISCRETE, doom_measurements=True)
    shaped = doom(DISCRETE, doom_measurements=True, doom_reward_shaping="ammo_delta=2")
    names = plain.env.measurement_names
    plain.reset(), shaped.reset()
    ammo_before = None
    shots = 0
    for t in range(12):
        action = 1 if t % 2 == 0 else 0  # discrete 1 = ATTACK alone in basic
        o0, r0, term, trunc, _ = plain.step([action])
        o1, r1, _, _, _ = shaped.step([action])
        if term[0] or trunc[0]:
            break
        ammo = o0[0]["measurements"][names.index("SELECTED_WEAPON_AMMO")]
        if ammo_before is not None:
            assert r1[0] - r0[0] == pytest.approx(2.0 * (ammo - ammo_before))
            shots += ammo < ammo_before
        ammo_before = ammo
        assert np.array_equal(o0[0]["measurements"], o1[0]["measurements"])
    assert shots >= 3
    assert shaped.env.reward_shaping.weights == {"ammo_delta": 2.0}  # what PBT would replace
    plain.close(), shaped.close()


def test_shaping_sums_in_episode_stats():
    env = doom(DISCRETE, doom_reward_shaping="ammo_delta=1,death=-3")
    env.reset()
    steps, _, info, _, _ = run_episode(env, lambda t: 1, limit=200)  # shoot every step
    stats = info["episode"]
    assert stats["shaping_death"] == 0.0
    assert stats["shaping_ammo_delta"] == -(50 - stats["ammo"])  # basic starts with 50 bullets
    env.close()


def test_measurements_in_a_dict_observation():
    env = doom(DISCRETE, doom_measurements=True)
    obs, _ = env.reset()
    names = env.env.measurement_names
    assert isinstance(env.observation_space, gymnasium.spaces.Dict)
    assert set(env.observation_space.spaces) == {"obs", "measurements"}
    m = obs[0]["measurements"]
    assert m.dtype == np.float32 and m.shape == (len(names),)
    assert obs[0]["obs"].shape == env.observation_space["obs"].shape
    assert names[0] == "AMMO2"  # the scenario's own variables first
    assert m[names.index("HEALTH")] == 100.0
    assert env.observation_space.contains(obs[0])
    for t in range(6):  # shoot: the ammo count goes down in the observation
        obs, _, _, _, _ = env.step([1 if t % 2 == 0 else 0])
    assert obs[0]["measurements"][names.index("AMMO2")] < m[names.index("AMMO2")]
    plain = doom()
    assert isinstance(plain.observation_space, gymnasium.spaces.Box)
    env.close(), plain.close()


def test_seeding_is_deterministic():
    def frames(seed, env_id=0):
        env = doom(DISCRETE, seed=seed, env_id=env_id)
        obs, _ = env.reset()
        out = [obs[0]]
        for t in range(20):
            obs, *_ = env.step([t % 6])
            out.append(obs[0])
        env.close()
        return np.stack(out)

    a = frames(7)
    assert np.array_equal(a, frames(7))
    assert np.array_equal(frames(6, env_id=1), a)  # seed + env_id
    # basic places its monster at random: another seed shows another first frame
    assert not np.array_equal(frames(8)[0], a[0])


def test_gray_wide_and_other_sizes():
    env = doom(pixel_format="gray", wide_aspect_ratio=True)
    obs, _ = env.reset()
    assert obs[0].shape == (1, 72, 128) and env.observation_space.shape == (1, 72, 128)
    env.close()
    env = doom(res_w=160, res_h=120)  # native: no resize
    assert env.reset()[0][0].shape == (3, 120, 160)
    env.close()
    assert render_resolution(128, 72, wide_aspect_ratio=False) == (160, 120)
    assert render_resolution(128, 72, wide_aspect_ratio=True) == (256, 144)
    assert render_resolution(64, 36, wide_aspect_ratio=True) == (256, 144)


@pytest.mark.parametrize("name", ["area", "linear", "nearest"])
def test_resize_interpolation_filters_the_native_render(name):
    # the native render of the same seed (160x120 HWC, what the converter is given) resized by the named filter
    env, native_env = doom(resize_interpolation=name), doom(res_w=160, res_h=120)
    obs = env.reset()[0][0]
    native = np.ascontiguousarray(native_env.reset()[0][0].transpose(1, 2, 0))
    env.close()
    native_env.close()
    filt = {"area": cv2.INTER_AREA, "linear": cv2.INTER_LINEAR, "nearest": cv2.INTER_NEAREST}[name]
    assert np.array_equal(obs, cv2.resize(native, (128, 72), interpolation=filt).transpose(2, 0, 1))
    # nearest copies rendered pixels: every value is one of the native frame's at the same channel
    if name == "nearest":
        assert set(np.unique(obs[0])) <= set(np.unique(native[..., 0]))


def test_resize_interpolation_bad_name():
    with pytest.raises(ConfigError, match="--resize_interpolation=cubic is not known; allowed: area, linear, nearest"):
        FrameConverter((160, 120), (128, 72), "rgb", "cubic")
    with pytest.raises(ConfigError, match="--resize_interpolation: invalid choice: 'cubic'"):
        parse_args(["--env=doom_basic", "--resize_interpolation=cubic"], resume=False)


def test_doom_render_sets_the_engines_render_options_over_the_cfg():
    """--doom_render: Sample Factory's basic.cfg rendering (HUD on, decals and particles off) against the bundled
    basic.cfg's (no HUD): the status bar takes the bottom rows of the frame, the view above it is squeezed, and
    the run's seed still gives the same frame twice."""
    def first_frame(**overrides):
        env = doom(res_w=160, res_h=120, **overrides)  # native size: the engine's own pixels
        obs = env.reset()[0][0]
        env.close()
        return obs

    plain, sf = first_frame(), first_frame(doom_render="hud=on,decals=off,particles=off")
    assert np.array_equal(sf, first_frame(doom_render="hud=1, decals=0, particles=false"))
    bottom = slice(120 - 16, 120)  # the status bar: 32 of the original 200 rows
    assert np.abs(plain[:, bottom].astype(int) - sf[:, bottom].astype(int)).mean() > 10
    # the monster is in view either way: the frames differ beyond the bar too (the view is shorter)
    assert not np.array_equal(plain[:, :60], sf[:, :60])
    assert np.array_equal(plain, first_frame(doom_render=""))  # empty: the .cfg's own options


@pytest.mark.parametrize("spec, message", [
    ("hud", r"'hud' is not name=on\|off"),
    ("hudd=1", r"'hudd=1' is not name=on\|off with a name from hud, minimal_hud, crosshair"),
    ("hud=maybe", r"'hud=maybe'"),
    ("hud=1,hud=0", r"hud is set twice"),
])
def test_doom_render_bad_values(spec, message):
    with pytest.raises(ConfigError, match=message):
        default_cfg("doom_basic", doom_render=spec)


def test_render_rgb_array():
    cfg = default_cfg("doom_basic", seed=1, pixel_format="gray")
    env = make_doom_env("doom_basic", cfg, render_mode="rgb_array")
    env.reset()
    frame = env.render()
    assert frame.shape == (72, 128, 3) and frame.dtype == np.uint8
    env.close()
    env.close()  # twice is fine


def test_no_files_left_in_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = doom()
    workdir = env.env.workdir
    assert os.path.isdir(workdir) and os.getcwd() == str(tmp_path)
    env.reset()
    env.step([0])
    env.close()
    assert os.listdir(tmp_path) == [] and not os.path.exists(workdir)


def test_family_defaults():
    cfg = default_cfg("doom_basic")
    assert (cfg.env_frameskip, cfg.encoder_type, cfg.encoder_subtype) == (4, "conv", "convnet_simple")
    assert (cfg.res_w, cfg.res_h, cfg.wide_aspect_ratio, cfg.pixel_format) == (128, 72, False, "rgb")
    assert cfg.resize_interpolation == "linear"
    assert cfg.doom_reward_shaping is None
    # each scenario's action space: basic Sample Factory's idle / left / right / attack, others every combination
    assert cfg.doom_action_space == "single" and default_cfg("doom_defend_the_center").doom_action_space == "discrete"
    assert doom().action_space == gymnasium.spaces.Discrete(4)
    # Sample Factory's VizDoom settings and its APPO (GAE, its value weight, advantages per minibatch), and each
    # scenario's reward scale
    assert (cfg.ppo_clip_value, cfg.exploration_loss, cfg.exploration_loss_coeff) == (0.2, "symmetric_kl", 0.001)
    assert (cfg.with_vtrace, cfg.gae_lambda, cfg.value_loss_coeff, cfg.advantage_normalization) == \
        (False, 0.95, 1.0, "minibatch")
    assert not hasattr(default_cfg("doom_basic", algo="R2D2"), "with_vtrace")  # another algorithm: APPO's left out
    # the encoder starts at PyTorch's default scale, as Sample Factory's does; the heads stay orthogonal
    assert (cfg.encoder_initialization, cfg.policy_initialization) == ("kaiming_uniform", "orthogonal")
    assert default_cfg("doom_basic", encoder_initialization="policy").encoder_initialization == "policy"
    assert cfg.reward_scale == 0.01
    assert default_cfg("doom_defend_the_center").reward_scale == 1.0
    assert default_cfg("doom_basic", reward_scale=0.5).reward_scale == 0.5, "the command line wins"


def test_per_env_defaults_show_in_help_and_reach_cfg_json(tmp_path, capsys):
    from sfx.registries import parse_args
    from sfx.experiment.cfg_io import save_cfg

    with pytest.raises(SystemExit):
        parse_args(["--env=doom_basic", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "rewards are multiplied by this before clipping (default: 0.01, from env family doom_)" in help_text
    cfg = parse_args(["--env=doom_basic", f"--train_dir={tmp_path}", "--experiment=x"])
    save_cfg(cfg)
    assert json.loads((tmp_path / "x" / "cfg.json").read_text())["reward_scale"] == 0.01


@pytest.mark.parametrize("name, message", [
    ("doom_basci", r"unknown doom scenario; did you mean: doom_basic"),
    ("doom_defend_the_centre", r"did you mean: doom_defend_the_center"),
    ("doom_duels", r"unknown doom scenario; did you mean: doom_duel"),  # multiplayer names are suggested too
])
def test_unknown_scenarios(name, message):
    with pytest.raises(ConfigError, match=message):
        default_cfg(name)


@pytest.mark.parametrize("overrides, message", [
    ({"doom_reward_shaping": "kils=1"}, r"--doom_reward_shaping item 'kils=1'"),
    ({"res_w": 4}, r"--res_w=4 must be in"),
    ({"res_w": 1900, "res_h": 1000}, r"no native 4:3 VizDoom resolution"),
])
def test_bad_family_flags(overrides, message):
    with pytest.raises(ConfigError, match=message):
        default_cfg("doom_basic", **overrides)


def test_custom_scenario_registration(tmp_path):
    from sfx.envs.doom import DoomScenario, register_doom_scenario
    from sfx.envs.registry import unregister_env_family
    from sfx_examples.train_custom_doom_scenario import ENV_NAME, SCENARIO

    # the example's scenario: its own cfg on a bundled map, with every doom flag
    assert ENV_NAME == "doom_medkit_run"
    cfg = default_cfg(ENV_NAME, seed=1)
    assert cfg.doom_measurements and cfg.doom_reward_shaping == "health_delta=0.01,death=-1" and cfg.res_w == 64
    env = make_env(cfg)
    assert list(env.env.button_names) == ["TURN_LEFT", "TURN_RIGHT", "MOVE_FORWARD"]
    obs, _ = env.reset()
    assert obs[0]["obs"].shape == (3, 48, 64)
    assert env.env.measurement_names[0] == "HEALTH"
    hurt = False
    for _ in range(40):  # standing on the acid floor hurts: health goes down, shaping gives < 0
        obs, rewards, term, trunc, _ = env.step([0])
        hurt |= rewards[0] < 0
    assert hurt and obs[0]["measurements"][0] < 100
    env.close()

    with pytest.raises(ValueError, match="taken by a built-in"):
        register_doom_scenario(DoomScenario("basic", "basic.cfg"))
    with pytest.raises(ValueError, match="wad file .*nowhere.wad does not exist"):
        register_doom_scenario(DoomScenario("tst_x", SCENARIO.cfg_file, wad_file="nowhere.wad"))
    with pytest.raises(ValueError, match="action_space='singel'; allowed: .*single"):
        register_doom_scenario(DoomScenario("tst_x", SCENARIO.cfg_file, action_space="singel"))
    mine = tmp_path / "mine.cfg"
    mine.write_text("episode_timeout = 20\navailable_buttons = { ATTACK }\n")
    name = register_doom_scenario(DoomScenario("tst_mine", str(mine), wad_file="basic.wad"))
    try:
        env = make_env(default_cfg(name, seed=1))
        env.reset()
        steps, *_ = run_episode(env, lambda t: 0, limit=100)
        assert steps == 5  # 20 tics at frameskip 4
        env.close()
    finally:
        unregister_env_family(name)
