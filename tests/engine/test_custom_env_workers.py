"""A family registered only in the coordinator's process reaches the worker processes."""

import datetime
import re

import gymnasium

from sfx.registries import default_cfg
from sfx.engine import run_training
from sfx.envs import register_env
from sfx.envs.registry import unregister_env_family


def make_registered_cartpole(full_env_name, cfg, env_config, render_mode=None):
    return gymnasium.make("CartPole-v1")


def test_registered_env_trains_in_async_mode(tmp_path):
    # registered here, inside a test: the workers (forked from the forkserver, which never
    # imported this module) can only know it through the coordinator
    register_env("tst_registered_cartpole", make_registered_cartpole, default_overrides={"hidden_size": 16})
    try:
        cfg = default_cfg(env="tst_registered_cartpole", experiment="r", train_dir=str(tmp_path), num_workers=2,
                          num_envs_per_worker=2, rollout=16, recurrence=8, batch_size=64, device="cpu",
                          train_for_env_steps=2000, use_rnn=False)
        result = run_training(cfg)
    finally:
        unregister_env_family("tst_registered_cartpole")
    assert result["status"] == "done"
    assert result["env_steps"] >= 2000


class _ResetLoggingCartPole(gymnasium.Wrapper):
    """CartPole that appends ``worker time`` to a file at its first reset."""

    def __init__(self, env, path, worker):
        super().__init__(env)
        self.path, self.worker, self.logged = path, worker, False

    def reset(self, **kwargs):
        if not self.logged:
            import time

            with open(self.path, "a") as f:
                f.write(f"{self.worker} {time.time()}\n")
            self.logged = True
        return self.env.reset(**kwargs)


def make_reset_logging_cartpole(full_env_name, cfg, env_config, render_mode=None):
    return _ResetLoggingCartPole(gymnasium.make("CartPole-v1"), cfg.train_dir + "/resets.txt",
                                 env_config["worker_index"])


def test_decorrelate_experience_spreads_the_workers_starts(tmp_path):
    """--decorrelate_experience_max_seconds: each rollout worker resets its envs after its own random
    delay (seeded), so the workers' first resets are spread over that window instead of all at once."""
    register_env("tst_reset_logging", make_reset_logging_cartpole)
    try:
        cfg = default_cfg(env="tst_reset_logging", experiment="d", train_dir=str(tmp_path), num_workers=2,
                          num_envs_per_worker=2, rollout=16, recurrence=8, batch_size=64, device="cpu", seed=3,
                          train_for_env_steps=40000, use_rnn=False, decorrelate_experience_max_seconds=4.0)
        result = run_training(cfg)
    finally:
        unregister_env_family("tst_reset_logging")
    assert result["status"] == "done"
    first = {}
    for line in (tmp_path / "resets.txt").read_text().split("\n"):
        if line:
            worker, t = line.split()
            first[int(worker)] = min(float(t), first.get(int(worker), float("inf")))
    assert sorted(first) == [0, 1]
    # each worker's own clock: the log line it writes as its delay begins (process starts are skewed by
    # a loaded machine, by a second or more, so the gap between the two workers' resets alone is not a measure)
    began = {}
    for line in (tmp_path / "d" / "sf_log.txt").read_text().splitlines():
        m = re.match(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\]\[rollout_worker_(\d)\] rollout worker \d starts",
                     line)
        if m:
            stamp = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp() + int(m.group(2)) / 1000
            began[int(m.group(3))] = stamp
    assert sorted(began) == [0, 1]
    # seed 3 draws delays of 1.75 s and 3.67 s for workers 0 and 1 (numpy's default_rng(3000 + worker)); after
    # its delay a worker makes its envs and resets them: milliseconds on a quiet machine, seconds at a load of 6
    # (2.0 s seen), so only the lower bound is exact
    waited = {w: first[w] - began[w] for w in (0, 1)}
    assert waited[0] >= 1.746 - 0.01 and waited[1] >= 3.671 - 0.01, waited
    assert waited[0] < 1.75 + 15 and waited[1] < 3.67 + 15, waited  # started: not stuck behind anything
