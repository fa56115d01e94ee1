"""The minigrid_ family with the real minigrid package: names, the flat observation, success, truncation, a short run."""

import json

import gymnasium
import numpy as np
import pytest

from sfx.cfg import ConfigError
from sfx.registries import default_cfg
from sfx.envs import find_family, make_env
from sfx.envs.minigrid import CELL_SIZE, DEFAULT_OVERRIDES, NUM_COLORS, NUM_OBJECTS, minigrid_id

# MemoryS7's actions (minigrid.core.actions.Actions)
LEFT, RIGHT, FORWARD = 0, 1, 2


def test_short_full_and_unversioned_names():
    assert minigrid_id("minigrid_MemoryS7") == "MiniGrid-MemoryS7-v0"
    assert minigrid_id("minigrid_MiniGrid-MemoryS7-v0") == "MiniGrid-MemoryS7-v0"
    assert minigrid_id("minigrid_memorys7") == "MiniGrid-MemoryS7-v0"  # case does not matter in short names
    assert minigrid_id("minigrid_MiniGrid-DoorKey-5x5") == "MiniGrid-DoorKey-5x5-v0"
    assert minigrid_id("minigrid_ObstructedMaze-1Q") == "MiniGrid-ObstructedMaze-1Q-v1"  # the newest version
    assert minigrid_id("minigrid_BabyAI-GoToLocal-v0") == "BabyAI-GoToLocal-v0"


def test_unknown_env_is_a_config_error_with_close_matches():
    with pytest.raises(ConfigError, match=r"--env=minigrid_MemoryS8: the minigrid package has no env 'MemoryS8'; "
                                          r"did you mean: minigrid_MemoryS9, minigrid_MemoryS7"):
        default_cfg("minigrid_MemoryS8")
    with pytest.raises(ConfigError, match=r"has no env 'qqq'; known: minigrid_"):
        default_cfg("minigrid_qqq")


def test_family_defaults_reach_the_cfg():
    cfg = default_cfg("minigrid_MemoryS7")
    assert find_family("minigrid_MemoryS7").prefix == "minigrid_"
    for key, value in DEFAULT_OVERRIDES.items():
        assert getattr(cfg, key) == value, key
    assert cfg.minigrid_obs == "onehot"
    assert default_cfg("minigrid_MemoryS7", hidden_size=32).hidden_size == 32  # the user still wins


def test_bad_view_size_is_a_config_error():
    for size in (1, 2, 4):
        with pytest.raises(ConfigError, match=f"--minigrid_agent_view_size={size} is not valid; allowed: an odd"):
            default_cfg("minigrid_MemoryS7", minigrid_agent_view_size=size)


def decode_onehot(obs, view=7):
    """The flat one-hot vector -> MiniGrid's (view, view, 3) codes and the direction."""
    cells = obs[:-4].reshape(view, view, CELL_SIZE)
    assert np.all(cells[..., :NUM_OBJECTS].sum(-1) == 1)
    assert np.all(cells[..., NUM_OBJECTS:NUM_OBJECTS + NUM_COLORS].sum(-1) == 1)
    assert np.all(cells[..., NUM_OBJECTS + NUM_COLORS:].sum(-1) == 1)
    image = np.stack([cells[..., :NUM_OBJECTS].argmax(-1), cells[..., NUM_OBJECTS:NUM_OBJECTS + NUM_COLORS].argmax(-1),
                      cells[..., NUM_OBJECTS + NUM_COLORS:].argmax(-1)], axis=-1)
    assert obs[-4:].sum() == 1
    return image, int(obs[-4:].argmax())


@pytest.mark.parametrize("obs_kind, view", [("onehot", 7), ("codes", 7), ("onehot", 3)])
def test_observation_is_minigrids_view_flattened(obs_kind, view):
    env = make_env(default_cfg("minigrid_MemoryS7", seed=3, minigrid_obs=obs_kind,
                               minigrid_agent_view_size=None if view == 7 else view))
    space = env.observation_space
    assert isinstance(space, gymnasium.spaces.Box) and space.dtype == np.uint8
    assert space.shape == ((view * view * 20 + 4,) if obs_kind == "onehot" else (view * view * 3 + 1,))
    assert env.action_space == gymnasium.spaces.Discrete(7)
    obs, _ = env.reset()
    for t in range(30):
        assert space.contains(obs[0])
        minigrid = env.env.unwrapped.gen_obs()  # what MiniGrid itself shows the agent now
        if obs_kind == "onehot":
            image, direction = decode_onehot(obs[0], view)
        else:
            image, direction = obs[0][:-1].reshape(view, view, 3), int(obs[0][-1])
        np.testing.assert_array_equal(image, minigrid["image"])
        assert direction == minigrid["direction"]
        obs, *_ = env.step([(LEFT, FORWARD, RIGHT)[t % 3]])
    env.close()


