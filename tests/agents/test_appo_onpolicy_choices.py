"""The on-policy study's choices as APPO flags (sfx/agents/appo.py): --advantage_estimator, --n_step, --policy_loss
and their parameters. The math is tested in tests/algo/test_returns.py and test_policy_losses.py; here: the
flags' validation, that ``auto`` keeps --with_vtrace's meaning, that each loss trains through the real step,
and that V-MPO's learned temperature and multiplier move and survive a checkpoint."""

import copy
import json

import pytest
import torch

from sfx.agents.appo import APPO, advantage_estimator, learning_step, make_optimizer
from sfx.algo.policy_losses import vmpo_duals
from sfx.cfg import ConfigError
from sfx.registries import default_cfg
from tests.engine.test_learning_step import _batch, _setup

STANDARD = json.dumps([{"type": "queue", "capacity": 1, "sample_ratio": 0.5},
                       {"type": "standard", "capacity": 100, "sample_ratio": 0.5}])


@pytest.mark.parametrize("flags,fragment", [
    (dict(policy_loss="trpo"), "--policy_loss=trpo"),
    (dict(advantage_estimator="td"), "--advantage_estimator=td"),
    (dict(n_step=0), "--n_step=0"),
    (dict(awr_beta=0.0), "--awr_beta=0.0"),
    (dict(awr_max_weight=-1.0), "--awr_max_weight=-1.0"),
    (dict(vmpo_eps_eta=0.0), "--vmpo_eps_eta=0.0"),
    (dict(vmpo_eps_alpha=float("inf")), "--vmpo_eps_alpha=inf"),
    (dict(vmpo_init_eta=-2.0), "--vmpo_init_eta=-2.0"),
])
def test_bad_values_are_one_config_error_line(flags, fragment):
    with pytest.raises(ConfigError) as e:
        default_cfg(env="gym_CartPole-v1", **flags)
    message = str(e.value)
    assert "\n" not in message and fragment in message
    assert "allowed" in message or "must be" in message


def test_auto_keeps_with_vtrace_and_an_explicit_estimator_wins():
    assert advantage_estimator(default_cfg(env="gym_CartPole-v1")) == "vtrace"
    assert advantage_estimator(default_cfg(env="gym_CartPole-v1", with_vtrace=False)) == "gae"
    assert advantage_estimator(default_cfg(env="doom_basic")) == "gae"  # the family's with_vtrace=False
    for name in ("gae", "vtrace", "nstep", "mc"):
        cfg = default_cfg(env="gym_CartPole-v1", advantage_estimator=name, with_vtrace=name != "gae")
        assert advantage_estimator(cfg) == name
        # every estimator keeps one batch ahead (V-trace corrects the gradient, not the stored core state)
        assert APPO.batches_ahead(cfg) == 1


@pytest.mark.parametrize("name", ["nstep", "mc", "gae"])
def test_replay_needs_vtrace_whatever_the_estimator(name):
    with pytest.raises(ConfigError, match=f"--advantage_estimator={name}.*allowed"):
        default_cfg(env="gym_CartPole-v1", replay_parameters=STANDARD, advantage_estimator=name)
    default_cfg(env="gym_CartPole-v1", replay_parameters=STANDARD, advantage_estimator="vtrace")


@pytest.mark.parametrize("explicit,auto", [("vtrace", True), ("gae", False)])
def test_explicit_vtrace_and_gae_are_auto_bit_for_bit(tmp_path, explicit, auto):
    results = []
    for flags in (dict(advantage_estimator=explicit), dict(with_vtrace=auto)):
        cfg, model = _setup(tmp_path, use_rnn=False, with_vtrace=auto if "with_vtrace" in flags else not auto,
                            **{k: v for k, v in flags.items() if k != "with_vtrace"})
        mb, valids = _batch(model, 4, cfg.rollout, seed=1)
        stats = learning_step(model, make_optimizer(cfg, model), mb, valids, cfg)
        results.append((stats, [p.detach().clone() for p in model.parameters()]))
    assert results[0][0] == results[1][0]
    assert all(torch.equal(a, b) for a, b in zip(results[0][1], results[1][1]))


@pytest.mark.parametrize("env", ["gym_CartPole-v1", "gym_Pendulum-v1"])
@pytest.mark.parametrize("policy_loss", ["ppo", "vpg", "awr", "vmpo"])
@pytest.mark.parametrize("estimator", ["nstep", "mc"])
def test_every_loss_and_estimator_steps_the_policy(tmp_path, env, policy_loss, estimator):
    cfg, model = _setup(tmp_path, env=env, use_rnn=False, policy_loss=policy_loss, advantage_estimator=estimator,
                        n_step=3)
    agent = APPO(cfg, model, torch.device("cpu"))
    mb, valids = _batch(model, 4, cfg.rollout, seed=2)
    before = copy.deepcopy(model.state_dict())
    stats = agent.step(mb, valids)
    assert all(torch.isfinite(torch.tensor(v)) for v in stats.values())
    changed = [k for k, v in model.state_dict().items() if v.dtype.is_floating_point and not torch.equal(v, before[k])]
    assert any("action" in k or "policy" in k for k in changed), changed
    if policy_loss == "vmpo":
        assert {"vmpo/eta", "vmpo/alpha", "vmpo/weights_kl", "loss/vmpo_temperature"} <= set(stats)
    if policy_loss == "awr":
        assert 0.0 <= stats["awr/clipped_fraction"] <= 1.0


