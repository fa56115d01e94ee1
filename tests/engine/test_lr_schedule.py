"""--lr_schedule in the learner: every optimizer of every agent that declares it follows the schedule, PBT's
new values are scaled too, a resumed run goes on at the rate it had, and settings that cannot work are refused."""

import gymnasium
import pytest
import torch

from sfx.agents import Agent, find_agent, registered_agents
from sfx.cfg import ConfigError
from sfx.registries import default_cfg
from sfx.engine.coordinator import build_component, probe_env, wire
from sfx.engine.queues import drain


def _learning_rates(agent):
    """Every param group's rate of every optimizer the agent holds (APPO's V-MPO duals have their own)."""
    found = []
    for value in vars(agent).values():
        for item in (value if isinstance(value, tuple) else (value,)):
            if isinstance(item, torch.optim.Optimizer):
                found += [g["lr"] for g in item.param_groups]
    return found


AGENTS = [
    ("APPO", "gym_CartPole-v1", {}, {"learning_rate": 3e-4}),
    ("APPO", "gym_CartPole-v1", {"policy_loss": "vmpo"}, {"learning_rate": 3e-4}),
    ("R2D2", "gym_CartPole-v1", {}, {"learning_rate": 1e-3}),
    ("SAC", "gym_Pendulum-v1", {"actor_learning_rate": 1e-3, "critic_learning_rate": 2e-3,
                                "alpha_learning_rate": 4e-3}, None),
]


@pytest.mark.parametrize("algo,env,flags,lr", AGENTS)
def test_every_optimizer_of_every_agent_follows_the_scale_and_pbt_values_are_scaled(algo, env, flags, lr):
    cfg = default_cfg(env=env, algo=algo, lr_schedule="linear_decay", train_for_env_steps=1000, device="cpu",
                      **flags, **(lr or {}))
    spaces = gymnasium.make(env.removeprefix("gym_"))
    agent_class = find_agent(algo)
    assert "linear_decay" in agent_class.lr_schedules
    model = agent_class.make_model(cfg, spaces.observation_space, spaces.action_space)
    agent = agent_class(cfg, model, torch.device("cpu"))
    base = _learning_rates(agent)
    assert len(base) >= (3 if algo == "SAC" else 2 if flags.get("policy_loss") == "vmpo" else 1)
    agent.set_lr_scale(0.25)
    assert _learning_rates(agent) == pytest.approx([0.25 * r for r in base], rel=1e-12)
    if lr is not None:  # PBT (or a resumed run's flag) sets a new value: the schedule's factor stays on it
        cfg.learning_rate = 1e-2
        agent.apply_params({"learning_rate": 1e-2})
        assert _learning_rates(agent) == pytest.approx([0.25 * 1e-2] * len(base), rel=1e-12)
    agent.set_lr_scale(1.0)
    assert max(_learning_rates(agent)) > 0.25 * max(base)


def _learner(tmp_path, **overrides):
    flags = dict(env="gym_CartPole-v1", experiment="lr", train_dir=str(tmp_path), num_workers=1, num_envs_per_worker=4,
                 rollout=16, batch_size=128, hidden_size=16, use_rnn=False, device="cpu", seed=1, learning_rate=1e-3,
                 lr_schedule="linear_decay", lr_decay_multiplier=0.1, train_for_env_steps=1024, serial_mode=True,
                 save_every_sec=1000, set_workers_cpu_affinity=False)
    cfg = default_cfg(**{**flags, **overrides})
    info = probe_env(cfg)
    model = find_agent(cfg.algo).make_model(cfg, info.observation_space, info.action_space)
    w = wire(cfg, info, model, serial=True)
    learner = build_component(w, "learner", 0, 0, torch.device("cpu"))
    learner.start()
    drain(w.report_queue)
    return cfg, w, learner


def _train_once(w, learner, cfg):
    """One iteration on fresh slots of random observations -> its TRAIN stats."""
    n = learner.agent.trajectories_per_iteration(cfg)
    slots = [int(w.free_slots[0].get()) for _ in range(n)]
    tb = w.traj[0]
    tb.obs["obs"][slots] = torch.rand_like(tb.obs["obs"][slots])
    tb.active[slots] = True
    tb.policy_versions[slots] = learner.train_step
    learner.process([("traj", slots)])
    return [r for r in drain(w.report_queue) if r[0] == "train"][-1][2]


