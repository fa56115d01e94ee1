"""Auxiliary heads (Brain Agent, Kakao Brain 2022): frame reconstruction and future-frame prediction.

``AuxiliaryHeads`` is the one object a learner needs: built from cfg next to the actor-critic, it
holds only the enabled parts and turns a minibatch into named scalar loss terms
(``aux_reconstruction``, ``aux_future_pred``); the learner adds ``coeff * term``
(``AuxiliaryHeads.coefficients``). The math is in ``sfx.algo.aux_losses``.

* ``FrameDecoder`` mirrors a built-in ``ImageEncoder`` (convnet_simple, convnet_impala,
  resnet_impala): features -> linear -> the conv output's shape -> the conv stack reversed with
  transposed convolutions (channels and strides reversed) -> tanh, a ``[N, C, H, W]`` frame of
  exactly the encoder's input size.
* ``FuturePredictor`` rolls a GRU cell forward from the core's output over the actions taken and
  decodes each state into a future frame (Gregor et al. 2019, as Brain Agent does with a causal
  transformer).

Frames come as the buffers store them (the env's layout, HWC or CHW, usually uint8) and are put
in CHW by the rule the image encoders use (``sfx.models.encoders.is_channels_last``).
"""

from __future__ import annotations

import copy
import math
from typing import Any, Mapping, Sequence

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn

from sfx.algo.aux_losses import (frame_targets, future_mask, future_prediction_loss, reconstruction_loss,
                                 sample_horizons, sample_start_times)
from sfx.algo.distributions import UnsupportedActionSpaceError, action_shape, categorical_sizes
from sfx.errors import ConfigError
from sfx.models.encoders import (NONLINEARITIES, DictEncoder, ImageEncoder, ResidualBlock, chw_shape,
                                 init_weights, is_channels_last, make_nonlinearity)
from sfx.models.obs import BOX_KEY

AUX_TERMS = ("aux_reconstruction", "aux_future_pred")
_ACTIVATIONS = tuple(NONLINEARITIES.values())


def frames_to_chw(frames: torch.Tensor, obs_shape: Sequence[int]) -> torch.Tensor:
    """``[N, *obs_shape]`` in the env's layout -> ``[N, C, H, W]`` (a view; HWC frames are
    permuted exactly as ``ImageEncoder`` does, a 2-D frame becomes one channel)."""
    if len(obs_shape) == 2:
        return frames.unsqueeze(1)
    if is_channels_last(obs_shape):
        return frames.permute(0, 3, 1, 2)
    return frames


def _fresh_copy(module: nn.Module) -> nn.Module:
    """A structural copy with its own, re-drawn weights (a decoder must not start from the encoder's)."""
    twin = copy.deepcopy(module)
    for m in twin.modules():
        if hasattr(m, "reset_parameters"):
            m.reset_parameters()
    return twin


def _mirror_layer(layer: nn.Module, in_shape: tuple[int, int, int], out_shape: tuple[int, int, int],
                  index: int) -> nn.Module:
    """The decoder layer that maps ``out_shape`` back to ``in_shape`` for one encoder layer."""
    if isinstance(layer, nn.Conv2d):
        if layer.groups != 1 or layer.dilation != (1, 1) or isinstance(layer.padding, str):
            raise ConfigError(f"FrameDecoder cannot mirror encoder layer {index} ({layer}); allowed: Conv2d "
                              f"without groups, dilation or string padding")
        (kh, kw), (sh, sw), (ph, pw) = layer.kernel_size, layer.stride, layer.padding
        # the rows a strided conv drops at the border come back as output_padding (< stride always)
        pad_h = in_shape[1] - ((out_shape[1] - 1) * sh - 2 * ph + kh)
        pad_w = in_shape[2] - ((out_shape[2] - 1) * sw - 2 * pw + kw)
        return nn.ConvTranspose2d(layer.out_channels, layer.in_channels, (kh, kw), stride=(sh, sw),
                                  padding=(ph, pw), output_padding=(pad_h, pad_w))
    if isinstance(layer, (nn.MaxPool2d, nn.AvgPool2d)):
        # parameter-free and exact: nearest upsampling to the size before the pool
        return nn.Upsample(size=(in_shape[1], in_shape[2]), mode="nearest")
    if isinstance(layer, (ResidualBlock, *_ACTIVATIONS)):
        return _fresh_copy(layer)
    raise ConfigError(f"FrameDecoder cannot mirror encoder layer {index} ({type(layer).__name__}); allowed: "
                      f"the layers of the built-in image encoders (Conv2d, MaxPool2d, ResidualBlock, "
                      f"{', '.join(NONLINEARITIES)})")


