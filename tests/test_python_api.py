"""The Python API (issue 38): ``sfx.train(env=..., experiment=..., **flags)`` and ``sfx.evaluate(...)`` take
the command line's flags, defaults and validation; ``python -m sfx.train`` stays the module it was."""

import subprocess
import sys

import pytest

SMALL = dict(num_workers=1, num_envs_per_worker=2, worker_num_splits=1, rollout=16, recurrence=8, batch_size=32,
             hidden_size=16, device="cpu", serial_mode=True, train_for_env_steps=1000, seed=3)


def test_train_then_evaluate_from_python(tmp_path):
    import sfx

    result = sfx.train(env="gym_CartPole-v1", experiment="api", train_dir=str(tmp_path), **SMALL)
    assert (result.status, result.stop_reason) == ("done", "train_for_env_steps")
    assert result.experiment_dir == tmp_path / "api" and (result.experiment_dir / "done").exists()
    assert result.env_steps >= 1000
    assert result.reward == pytest.approx(result.stats["reward"][0]) and result.reward > 0
    assert result.checkpoint is not None and result.checkpoint.is_file()
    assert result.checkpoint.parent == tmp_path / "api" / "checkpoint_p0"
    assert result.cfg.use_rnn is True and result.cfg.ppo_epochs == 1  # the command line's defaults

    scores = sfx.evaluate(env="gym_CartPole-v1", experiment="api", train_dir=str(tmp_path), max_num_episodes=3,
                          deterministic=True)
    assert scores["episodes"] == 3 and len(scores["rewards"]) == 3 and scores["mean_reward"] > 0
    # the results file the sfx.tb tables read: this evaluation, with the checkpoint it played
    import json
    doc = json.loads((tmp_path / "api" / "eval_results_p0.json").read_text())
    assert scores["results_path"] == str(tmp_path / "api" / "eval_results_p0.json")
    assert doc["rewards"] == scores["rewards"] and doc["checkpoint"] == str(result.checkpoint.resolve())
    assert doc["env_steps"] == scores["env_steps"] >= 1000 and doc["cfg"]["deterministic"] is True


def test_train_validates_like_the_command_line(tmp_path):
    import sfx
    from sfx.errors import ConfigError

    # the same checks, worded in the caller's keyword terms
    with pytest.raises(ConfigError, match=r"^num_workers=0 must be a positive integer"):
        sfx.train(env="gym_CartPole-v1", experiment="bad", train_dir=str(tmp_path), num_workers=0)
    with pytest.raises(ConfigError, match=r"unexpected keyword argument 'num_wrokers' \(did you mean num_workers"):
        sfx.train(env="gym_CartPole-v1", experiment="bad", train_dir=str(tmp_path), num_wrokers=2)
    assert not (tmp_path / "bad").exists()


def test_from_sfx_import_train_is_callable_and_the_module_still_runs():
    from sfx import evaluate, train
    import sfx.train as module

    assert callable(train) and callable(evaluate) and callable(module) and module.main
    r = subprocess.run([sys.executable, "-m", "sfx.train", "--env=gym_CartPole-v1", "--num_workers=0"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--num_workers=0 must be a positive integer" in r.stderr


def test_import_sfx_loads_no_torch():
    r = subprocess.run([sys.executable, "-c", "import sys, sfx; print('torch' in sys.modules)"], capture_output=True,
                       text=True, timeout=60)
    assert r.stdout.strip() == "False", r.stderr
