"""Encoder shapes, image layouts and observation preprocessing."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from sfx.models import create_actor_critic
from sfx.models.actor_critic import IMAGE_STATS_ROWS
from sfx.models.encoders import ImageEncoder, MlpEncoder, chw_shape, is_channels_last

from model_helpers import image_space, make_cfg, random_obs, vector_space, seeded  # noqa: F401 (seeded: autouse fixture)

IMAGE_ENCODERS = [("conv", "convnet_simple"), ("conv", "convnet_impala"), ("resnet", "resnet_impala")]


@pytest.mark.parametrize("shape, expected", [
    ((72, 128, 3), (3, 72, 128)), ((3, 72, 128), (3, 72, 128)), ((84, 84, 4), (4, 84, 84)),
    ((4, 84, 84), (4, 84, 84)), ((84, 84, 1), (1, 84, 84)), ((84, 84), (1, 84, 84)),
])
def test_layout_detection(shape, expected):
    assert chw_shape(shape) == expected
    assert is_channels_last(shape) == (len(shape) == 3 and shape[0] != expected[0])


@pytest.mark.parametrize("enc_type, subtype", IMAGE_ENCODERS)
@pytest.mark.parametrize("shape", [(72, 128, 3), (3, 72, 128)])
def test_image_encoder_shapes(enc_type, subtype, shape):
    cfg = make_cfg(encoder_type=enc_type, encoder_subtype=subtype, hidden_size=24, use_rnn=False)
    space = image_space(shape)
    model = create_actor_critic(cfg, space, spaces.Discrete(6))
    assert isinstance(model.encoder, ImageEncoder)
    assert model.encoder.out_size == 24
    out = model.forward_step(random_obs(space, 4), torch.zeros(4, 1))
    assert out["action_params"].shape == (4, 6)
    assert out["values"].shape == (4,)
    assert torch.isfinite(out["action_params"]).all() and torch.isfinite(out["values"]).all()


@pytest.mark.parametrize("enc_type, subtype", IMAGE_ENCODERS)
def test_hwc_and_chw_give_the_same_network(enc_type, subtype):
    """The same weights see the same picture whether the env gives HWC or CHW."""
    cfg = make_cfg(encoder_type=enc_type, encoder_subtype=subtype, use_rnn=False)
    hwc, chw = image_space((72, 128, 3)), image_space((3, 72, 128))
    m_hwc = create_actor_critic(cfg, hwc, spaces.Discrete(3))
    m_chw = create_actor_critic(cfg, chw, spaces.Discrete(3))
    m_chw.load_state_dict(m_hwc.state_dict())
    obs = random_obs(hwc, 2)
    a = m_hwc.forward_step(obs, torch.zeros(2, 1))
    b = m_chw.forward_step(obs.permute(0, 3, 1, 2).contiguous(), torch.zeros(2, 1))
    torch.testing.assert_close(a["action_params"], b["action_params"])
    torch.testing.assert_close(a["values"], b["values"])


def test_conv_output_sizes_match_the_architecture():
    cfg = make_cfg(use_rnn=False)
    space = image_space((84, 84, 4))
    # 84 -> (84-8)/4+1 = 20 -> (20-4)/2+1 = 9 -> (9-3)/2+1 = 4; 128 channels
    assert create_actor_critic(cfg, space, spaces.Discrete(2)).encoder.conv_out_size == 128 * 4 * 4
    cfg.encoder_subtype = "convnet_impala"  # 84 -> 20 -> 9; 32 channels
    assert create_actor_critic(cfg, space, spaces.Discrete(2)).encoder.conv_out_size == 32 * 9 * 9
    cfg.encoder_type, cfg.encoder_subtype = "resnet", "resnet_impala"  # 84 -> 42 -> 21 -> 11; 32 ch
    assert create_actor_critic(cfg, space, spaces.Discrete(2)).encoder.conv_out_size == 32 * 11 * 11


@pytest.mark.parametrize("enc_type", ["conv", "resnet", "mlp"])
def test_vector_obs_always_use_an_mlp(enc_type):
    subtype = {"conv": "convnet_simple", "resnet": "resnet_impala", "mlp": "mlp_mujoco"}[enc_type]
    cfg = make_cfg(encoder_type=enc_type, encoder_subtype=subtype, hidden_size=20)
    model = create_actor_critic(cfg, vector_space(7), spaces.Box(-1, 1, (2,), np.float32))
    assert isinstance(model.encoder, MlpEncoder)
    linears = [m for m in model.encoder.modules() if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(7, 20), (20, 20)]
    out = model.forward_step(random_obs(vector_space(7), 3), torch.zeros(3, model.rnn_state_size))
    assert out["action_params"].shape == (3, 4)  # Gaussian: mean and log_std


def test_mlp_encoder_on_images_flattens():
    cfg = make_cfg(encoder_type="mlp", encoder_subtype="mlp_mujoco", use_rnn=False)
    space = image_space((6, 8, 3))
    model = create_actor_critic(cfg, space, spaces.Discrete(2))
    assert isinstance(model.encoder, MlpEncoder)
    assert model.forward_step(random_obs(space, 2), torch.zeros(2, 1))["values"].shape == (2,)


def test_uint8_images_are_divided_by_obs_scale():
    cfg = make_cfg(obs_scale=255.0, use_rnn=False, normalize_input=False)
    space = image_space((36, 36, 3))
    model = create_actor_critic(cfg, space, spaces.Discrete(2))
    obs = torch.full((1, 36, 36, 3), 255, dtype=torch.uint8)
    torch.testing.assert_close(model.preprocess_obs(obs), torch.ones(1, 36, 36, 3))
    assert model.obs_normalizer is None  # without --normalize_input images are only scaled
    cfg.obs_scale = 51.0
    model = create_actor_critic(cfg, space, spaces.Discrete(2))
    torch.testing.assert_close(model.preprocess_obs(obs), torch.full((1, 36, 36, 3), 5.0))


@pytest.mark.parametrize("shape", [(3, 36, 40), (36, 40, 3)])
def test_normalize_input_standardizes_images_per_pixel(shape):
    """--normalize_input: frames are divided by obs_scale, then standardized per pixel and channel by
    running statistics kept in (C, H, W) whatever the env's layout."""
    cfg = make_cfg(use_rnn=False, normalize_input=True)
    space = image_space(shape)
    model = create_actor_critic(cfg, space, spaces.Discrete(2))
    assert tuple(model.obs_normalizer.mean.shape) == (3, 36, 40)
    gen = torch.Generator().manual_seed(0)
    # a static background (differs per pixel) plus a little noise: standardized, the background is gone
    background = torch.randint(0, 200, shape, generator=gen, dtype=torch.int64)
    frames = (background + torch.randint(0, 50, (4000, *shape), generator=gen)).to(torch.uint8)
    for chunk in frames.reshape(16, 10, 25, *shape):  # any leading dims; 250 frames per update: all used
        model.update_obs_normalizer(chunk)
    z = model.preprocess_obs(frames[:1000])
    assert z.shape == (1000, *shape)
    assert float(z.mean(0).abs().max()) < 0.2 and float((z.std(0) - 1).abs().max()) < 0.15
    # a batch larger than IMAGE_STATS_ROWS is folded in through an evenly spread subset of its frames
    before = float(model.obs_normalizer.count)
    model.update_obs_normalizer(frames[:1000])
    assert float(model.obs_normalizer.count) == before + IMAGE_STATS_ROWS
    chw = frames if shape[0] == 3 else frames.permute(0, 3, 1, 2)
    torch.testing.assert_close(model.obs_normalizer.mean.float(), chw.double().mean(0).float() / 255.0,
                               atol=0.02, rtol=0)