def walk_to_the_split(env):
    """MemoryS7: the agent starts facing east on the middle row; walk to the vertical hallway (x=5)."""
    grid = env.env.unwrapped
    steps = 0
    while grid.agent_pos[0] < 5:
        _, _, term, trunc, _ = env.step([FORWARD])
        assert not term[0] and not trunc[0]
        steps += 1
    return grid, steps


@pytest.mark.parametrize("matching", [True, False])
def test_episode_reports_success_and_minigrids_reward(matching):
    env = make_env(default_cfg("minigrid_MemoryS7", seed=5))
    env.reset()
    grid, steps = walk_to_the_split(env)
    goal_y = grid.success_pos[1] if matching else grid.failure_pos[1]
    turn = LEFT if goal_y < grid.agent_pos[1] else RIGHT  # facing east: left is north (y - 1)
    env.step([turn])
    _, rewards, term, trunc, infos = env.step([FORWARD])
    steps += 2
    assert term == [True] and trunc == [False]
    episode = infos[0]["episode"]
    if matching:
        assert rewards[0] == pytest.approx(1 - 0.9 * steps / 245) and episode["success"] == 1.0
    else:
        assert rewards[0] == 0.0 and episode["success"] == 0.0
    assert episode["len"] == steps and episode["reward"] == rewards[0]
    env.close()


def test_minigrids_step_limit_is_a_truncation():
    env = make_env(default_cfg("minigrid_MemoryS7", seed=0))
    env.reset()
    for t in range(245):  # MemoryS7's max_steps = 5 * 7 ** 2; turning in place never ends the episode
        _, rewards, term, trunc, infos = env.step([LEFT])
        assert not term[0] and rewards[0] == 0.0
    assert trunc == [True]
    assert infos[0]["episode"] == {"reward": 0.0, "len": 245, "success": 0.0}
    env.close()


def test_seeded_envs_are_reproducible_and_differ_by_env_id():
    def layouts(seed, env_id, episodes=6):
        env = make_env(default_cfg("minigrid_MemoryS7", seed=seed), {"worker_index": 0, "vector_index": 0,
                                                                     "env_id": env_id})
        obs, _ = env.reset()
        firsts = []
        for _ in range(episodes):  # the auto-reset after each truncation continues the seeded stream
            firsts.append(obs[0].copy())
            for _ in range(245):
                obs, *_ = env.step([LEFT])
        env.close()
        return np.stack(firsts)

    a = layouts(11, 0)
    np.testing.assert_array_equal(a, layouts(11, 0))
    assert not np.array_equal(a, layouts(11, 1))
    np.testing.assert_array_equal(layouts(11, 1), layouts(12, 0))  # seed + env_id


def test_render_rgb_array():
    env = make_env(default_cfg("minigrid_MemoryS7", seed=0), render_mode="rgb_array")
    env.reset()
    frame = env.render()
    assert frame.ndim == 3 and frame.shape[2] == 3 and frame.dtype == np.uint8
    env.close()


def test_short_serial_training_reports_success(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from sfx.train import main

    args = ["--env=minigrid_MemoryS7", "--experiment=mem", f"--train_dir={tmp_path}", "--device=cpu",
            "--serial_mode=True", "--num_workers=1", "--num_envs_per_worker=4", "--worker_num_splits=2",
            "--batch_size=256", "--train_for_env_steps=4096", "--seed=1", "--experiment_summaries_interval=0.5"]
    assert main(args) == 0
    exp = tmp_path / "mem"
    saved = json.loads((exp / "cfg.json").read_text())
    assert saved["minigrid_obs"] == "onehot" and saved["encoder_type"] == "mlp"
    assert list((exp / "checkpoint_p0").glob("*.pth")), "no checkpoint written"
    acc = EventAccumulator(str(exp / ".summary" / "0"))
    acc.Reload()
    assert "episode/success" in acc.Tags()["scalars"]
