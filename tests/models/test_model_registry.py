"""Custom encoders and the errors a typo in a model flag gives."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from gymnasium import spaces

from sfx.cfg import ConfigError
from sfx.models import create_actor_critic, register_encoder, registered_encoders, unregister_encoder

from model_helpers import image_space, make_cfg, random_obs, vector_space, seeded  # noqa: F401 (seeded: autouse fixture)


class TinyEncoder(nn.Module):
    def __init__(self, cfg, obs_space):
        super().__init__()
        self.seen_space = obs_space
        self.out_size = 7
        self.fc = nn.Linear(int(torch.tensor(obs_space.shape).prod()), 7)
        self.inputs: list[torch.Tensor] = []

    def forward(self, obs):
        self.inputs.append(obs)
        return torch.tanh(self.fc(obs.flatten(1)))


@pytest.fixture
def tiny():
    register_encoder("tiny_test_encoder", TinyEncoder)
    yield "tiny_test_encoder"
    unregister_encoder("tiny_test_encoder")
    assert "tiny_test_encoder" not in registered_encoders()


@pytest.mark.parametrize("field", ["encoder_type", "encoder_subtype"])
def test_custom_encoder_is_used(tiny, field):
    cfg = make_cfg(**{field: tiny}, hidden_size=10, rnn_type="lstm")
    space = image_space((8, 8, 3))
    model = create_actor_critic(cfg, space, spaces.Discrete(3))
    assert isinstance(model.encoder, TinyEncoder)
    assert model.encoder.seen_space is space
    assert model.core.rnn.input_size == 7
    obs = torch.full((2, 8, 8, 3), 255, dtype=torch.uint8)
    out = model.forward_step(obs, torch.zeros(2, model.rnn_state_size))
    assert out["action_params"].shape == (2, 3)
    # custom encoders get preprocessed observations: floats, images scaled
    torch.testing.assert_close(model.encoder.inputs[-1], torch.ones(2, 8, 8, 3))


def test_custom_encoder_on_vector_obs(tiny):
    cfg = make_cfg(encoder_type=tiny)
    model = create_actor_critic(cfg, vector_space(4), spaces.Discrete(2))
    assert isinstance(model.encoder, TinyEncoder)
    seq = model.forward_sequence(random_obs(vector_space(4), 2, 3), torch.zeros(2, model.rnn_state_size),
                                 torch.zeros(2, 3, dtype=torch.bool))
    assert seq["values"].shape == (2, 3)


def test_encoder_without_out_size_is_refused():
    register_encoder("no_out_size_test", lambda cfg, space: nn.Identity())
    try:
        with pytest.raises(ConfigError, match="out_size"):
            create_actor_critic(make_cfg(encoder_type="no_out_size_test"), vector_space(), spaces.Discrete(2))
    finally:
        unregister_encoder("no_out_size_test")


def test_reserved_names_cannot_be_registered():
    with pytest.raises(ConfigError, match="'conv'"):
        register_encoder("conv", TinyEncoder)


def test_bad_encoder_type_names_value_and_choices(tiny):
    with pytest.raises(ValueError) as e:
        create_actor_critic(make_cfg(encoder_type="convv"), image_space((36, 36, 3)), spaces.Discrete(2))
    assert isinstance(e.value, ConfigError)
    msg = str(e.value)
    assert "'convv'" in msg and "\n" not in msg
    for allowed in ("conv", "resnet", "mlp", tiny):
        assert allowed in msg


@pytest.mark.parametrize("field, value, allowed", [
    ("encoder_subtype", "convnet_huge", "convnet_simple"),
    ("rnn_type", "transformer", "lstm"),
    ("nonlinearity", "swish", "relu"),
    ("policy_initialization", "kaiming", "orthogonal"),
    ("rnn_num_layers", 0, ">= 1"),
    ("hidden_size", 0, ">= 1"),
])
def test_bad_model_flags(field, value, allowed):
    with pytest.raises(ConfigError) as e:
        create_actor_critic(make_cfg(**{field: value}), image_space((36, 36, 3)), spaces.Discrete(2))
    msg = str(e.value)
    assert repr(value) in msg and allowed in msg and "\n" not in msg


def test_subtype_must_fit_family():
    with pytest.raises(ConfigError, match="resnet_impala"):
        create_actor_critic(make_cfg(encoder_type="resnet", encoder_subtype="convnet_simple"),
                            image_space((36, 36, 3)), spaces.Discrete(2))
