"""Faults inside a run that must not end it: an env that raises (recreated, episode dropped,
counted) and NaN rewards (the minibatch is skipped and counted); and the one that must end it
cleanly: NaNs in every batch (stop with the last good weights saved and the batch in the log)."""

import math

import gymnasium
import numpy as np
import pytest
import torch

from sfx.registries import default_cfg
from sfx.engine import run_training
from sfx.envs import register_env
from sfx.envs.registry import unregister_env_family
from sfx.experiment import load_latest_checkpoint

pytestmark = pytest.mark.slow


class FaultyEnv(gymnasium.Env):
    """CartPole-like dynamics do not matter here: 4 floats in, 2 actions, 20-step episodes.
    ``crash_every``: every Nth step of the process raises. ``nan_every``: every Nth step rewards NaN."""

    steps_in_process = 0

    def __init__(self, crash_every=0, nan_every=0):
        self.observation_space = gymnasium.spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.action_space = gymnasium.spaces.Discrete(2)
        self.crash_every, self.nan_every = crash_every, nan_every

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.uniform(-1, 1, 4).astype(np.float32), {}

    def step(self, action):
        FaultyEnv.steps_in_process += 1
        n = FaultyEnv.steps_in_process
        if self.crash_every and n % self.crash_every == 0:
            raise RuntimeError(f"injected env crash at step {n}")
        self.t += 1
        reward = float("nan") if self.nan_every and n % self.nan_every == 0 else float(action == 1)
        return self.np_random.uniform(-1, 1, 4).astype(np.float32), reward, False, self.t >= 20, {}


def make_crashing(*a, **k):
    return FaultyEnv(crash_every=97)


def make_sometimes_nan(*a, **k):
    return FaultyEnv(nan_every=301)


def make_always_nan(*a, **k):
    return FaultyEnv(nan_every=1)


@pytest.fixture
def faulty_envs():
    names = {"tst_crashing": make_crashing, "tst_sometimes_nan": make_sometimes_nan,
             "tst_always_nan": make_always_nan}
    for name, fn in names.items():
        register_env(name, fn)
    yield
    for name in names:
        unregister_env_family(name)


def cfg_for(tmp_path, env, **overrides):
    base = dict(env=env, experiment="f", train_dir=str(tmp_path), num_workers=1, num_envs_per_worker=4,
                rollout=16, recurrence=8, batch_size=64, hidden_size=32, use_rnn=True, device="cpu", seed=1,
                serial_mode=True, train_for_env_steps=4000, experiment_summaries_interval=0.2, save_every_sec=1000)
    base.update(overrides)
    return default_cfg(**base)


def scalars(tmp_path, tag):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "f" / ".summary" / "0"))
    acc.Reload()
    return [e.value for e in acc.Scalars(tag)] if tag in acc.Tags()["scalars"] else []


@pytest.mark.fault("env raises in step() every 97 steps")
def test_a_crashing_env_is_recreated_and_counted(faulty_envs, tmp_path):
    result = run_training(cfg_for(tmp_path, "tst_crashing"))
    assert result["status"] == "done" and result["env_steps"] >= 4000
    log_text = (tmp_path / "f" / "sf_log.txt").read_text()
    crashes = log_text.count("crashed (")
    assert crashes >= 30 and "injected env crash" in log_text and "its episode is dropped" in log_text
    assert scalars(tmp_path, "env_errors")[-1] == crashes
    # episodes that ended normally are still reported; the dropped ones are not
    assert math.isfinite(result["reward"][0])


@pytest.mark.fault("NaN reward every 301 steps (NaN in targets and loss)")
def test_nan_rewards_skip_their_minibatch_and_training_goes_on(faulty_envs, tmp_path):
    result = run_training(cfg_for(tmp_path, "tst_sometimes_nan", train_for_env_steps=6000))
    assert result["status"] == "done"
    skipped = result["train_stats"][0]["nan_batches"]
    assert skipped >= 3
    assert scalars(tmp_path, "nan_batches")[-1] == skipped
    log_text = (tmp_path / "f" / "sf_log.txt").read_text()
    assert "value targets / advantages not finite in a minibatch" in log_text and "rewards[min" in log_text
    ckpt = load_latest_checkpoint(cfg_for(tmp_path, "tst_sometimes_nan"), 0)
    assert all(torch.isfinite(t).all() for t in ckpt["model"].values() if t.is_floating_point())


@pytest.mark.fault("NaN in every batch (stop with last good weights)")
def test_nan_in_every_batch_stops_with_good_weights_and_the_batch_in_the_log(faulty_envs, tmp_path):
    result = run_training(cfg_for(tmp_path, "tst_always_nan", max_nan_batches=5, serial_mode=False))
    assert result["status"] == "failed"
    log_text = (tmp_path / "f" / "sf_log.txt").read_text()
    assert "5 minibatches in a row had non-finite value targets / advantages (--max_nan_batches=5)" in log_text
    assert "Last batch: " in log_text and "100.0% non-finite" in log_text
    ckpt = load_latest_checkpoint(cfg_for(tmp_path, "tst_always_nan"), 0)
    assert ckpt is not None
    assert all(torch.isfinite(t).all() for t in ckpt["model"].values() if t.is_floating_point())
