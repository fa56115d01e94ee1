"""Recurrent training on sequences equals step-by-step acting; gradients; normalizers; spaces."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from sfx.models import ActorCritic, create_actor_critic
from sfx.models.cores import RnnCore

from model_helpers import image_space, make_cfg, random_obs, vector_space, seeded  # noqa: F401 (seeded: autouse fixture)

CORES = [(False, "gru", 1), (True, "gru", 1), (True, "gru", 2), (True, "lstm", 1), (True, "lstm", 2)]
CORE_IDS = ["none", "gru1", "gru2", "lstm1", "lstm2"]


def step_by_step(model: ActorCritic, obs, rnn_init, resets):
    """The reference: what policy workers do, one step at a time, zeroing the state on resets."""
    B, T = resets.shape
    h = rnn_init
    params, values = [], []
    for t in range(T):
        h = h * (~resets[:, t]).float().unsqueeze(1)
        out = model.forward_step(obs[:, t], h)
        params.append(out["action_params"])
        values.append(out["values"])
        h = out["new_rnn_states"]
    return torch.stack(params, 1), torch.stack(values, 1)


def random_resets(B: int, T: int, p: float, gen: torch.Generator) -> torch.Tensor:
    return torch.rand(B, T, generator=gen) < p


@pytest.mark.parametrize("share_weights", [True, False], ids=["shared", "separate"])
@pytest.mark.parametrize("use_rnn, rnn_type, layers", CORES, ids=CORE_IDS)
@pytest.mark.parametrize("reset_prob", [0.0, 0.15, 0.6, 1.0])
def test_sequence_equals_steps(use_rnn, rnn_type, layers, reset_prob, share_weights):
    gen = torch.Generator().manual_seed(int(reset_prob * 100) + layers)
    cfg = make_cfg(use_rnn=use_rnn, rnn_type=rnn_type, rnn_num_layers=layers, hidden_size=12,
                   actor_critic_share_weights=share_weights)
    space = vector_space(5)
    model = create_actor_critic(cfg, space, spaces.Discrete(4))
    model.update_obs_normalizer(random_obs(space, 50, gen=gen))
    B, T = 6, 9
    S = max(1, model.rnn_state_size)
    obs = random_obs(space, B, T, gen=gen)
    rnn_init = torch.randn(B, S, generator=gen)
    resets = random_resets(B, T, reset_prob, gen)
    if 0 < reset_prob < 1:
        resets[0] = False  # one row without any reset
        resets[1, 0] = True  # a row reset at its very first step
        resets[2, -1] = True  # and one reset at the last step
    with torch.no_grad():
        seq = model.forward_sequence(obs, rnn_init, resets)
        ref_params, ref_values = step_by_step(model, obs, rnn_init, resets)
    assert seq["action_params"].shape == (B, T, 4)
    assert seq["values"].shape == (B, T) and seq["values_normalized"].shape == (B, T)
    torch.testing.assert_close(seq["action_params"], ref_params, atol=1e-5, rtol=0)
    torch.testing.assert_close(seq["values"], ref_values, atol=1e-5, rtol=0)


@pytest.mark.parametrize("share_weights", [True, False], ids=["shared", "separate"])
@pytest.mark.parametrize("rnn_type", ["gru", "lstm"])
def test_sequence_equals_steps_with_an_image_encoder(rnn_type, share_weights):
    gen = torch.Generator().manual_seed(3)
    cfg = make_cfg(rnn_type=rnn_type, encoder_subtype="convnet_impala", actor_critic_share_weights=share_weights)
    space = image_space((36, 48, 3))
    model = create_actor_critic(cfg, space, spaces.Tuple([spaces.Discrete(3), spaces.Discrete(2)]))
    B, T = 3, 5
    obs = random_obs(space, B, T, gen=gen)
    rnn_init = torch.randn(B, model.rnn_state_size, generator=gen)
    resets = torch.tensor([[0, 0, 1, 0, 0], [1, 0, 0, 0, 1], [0, 0, 0, 0, 0]], dtype=torch.bool)
    with torch.no_grad():
        seq = model.forward_sequence(obs, rnn_init, resets)
        ref_params, ref_values = step_by_step(model, obs, rnn_init, resets)
    torch.testing.assert_close(seq["action_params"], ref_params, atol=1e-5, rtol=0)
    torch.testing.assert_close(seq["values"], ref_values, atol=1e-5, rtol=0)


def test_recurrent_state_carries_memory():
    """Without this the equality tests above would pass for a core that ignores its state."""
    model = create_actor_critic(make_cfg(hidden_size=8), vector_space(3), spaces.Discrete(2))
    obs = torch.randn(2, 3)
    a = model.forward_step(obs, torch.zeros(2, model.rnn_state_size))
    b = model.forward_step(obs, torch.ones(2, model.rnn_state_size))
    assert not torch.allclose(a["action_params"], b["action_params"])
    assert not torch.allclose(a["new_rnn_states"], torch.zeros_like(a["new_rnn_states"]))


@pytest.mark.parametrize("share_weights", [True, False], ids=["shared", "separate"])
@pytest.mark.parametrize("use_rnn, rnn_type, layers, expected", [
    (False, "gru", 1, 0), (True, "gru", 1, 16), (True, "gru", 2, 32), (True, "lstm", 1, 32), (True, "lstm", 3, 96),
])
def test_rnn_state_size(use_rnn, rnn_type, layers, expected, share_weights):
    cfg = make_cfg(use_rnn=use_rnn, rnn_type=rnn_type, rnn_num_layers=layers, hidden_size=16,
                   actor_critic_share_weights=share_weights)
    model = create_actor_critic(cfg, vector_space(), spaces.Discrete(2))
    expected = expected if share_weights else 2 * expected  # separate: the actor's state, then the critic's
    assert model.rnn_state_size == expected
    S = max(1, expected)
    out = model.forward_step(torch.randn(4, 5), torch.zeros(4, S))
    assert out["new_rnn_states"].shape == (4, S)
    assert out["new_rnn_states"].dtype == torch.float32


@pytest.mark.parametrize("layers", [1, 2])
def test_lstm_flat_state_roundtrip(layers):
    core = RnnCore(4, 6, "lstm", layers)
    flat = torch.randn(3, core.state_size)
    h, c = core.unflatten(flat)
    assert h.shape == c.shape == (layers, 3, 6)
    torch.testing.assert_close(core.flatten((h, c)), flat)


# separate actor and critic with a learned stddev: every core on vectors, one on images (two resnets
# per model are the slow part)
GRADIENT_CASES = [pytest.param(*core, obs, True, True, id=f"{obs}-{cid}-shared")
                  for obs in ("vector", "image") for core, cid in zip(CORES, CORE_IDS)] + [
                  pytest.param(*core, obs, False, False, id=f"{obs}-{cid}-separate-fixed_std")
                  for obs in ("vector", "image") for core, cid in zip(CORES, CORE_IDS)
                  if obs == "vector" or cid == "lstm1"]


@pytest.mark.parametrize("use_rnn, rnn_type, layers, obs_kind, share_weights, adaptive_stddev", GRADIENT_CASES)
def test_gradients_reach_every_parameter(use_rnn, rnn_type, layers, obs_kind, share_weights, adaptive_stddev):
    cfg = make_cfg(use_rnn=use_rnn, rnn_type=rnn_type, rnn_num_layers=layers, normalize_returns=True,
                   encoder_type="resnet", encoder_subtype="resnet_impala", actor_critic_share_weights=share_weights,
                   adaptive_stddev=adaptive_stddev, initial_stddev=0.5)  # log 1 = 0 would zero d(params^2)
    space = vector_space(4) if obs_kind == "vector" else image_space((24, 24, 3))
    # a Box action space, so the non-adaptive log-stddev parameter is there to be reached
    action_space = spaces.Discrete(3) if adaptive_stddev else spaces.Box(-1, 1, (2,), np.float32)
    model = create_actor_critic(cfg, space, action_space)
    B, T = 3, 4
    resets = torch.tensor([[0, 1, 0, 0], [0, 0, 0, 0], [1, 0, 1, 0]], dtype=torch.bool)
    out = model.forward_sequence(random_obs(space, B, T), torch.randn(B, max(1, model.rnn_state_size)), resets)
    loss = out["action_params"].pow(2).sum() + out["values_normalized"].pow(2).sum()
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, name
        assert p.grad.abs().sum() > 0, name


def test_normalizers_travel_in_state_dict():
    cfg = make_cfg(normalize_input=True, normalize_returns=True)
    space = vector_space(3)
    model = create_actor_critic(cfg, space, spaces.Discrete(2))
    keys = set(model.state_dict())
    for k in ("obs_normalizer.mean", "obs_normalizer.var", "obs_normalizer.count",
              "returns_normalizer.mean", "returns_normalizer.var", "returns_normalizer.count"):
        assert k in keys
    model.update_obs_normalizer(torch.randn(100, 3) * 4 + 2)
    model.returns_normalizer.update(torch.randn(100) * 10 + 50)

    clone = create_actor_critic(cfg, space, spaces.Discrete(2))
    obs = torch.randn(5, 3)
    h = torch.zeros(5, model.rnn_state_size)
    assert not torch.allclose(clone.forward_step(obs, h)["values"], model.forward_step(obs, h)["values"])
    clone.load_state_dict(model.state_dict())
    torch.testing.assert_close(clone.forward_step(obs, h)["values"], model.forward_step(obs, h)["values"])

    off = create_actor_critic(make_cfg(normalize_input=False, normalize_returns=False), space, spaces.Discrete(2))
    assert not any("normalizer" in k for k in off.state_dict())


def test_values_are_denormalized():
    cfg = make_cfg(normalize_returns=True, use_rnn=False)
    model = create_actor_critic(cfg, vector_space(3), spaces.Discrete(2))
    model.returns_normalizer.update(torch.randn(1000) * 10 + 100)
    out = model.forward_step(torch.randn(4, 3), torch.zeros(4, 1))
    torch.testing.assert_close(out["values"], model.returns_normalizer.denormalize(out["values_normalized"]))
    assert out["values"].mean() > 50  # near the returns' mean: the head starts near 0 normalized
    v = torch.randn(10) * 10 + 100
    torch.testing.assert_close(model.denormalize_values(model.normalize_values(v)), v)

    seq = model.forward_sequence(torch.randn(2, 3, 3), torch.zeros(2, 1), torch.zeros(2, 3, dtype=torch.bool))
    torch.testing.assert_close(seq["values"], model.denormalize_values(seq["values_normalized"]))

    plain = create_actor_critic(make_cfg(use_rnn=False), vector_space(3), spaces.Discrete(2))
    assert plain.returns_normalizer is None
    torch.testing.assert_close(plain.normalize_values(v), v)
    torch.testing.assert_close(plain.denormalize_values(v), v)


@pytest.mark.parametrize("action_space, P", [
    (spaces.Discrete(5), 5),
    (spaces.Tuple([spaces.Discrete(3), spaces.Discrete(4)]), 7),
    (spaces.Box(-1, 1, (3,), np.float32), 6),
])
def test_action_spaces(action_space, P):
    model = create_actor_critic(make_cfg(), vector_space(4), action_space)
    assert model.action_space is action_space
    assert model.action_params_size == P
    out = model.forward_step(torch.randn(2, 4), torch.zeros(2, model.rnn_state_size))
    assert out["action_params"].shape == (2, P)


@pytest.mark.parametrize("gain", [1.0, 0.5])
def test_heads_follow_the_policy_initialization(gain):
    """The action and value heads are initialised like the encoder (orthogonal, --policy_init_gain), as in
    Sample Factory: a 0.01 policy head starved the shared trunk of policy gradient (see ActorCritic)."""
    model = create_actor_critic(make_cfg(use_rnn=False, policy_initialization="orthogonal", policy_init_gain=gain),
                                vector_space(4), spaces.Discrete(6))
    w = model.action_head.weight.detach()  # [6, 16]: orthogonal rows of norm `gain`
    torch.testing.assert_close(w @ w.T, gain**2 * torch.eye(6), atol=1e-5, rtol=0)
    v = model.value_head.weight.detach()
    torch.testing.assert_close(v.norm(), torch.tensor(gain), atol=1e-5, rtol=0)
    assert float(model.action_head.bias.detach().abs().max()) == 0.0
    assert float(model.value_head.bias.detach().abs().max()) == 0.0


def _encoder_layers(model):
    return [m for m in model.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))
            and m is not model.action_head and m is not model.value_head]


@pytest.mark.parametrize("gain", [1.0, 0.5])
def test_encoder_initialization_kaiming_uniform_is_pytorchs_default_scale_and_heads_stay_orthogonal(gain):
    """--encoder_initialization=kaiming_uniform: each encoder layer's weights uniform in +-gain/sqrt(fan_in)
    (PyTorch's default for Linear/Conv2d, the scale Sample Factory's jit-scripted encoders train from), biases 0;
    the heads follow --policy_initialization (orthogonal)."""
    model = create_actor_critic(make_cfg(use_rnn=False, encoder_initialization="kaiming_uniform",
                                         policy_init_gain=gain), image_space((72, 128, 3)), spaces.Discrete(4))
    layers = _encoder_layers(model)
    assert len(layers) == 4  # convnet_simple's three convs and its fc
    for layer in layers:
        w = layer.weight.detach().reshape(layer.weight.shape[0], -1)
        bound = gain / np.sqrt(w.shape[1])
        assert float(w.abs().max()) <= bound * (1 + 1e-6)
        # U(-b, b) has std b / sqrt(3); with >= 6,144 draws the sample std is within 3% of it
        torch.testing.assert_close(float(w.std()), bound / np.sqrt(3), rtol=0.03, atol=0)
        assert float(layer.bias.detach().abs().max()) == 0.0
    h = model.action_head.weight.detach()
    torch.testing.assert_close(h @ h.T, gain**2 * torch.eye(4), atol=1e-5, rtol=0)


def test_initialization_flags_offer_every_scheme_init_weights_knows():
    from sfx.registries import parse_args
    from sfx.models.encoders import INITIALIZATIONS
    for scheme in INITIALIZATIONS:
        cfg = parse_args(["--env=gym_CartPole-v1", f"--policy_initialization={scheme}",
                          f"--encoder_initialization={scheme}"])
        assert (cfg.policy_initialization, cfg.encoder_initialization) == (scheme, scheme)


def test_encoder_initialization_policy_follows_the_policy_initialization():
    """The default, ``policy``: the encoder is initialised by --policy_initialization (orthogonal rows here)."""
    model = create_actor_critic(make_cfg(use_rnn=False), image_space((72, 128, 3)), spaces.Discrete(4))
    for layer in _encoder_layers(model):
        w = layer.weight.detach().reshape(layer.weight.shape[0], -1)
        assert w.shape[0] <= w.shape[1]
        torch.testing.assert_close(w @ w.T, torch.eye(w.shape[0]), atol=1e-4, rtol=0)


def test_policy_gradient_reaches_the_trunk():
    """At initialisation the policy loss moves the encoder about as much as the value loss does (with a
    0.01 head it was a hundred times less)."""
    model = create_actor_critic(make_cfg(use_rnn=False), vector_space(4), spaces.Discrete(6))
    x = torch.randn(256, 4) * 3
    out = model.forward_step(x, torch.zeros(256, 1))
    enc = [p for p in model.encoder.parameters()]
    adv = torch.randn(256)
    logp = torch.log_softmax(out["action_params"], -1)[:, 0]
    g_pi = torch.autograd.grad(-(logp * adv).mean(), enc, retain_graph=True)
    g_v = torch.autograd.grad(0.5 * (out["values"] - torch.randn(256)).pow(2).mean(), enc)
    norm = lambda gs: float(torch.sqrt(sum((g**2).sum() for g in gs)))  # noqa: E731
    assert norm(g_pi) > 0.05 * norm(g_v)
