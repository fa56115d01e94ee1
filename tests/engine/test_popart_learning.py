"""PopArt in the learner's step (``--popart``): per-task value outputs and statistics, advantages on each
task's scale, the statistics updated after the optimizer step with the value head's reward-scale outputs
preserved, and a checkpoint of another number of tasks refused by name."""

import pytest
import torch

from sfx.algo.popart import PopArtStats, popart_update
from sfx.engine.coordinator import check_checkpoints_fit
from sfx.agents.appo import learning_step, make_optimizer
from sfx.errors import ConfigError
from tests.engine.test_learning_step import _batch
from tests.engine.test_learning_step import _setup as _learning_setup


def _setup(tmp_path, num_tasks=2, **overrides):
    """test_learning_step's model and cfg, with PopArt on, no reward clipping, a fast-moving statistic."""
    return _learning_setup(tmp_path, num_tasks=num_tasks, **{"reward_clip": 1e9, "popart": True, "popart_beta": 0.3,
                                                             **overrides})


def _two_task_batch(model, n=4, T=8, seed=1, tasks=(0, 1, 0, 1), scale=(1.0, 1000.0)):
    mb, valids = _batch(model, n, T, seed)
    mb["task"] = torch.tensor(tasks, dtype=torch.int64)
    mb["rewards"] = mb["rewards"] * torch.tensor([scale[t] for t in tasks]).unsqueeze(1)
    return mb, valids


def test_the_model_has_one_value_output_per_task_and_no_returns_normalizer(tmp_path):
    cfg, model = _setup(tmp_path, num_tasks=3)
    assert model.value_head.out_features == 3 and model.returns_normalizer is None
    assert {"popart.mu", "popart.nu", "popart.sigma_"} <= set(model.state_dict())
    obs = torch.randn(3, *model.obs_space.shape)
    head = model.value_head(model.core.forward_step(model.encoder(model.preprocess_obs(obs)),
                                                    torch.zeros(3, model.rnn_state_size or 1))[0])
    out = model.forward_step(obs, torch.zeros(3, model.rnn_state_size or 1), torch.tensor([2, 0, 1]))
    assert torch.allclose(out["values_normalized"], head[torch.arange(3), torch.tensor([2, 0, 1])])


@pytest.mark.parametrize("preserve_mean", [False, True])
def test_a_step_moves_each_task_s_statistics_and_preserves_the_outputs(tmp_path, preserve_mean):
    """The rescale after the step keeps each value's deviation from its task's mean; the values follow the move
    of the mean (the default), or with ``preserve_mean`` (the papers' POP) stay exactly what they were."""
    cfg, model = _setup(tmp_path)
    model.popart.preserve_mean = preserve_mean
    opt = make_optimizer(cfg, model)
    # the first step: each task's statistics become its targets' moments (no data before them)
    first, valids = _two_task_batch(model, seed=2)
    stats = learning_step(model, opt, first, valids, cfg)
    for k in (0, 1):
        n = int(valids[first["task"] == k].sum())  # target_std is the sample std, sigma the population's
        assert stats[f"popart/sigma_{k}"] == pytest.approx(stats[f"popart/target_std_{k}"] * ((n - 1) / n) ** 0.5,
                                                           rel=1e-6)
    # the next ones move the statistics at beta's rate per trajectory and rescale the head
    mb, valids = _two_task_batch(model)
    probe_obs = torch.randn(6, *model.obs_space.shape)
    probe_rnn = torch.zeros(6, max(model.rnn_state_size, 1))
    probe_tasks = torch.tensor([0, 1, 0, 1, 0, 1])
    seen = {}
    original = model.popart.update

    def spy(targets, tasks, valid, head, reduce=None, skip=None):
        assert skip is None  # every task had its first statistics from the first step
        seen["targets"], seen["tasks"], seen["valid"] = targets.clone(), tasks.clone(), valid.clone()
        with torch.no_grad():
            seen["before"] = model.forward_step(probe_obs, probe_rnn, probe_tasks)["values"]
            # the data weight too where the model keeps it (a buffer "weight"; without it the update infers it)
            weight = dict(model.popart.named_buffers()).get("weight")
            seen["stats"] = PopArtStats(model.popart.mu.clone(), model.popart.nu.clone(),
                                        None if weight is None else weight.clone())
        original(targets, tasks, valid, head, reduce, skip)
        with torch.no_grad():
            seen["after"] = model.forward_step(probe_obs, probe_rnn, probe_tasks)["values"]

    model.popart.update = spy
    learning_step(model, opt, mb, valids, cfg)
    # the head was rescaled: the reward-scale values are what they were under the old statistics, plus the move
    # of their task's mean unless it is preserved too
    shift = (model.popart.mu - seen["stats"].mu).float()[probe_tasks]
    assert shift.abs().min() > 1e-2  # both means moved
    expected_after = seen["before"] if preserve_mean else seen["before"] + shift
    assert torch.allclose(seen["after"], expected_after, rtol=1e-4, atol=1e-3)
    # the statistics are the update from this minibatch's targets of each task, valid samples only
    expected = popart_update(seen["stats"], seen["targets"], seen["tasks"], cfg.popart_beta, valid=seen["valid"])
    assert torch.allclose(model.popart.mu, expected.mu) and torch.allclose(model.popart.nu, expected.nu)
    # the x1000 task's scale grew far beyond the x1 task's
    sigma = model.popart.sigma()
    assert sigma[1] > 10 * sigma[0]


