"""Built-in encoders: observation ``[N, *obs_shape]`` (float) -> features ``[N, out_size]``.

* ``mlp``: two fully connected layers of ``hidden_size`` (vector observations; images flattened).
* ``convnet_simple``: conv 8x8/4 x32, 4x4/2 x64, 3x3/2 x128, fc ``hidden_size`` (the classic
  Atari-style stack with a third layer).
* ``convnet_impala``: the IMPALA "shallow" network (Espeholt et al. 2018, fig. 3 left):
  conv 8x8/4 x16, 4x4/2 x32; its fc 256 becomes fc ``hidden_size``.
* ``resnet_impala``: the IMPALA "deep" network (Espeholt et al. 2018, fig. 3 right): three stages
  of 16, 32, 32 channels, each conv 3x3 + max-pool 3x3/2 + two residual blocks; fc ``hidden_size``.

Image encoders take the env's layout: ``[N, H, W, C]`` when the last dimension looks like
channels (1, 3 or 4) and the first does not, else ``[N, C, H, W]``; a 2-D observation is one
channel. They permute to CHW themselves, so buffers keep what the env produced (no copy on the
rollout side).

Convolutions run on channels_last tensors (weights and inputs; oneDNN and cuDNN are fastest so,
1.09-1.28x per learner step on the CPU in float32) and, with ``--mixed_precision`` resolving to bf16
(``sfx.models.precision``), in bfloat16 under autocast; the encoder output is always float32.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn as nn

from sfx.errors import ConfigError
from sfx.models.precision import encoder_uses_bf16

NONLINEARITIES = {"elu": nn.ELU, "relu": nn.ReLU, "tanh": nn.Tanh}
INITIALIZATIONS = ("orthogonal", "xavier_uniform", "kaiming_uniform", "torch_default")
_CHANNEL_COUNTS = (1, 3, 4)


def make_nonlinearity(name: str) -> nn.Module:
    """``elu`` | ``relu`` | ``tanh`` as a module."""
    if name not in NONLINEARITIES:
        raise ConfigError(f"nonlinearity {name!r} is not known; allowed: {', '.join(NONLINEARITIES)}")
    return NONLINEARITIES[name]()


def is_channels_last(obs_shape: Sequence[int]) -> bool:
    """True when a 3-D observation is HWC (what gymnasium image envs produce)."""
    return len(obs_shape) == 3 and obs_shape[-1] in _CHANNEL_COUNTS and obs_shape[0] not in _CHANNEL_COUNTS


def chw_shape(obs_shape: Sequence[int]) -> tuple[int, int, int]:
    """The (C, H, W) an image observation is fed to convolutions as."""
    shape = tuple(int(d) for d in obs_shape)
    if len(shape) == 2:
        return (1, *shape)
    if len(shape) != 3:
        raise ConfigError(f"observation shape {shape} is not an image; allowed for conv/resnet encoders: "
                          f"(H, W), (H, W, C) or (C, H, W)")
    if is_channels_last(shape):
        return (shape[2], shape[0], shape[1])
    return shape


class ImageEncoder(nn.Module):
    """Shared wiring of the conv encoders: layout to CHW, conv stack, flatten, fc ``hidden_size``."""

    def __init__(self, obs_shape: Sequence[int], convs: nn.Module, hidden_size: int, nonlinearity: str,
                 bf16: bool = False):
        super().__init__()
        self.obs_ndim = len(obs_shape)
        self.channels_last = is_channels_last(obs_shape)
        self.bf16 = bool(bf16)
        self.memory_format = torch.channels_last
        self.convs = convs.to(memory_format=self.memory_format)
        c, h, w = chw_shape(obs_shape)
        with torch.no_grad():
            conv_out = self.convs(torch.zeros(1, c, h, w)).numel()
        self.conv_out_size = int(conv_out)
        self.fc = nn.Sequential(nn.Linear(self.conv_out_size, hidden_size), make_nonlinearity(nonlinearity))
        self.out_size = hidden_size

    def for_inference(self) -> None:
        """A model that only acts (a policy worker's) keeps its bf16 encoder's weights in bfloat16:
        autocast would otherwise cast every float32 weight again at every forward pass (the fc alone
        is millions of weights). New float32 weights copied in are rounded exactly as autocast would."""
        if self.bf16:
            self.to(torch.bfloat16)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """``obs [N, *obs_shape]`` float -> ``[N, hidden_size]``."""
        if self.obs_ndim == 2:
            x = obs.unsqueeze(1)
        elif self.channels_last:
            # a permuted view is channels_last in memory, which conv kernels accept directly
            x = obs.permute(0, 3, 1, 2)
        else:
            x = obs
        x = x.contiguous(memory_format=self.memory_format)
        with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            out = self.fc(self.convs(x).flatten(1))
        return out.float()


def _conv_stack(in_channels: int, layers: Sequence[tuple[int, int, int]], nonlinearity: str) -> nn.Sequential:
    """``layers``: (out_channels, kernel, stride) each, every conv followed by the nonlinearity."""
    modules: list[nn.Module] = []
    c = in_channels
    for out_c, k, s in layers:
        modules += [nn.Conv2d(c, out_c, k, stride=s), make_nonlinearity(nonlinearity)]
        c = out_c
    return nn.Sequential(*modules)


def convnet_simple(cfg: Any, obs_shape: Sequence[int]) -> ImageEncoder:
    nl = cfg.nonlinearity
    convs = _conv_stack(chw_shape(obs_shape)[0], [(32, 8, 4), (64, 4, 2), (128, 3, 2)], nl)
    return ImageEncoder(obs_shape, convs, cfg.hidden_size, nl, encoder_uses_bf16(cfg))


def convnet_impala(cfg: Any, obs_shape: Sequence[int]) -> ImageEncoder:
    nl = cfg.nonlinearity
    convs = _conv_stack(chw_shape(obs_shape)[0], [(16, 8, 4), (32, 4, 2)], nl)
    return ImageEncoder(obs_shape, convs, cfg.hidden_size, nl, encoder_uses_bf16(cfg))


class ResidualBlock(nn.Module):
    """x + conv(nl(conv(nl(x)))), both convs 3x3 with the channel count kept (pre-activation)."""

    def __init__(self, channels: int, nonlinearity: str):
        super().__init__()
        self.body = nn.Sequential(
            make_nonlinearity(nonlinearity), nn.Conv2d(channels, channels, 3, padding=1),
            make_nonlinearity(nonlinearity), nn.Conv2d(channels, channels, 3, padding=1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


def resnet_impala(cfg: Any, obs_shape: Sequence[int]) -> ImageEncoder:
    nl = cfg.nonlinearity
    modules: list[nn.Module] = []
    c = chw_shape(obs_shape)[0]
    for out_c in (16, 32, 32):
        modules += [
            nn.Conv2d(c, out_c, 3, padding=1),
            nn.MaxPool2d(3, stride=2, padding=1),
            ResidualBlock(out_c, nl),
            ResidualBlock(out_c, nl),
        ]
        c = out_c
    # the residual stream ends un-activated; activate before the fc as the paper's figure does
    modules.append(make_nonlinearity(nl))
    return ImageEncoder(obs_shape, nn.Sequential(*modules), cfg.hidden_size, nl,
                        encoder_uses_bf16(cfg))


class MlpEncoder(nn.Module):
    """Flattened observation -> fc ``hidden`` -> nl -> fc ``hidden`` -> nl (``hidden``: ``cfg.hidden_size``
    unless given)."""

    def __init__(self, cfg: Any, obs_shape: Sequence[int], hidden: int | None = None):
        super().__init__()
        hidden = cfg.hidden_size if hidden is None else hidden
        nl = cfg.nonlinearity
        in_size = int(math.prod(obs_shape))
        self.net = nn.Sequential(
            nn.Linear(in_size, hidden), make_nonlinearity(nl),
            nn.Linear(hidden, hidden), make_nonlinearity(nl),
        )
        self.out_size = hidden

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs.flatten(1))


class TokenEncoder(nn.Module):
    """Integer token ids ``[N, L]`` (0 = padding, at the end) -> ``[N, hidden]``: embeddings read by
    a GRU, whose state after the last real token is the output (IMPALA's DMLab-30 agent reads
    instructions with an LSTM the same way). An all-padding row gives the GRU's output for
    one padding token."""

    def __init__(self, vocab_size: int, embedding_size: int = 32, hidden: int = 64):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embedding_size, padding_idx=0)
        self.rnn = nn.GRU(embedding_size, hidden, batch_first=True)
        self.out_size = hidden

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        lengths = (tokens != 0).sum(dim=1).clamp(min=1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(self.embedding(tokens), lengths, batch_first=True,
                                                   enforce_sorted=False)
        _, h = self.rnn(packed)
        return h[-1]


DICT_VECTOR_HIDDEN = 128  # measurements and other vectors beside an image are small


class DictEncoder(nn.Module):
    """Dict observations: one encoder per key, outputs concatenated in sorted key order.

    * 2-D / 3-D keys (images): the built-in encoder ``image_encoder`` (an image subtype, or
      ``mlp`` to flatten them);
    * 1-D integer keys: token ids read by :class:`TokenEncoder` (vocabulary: the Box's ``high`` + 1);
    * other 1-D keys (e.g. VizDoom measurements): an MLP of ``DICT_VECTOR_HIDDEN`` units.
    """

    def __init__(self, cfg: Any, obs_space: Any, image_encoder: str):
        super().__init__()
        parts = {}
        for key in sorted(obs_space.spaces):
            sub = obs_space.spaces[key]
            shape = tuple(sub.shape)
            if "." in key or not key:
                raise ConfigError(f"observation key {key!r} is not valid; allowed: a non-empty name without '.'")
            if len(shape) >= 2:
                parts[key] = make_builtin_encoder(image_encoder, cfg, shape)
            elif len(shape) == 1 and np.issubdtype(sub.dtype, np.integer):
                vocab = int(np.max(sub.high)) + 1
                if vocab < 2 or vocab > 10_000_000:
                    raise ConfigError(f"observation key {key!r} holds token ids up to {vocab - 1}; allowed: "
                                      f"a Box with 1 <= high < 10,000,000 (0 is padding)")
                parts[key] = TokenEncoder(vocab)
            else:
                parts[key] = MlpEncoder(cfg, shape, hidden=DICT_VECTOR_HIDDEN)
        self.parts = nn.ModuleDict(parts)
        self.out_size = sum(int(p.out_size) for p in self.parts.values())

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.cat([enc(obs[key]) for key, enc in self.parts.items()], dim=1)


BUILTIN_ENCODERS = {
    "mlp": MlpEncoder,
    "convnet_simple": convnet_simple,
    "convnet_impala": convnet_impala,
    "resnet_impala": resnet_impala,
}


def make_builtin_encoder(name: str, cfg: Any, obs_shape: Sequence[int]) -> nn.Module:
    """Build a built-in encoder by its resolved name (see ``sfx.models.registry``)."""
    return BUILTIN_ENCODERS[name](cfg, obs_shape)


def init_weights(module: nn.Module, scheme: str = "orthogonal", gain: float = 1.0) -> None:
    """Initialize every Linear/Conv2d weight in ``module`` (biases to zero).

    ``scheme``: ``orthogonal`` | ``xavier_uniform`` | ``kaiming_uniform`` | ``torch_default`` (leave PyTorch's
    init, biases included). ``kaiming_uniform`` is PyTorch's own default for these layers' weights
    (``kaiming_uniform_`` with ``a = sqrt(5)``: ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``) times ``gain``: the scale
    Sample Factory's conv and MLP encoders train from (they are ``torch.jit.script`` modules, which its
    orthogonal initialisation does not recognise as layers, so only their biases are zeroed). An orthogonal
    ``W`` with gain 1 has ``|W|_F = sqrt(out)``, this one ``sqrt(out / 3)``: each layer 0.58x as large.
    """
    if scheme not in INITIALIZATIONS:
        raise ConfigError(f"initialization {scheme!r} (--policy_initialization, --encoder_initialization) is not "
                          f"known; allowed: {', '.join(INITIALIZATIONS)}")
    if scheme == "torch_default":
        return
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Conv2d, nn.ConvTranspose2d)):  # transposed: the auxiliary decoders
            # drawn into a contiguous tensor, then copied: conv weights are channels_last in memory
            w = torch.empty(m.weight.shape, dtype=m.weight.dtype, device=m.weight.device)
            if scheme == "orthogonal":
                nn.init.orthogonal_(w, gain=gain)
            elif scheme == "xavier_uniform":
                nn.init.xavier_uniform_(w, gain=gain)
            else:
                nn.init.kaiming_uniform_(w, a=math.sqrt(5))
                w.mul_(gain)
            with torch.no_grad():
                m.weight.copy_(w)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
