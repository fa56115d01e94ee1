"""Auxiliary heads: decoder shapes, which parts get built, and what reaches the loss terms."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from sfx.cfg import ConfigError
from sfx.models.aux_heads import AuxiliaryHeads, FrameDecoder, frames_to_chw
from sfx.models.encoders import DictEncoder, init_weights, make_builtin_encoder

from model_helpers import image_space, make_cfg, random_obs, vector_space, seeded  # noqa: F401 (autouse)

SUBTYPES = ("convnet_simple", "convnet_impala", "resnet_impala")
SMALL = (40, 48, 3)  # the smallest-ish HWC frame all three encoders take (convnet_simple needs >= 36)


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny convolutions and GRU steps: thread hand-offs cost more than the math (measured 10x slower
    with 2 threads on a busy 2-core machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def aux_cfg(recon: float = 0.0, future: float = 0.0, horizon: int = 3, **overrides):
    """A small model cfg with the aux flags (set as attributes: they may not be parsed flags yet)."""
    cfg = make_cfg(**overrides)
    cfg.aux_loss_reconstruction_coeff = recon
    cfg.aux_loss_future_pred_coeff = future
    cfg.aux_loss_future_pred_horizon = horizon
    return cfg


def build(recon=0.0, future=0.0, horizon=3, shape=SMALL, subtype="convnet_simple", action_space=None, **kw):
    cfg = aux_cfg(recon, future, horizon, hidden_size=16)
    encoder = make_builtin_encoder(subtype, cfg, shape)
    init_weights(encoder, cfg.policy_initialization, cfg.policy_init_gain)
    heads = AuxiliaryHeads(cfg, image_space(shape), action_space or spaces.Discrete(4), encoder, 8, **kw)
    return heads, encoder


def batch(B, T, shape=SMALL, k=1, n_actions=4, gen=None):
    gen = gen or torch.Generator().manual_seed(0)
    return dict(
        frames=random_obs(image_space(shape), B, T + 1, gen=gen),
        core_out=torch.randn(B, T, 8, generator=gen),
        actions=torch.randint(0, n_actions, (B, T, k), generator=gen).float(),
        dones=torch.zeros(B, T, dtype=torch.bool),
        valids=torch.ones(B, T, dtype=torch.bool),
    )


def features_of(encoder, frames, B, T):
    return encoder(frames[:, :T].reshape(B * T, *frames.shape[2:]).float() / 255.0)


@pytest.mark.parametrize("subtype", SUBTYPES)
@pytest.mark.parametrize("shape", [(72, 128, 3), (4, 84, 84), (84, 84, 4), (72, 96, 3), (3, 72, 128), (84, 84)])
def test_decoder_gives_the_frame_shape_exactly(subtype, shape):
    """doom (HWC), atari (CHW frame stack, and HWC), dmlab, a CHW doom and a 2-D frame."""
    cfg = make_cfg(hidden_size=16)
    encoder = make_builtin_encoder(subtype, cfg, shape)
    decoder = FrameDecoder(encoder, shape)
    out = decoder(torch.randn(2, 16))
    c, h, w = frames_to_chw(torch.zeros(1, *shape), shape).shape[1:]
    assert out.shape == (2, c, h, w)
    assert out.abs().max() <= 1.0 and torch.isfinite(out).all()


def test_decoder_mirrors_the_encoder():
    cfg = make_cfg(hidden_size=16)
    encoder = make_builtin_encoder("convnet_simple", cfg, (72, 128, 3))
    decoder = FrameDecoder(encoder, (72, 128, 3), in_features=5)
    convs = [m for m in decoder.deconvs if isinstance(m, torch.nn.ConvTranspose2d)]
    # conv 3->32 8/4, 32->64 4/2, 64->128 3/2, reversed with channels swapped
    assert [(m.in_channels, m.out_channels, m.kernel_size[0], m.stride[0]) for m in convs] == [
        (128, 64, 3, 2), (64, 32, 4, 2), (32, 3, 8, 4)]
    assert decoder.fc.in_features == 5 and decoder.fc.out_features == encoder.conv_out_size
    assert isinstance(decoder.deconvs[-1], torch.nn.Tanh)
    # its own weights, not the encoder's
    assert not set(map(id, decoder.parameters())) & set(map(id, encoder.parameters()))


def test_vector_observations_are_refused():
    cfg = aux_cfg(recon=0.01)
    space = vector_space(5)
    encoder = make_builtin_encoder("mlp", cfg, space.shape)
    with pytest.raises(ConfigError, match=r"--aux_loss_reconstruction_coeff=0.01.*Box"):
        AuxiliaryHeads(cfg, space, spaces.Discrete(3), encoder, 16)
    # off: nothing is needed from the observation
    assert AuxiliaryHeads(aux_cfg(), space, spaces.Discrete(3), encoder, 16).enabled == ()


def test_an_mlp_on_images_is_refused():
    cfg = aux_cfg(future=1.0)
    encoder = make_builtin_encoder("mlp", cfg, SMALL)
    with pytest.raises(ConfigError, match=r"--aux_loss_future_pred_coeff=1.0.*MlpEncoder"):
        AuxiliaryHeads(cfg, image_space(SMALL), spaces.Discrete(3), encoder, 16)


def test_an_image_too_small_for_the_encoder_is_refused():
    cfg = aux_cfg(recon=0.01)
    encoder = make_builtin_encoder("convnet_simple", cfg, (84, 84, 4))
    with pytest.raises(ConfigError, match=r"observation shape \(7, 7, 3\) does not fit"):
        AuxiliaryHeads(cfg, image_space((7, 7, 3)), spaces.Discrete(3), encoder, 16)
    with pytest.raises(ConfigError, match=r"observation shape \(120, 120, 4\) gives a conv output"):
        AuxiliaryHeads(cfg, image_space((120, 120, 4)), spaces.Discrete(3), encoder, 16)


@pytest.mark.parametrize("field, value, match", [
    ("aux_loss_reconstruction_coeff", -0.1, "--aux_loss_reconstruction_coeff=-0.1"),
    ("aux_loss_future_pred_coeff", float("nan"), "--aux_loss_future_pred_coeff=nan"),
    ("aux_loss_future_pred_horizon", 0, "--aux_loss_future_pred_horizon=0"),
])
def test_bad_flags_are_named(field, value, match):
    cfg = aux_cfg(recon=0.01, future=1.0)
    setattr(cfg, field, value)
    encoder = make_builtin_encoder("convnet_simple", cfg, SMALL)
    with pytest.raises(ConfigError, match=match):
        AuxiliaryHeads(cfg, image_space(SMALL), spaces.Discrete(3), encoder, 16)


@pytest.mark.parametrize("recon, future, expected", [
    (0.0, 0.0, ()), (0.01, 0.0, ("aux_reconstruction",)), (0.0, 1.0, ("aux_future_pred",)),
    (0.01, 1.0, ("aux_reconstruction", "aux_future_pred")),
])
def test_only_enabled_terms_are_built_and_returned(recon, future, expected):
    heads, encoder = build(recon, future)
    assert heads.enabled == expected
    assert tuple(heads.coefficients) == expected
    assert (heads.reconstruction_decoder is not None) == (recon > 0)
    assert (heads.future_predictor is not None) == (future > 0)
    names = [n for n, _ in heads.named_parameters()]
    assert all(n.startswith("reconstruction_decoder.") for n in names if recon > 0 and future == 0)
    assert all(n.startswith("future_predictor.") for n in names if future > 0 and recon == 0)
    if not expected:
        assert names == []
    B, T = 2, 5
    b = batch(B, T)
    terms = heads.loss_terms(b["frames"], features_of(encoder, b["frames"], B, T), b["core_out"], b["actions"],
                             b["dones"], b["valids"])
    assert tuple(terms) == expected
    for value in terms.values():
        assert value.dim() == 0 and torch.isfinite(value) and value.item() > 0


@pytest.mark.parametrize("subtype", SUBTYPES)
def test_reconstruction_gradient_reaches_the_encoder(subtype):
    heads, encoder = build(recon=0.01, subtype=subtype)
    B, T = 2, 3
    b = batch(B, T)
    # the frames go in as a model's obs dict, the way the learner holds them
    loss = heads.loss_terms({"obs": b["frames"]}, features_of(encoder, b["frames"], B, T), b["core_out"],
                            b["actions"], b["dones"], b["valids"])["aux_reconstruction"]
    loss.backward()
    for name, p in encoder.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    for name, p in heads.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_reconstruction_targets_are_the_frames_at_steps_0_to_T_minus_1():
    heads, encoder = build(recon=0.01)
    B, T = 2, 3
    b = batch(B, T)
    feats = features_of(encoder, b["frames"], B, T).detach()

    def loss(frames, valids=b["valids"]):
        return heads.loss_terms(frames, feats, b["core_out"], b["actions"], b["dones"], valids)["aux_reconstruction"]

    base = loss(b["frames"])
    last = b["frames"].clone()
    last[:, T] = 255 - last[:, T]  # o_T is the bootstrap frame, not reconstructed
    assert loss(last).item() == base.item()
    changed = b["frames"].clone()
    changed[1, 2] = 255 - changed[1, 2]
    assert loss(changed).item() != base.item()
    valids = b["valids"].clone()
    valids[1, 2] = False  # an invalid sample does not count
    assert loss(changed, valids).item() == loss(b["frames"], valids).item()


def test_reconstruction_subsampling_caps_the_decoded_rows():
    heads, encoder = build(recon=0.01, max_reconstruction_samples=4)
    B, T = 3, 4
    b = batch(B, T)
    seen = []
    heads.reconstruction_decoder.register_forward_hook(lambda m, i, o: seen.append(o.shape[0]))
    heads.loss_terms(b["frames"], features_of(encoder, b["frames"], B, T), b["core_out"], b["actions"],
                     b["dones"], b["valids"])
    assert seen == [4]


def _future_loss(heads, b, frames=None, seed=0):
    return heads.loss_terms(b["frames"] if frames is None else frames, None, b["core_out"], b["actions"],
                            b["dones"], b["valids"], generator=torch.Generator().manual_seed(seed))["aux_future_pred"]


def test_future_mask_keeps_other_episodes_and_invalid_starts_out():
    T, K = 6, 3
    # every start and every horizon decoded, so the term is deterministic
    heads, _ = build(future=1.0, horizon=K, num_future_starts=T, num_future_horizons=K)
    b = batch(2, T)
    b["dones"][0, 2] = True     # trajectory 0: o_3 is the next episode's first frame
    b["valids"][1, 0] = False   # trajectory 1: o_1 is a target only from the invalid start 0
    base = _future_loss(heads, b)
    assert torch.isfinite(base) and base.item() > 0

    def with_changed(*where):
        frames = b["frames"].clone()
        for bi, t in where:
            frames[bi, t] = 255 - frames[bi, t]
        return _future_loss(heads, b, frames).item()

    assert with_changed((0, 3)) == base.item()          # reached only across the done
    assert with_changed((1, 1)) == base.item()          # reached only from an invalid start
    assert with_changed((0, 0), (1, 0)) == base.item()  # o_0 is never a future frame
    assert with_changed((0, 2)) != base.item()          # o_2 from t = 0, 1 in the first episode
    assert with_changed((0, 5)) != base.item()          # o_5 from t = 3, 4 in the second episode
    assert with_changed((0, T)) != base.item()          # the last frame o_T from t = T - 1
    assert with_changed((1, 2)) != base.item()


def test_future_subsampling_is_reproducible_and_masked():
    T, K = 8, 4
    heads, _ = build(future=1.0, horizon=K)  # Brain Agent's 6 starts x 2 horizons
    b = batch(3, T)
    b["dones"][:, 3] = True
    base = _future_loss(heads, b, seed=5)
    assert _future_loss(heads, b, seed=5).item() == base.item()
    frames = b["frames"].clone()
    frames[:, 4] = 255 - frames[:, 4]  # o_4 follows the done at step 3 in every trajectory
    assert _future_loss(heads, b, frames, seed=5).item() == base.item()


def test_future_predictor_is_causal_in_the_actions():
    """h_k sees b_t and a_t .. a_{t+k-1}: later actions change nothing, a_{t+k-1} changes o_{t+k}."""
    K = 4
    heads, _ = build(future=1.0, horizon=K)
    predictor = heads.future_predictor
    beliefs = torch.randn(3, 8)
    actions = torch.randint(0, 4, (3, K, 1)).float()
    horizons = torch.tensor([[1], [2], [3]])
    base = predictor(beliefs, actions, horizons)  # [3 * 1, C, H, W]
    for row, k in enumerate([1, 2, 3]):
        later = actions.clone()
        later[row, k:] = (later[row, k:] + 1) % 4
        torch.testing.assert_close(predictor(beliefs, later, horizons)[row], base[row], rtol=0, atol=0)
        last = actions.clone()
        last[row, k - 1] = (last[row, k - 1] + 1) % 4
        assert not torch.equal(predictor(beliefs, last, horizons)[row], base[row])


def test_future_gradient_reaches_the_sampled_beliefs_only():
    T, K = 6, 3
    heads, _ = build(future=1.0, horizon=K, num_future_starts=2, num_future_horizons=1)
    b = batch(2, T)
    core_out = b["core_out"].clone().requires_grad_(True)
    g = torch.Generator().manual_seed(4)
    heads.loss_terms(b["frames"], None, core_out, b["actions"], b["dones"], b["valids"],
                     generator=g)["aux_future_pred"].backward()
    touched = core_out.grad.abs().sum(-1) > 0  # [B, T]
    assert touched.any()
    assert all(n <= 2 for n in touched.sum(dim=1).tolist())


@pytest.mark.parametrize("action_space, k", [
    (spaces.Discrete(5), 1),
    (spaces.Tuple([spaces.Discrete(3), spaces.Discrete(2)]), 2),
    (spaces.MultiDiscrete([4, 2, 3]), 3),
    (spaces.Box(-1, 1, shape=(2,), dtype=np.float32), 2),
])
def test_future_prediction_for_every_action_layout(action_space, k):
    heads, _ = build(future=1.0, action_space=action_space)
    b = batch(2, 4, k=k, n_actions=2)
    loss = _future_loss(heads, b)
    assert loss.dim() == 0 and torch.isfinite(loss)
    loss.backward()
    assert all(p.grad is not None for p in heads.future_predictor.action_embedding.parameters())


def test_unknown_action_space_is_refused():
    with pytest.raises(ConfigError, match=r"--aux_loss_future_pred_coeff.*Dict"):
        build(future=1.0, action_space=spaces.Dict({"a": spaces.Discrete(2)}))


def test_dict_observation_with_one_image_key():
    cfg = aux_cfg(recon=0.01, future=1.0, hidden_size=16)
    space = spaces.Dict({"screen": image_space(SMALL), "measurements": vector_space(3)})
    encoder = DictEncoder(cfg, space, "convnet_impala")
    heads = AuxiliaryHeads(cfg, space, spaces.Discrete(4), encoder, 8)
    assert heads.image_key == "screen"
    assert heads.reconstruction_decoder.fc.in_features == encoder.out_size  # the whole concatenated output
    B, T = 2, 3
    b = batch(B, T)
    obs = {"screen": b["frames"], "measurements": torch.randn(B, T + 1, 3)}
    feats = encoder({k: v[:, :T].reshape(B * T, *v.shape[2:]).float() for k, v in obs.items()})
    terms = heads.loss_terms(obs, feats, b["core_out"], b["actions"], b["dones"], b["valids"])
    assert set(terms) == {"aux_reconstruction", "aux_future_pred"}
    terms["aux_reconstruction"].backward()
    assert all(p.grad is not None for p in encoder.parts["screen"].parameters())


def test_dict_observation_with_two_images_is_refused():
    cfg = aux_cfg(recon=0.01, hidden_size=16)
    space = spaces.Dict({"left": image_space(SMALL), "right": image_space(SMALL)})
    encoder = DictEncoder(cfg, space, "convnet_impala")
    with pytest.raises(ConfigError, match=r"2 image keys \['left', 'right'\]"):
        AuxiliaryHeads(cfg, space, spaces.Discrete(4), encoder, 8)