class FrameDecoder(nn.Module):
    """Features ``[N, F]`` -> a frame ``[N, C, H, W]`` in ``[-1, 1]``, the mirror of an ``ImageEncoder``.

    Linear ``F -> conv_out_size`` (reshaped to the conv stack's output ``[C', H', W']``), then the
    encoder's conv stack in reverse: each Conv2d becomes a ConvTranspose2d with the channels swapped
    and the same kernel, stride and padding, each max-pool a nearest upsampling to the exact size
    before it, each residual block and nonlinearity a fresh one of the same kind; a final tanh.
    The output size is exact by construction (``output_padding`` on the transposed convolutions
    restores the border rows a strided conv drops; no crop or interpolation), and checked once here.

    Runs channels_last and, when the encoder does, in bfloat16 under autocast (output float32).
    """

    def __init__(self, encoder: ImageEncoder, obs_shape: Sequence[int], in_features: int | None = None,
                 initialization: str = "orthogonal", gain: float = 1.0):
        """``encoder``: the built ``ImageEncoder`` for ``obs_shape`` (only its architecture is read, no
        weights are shared). ``in_features``: width of the features decoded (default ``encoder.out_size``).
        ``initialization``, ``gain``: as ``--policy_initialization`` and ``--policy_init_gain``."""
        super().__init__()
        if not isinstance(encoder, ImageEncoder):
            raise ConfigError(f"FrameDecoder needs a built-in image encoder (convnet_simple, convnet_impala, "
                              f"resnet_impala); got {type(encoder).__name__}")
        self.chw = chw_shape(obs_shape)
        trace = _trace_conv_stack(encoder, obs_shape)
        self.conv_out_shape = trace[-1][2] if trace else self.chw
        in_features = int(encoder.out_size if in_features is None else in_features)
        self.fc = nn.Linear(in_features, math.prod(self.conv_out_shape))
        layers = [_mirror_layer(layer, i_shape, o_shape, i)
                  for i, (layer, i_shape, o_shape) in reversed(list(enumerate(trace)))]
        self.deconvs = nn.Sequential(*layers, nn.Tanh())
        init_weights(self, initialization, gain)
        self.bf16 = bool(encoder.bf16)
        self.memory_format = torch.channels_last
        self.deconvs.to(memory_format=self.memory_format)
        device = next(encoder.parameters()).device
        self.to(device)
        with torch.no_grad():
            out_shape = tuple(self.deconvs(torch.zeros(1, *self.conv_out_shape, device=device)).shape[1:])
        if out_shape != self.chw:  # a layer the mirror rules got wrong, never the user's doing
            raise RuntimeError(f"FrameDecoder built {out_shape} frames for observations {tuple(obs_shape)} "
                               f"(expected {self.chw})")

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """``features [N, F]`` -> ``[N, C, H, W]`` float32 in ``[-1, 1]`` (channels_last in memory)."""
        with torch.autocast(features.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            x = self.fc(features).view(features.shape[0], *self.conv_out_shape)
            out = self.deconvs(x.contiguous(memory_format=self.memory_format))
        return out.float()


def _trace_conv_stack(encoder: ImageEncoder, obs_shape: Sequence[int]
                      ) -> list[tuple[nn.Module, tuple[int, int, int], tuple[int, int, int]]]:
    """``(layer, input CHW, output CHW)`` of each layer of ``encoder.convs`` for one frame of
    ``obs_shape``; ConfigError when the frame does not fit the stack or the encoder was built
    for another shape."""
    c, h, w = chw_shape(obs_shape)
    param = next(encoder.parameters())
    x = torch.zeros(1, c, h, w, device=param.device, dtype=param.dtype)
    trace = []
    with torch.no_grad():
        for i, layer in enumerate(encoder.convs):
            try:
                y = layer(x)
            except RuntimeError as e:
                raise ConfigError(f"observation shape {tuple(obs_shape)} does not fit the encoder's conv stack "
                                  f"(layer {i}, {type(layer).__name__}, gets {tuple(x.shape[1:])}: {e}); "
                                  f"allowed: an image at least as large as the encoder was built for") from None
            trace.append((layer, tuple(x.shape[1:]), tuple(y.shape[1:])))
            x = y
    if x.numel() != encoder.conv_out_size:
        raise ConfigError(f"observation shape {tuple(obs_shape)} gives a conv output of {x.numel()} values but "
                          f"the encoder was built for {encoder.conv_out_size}; allowed: the shape the encoder "
                          f"was built for")
    return trace


def _action_sizes(action_space: gym.Space) -> list[int] | None:
    """``categorical_sizes`` of the action space, with the aux flag named when it is not supported."""
    try:
        return categorical_sizes(action_space)
    except UnsupportedActionSpaceError:
        raise ConfigError(f"--aux_loss_future_pred_coeff needs an action space it can embed; got {action_space}; "
                          f"allowed: Discrete, Tuple of Discrete, MultiDiscrete (1-D) or Box") from None


class ActionEmbedding(nn.Module):
    """Stored actions ``[..., k]`` (float rows, see ``sfx.algo.distributions``) -> ``[..., size]``.

    Categorical columns: one embedding table over all components' choices (offsets keep them apart),
    the ``k`` rows summed, i.e. a linear layer over the concatenated one-hots without materialising
    them. Box actions: a linear layer over the values as stored. Then the nonlinearity.
    """

    def __init__(self, action_space: gym.Space, size: int, nonlinearity: str):
        super().__init__()
        sizes = _action_sizes(action_space)
        self.categorical = sizes is not None
        if self.categorical:
            self.register_buffer("offsets", torch.tensor([0] + sizes[:-1]).cumsum(0), persistent=False)
            self.register_buffer("limits", torch.tensor(sizes) - 1, persistent=False)
            self.embed: nn.Module = nn.Embedding(sum(sizes), size)
        else:
            self.embed = nn.Linear(action_shape(action_space), size)
        self.nl = make_nonlinearity(nonlinearity)

    def forward(self, actions: torch.Tensor) -> torch.Tensor:
        if self.categorical:
            index = torch.minimum(actions.long().clamp(min=0), self.limits) + self.offsets
            return self.nl(self.embed(index).sum(dim=-2))
        return self.nl(self.embed(actions.float()))


class FuturePredictor(nn.Module):
    """Predicts ``o_{t+k}`` from the core's output ``b_t`` and the actions ``a_t .. a_{t+k-1}``:

        h_0 = tanh(W b_t),   h_k = GRUCell(embed(a_{t+k-1}), h_{k-1}),   o_{t+k} ~ decoder(h_k)

    Causal by construction: ``h_k`` sees only the actions before ``o_{t+k}``. Brain Agent uses a
    causal transformer over the same inputs; a GRU cell is our choice because it costs
    ``K`` small matrix products over ``[B * starts, hidden]`` rows (no attention over the
    horizon, no positional encoding), far below the frame decoder's cost, while keeping the
    belief-to-future structure of Gregor et al. 2019.
    """

    def __init__(self, belief_size: int, action_space: gym.Space, decoder: FrameDecoder, hidden_size: int,
                 action_embedding_size: int = 32, nonlinearity: str = "elu"):
        """``decoder`` reads ``hidden_size`` features (build it with ``in_features=hidden_size``)."""
        super().__init__()
        self.hidden_size = int(hidden_size)
        self.belief_proj = nn.Sequential(nn.Linear(belief_size, self.hidden_size), nn.Tanh())
        self.action_embedding = ActionEmbedding(action_space, action_embedding_size, nonlinearity)
        self.cell = nn.GRUCell(action_embedding_size, self.hidden_size)
        self.decoder = decoder

    def forward(self, beliefs: torch.Tensor, actions: torch.Tensor, horizons: torch.Tensor) -> torch.Tensor:
        """Predicted frames for chosen horizons.

        Args:
            beliefs: ``[N, Hb]`` the core's outputs ``b_t``.
            actions: ``[N, K, k]`` stored actions ``a_t .. a_{t+K-1}``.
            horizons: ``[N, Hn]`` int64 in ``[1, K]``: which ``o_{t+k}`` to decode.

        Returns:
            ``[N * Hn, C, H, W]`` in ``[-1, 1]``, row ``n * Hn + j`` predicting ``o_{t+horizons[n, j]}``.
        """
        N, K = actions.shape[:2]
        emb = self.action_embedding(actions)  # [N, K, E], all steps at once
        h = self.belief_proj(beliefs)
        states = []
        for k in range(K):
            h = self.cell(emb[:, k], h)
            states.append(h)
        states = torch.stack(states, dim=1)  # [N, K, G]: h_1 .. h_K
        picked = states.gather(1, (horizons - 1).unsqueeze(-1).expand(-1, -1, self.hidden_size))
        return self.decoder(picked.reshape(-1, self.hidden_size))


def _flag_list(recon: float, future: float) -> str:
    flags = []
    if recon > 0:
        flags.append(f"--aux_loss_reconstruction_coeff={recon}")
    if future > 0:
        flags.append(f"--aux_loss_future_pred_coeff={future}")
    return " and ".join(flags)


class AuxiliaryHeads(nn.Module):
    """The enabled auxiliary losses of one policy, as modules and loss terms.

    Attributes:
        enabled: the term names built, among ``("aux_reconstruction", "aux_future_pred")``
            (a term whose coefficient is 0 builds no parameters).
        coefficients: ``{term: coeff}`` for the enabled terms (the learner adds ``coeff * term``).
        image_key: the observation key the frames are read from (``"obs"`` for a Box space).
        horizon: ``K`` of the future prediction (``cfg.aux_loss_future_pred_horizon``).
        reconstruction_decoder: ``FrameDecoder`` from the encoder's features (when enabled).
        future_predictor: ``FuturePredictor`` (when enabled).
    """

    def __init__(self, cfg: Any, obs_space: gym.Space, action_space: gym.Space, encoder: nn.Module,
                 core_out_size: int, num_future_starts: int = 6, num_future_horizons: int = 2,
                 max_reconstruction_samples: int | None = None, future_hidden_size: int | None = None,
                 action_embedding_size: int = 32):
        """Reads ``cfg.aux_loss_reconstruction_coeff``, ``cfg.aux_loss_future_pred_coeff``,
        ``cfg.aux_loss_future_pred_horizon``, ``cfg.nonlinearity``, ``cfg.policy_initialization``,
        ``cfg.policy_init_gain``.

        Args:
            encoder: the model's (actor's) encoder: a built-in ``ImageEncoder`` for a Box image space,
                or a ``DictEncoder`` whose one image key has one (the features decoded are then the
                whole concatenated output).
            core_out_size: width of the core's output (the future predictor's belief).
            num_future_starts: start times per trajectory (Brain Agent: 6).
            num_future_horizons: horizons decoded per start (Brain Agent: 2 of the ``K``).
            max_reconstruction_samples: reconstruct at most this many samples per minibatch (evenly
                spread over it); ``None``: all (Brain Agent).
            future_hidden_size: the predictor's GRU width; ``None``: ``core_out_size``.
            action_embedding_size: width of the predictor's action embedding.
        """
        super().__init__()
        recon = float(cfg.aux_loss_reconstruction_coeff)
        future = float(cfg.aux_loss_future_pred_coeff)
        horizon = cfg.aux_loss_future_pred_horizon
        for name, value in (("aux_loss_reconstruction_coeff", recon), ("aux_loss_future_pred_coeff", future)):
            if not math.isfinite(value) or value < 0:
                raise ConfigError(f"--{name}={value} is not valid; allowed: a number >= 0 (0 turns the loss off)")
        if future > 0 and (not isinstance(horizon, (int, np.integer)) or isinstance(horizon, bool) or horizon < 1):
            raise ConfigError(f"--aux_loss_future_pred_horizon={horizon!r} is not valid; allowed: an integer >= 1 "
                              f"(frames 1..K steps ahead are predicted)")
        for name, value in (("num_future_starts", num_future_starts), ("num_future_horizons", num_future_horizons)):
            if int(value) < 1:
                raise ConfigError(f"AuxiliaryHeads {name}={value} is not valid; allowed: an integer >= 1")
        if max_reconstruction_samples is not None and int(max_reconstruction_samples) < 1:
            raise ConfigError(f"AuxiliaryHeads max_reconstruction_samples={max_reconstruction_samples} is not valid; "
                              f"allowed: None (all) or an integer >= 1")
        self.coefficients: dict[str, float] = {}
        if recon > 0:
            self.coefficients["aux_reconstruction"] = recon
        if future > 0:
            self.coefficients["aux_future_pred"] = future
        self.enabled: tuple[str, ...] = tuple(self.coefficients)
        self.horizon = int(horizon)
        self.num_future_starts = int(num_future_starts)
        self.num_future_horizons = int(num_future_horizons)
        self.max_reconstruction_samples = (None if max_reconstruction_samples is None
                                           else int(max_reconstruction_samples))
        self.image_key = BOX_KEY
        self.obs_shape: tuple[int, ...] = ()
        self.reconstruction_decoder: FrameDecoder | None = None
        self.future_predictor: FuturePredictor | None = None
        if not self.enabled:
            return

        self.image_key, self.obs_shape, image_encoder = _image_part(obs_space, encoder, _flag_list(recon, future))
        scheme, gain = cfg.policy_initialization, float(cfg.policy_init_gain)
        features = int(encoder.out_size)
        if recon > 0:
            self.reconstruction_decoder = FrameDecoder(image_encoder, self.obs_shape, features, scheme, gain)
        if future > 0:
            hidden = int(core_out_size if future_hidden_size is None else future_hidden_size)
            decoder = FrameDecoder(image_encoder, self.obs_shape, hidden, scheme, gain)
            self.future_predictor = FuturePredictor(int(core_out_size), action_space, decoder, hidden,
                                                    action_embedding_size, cfg.nonlinearity)
            init_weights(self.future_predictor.belief_proj, scheme, gain)
            init_weights(self.future_predictor.action_embedding, scheme, gain)
            self.future_predictor.to(next(encoder.parameters()).device)

    def loss_terms(self, frames: torch.Tensor | Mapping[str, torch.Tensor], encoder_features: torch.Tensor,
                   core_out: torch.Tensor, actions: torch.Tensor, dones: torch.Tensor, valids: torch.Tensor,
                   generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        """The enabled terms for a minibatch of ``B`` trajectories of ``T`` steps.

        Args:
            frames: ``[B, T + 1, *obs_shape]`` raw observations as stored (env layout, e.g. uint8 HWC),
                or the observation dict ``{key: [B, T + 1, ...]}`` (``image_key`` is read).
            encoder_features: ``[B * T, F]`` the encoder's output for steps ``0 .. T - 1`` (with gradient:
                the reconstruction's reaches the encoder); not read when reconstruction is off.
            core_out: ``[B, T, H]`` the core's output (with gradient).
            actions: ``[B, T, k]`` actions as stored (float rows).
            dones: ``[B, T]`` bool, the episode ended at that step.
            valids: ``[B, T]`` bool, the samples that count.
            generator: draws the future prediction's start times and horizons (``None``: the global RNG of
                ``dones``' device).

        Returns:
            ``{term: scalar}`` for the enabled terms only (``{}`` when none is).
        """
        if not self.enabled:
            return {}
        if isinstance(frames, Mapping):
            frames = frames[self.image_key]
        B, T = dones.shape
        if tuple(frames.shape[:2]) != (B, T + 1):
            raise ValueError(f"loss_terms: frames have shape {tuple(frames.shape)}; expected [B, T + 1, ...] "
                             f"with B={B}, T={T} from dones")
        terms: dict[str, torch.Tensor] = {}
        if self.reconstruction_decoder is not None:
            terms["aux_reconstruction"] = self._reconstruction(frames, encoder_features, valids, B, T)
        if self.future_predictor is not None:
            terms["aux_future_pred"] = self._future_prediction(frames, core_out, actions, dones, valids, B, T,
                                                               generator)
        return terms

    def _reconstruction(self, frames, features, valids, B, T) -> torch.Tensor:
        frames = frames[:, :T].reshape(B * T, *self.obs_shape)
        valid = valids.reshape(B * T)
        limit = self.max_reconstruction_samples
        if limit is not None and B * T > limit:
            pick = torch.linspace(0, B * T - 1, limit, device=features.device).long()
            frames, features, valid = frames[pick.to(frames.device)], features[pick], valid[pick]
        target = frame_targets(frames_to_chw(frames, self.obs_shape)).to(features.device)
        return reconstruction_loss(self.reconstruction_decoder(features), target, valid)

    def _future_prediction(self, frames, core_out, actions, dones, valids, B, T, generator) -> torch.Tensor:
        K, device = self.horizon, dones.device
        starts = sample_start_times(B, T, self.num_future_starts, device, generator)  # [B, S]
        S = starts.shape[1]
        horizons = sample_horizons(B, S, K, self.num_future_horizons, device, generator)  # [B, S, Hn]
        rows = torch.arange(B, device=device).view(B, 1)
        beliefs = core_out[rows, starts]  # [B, S, H]
        steps = (starts.unsqueeze(-1) + torch.arange(K, device=device)).clamp(max=T - 1)  # [B, S, K]
        # actions past the trajectory's end (clamped) feed only horizons that the mask drops: the GRU is causal
        taken = actions[rows.unsqueeze(-1), steps]  # [B, S, K, k]
        pred = self.future_predictor(beliefs.reshape(B * S, -1), taken.reshape(B * S, K, -1),
                                     horizons.reshape(B * S, -1))  # [B * S * Hn, C, H, W]
        target_steps = (starts.unsqueeze(-1) + horizons).clamp(max=T)  # [B, S, Hn]
        rows3 = rows.unsqueeze(-1).to(frames.device)
        target_frames = frames[rows3, target_steps.to(frames.device)].reshape(-1, *self.obs_shape)
        target = frame_targets(frames_to_chw(target_frames, self.obs_shape)).to(pred.device)
        mask = future_mask(dones, valids, K)[rows.unsqueeze(-1), starts.unsqueeze(-1), horizons - 1]
        return future_prediction_loss(pred, target, mask.reshape(-1))


def _image_part(obs_space: gym.Space, encoder: nn.Module, flags: str
                ) -> tuple[str, tuple[int, ...], ImageEncoder]:
    """``(key, image shape, its ImageEncoder)`` for the auxiliary decoders, or a ConfigError."""
    allowed = ("allowed: an image observation (Box of 2 or 3 dimensions, or a Dict with exactly one such key) "
               "encoded by a built-in image encoder (--encoder_type conv or resnet)")
    if isinstance(obs_space, gym.spaces.Box):
        key, shape, image_encoder = BOX_KEY, tuple(obs_space.shape), encoder
    elif isinstance(obs_space, gym.spaces.Dict):
        images = [k for k in sorted(obs_space.spaces) if len(getattr(obs_space.spaces[k], "shape", ()) or ()) >= 2]
        if len(images) != 1:
            raise ConfigError(f"{flags} needs one image in the observation; observation space {obs_space} has "
                              f"{len(images)} image keys {images}; {allowed}")
        key, shape = images[0], tuple(obs_space.spaces[images[0]].shape)
        image_encoder = encoder.parts[key] if isinstance(encoder, DictEncoder) else None
    else:
        raise ConfigError(f"{flags} needs an image observation; observation space {obs_space}; {allowed}")
    if len(shape) not in (2, 3):
        raise ConfigError(f"{flags} needs an image observation; observation space {obs_space} has shape {shape}; "
                          f"{allowed}")
    if not isinstance(image_encoder, ImageEncoder):
        raise ConfigError(f"{flags} needs a built-in image encoder for observation space {obs_space}; the encoder is "
                          f"{type(image_encoder if image_encoder is not None else encoder).__name__}; {allowed}")
    return key, shape, image_encoder