def test_the_learner_decays_by_env_steps_and_a_resumed_run_goes_on_at_its_rate(tmp_path):
    cfg, w, learner = _learner(tmp_path)
    expected = lambda steps: 1e-3 * (1 - 0.9 * min(steps / 1024, 1.0))  # noqa: E731
    seen = []
    for _ in range(3):
        before = learner.env_steps
        stats = _train_once(w, learner, cfg)
        assert stats["env_steps"] == before + 128
        # each iteration trains at the rate of the steps trained before its batch (the first at the flag's)
        assert stats["lr"] == pytest.approx(expected(before), rel=1e-12)
        seen.append(stats["lr"])
    assert seen[0] == 1e-3 and seen[0] > seen[1] > seen[2]
    learner.finish()  # the final checkpoint: 384 env steps
    trained = learner.env_steps

    # the same experiment again (as the same command resumes it): the rate of the checkpoint's steps, at once
    cfg2, w2, resumed = _learner(tmp_path)
    assert resumed.env_steps == trained == 384
    assert _learning_rates(resumed.agent) == pytest.approx([expected(384)], rel=1e-12)
    assert _train_once(w2, resumed, cfg2)["lr"] == pytest.approx(expected(384), rel=1e-12)
    resumed.finish()


def test_a_schedule_that_cannot_work_is_one_clear_line():
    with pytest.raises(ConfigError, match=r"--lr_schedule=linear_decay decays the learning rate until "
                                          r"--train_for_env_steps, which is 1e\+10 \(no limit\)"):
        default_cfg(lr_schedule="linear_decay")
    with pytest.raises(ConfigError, match=r"--lr_decay_multiplier=1.5 must be in \[0, 1\]"):
        default_cfg(lr_decay_multiplier=1.5)
    with pytest.raises(ConfigError, match=r"--lr_decay_multiplier=nan must be in \[0, 1\]"):
        default_cfg(lr_decay_multiplier=float("nan"))

    class Fixed(Agent):  # an agent whose optimizers keep their rates: a schedule would be silently ignored
        name = "FIXED_LR"

    with pytest.raises(ConfigError, match=r"--lr_schedule=linear_decay is not offered by --algo=FIXED_LR; its "
                                          r"schedules: constant"):
        Fixed.check_flags(default_cfg(lr_schedule="linear_decay", train_for_env_steps=100), ["lr_schedule"])
    with pytest.raises(ConfigError, match=r"--lr_schedule=kl_adaptive_minibatch is not offered by --algo=SAC; its "
                                          r"schedules: constant, linear_decay"):
        default_cfg(env="gym_Pendulum-v1", algo="SAC", lr_schedule="kl_adaptive_minibatch")
    with pytest.raises(ConfigError, match=r"--lr_adaptive_min=0.1 and --lr_adaptive_max=0.01 must be finite with "
                                          r"0 < min <= max"):
        default_cfg(lr_schedule="kl_adaptive_epoch", lr_adaptive_min=0.1, lr_adaptive_max=0.01)
    with pytest.raises(ConfigError, match=r"--lr_schedule_kl_threshold=0.0 must be a finite number > 0"):
        default_cfg(lr_schedule="kl_adaptive_epoch", lr_schedule_kl_threshold=0.0)
    offered = {name: find_agent(name).lr_schedules for name in registered_agents()}
    assert "linear_decay" in offered["R2D2"] and "linear_decay" in offered["SAC"]
    assert set(offered["APPO"]) == {"constant", "linear_decay", "kl_adaptive_minibatch", "kl_adaptive_epoch"}


@pytest.mark.parametrize("schedule,threshold,expected_factor", [
    # 2 minibatches x 2 epochs: a threshold far above the KL raises the rate after each step (x1.5 four times, up to
    # --lr_adaptive_max), one far below lowers it; per epoch it moves twice (the epochs' mean KLs)
    ("kl_adaptive_minibatch", 10.0, 1.5 ** 4),
    ("kl_adaptive_minibatch", 1e-12, 1.5 ** -4),
    ("kl_adaptive_epoch", 10.0, 1.5 ** 2),
    ("kl_adaptive_epoch", 1e-12, 1.5 ** -2),
])
def test_kl_adaptive_rates_move_per_minibatch_or_epoch_and_a_resumed_run_keeps_the_adapted_rate(
        tmp_path, schedule, threshold, expected_factor):
    flags = dict(lr_schedule=schedule, lr_schedule_kl_threshold=threshold, lr_decay_multiplier=0.0,
                 train_for_env_steps=10**6, num_batches_per_iteration=2, ppo_epochs=2, batch_size=64)
    cfg, w, learner = _learner(tmp_path, **flags)
    stats = _train_once(w, learner, cfg)
    assert learner.train_step == 4 and 0 < stats["kl"] < 1.0
    assert stats["lr"] == pytest.approx(1e-3 * expected_factor, rel=1e-12)
    assert _learning_rates(learner.agent) == pytest.approx([1e-3 * expected_factor], rel=1e-12)
    learner.finish()

    _, _, resumed = _learner(tmp_path, **flags)  # the checkpoint holds the adapted rate
    assert _learning_rates(resumed.agent) == pytest.approx([1e-3 * expected_factor], rel=1e-12)
    resumed.finish()