def test_float_images_are_not_scaled():
    space = spaces.Box(0, 1, shape=(3, 36, 36), dtype=np.float32)
    model = create_actor_critic(make_cfg(use_rnn=False), space, spaces.Discrete(2))
    obs = torch.rand(2, 3, 36, 36)
    torch.testing.assert_close(model.preprocess_obs(obs), obs)


def test_vector_obs_normalizer_standardizes():
    space = vector_space(3)
    model = create_actor_critic(make_cfg(), space, spaces.Discrete(2))
    assert model.obs_normalizer is not None
    data = torch.randn(4000, 3) * torch.tensor([1.0, 10.0, 0.1]) + torch.tensor([5.0, -20.0, 3.0])
    model.update_obs_normalizer(data.reshape(40, 100, 3))  # any leading dims
    x = model.preprocess_obs(data)
    torch.testing.assert_close(x.mean(0), torch.zeros(3), atol=1e-3, rtol=0)
    torch.testing.assert_close(x.std(0), torch.ones(3), atol=1e-2, rtol=0)
    off = create_actor_critic(make_cfg(normalize_input=False), space, spaces.Discrete(2))
    assert off.obs_normalizer is None
    off.update_obs_normalizer(data)  # a no-op, not an error
    torch.testing.assert_close(off.preprocess_obs(data), data)