def test_a_task_s_first_value_loss_is_on_normalised_targets(tmp_path):
    """A task's first statistics are set from its first minibatch before that minibatch's loss (as the returns
    normalizer's are), so its first value loss is O(1), not on the x1000 reward scale; that minibatch counts
    once in its statistics (data weight 1 - (1 - beta)^trajectories)."""
    cfg, model = _setup(tmp_path, popart_beta=3e-4)
    mb, valids = _two_task_batch(model, seed=2)
    stats = learning_step(model, make_optimizer(cfg, model), mb, valids, cfg)
    assert stats["loss/value"] < 10, stats["loss/value"]  # ~1e5 with the x1000 task's raw targets
    for k in (0, 1):
        rows = mb["task"] == k
        units = float(valids[rows].double().mean(dim=1).sum())  # a trajectory's valid share of a unit
        assert model.popart.weight[k].item() == pytest.approx(1 - (1 - 3e-4) ** units, rel=1e-9)
        n = int(valids[rows].sum())
        assert stats[f"popart/sigma_{k}"] == pytest.approx(stats[f"popart/target_std_{k}"] * ((n - 1) / n) ** 0.5,
                                                           rel=1e-6)


def test_per_task_statistics_reach_the_learner_s_stats(tmp_path):
    cfg, model = _setup(tmp_path)
    mb, valids = _two_task_batch(model)
    stats = learning_step(model, make_optimizer(cfg, model), mb, valids, cfg)
    for k in (0, 1):
        assert stats[f"popart/mu_{k}"] == pytest.approx(model.popart.mu[k].item())
        assert stats[f"popart/sigma_{k}"] == pytest.approx(model.popart.sigma_[k].item())
        assert stats[f"popart/target_std_{k}"] > 0
    assert stats["popart/target_std_1"] > 100 * stats["popart/target_std_0"]  # the x1000 task


def test_the_status_line_shows_each_task_s_reward():
    """A multi-task run's status line shows every task's own reward: the average over tasks of rewards x1 and
    x1000 would follow the x1000 task only."""
    from sfx.engine.stats import STATUS_MAX_TASKS, PolicyStats, status_line

    stats = PolicyStats(100, ("gym_Acrobot-v1", "gym_Acrobot-v1_x1000"))
    for r, task in [(-500.0, 0), (-80.0, 0), (-400_000.0, 1)]:
        stats.add_episode({"reward": r, "len": 100, "task": task})
    line = status_line([stats], [100.0, 100.0, 100.0], 100.0, 1000, 10_000, 10.0, 1e9)
    assert "task rewards gym_Acrobot-v1 -290.00, gym_Acrobot-v1_x1000 -400,000.00" in line, line
    assert "reward -133" not in line  # not the mixed average
    many = PolicyStats(100, tuple(f"task{i}" for i in range(STATUS_MAX_TASKS + 3)))
    for i in range(STATUS_MAX_TASKS + 3):
        many.add_episode({"reward": float(i), "len": 10, "task": i})
    line = status_line([many], [1.0] * 3, 1.0, 10, 100, 1.0, 1e9)
    assert f"task{STATUS_MAX_TASKS - 1} " in line and f"task{STATUS_MAX_TASKS} " not in line and "(+3 more)" in line
    single = PolicyStats(100)
    single.add_episode({"reward": 12.5, "len": 10})
    assert "reward 12.50 len 10" in status_line([single], [1.0] * 3, 1.0, 10, 100, 1.0, 1e9)


