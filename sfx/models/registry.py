"""Which encoder a cfg asks for: built-in encoders by family and subtype, plus user-registered ones.

Resolution (``resolve_encoder``), first match wins:

1. ``cfg.encoder_type`` is a registered custom name -> that factory.
2. ``cfg.encoder_subtype`` is a registered custom name -> that factory (any obs shape).
3. 1-D observations -> the built-in MLP, whatever the family (vector envs keep the conv defaults).
4. ``encoder_type`` ``conv`` or ``resnet`` -> the built-in image encoder named by ``encoder_subtype``
   (``conv``: convnet_simple | convnet_impala; ``resnet``: resnet_impala).
5. ``encoder_type`` ``mlp`` -> the built-in MLP over the flattened observation.

A Dict observation space gets the built-in ``DictEncoder`` (one encoder per key, concatenated);
the name resolved by the rules above is the encoder its image keys get.

A custom factory is called as ``factory(cfg, obs_space)`` and must return an ``nn.Module`` with an
integer ``out_size`` attribute; it receives float observations in the env's own layout, integer
images as ``(x - obs_subtract_mean) / obs_scale``, and, when ``normalize_input``, images and 1-D
float vectors already standardized by the running statistics
(for a Dict space: ``{key: tensor}`` so prepared, integer 1-D keys as int64 token ids).
"""

from __future__ import annotations

from typing import Any, Callable

import gymnasium as gym
import torch.nn as nn

from sfx.errors import ConfigError

EncoderFactory = Callable[[Any, gym.Space], nn.Module]

ENCODER_FAMILIES = ("conv", "resnet", "mlp")
# subtypes each image family accepts
IMAGE_SUBTYPES = {
    "conv": ("convnet_simple", "convnet_impala"),
    "resnet": ("resnet_impala",),
}

_custom_encoders: dict[str, EncoderFactory] = {}


def register_encoder(name: str, factory: EncoderFactory) -> None:
    """Make ``cfg.encoder_type = name`` (or ``cfg.encoder_subtype = name``) build ``factory(cfg, obs_space)``.

    The factory returns an ``nn.Module`` with an ``out_size: int`` attribute that maps float
    observations ``[N, *obs_shape]`` to features ``[N, out_size]``. Registering a name again
    replaces the earlier factory; a name equal to a built-in subtype overrides that built-in.
    """
    if not isinstance(name, str) or not name:
        raise ConfigError(f"encoder name {name!r} is not valid; allowed: a non-empty string")
    if name in ENCODER_FAMILIES:
        raise ConfigError(f"encoder name {name!r} is reserved for a built-in family; "
                          f"allowed: any name except {', '.join(ENCODER_FAMILIES)}")
    if not callable(factory):
        raise ConfigError(f"encoder factory for {name!r} is {factory!r}; allowed: a callable(cfg, obs_space)")
    _custom_encoders[name] = factory


def unregister_encoder(name: str) -> None:
    """Forget a custom encoder (tests use it to leave the registry as they found it)."""
    _custom_encoders.pop(name, None)


def registered_encoders() -> list[str]:
    """Names of the custom encoders registered so far."""
    return sorted(_custom_encoders)


def allowed_encoder_types() -> list[str]:
    return list(ENCODER_FAMILIES) + registered_encoders()


def resolve_encoder(cfg: Any, obs_space: gym.Space) -> tuple[str, EncoderFactory | None]:
    """Return ``(name, custom_factory)``: a custom factory, or ``None`` with the built-in name
    (``mlp`` or an image subtype) to build. Raises ConfigError for names nobody knows."""
    enc_type = cfg.encoder_type
    enc_subtype = cfg.encoder_subtype

    if enc_type in _custom_encoders:
        return enc_type, _custom_encoders[enc_type]
    if enc_type not in ENCODER_FAMILIES:
        raise ConfigError(f"encoder_type {enc_type!r} is not known; allowed: "
                          f"{', '.join(allowed_encoder_types())}")
    if enc_subtype in _custom_encoders:
        return enc_subtype, _custom_encoders[enc_subtype]

    if isinstance(obs_space, gym.spaces.Dict):
        # a DictEncoder: the name returned is the one its image keys get
        shapes = [getattr(s, "shape", None) or () for s in obs_space.spaces.values()]
        if enc_type == "mlp" or all(len(s) < 2 for s in shapes):
            return "mlp", None
    else:
        shape = getattr(obs_space, "shape", None)
        if not isinstance(obs_space, gym.spaces.Box) or shape is None:
            raise ConfigError(f"observation space {obs_space} is not supported by the built-in encoders; "
                              f"allowed: gymnasium Box or Dict of Boxes (or register a custom encoder)")
        if len(shape) == 1 or enc_type == "mlp":
            return "mlp", None
    allowed = IMAGE_SUBTYPES[enc_type]
    if enc_subtype not in allowed:
        raise ConfigError(f"encoder_subtype {enc_subtype!r} does not fit encoder_type {enc_type!r}; "
                          f"allowed: {', '.join(allowed + tuple(registered_encoders()))}")
    return enc_subtype, None
