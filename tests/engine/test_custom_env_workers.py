"""A family registered only in the coordinator's process reaches the worker processes."""

import gymnasium

from sfx.cfg import default_cfg
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
    # seed 3 draws delays of 1.75 s and 3.67 s for workers 0 and 1 (numpy's default_rng(3000 + worker)): their
    # first resets are ~1.9 s apart. The upper bound allows for a loaded machine, where one process's start or
    # env creation alone can lag by seconds (3.2-4.0 s seen under a parallel full suite and a doom training)
    assert 1.2 < first[1] - first[0] < 6.0
