"""APPO's --vmpo_kl_bounds (sfx/agents/appo.py): the decoupled bounds of Gaussian policies as flags (the math:
tests/algo/test_vmpo_decoupled.py). Bad values are one ConfigError line, decoupled bounds refuse discrete actions,
train both multipliers through the real step, and survive a checkpoint; a checkpoint of the other form starts
the multipliers at their flags."""

import copy

import pytest
import torch
from gymnasium import spaces

from sfx.agents.appo import APPO
from sfx.algo.policy_losses import vmpo_decoupled_duals, vmpo_duals
from sfx.cfg import ConfigError
from sfx.registries import default_cfg
from tests.engine.test_learning_step import _batch, _setup

PENDULUM = "gym_Pendulum-v1"


@pytest.mark.parametrize("flags,fragment", [
    (dict(vmpo_kl_bounds="full"), "--vmpo_kl_bounds=full"),
    (dict(vmpo_eps_alpha_mu=0.0), "--vmpo_eps_alpha_mu=0.0"),
    (dict(vmpo_eps_alpha_sigma=float("nan")), "--vmpo_eps_alpha_sigma=nan"),
    (dict(vmpo_eps_alpha_sigma=-1e-5), "--vmpo_eps_alpha_sigma=-1e-05"),
])
def test_bad_values_are_one_config_error_line(flags, fragment):
    with pytest.raises(ConfigError) as e:
        default_cfg(env=PENDULUM, policy_loss="vmpo", **flags)
    message = str(e.value)
    assert "\n" not in message and fragment in message
    assert "allowed" in message or "must be" in message


def test_decoupled_bounds_refuse_discrete_actions(tmp_path):
    cfg = default_cfg(env="gym_CartPole-v1", policy_loss="vmpo", vmpo_kl_bounds="decoupled")
    with pytest.raises(ConfigError, match="--vmpo_kl_bounds=decoupled.*Discrete.*allowed") as e:
        APPO.acting_rule(cfg, spaces.Discrete(2))
    assert "\n" not in str(e.value)
    cfg, model = _setup(tmp_path, env="gym_CartPole-v1", use_rnn=False, policy_loss="vmpo", vmpo_kl_bounds="decoupled")
    with pytest.raises(ConfigError, match="--vmpo_kl_bounds=single"):
        APPO(cfg, model, torch.device("cpu"))
    # the flag means nothing to another loss, and a single bound takes any action space
    APPO.acting_rule(default_cfg(env="gym_CartPole-v1", vmpo_kl_bounds="decoupled"), spaces.Discrete(2))
    APPO.acting_rule(default_cfg(env="gym_CartPole-v1", policy_loss="vmpo"), spaces.Discrete(2))
    APPO.acting_rule(cfg, spaces.Box(-1.0, 1.0, (3,)))


def test_default_is_the_single_bound(tmp_path):
    cfg, model = _setup(tmp_path, env=PENDULUM, use_rnn=False, policy_loss="vmpo")
    assert cfg.vmpo_kl_bounds == "single"
    agent = APPO(cfg, model, torch.device("cpu"))
    assert agent.vmpo_duals[0].shape == (2,)
    stats = agent.step(*_batch(model, 4, cfg.rollout, seed=0))
    assert "vmpo/alpha" in stats and "vmpo/alpha_mu" not in stats


def test_decoupled_multipliers_descend_their_own_bounds_and_survive_a_checkpoint(tmp_path):
    # the mean's bound loose (its gradient eps - C_mu > 0: alpha_mu falls), the covariance's tight (alpha_sigma rises)
    cfg, model = _setup(tmp_path, env=PENDULUM, use_rnn=False, policy_loss="vmpo", vmpo_kl_bounds="decoupled",
                        vmpo_eps_alpha_mu=10.0, vmpo_eps_alpha_sigma=1e-12, learning_rate=0.05)
    agent = APPO(cfg, model, torch.device("cpu"))
    assert agent.vmpo_duals[0].shape == (3,)
    start = [float(x) for x in vmpo_decoupled_duals(agent.vmpo_duals[0].detach())]
    assert start == pytest.approx([cfg.vmpo_init_eta, cfg.vmpo_init_alpha, cfg.vmpo_init_alpha], rel=1e-5)
    before = copy.deepcopy(model.state_dict())
    for seed in range(3):
        stats = agent.step(*_batch(model, 4, cfg.rollout, seed=seed))
    assert all(torch.isfinite(torch.tensor(v)) for v in stats.values())
    assert {"vmpo/eta", "vmpo/alpha_mu", "vmpo/alpha_sigma", "vmpo/kl_mu", "vmpo/kl_sigma", "vmpo/weights_kl",
            "loss/vmpo_trust_region"} <= set(stats) and "vmpo/alpha" not in stats
    assert stats["vmpo/kl_mu"] > 0 and stats["vmpo/kl_sigma"] > 0
    assert stats["vmpo/alpha_mu"] < start[1] and stats["vmpo/alpha_sigma"] > start[2]
    changed = [k for k, v in model.state_dict().items() if v.dtype.is_floating_point and not torch.equal(v, before[k])]
    assert any("action" in k or "policy" in k for k in changed), changed
    state = agent.learning_state()
    cfg2, model2 = _setup(tmp_path, env=PENDULUM, use_rnn=False, policy_loss="vmpo", vmpo_kl_bounds="decoupled")
    other = APPO(cfg2, model2, torch.device("cpu"))
    other.load_learning_state(state)
    assert torch.equal(other.vmpo_duals[0], agent.vmpo_duals[0])
    # a single bound's checkpoint (one multiplier) leaves the decoupled ones at their flags, and the reverse
    cfg3, model3 = _setup(tmp_path, env=PENDULUM, use_rnn=False, policy_loss="vmpo")
    single = APPO(cfg3, model3, torch.device("cpu"))
    fresh = APPO(cfg2, model2, torch.device("cpu"))
    fresh.load_learning_state(single.learning_state())
    assert [float(x) for x in vmpo_decoupled_duals(fresh.vmpo_duals[0].detach())] == pytest.approx(start, rel=1e-5)
    single.load_learning_state(state)
    assert [float(x) for x in vmpo_duals(single.vmpo_duals[0].detach())] == pytest.approx(start[:2], rel=1e-5)