def test_a_task_absent_from_the_minibatch_keeps_its_statistics(tmp_path):
    cfg, model = _setup(tmp_path, num_tasks=3)
    opt = make_optimizer(cfg, model)
    mb, valids = _two_task_batch(model, tasks=(0, 1, 0, 1))
    learning_step(model, opt, mb, valids, cfg)
    assert model.popart.mu[2] == 0 and model.popart.nu[2] == 1 and model.popart.mu[1] != 0


def test_advantages_are_on_each_task_s_scale(tmp_path, monkeypatch):
    """The policy-gradient advantages get 1 / sigma of their task before the minibatch normalization."""
    import sfx.agents.appo.learning as learner_mod

    cfg, model = _setup(tmp_path)
    with torch.no_grad():
        model.popart.mu.copy_(torch.tensor([0.0, 100.0], dtype=torch.float64))
        model.popart.nu.copy_(torch.tensor([4.0, 100.0 ** 2 + 1000.0 ** 2], dtype=torch.float64))
        model.popart.sigma_.copy_(PopArtStats(model.popart.mu, model.popart.nu).sigma(cfg.popart_clip_min))
        model.popart.weight.fill_(1.0)  # both tasks have seen data: no first statistics in this minibatch
    got = {}
    real_targets, real_normalize = learner_mod.appo_targets, learner_mod.normalize_advantages

    def capture_targets(*args, **kwargs):
        got["raw"] = real_targets(*args, **kwargs).advantages
        return real_targets(*args, **kwargs)

    def capture_normalize(advantages, *args, **kwargs):
        got.setdefault("scaled", advantages)  # the advantages the minibatch normalization gets
        return real_normalize(advantages, *args, **kwargs)

    monkeypatch.setattr(learner_mod, "appo_targets", capture_targets)
    monkeypatch.setattr(learner_mod, "normalize_advantages", capture_normalize)
    mb, valids = _two_task_batch(model)
    learning_step(model, make_optimizer(cfg, model), mb, valids, cfg)
    scale = torch.tensor([1 / 2, 1 / 1000, 1 / 2, 1 / 1000], dtype=got["raw"].dtype).unsqueeze(1)
    assert torch.allclose(got["scaled"], got["raw"] * scale)


def test_one_task_with_popart_is_allowed(tmp_path):
    cfg, model = _setup(tmp_path, num_tasks=1)
    mb, valids = _batch(model, 4, 8, 3)
    mb["task"] = torch.zeros(4, dtype=torch.int64)
    learning_step(model, make_optimizer(cfg, model), mb, valids, cfg)
    assert model.value_head.out_features == 1 and model.popart.mu.shape == (1,) and model.popart.mu[0] != 0


def test_a_checkpoint_of_another_number_of_tasks_is_refused_by_name(tmp_path):
    from sfx.experiment import checkpoint_dir

    cfg, model = _setup(tmp_path, num_tasks=2, experiment="tasks")
    folder = checkpoint_dir(cfg, 0)
    folder.mkdir(parents=True)
    torch.save({"model": model.state_dict(), "train_step": 1, "env_steps": 10}, folder / "checkpoint_000000001_10.pth")
    _, three = _setup(tmp_path, num_tasks=3, experiment="tasks")
    with pytest.raises(ConfigError, match=r"was trained on 2 task\(s\), the env now has 3"):
        check_checkpoints_fit(cfg, three)


# --- the classic demonstration (slow): two tasks whose rewards are 1000x apart -------------------------

