"""procgen_ family on EnvPool's real Procgen: names, flags and defaults, observations, level selection, time
limits, statistics, the one-env form (probe / evaluator / enjoy) and the one-line errors."""

import sys

import numpy as np
import pytest

from sfx.cfg import ConfigError
from sfx.registries import default_cfg
from sfx.envs.procgen import PROCGEN_GAMES, PROCGEN_MODES

envpool = pytest.importorskip("envpool", reason="the envpool extra is not installed (pip install -e .[envpool])")
try:
    import envpool.procgen
except ImportError as e:  # no Qt 5 runtime: scripts/install_qt5.sh installs it where it can
    pytest.skip(f"EnvPool's Procgen cannot load ({e}); run scripts/install_qt5.sh", allow_module_level=True)

from sfx.envs import make_env  # noqa: E402
from sfx.envs.vector import make_vector_env  # noqa: E402


def configs(n):
    return [{"worker_index": 0, "vector_index": e, "env_id": e} for e in range(n)]


def vector(game="starpilot", n=2, **flags):
    return make_vector_env(default_cfg(f"procgen_{game}", **{"seed": 1, **flags}), configs(n))


def test_sixteen_games_each_with_the_modes_envpool_registers():
    assert len(PROCGEN_GAMES) == 16
    tasks = set(envpool.list_all_envs())
    for game, modes in PROCGEN_MODES.items():
        for mode in ("easy", "hard", "extreme", "memory", "exploration"):
            assert (f"{game.capitalize()}{mode.capitalize()}-v0" in tasks) == (mode in modes), (game, mode)


def test_defaults_are_the_papers():
    cfg = default_cfg("procgen_starpilot")
    assert cfg.env_backend == "envpool"
    assert (cfg.procgen_distribution_mode, cfg.procgen_num_levels, cfg.procgen_start_level) == ("easy", 0, 0)
    assert (cfg.encoder_type, cfg.encoder_subtype, cfg.hidden_size, cfg.use_rnn) == ("resnet", "resnet_impala", 256,
                                                                                      False)
    assert (cfg.gamma, cfg.learning_rate, cfg.exploration_loss_coeff, cfg.rollout) == (0.999, 5e-4, 0.01, 256)
    assert (cfg.num_batches_per_iteration, cfg.ppo_epochs, cfg.max_grad_norm) == (8, 3, 0.5)


def test_observations_are_64x64_rgb_and_15_actions():
    v = vector(n=3)
    try:
        assert v.observation_space.shape == (3, 64, 64) and v.observation_space.dtype == np.uint8
        assert v.action_space.n == 15
        obs = v.reset([1, 2, 3])
        assert obs.shape == (3, 3, 64, 64) and obs.dtype == np.uint8 and obs.std() > 10
        step = v.step(np.zeros((3, 1), np.float32))
        assert step.obs.shape == (3, 3, 64, 64)
    finally:
        v.close()


def test_num_levels_and_start_level_choose_the_levels():
    """One level from start_level 5: every episode plays it; another start level is another level; the unbounded
    set plays many. Told by the first frame of each episode."""
    def first_frames(**flags):
        v = vector("maze", n=1, **flags)
        frames = [v.reset([1])[0].copy()]
        rng = np.random.default_rng(0)
        try:
            while len(frames) < 4:
                step = v.step(rng.integers(15, size=(1, 1)).astype(np.float32))
                if step.events:
                    frames.append(step.obs[0].copy())
        finally:
            v.close()
        return frames

    one = first_frames(procgen_num_levels=1, procgen_start_level=5)
    assert all(np.array_equal(f, one[0]) for f in one)
    other = first_frames(procgen_num_levels=1, procgen_start_level=6)
    assert not np.array_equal(other[0], one[0])
    many = first_frames(procgen_num_levels=0)
    assert len({f.tobytes() for f in many}) > 1


def test_time_limit_truncates_every_step_counted_and_success_is_the_completed_level():
    """Maze's 500-step limit: an episode that reaches it is truncated after exactly 500 of the vector's steps (the
    reset EnvPool would spend a step on is hidden); one that finds the cheese is terminated with success 1."""
    v = vector("maze", n=4)
    try:
        v.reset([1, 2, 3, 4])
        rng = np.random.default_rng(1)
        truncated, completed = [], []
        for _ in range(1000):
            step = v.step(rng.integers(15, size=(4, 1)).astype(np.float32))
            for e, event in step.events.items():
                if step.truncated[e]:
                    truncated.append(event.episode)
                else:
                    assert step.terminated[e]
                    completed.append(event.episode)
        assert truncated and all(ep["len"] == 500 and ep["success"] == 0.0 and ep["reward"] == 0 for ep in truncated)
        assert completed and all(ep["success"] == 1.0 and ep["reward"] == 10.0 for ep in completed)
        assert v.pool_steps == 1000 and v.pool_resets == len(truncated) + len(completed)
    finally:
        v.close()


def test_same_seed_same_frames():
    def frames():
        v = vector(n=2)
        try:
            v.reset([7, 8])
            return np.stack([v.step(np.full((2, 1), 3, np.float32)).obs.copy() for _ in range(30)])
        finally:
            v.close()

    assert np.array_equal(frames(), frames())


def test_one_env_form_for_the_probe_evaluator_and_enjoy():
    env = make_env(default_cfg("procgen_coinrun", seed=3))
    try:
        assert env.num_agents == 1 and env.observation_space.shape == (3, 64, 64)
        obs, _ = env.reset()
        assert obs[0].shape == (3, 64, 64)
        frame = env.render()
        assert frame.shape == (64, 64, 3) and np.array_equal(frame, np.moveaxis(obs[0], 0, -1))
        ended = None
        rng = np.random.default_rng(0)
        for _ in range(1100):  # coinrun's limit is 1000 steps
            obs, rew, term, trunc, infos = env.step([int(rng.integers(15))])
            if term[0] or trunc[0]:
                ended = infos[0]
                break
        assert ended is not None and {"reward", "len", "success"} <= set(ended["episode"])
        assert ended["final_obs"].shape == (3, 64, 64)
    finally:
        env.close()


@pytest.mark.parametrize("game,flags,message", [
    ("starpilt", {}, "did you mean procgen_starpilot?"),
    ("maze", {"procgen_distribution_mode": "extreme"}, "allowed: easy, hard, memory, exploration"),
    ("starpilot", {"procgen_num_levels": -1}, "--procgen_num_levels=-1 must be an integer >= 0"),
    ("starpilot", {"env_frameskip": 4}, "--env_frameskip=4 is not served by --env_backend=envpool"),
])
def test_bad_values_are_one_line_errors(game, flags, message):
    with pytest.raises(ConfigError) as e:
        default_cfg(f"procgen_{game}", **flags)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_missing_envpool_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "envpool", None)
    with pytest.raises(ConfigError) as e:
        default_cfg("procgen_starpilot")
    assert "pip install -e .[envpool]" in str(e.value) and "\n" not in str(e.value)