def test_vmpo_duals_descend_their_losses_and_survive_a_checkpoint(tmp_path):
    # a large bound on the policy's KL: alpha's gradient eps_alpha - KL is positive, so alpha falls step by step;
    # a tiny bound on the weights' KL: eta's gradient eps_eta - KL(psi || U) is negative, so eta rises
    cfg, model = _setup(tmp_path, use_rnn=False, policy_loss="vmpo", vmpo_eps_alpha=10.0, vmpo_eps_eta=1e-6,
                        learning_rate=0.05)
    agent = APPO(cfg, model, torch.device("cpu"))
    eta0, alpha0 = (float(x) for x in vmpo_duals(agent.vmpo_duals[0].detach()))
    assert eta0 == pytest.approx(cfg.vmpo_init_eta, rel=1e-5) and alpha0 == pytest.approx(cfg.vmpo_init_alpha, rel=1e-5)
    for seed in range(3):
        mb, valids = _batch(model, 4, cfg.rollout, seed=seed)
        stats = agent.step(mb, valids)
    assert stats["vmpo/eta"] > eta0 and stats["vmpo/alpha"] < alpha0
    state = agent.learning_state()
    cfg2, model2 = _setup(tmp_path, use_rnn=False, policy_loss="vmpo")
    other = APPO(cfg2, model2, torch.device("cpu"))
    other.load_learning_state(state)
    assert torch.equal(other.vmpo_duals[0], agent.vmpo_duals[0])
    # a checkpoint of another loss leaves them at their flags' values
    fresh = APPO(cfg2, model2, torch.device("cpu"))
    fresh.load_learning_state({"optimizer": make_optimizer(cfg2, model2).state_dict()})
    assert float(vmpo_duals(fresh.vmpo_duals[0].detach())[0]) == pytest.approx(cfg2.vmpo_init_eta, rel=1e-5)


def test_replayed_rows_report_how_much_the_clips_leave_untrained(tmp_path):
    # GAE: the advantages do not read the behaviour's log-probs, so both shifts below see the same advantages
    cfg, model = _setup(tmp_path, use_rnn=False, with_vtrace=False)
    mb, valids = _batch(model, 4, cfg.rollout, seed=5)
    stats = learning_step(copy.deepcopy(model), make_optimizer(cfg, model), mb, valids, cfg)
    assert not any(k.startswith("clip/") for k in stats)  # no replay: the step's statistics are today's
    mb["replayed"] = torch.tensor([True, False, True, False])
    fractions = []
    for shift in (-3.0, 3.0):
        # the replayed rows' behaviour made every taken action e^3 times less (more) likely than it is now: their
        # ratios are all above 1 + eps (below 1 - eps), so exactly the positive (negative) advantages get no gradient
        data = {**mb, "log_probs": torch.where(mb["replayed"].unsqueeze(1), mb["log_probs"] + shift, mb["log_probs"])}
        stats = learning_step(copy.deepcopy(model), make_optimizer(cfg, model), data, valids, cfg)
        for name in ("policy", "value"):
            for kind in ("fresh", "replayed"):
                assert 0.0 <= stats[f"clip/{name}_{kind}"] <= 1.0
        fractions.append(stats["clip/policy_replayed"])
    assert 0.0 < fractions[0] < 1.0
    assert sum(fractions) == pytest.approx(1.0)


def test_replayed_loss_impala_needs_ppo_and_a_replaying_buffer():
    with pytest.raises(ConfigError, match="--replayed_loss=impala.*--replay_parameters"):
        default_cfg(env="gym_CartPole-v1", replayed_loss="impala")
    with pytest.raises(ConfigError, match="--replayed_loss=impala.*--policy_loss=ppo \\(now awr\\)"):
        default_cfg(env="gym_CartPole-v1", replayed_loss="impala", replay_parameters=STANDARD, policy_loss="awr")
    with pytest.raises(ConfigError, match="--replayed_loss=sgd"):
        default_cfg(env="gym_CartPole-v1", replayed_loss="sgd")
    cfg = default_cfg(env="gym_CartPole-v1", replayed_loss="impala", replay_parameters=STANDARD)
    assert cfg.replayed_loss == "impala"
