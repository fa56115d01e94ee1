"""--inference=learner: SEED RL's central inference as a placement. Each policy's acting runs in a thread of its
learner's process on a copy of the model the learner keeps current (sfx.engine.learner_inference); no policy
worker processes, no weights through shared memory unless the evaluator reads them."""

from __future__ import annotations

import json

import pytest
import torch

from sfx.cfg import ConfigError
from sfx.registries import default_cfg
from sfx.engine import run_training
from sfx.engine.buffers import WeightsBuffer
from sfx.engine.learner_inference import LocalWeights
from sfx.engine.wiring import training_components
from sfx.models import create_actor_critic
from tests.engine.test_training import _in_process_components, small_cfg
from tests.engine.test_learning import reached_stop_reward


def _model(cfg, seed):
    from sfx.engine.wiring import probe_env

    torch.manual_seed(seed)
    info = probe_env(cfg)
    return create_actor_critic(cfg, info.observation_space, info.action_space)


def test_a_publish_copies_the_trained_weights_into_the_inference_copy(tmp_path):
    cfg = small_cfg(tmp_path)
    trained, acting = _model(cfg, 1), _model(cfg, 2).for_inference()
    shared = WeightsBuffer.for_model(trained)
    weights = LocalWeights(acting, torch.device("cpu"), shared=shared)
    assert weights.read_into(acting, -1) == -1
    weights.publish(trained, 7)
    for a, b in zip(WeightsBuffer.state_tensors(trained), WeightsBuffer.state_tensors(acting)):
        assert torch.equal(a, b)
    assert weights.read_into(acting, 3) == 7 and shared.version == 7  # the evaluator's copy too
    with torch.no_grad():
        next(trained.parameters()).add_(1.0)  # a training step: the copy changes only at the next publish
    assert not torch.equal(next(trained.parameters()), next(acting.parameters()))


def test_no_policy_worker_processes_and_the_learner_acts(tmp_path):
    cfg, w = _in_process_components(tmp_path, serial_mode=False, inference="learner")
    roles = [s.role for s in training_components(w)]
    assert "policy_worker" not in roles and roles.count("learner") == cfg.num_policies


def test_an_unknown_placement_is_refused_by_name(tmp_path):
    with pytest.raises((ConfigError, SystemExit)):
        from sfx.registries import parse_args

        parse_args(["--env=gym_CartPole-v1", "--inference=gpu", f"--train_dir={tmp_path}"], resume=False)


@pytest.mark.parametrize("num_policies", [1, 2])
def test_a_run_in_worker_processes_acts_on_the_learners(tmp_path, num_policies):
    cfg = small_cfg(tmp_path, inference="learner", num_policies=num_policies, train_for_env_steps=8000,
                    report_every_sec=0.5)
    result = run_training(cfg)
    assert result["status"] == "done" and result["env_steps"] >= 8000
    assert all(step > 0 for step in result["train_step"])
    status = json.loads((tmp_path / "t" / "status.json").read_text())
    assert not any(name.startswith("policy_worker") for name in status["components"])
    perf = result["perf"]
    assert perf["inference"]["forward"] > 0 and perf["inference"]["wait/requests"] > 0
    lag = [s["policy_lag_avg"] for s in result["train_stats"]]
    assert all(0 <= x < 50 for x in lag)  # the version each action came from is recorded


def test_serial_runs_with_inference_on_the_learner_repeat_exactly(tmp_path):
    finals = []
    for name in ("a", "b"):
        cfg = small_cfg(tmp_path, experiment=name, serial_mode=True, inference="learner", train_for_env_steps=4000)
        assert run_training(cfg)["status"] == "done"
        ckpt = sorted((tmp_path / name / "checkpoint_p0").glob("checkpoint_*.pth"))[-1]
        finals.append(torch.load(ckpt, map_location="cpu", weights_only=False)["model"])
    assert finals[0].keys() == finals[1].keys()
    assert all(torch.equal(finals[0][k], finals[1][k]) for k in finals[0])


@pytest.mark.slow  # ~40 s on an idle 2-core machine
def test_cartpole_learns_with_inference_on_the_learner(tmp_path):
    cfg = default_cfg(env="gym_CartPole-v1", experiment="learn", train_dir=str(tmp_path), device="cpu", seed=1,
                      num_workers=2, num_envs_per_worker=8, inference="learner", train_for_env_steps=300_000,
                      stop_at_reward=200.0)
    result = run_training(cfg)
    # judged by the stop rule: the final average also counts episodes that ended while the run stopped
    assert reached_stop_reward(result), result["reward"]
