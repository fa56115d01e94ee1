"""Brain Agent's auxiliary losses in the learning step: named terms logged as loss/aux_*, they change the
encoder's (and, for future prediction, the core's) gradients, a coefficient of 0 leaves the step
bit-identical, and the heads stay out of the weights policy workers receive."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from sfx.algo.distributions import make_action_distribution
from sfx.cfg import ConfigError
from sfx.registries import default_cfg
from sfx.engine.buffers import WeightsBuffer
from sfx.agents.appo import learning_step, make_optimizer
from sfx.models import create_actor_critic

FRAME = spaces.Box(0, 255, shape=(36, 48, 3), dtype=np.uint8)
ACTIONS = spaces.Discrete(4)


def _model(**overrides):
    base = dict(rollout=8, recurrence=8, batch_size=32, hidden_size=32, device="cpu", encoder_type="conv",
                encoder_subtype="convnet_impala")
    base.update(overrides)
    cfg = default_cfg(**base)
    torch.manual_seed(0)
    return cfg, create_actor_critic(cfg, FRAME, ACTIONS).train()


def _batch(model, n=4, T=8, seed=3):
    g = torch.Generator().manual_seed(seed)
    params = torch.randn(n, T, model.action_params_size, generator=g)
    dist = make_action_distribution(ACTIONS, params.reshape(n * T, -1))
    torch.manual_seed(seed)
    actions = dist.sample().reshape(n, T, 1).float()
    terminated = torch.zeros(n, T, dtype=torch.bool)
    terminated[0, 3] = terminated[2, 6] = True
    mb = dict(obs={"obs": torch.randint(0, 256, (n, T + 1, *FRAME.shape), dtype=torch.uint8, generator=g)},
              rnn_states=torch.zeros(n, T + 1, model.rnn_state_size), actions=actions,
              log_probs=dist.log_prob(actions.reshape(n * T, -1)).reshape(n, T), action_params=params,
              values=torch.randn(n, T, generator=g), rewards=torch.randn(n, T, generator=g),
              terminated=terminated, truncated=torch.zeros(n, T, dtype=torch.bool),
              trunc_values=torch.zeros(n, T), policy_versions=torch.zeros(n, T, dtype=torch.long),
              active=torch.ones(n, T, dtype=torch.bool), task=torch.zeros(n, dtype=torch.long),
              memory=torch.zeros(n, 0, 0))
    return mb, torch.ones(n, T, dtype=torch.bool)


def _grads(model, cfg, mb, valids):
    opt = make_optimizer(cfg, model)
    cfg.max_grad_norm = 0.0  # compare raw gradients
    stats = learning_step(model, opt, mb, valids, cfg)
    return stats, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_the_terms_are_logged_and_reach_the_encoder_and_the_core():
    cfg0, plain = _model()
    mb, valids = _batch(plain)
    stats0, g0 = _grads(plain, cfg0, mb, valids)
    assert plain.aux is None and not any(k.startswith("loss/aux") for k in stats0)

    cfg, recon = _model(aux_loss_reconstruction_coeff=0.5)
    assert recon.aux.enabled == ("aux_reconstruction",)
    stats, g = _grads(recon, cfg, mb, valids)
    assert stats["loss/aux_reconstruction"] > 0 and "loss/aux_future_pred" not in stats
    enc = [k for k in g0 if k.startswith("encoder.")]
    assert enc and any(not torch.equal(g[k], g0[k]) for k in enc)  # the encoder learns from it
    assert all(torch.equal(g[k], g0[k]) for k in g0 if k.startswith("core."))  # the core does not
    assert any(k.startswith("aux.") for k in g)

    cfg, future = _model(aux_loss_future_pred_coeff=1.0, aux_loss_future_pred_horizon=3)
    torch.manual_seed(5)
    stats, g = _grads(future, cfg, mb, valids)
    assert stats["loss/aux_future_pred"] > 0
    assert any(not torch.equal(g[k], g0[k]) for k in g0 if k.startswith("core."))


def test_the_heads_are_built_last_and_a_zero_coefficient_changes_nothing():
    """The model's own weights start the same with the heads; with the coefficients set to 0 afterwards
    (as PBT could) the step gives bit-identical weights to a model without heads."""
    cfg0, plain = _model()
    cfg, with_aux = _model(aux_loss_reconstruction_coeff=0.01, aux_loss_future_pred_coeff=1.0)
    own = plain.state_dict()
    assert all(torch.equal(with_aux.state_dict()[k], v) for k, v in own.items())
    mb, valids = _batch(plain)
    cfg.aux_loss_reconstruction_coeff = cfg.aux_loss_future_pred_coeff = 0.0
    opt0, opt = make_optimizer(cfg0, plain), make_optimizer(cfg, with_aux)
    for _ in range(2):
        s0 = learning_step(plain, opt0, mb, valids, cfg0)
        s = learning_step(with_aux, opt, mb, valids, cfg)
    assert s0 == s
    assert all(torch.equal(with_aux.state_dict()[k], v) for k, v in plain.state_dict().items())


def test_policy_workers_never_receive_the_heads():
    _, plain = _model()
    _, with_aux = _model(aux_loss_reconstruction_coeff=0.01, aux_loss_future_pred_coeff=1.0)
    assert sum(p.numel() for p in with_aux.aux.parameters()) > 0
    assert WeightsBuffer.for_model(with_aux).flat.numel() == WeightsBuffer.for_model(plain).flat.numel()
    buf = WeightsBuffer.for_model(with_aux)
    buf.publish(with_aux, 3)
    _, reader = _model()
    assert buf.read_into(reader, -1) == 3


def test_vector_observations_are_refused_naming_the_flag():
    cfg = default_cfg(aux_loss_reconstruction_coeff=0.01, device="cpu")
    with pytest.raises(ConfigError, match="aux_loss_reconstruction_coeff"):
        create_actor_critic(cfg, spaces.Box(-1, 1, shape=(4,), dtype=np.float32), ACTIONS)
