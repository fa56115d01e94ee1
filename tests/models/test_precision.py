"""--mixed_precision: bf16 image encoders (float32 everywhere else) and channels_last convolutions."""

import types

import pytest
import torch

from sfx.cfg import ConfigError
from sfx.engine.buffers import WeightsBuffer
from sfx.models import encoders, precision
from sfx.models.encoders import convnet_simple, resnet_impala

from model_helpers import make_cfg


def cfg(**kw):
    return make_cfg(hidden_size=64, nonlinearity="elu", device="cpu", **kw)


def test_mixed_precision_resolution(monkeypatch):
    assert precision.encoder_uses_bf16(cfg(mixed_precision="off")) is False
    with pytest.raises(AttributeError, match="mixed_precision"):  # the parser holds the default, not the model
        precision.encoder_uses_bf16(types.SimpleNamespace(device="cpu"))
    monkeypatch.setattr(precision, "native_bf16", lambda device: True)
    assert precision.encoder_uses_bf16(cfg(mixed_precision="auto")) is True
    monkeypatch.setattr(precision, "native_bf16", lambda device: False)
    assert precision.encoder_uses_bf16(cfg(mixed_precision="auto")) is False
    # asked for explicitly: used even where it is emulated (with a warning)
    assert precision.encoder_uses_bf16(cfg(mixed_precision="bf16")) is True
    with pytest.raises(ConfigError, match="--mixed_precision=fp8 is not known; allowed: auto, bf16, off"):
        precision.encoder_uses_bf16(cfg(mixed_precision="fp8"))


def test_cpu_bf16_detection_agrees_with_cpuinfo():
    with open("/proc/cpuinfo") as f:
        flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    if not any(f in flags for f in ("avx512_bf16", "amx_bf16")):
        assert precision.cpu_has_native_bf16() is False
    else:
        assert precision.cpu_has_native_bf16() == bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


@pytest.mark.parametrize("factory", [convnet_simple, resnet_impala])
def test_bf16_encoder_stays_close_to_float32_and_outputs_float32(factory):
    torch.manual_seed(0)
    shape = (3, 36, 64)
    enc32 = factory(cfg(mixed_precision="off"), shape)
    enc16 = factory(cfg(mixed_precision="bf16"), shape)
    enc16.load_state_dict(enc32.state_dict())
    assert enc32.bf16 is False and enc16.bf16 is True
    x = torch.rand(8, *shape)
    y16 = enc16(x)
    with torch.no_grad():
        y32 = enc32(x)
    assert y16.dtype == torch.float32 and y16.shape == y32.shape
    # bfloat16 keeps ~3 significant digits: the features agree to a few percent of their scale
    assert float((y16.detach() - y32).abs().max()) <= 0.05 * float(y32.abs().max()) + 1e-3
    # gradients reach the float32 weights as float32
    y16.sum().backward()
    grads = [p.grad for p in enc16.parameters()]
    assert all(g is not None and g.dtype == torch.float32 and torch.isfinite(g).all() for g in grads)


def test_conv_weights_are_channels_last_and_publish_in_logical_order():
    torch.manual_seed(0)
    enc = convnet_simple(cfg(mixed_precision="off"), (3, 36, 64))
    conv = enc.convs[0]
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    encoders.init_weights(enc, "orthogonal")  # drawing into channels_last weights works
    # a policy worker's copy, through the shared weights buffer, computes the same features
    other = convnet_simple(cfg(mixed_precision="off"), (3, 36, 64))
    buf = WeightsBuffer.for_model(enc)
    buf.publish(enc, 1)
    assert buf.read_into(other, 0) == 1
    x = torch.rand(4, 3, 36, 64)
    assert torch.allclose(enc(x), other(x))
    assert other.convs[0].weight.is_contiguous(memory_format=torch.channels_last)


def test_an_acting_model_keeps_bf16_encoder_weights_and_acts_as_the_learner_computes():
    from gymnasium import spaces

    from sfx.registries import default_cfg
    from sfx.models import create_actor_critic

    c = default_cfg(env="gym_CartPole-v1", mixed_precision="bf16", hidden_size=64, rnn_type="lstm", device="cpu",
                    encoder_type="conv", encoder_subtype="convnet_simple")
    obs_space, act_space = spaces.Box(0, 255, (3, 36, 64), "uint8"), spaces.Discrete(3)
    torch.manual_seed(0)
    learner = create_actor_critic(c, obs_space, act_space)
    actor = create_actor_critic(c, obs_space, act_space)
    buf = WeightsBuffer.for_model(learner)
    buf.publish(learner, 3)
    actor.for_inference()
    assert actor.encoder.convs[0].weight.dtype == torch.bfloat16 and actor.core is not None
    assert all(p.dtype == torch.float32 for n, p in actor.named_parameters() if not n.startswith("encoder."))
    assert buf.read_into(actor, 0) == 3  # float32 weights from the learner, rounded into bfloat16
    obs = torch.randint(0, 256, (5, 3, 36, 64), dtype=torch.uint8)
    rnn = torch.zeros(5, learner.rnn_state_size)
    with torch.no_grad():
        expected = learner.forward_step(obs, rnn)
    with torch.inference_mode():
        got = actor.forward_step(obs, rnn)
    for key in ("action_params", "values", "new_rnn_states"):
        assert got[key].dtype == torch.float32
        assert torch.allclose(got[key], expected[key], atol=1e-5), key


def test_tf32_switches_both_matmul_and_convolutions_and_is_off_by_default():
    from types import SimpleNamespace

    from sfx.registries import parse_args
    from sfx.models.precision import apply_tf32

    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        cfg = parse_args(["--env=gym_CartPole-v1"], resume=False)
        assert cfg.tf32 is False
        torch.backends.cudnn.allow_tf32 = True  # PyTorch's own default for convolutions
        apply_tf32(cfg)
        assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == (False, False)
        apply_tf32(SimpleNamespace(tf32=True))
        assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == (True, True)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