def _train_two_scales(tmp_path, popart: bool, seed: int = 1) -> dict:
    """flipcart_plain (x1) and flipcart_flipped (x1000, opposite actions; tests/engine/popart_tasks.py) as one
    multi-task training of 300k env steps with the README's main-job settings; each task's best and last
    average reward (its ``task/<name>/reward`` curve in TensorBoard)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from sfx_tb import load_scalars

    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "SFX_EXTRA_ENV_MODULES": "tests.engine.popart_tasks", "PYTHONPATH": str(repo)}
    train = [sys.executable, "-c", "import sys, tests.engine.popart_tasks; from sfx.train import main; "
                                   "sys.exit(main(sys.argv[1:]))",
             "--env=multitask", "--multitask_envs=flipcart_plain,flipcart_flipped",
             "--multitask_reward_scales=1,1000", f"--popart={popart}", "--train_for_env_steps=300000",
             "--num_workers=2", "--num_envs_per_worker=8", "--batch_size=512", "--use_rnn=False", "--device=cpu",
             f"--seed={seed}", f"--train_dir={tmp_path}", "--experiment=two_scales",
             "--experiment_summaries_interval=2"]
    proc = subprocess.run(train, cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    df = load_scalars(["two_scales"], dir=str(tmp_path), metrics="task/*/reward")
    out = {}
    for tag, rows in df.groupby("tag"):
        rows = rows.sort_values("step")
        out[tag[len("task/"):-len("/reward")]] = {"best": float(rows["value"].max()),
                                                   "last": float(rows["value"].iloc[-1])}
    return out


@pytest.mark.extended  # in ./all_tests.sh only with SFX_EXTENDED=1 (pytest.ini says why)
@pytest.mark.slow
def test_with_popart_both_tasks_learn_without_it_the_large_one_swamps_the_small(tmp_path):
    """Each task's best 100-episode average over the run: PopArt's job is that neither task's gradient is
    swamped by the other's scale. Measured (300k steps, seeds 1-3): with PopArt the x1 task's best is
    221 / 162 / 188 and the x1000 task's 172,400 / 203,740 / 170,570 (137 / 159 / 199 and 170,610 / 136,810 /
    151,090 before the values followed the mean, issue 29); they learn in turns (one network does not yet tell
    two tasks that want opposite actions apart, and whichever leads plays its actions in the other), so their
    last values swing (x1: 186 / 36 / 126). That is not a matter of scale: the same pair at
    x1 / x1 without PopArt learns only one task on seeds 1-3 (the other's best 20.5 / 21.9 / 20.3). Without
    PopArt at x1 / x1000 the x1 task never gets past a random policy (~22): the x1000 task's advantages set
    the policy gradient."""
    with_popart = _train_two_scales(tmp_path / "popart", popart=True)
    assert with_popart["flipcart_plain"]["best"] >= 100, with_popart
    assert with_popart["flipcart_flipped_x1000"]["best"] >= 100_000, with_popart
    without = _train_two_scales(tmp_path / "plain", popart=False)
    assert without["flipcart_flipped_x1000"]["best"] >= 100_000, without
    assert without["flipcart_plain"]["best"] < 50, without


def test_task_ids_reach_the_learner_and_the_per_task_curves_in_a_real_training(tmp_path):
    """Serial mode, two CartPole tasks at rewards x1 and x1000 (two envs each): the learner's statistics of
    the x1000 task end far above the x1 task's (so each trajectory carried its own env's task), and
    TensorBoard has both tasks' curves."""
    from sfx.registries import parse_args
    from sfx.engine import run_training
    from sfx.experiment import load_latest_checkpoint
    from sfx_tb import load_scalars

    cfg = parse_args(["--env=multitask", "--multitask_envs=gym_CartPole-v1,gym_CartPole-v1",
                      "--multitask_reward_scales=1,1000", "--popart=True", "--popart_beta=0.05", "--serial_mode=True",
                      "--num_workers=1", "--num_envs_per_worker=4", "--batch_size=256", "--use_rnn=False",
                      "--hidden_size=32", "--device=cpu", "--train_for_env_steps=6000", f"--train_dir={tmp_path}",
                      "--experiment=tasks", "--experiment_summaries_interval=1"])
    result = run_training(cfg)
    assert result["status"] == "done"
    mu = load_latest_checkpoint(cfg, 0)["model"]["popart.mu"]
    assert mu.shape == (2,) and mu[1] > 100 * abs(mu[0]) > 0, mu
    tags = set(load_scalars(["tasks"], dir=str(tmp_path))["tag"])
    assert {"task/gym_CartPole-v1/reward", "task/gym_CartPole-v1_x1000/reward"} <= tags
