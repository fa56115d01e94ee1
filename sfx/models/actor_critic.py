"""The actor-critic: preprocess -> encoder -> core -> (action params head, value head).

One network serves both roles: policy workers call ``forward_step`` (one observation per agent,
recurrent state in and out), learners call ``forward_sequence`` (``[B, T]`` chunks with episode
resets inside) and the two agree exactly, so training on sequences sees what acting saw.

Preprocessing, before any encoder (built-in or custom):

* integer (e.g. uint8) image observations are divided by ``cfg.obs_scale``;
* with ``cfg.normalize_input``, float vectors and (after that division) images are standardized
  per element by a running mean/std, clipped to +-5: for an image that is per pixel and channel, so
  the static background of a fixed-camera scene is subtracted and what moves stands out (Sample
  Factory 2's behaviour for the same flag). The statistics are buffers (they travel in
  ``state_dict`` and in published weights) and are updated only through ``update_obs_normalizer``
  by the learner.

With ``cfg.normalize_returns`` the value head predicts returns standardized by
``returns_normalizer`` (the learner updates it from its targets); ``values`` are always given back
in the env's reward scale.
"""

from __future__ import annotations

from typing import Any, Mapping

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn

from sfx.algo.distributions import action_params_size
from sfx.algo.normalizers import RunningMeanStd
from sfx.cfg import ConfigError
from sfx.models.cores import make_core
from sfx.models.encoders import DictEncoder, chw_shape, init_weights, is_channels_last, make_builtin_encoder
from sfx.models.obs import BOX_KEY, as_obs_dict, map_obs, obs_spec
from sfx.models.registry import resolve_encoder



IMAGE_STATS_ROWS = 256  # frames per learner iteration folded into the image statistics


class ActorCritic(nn.Module):
    """Shared-trunk actor-critic over one observation / action space pair.

    Attributes:
        obs_space, action_space: the gymnasium spaces it was built for.
        encoder: observation ``[N, *obs_shape]`` -> ``[N, encoder.out_size]``.
        core: ``IdentityCore`` or ``RnnCore`` (see ``sfx.models.cores`` for the state layout).
        rnn_state_size: flat recurrent state size ``S`` (0 without an RNN; callers then keep
            one dummy column, which is passed through).
        action_params_size: ``P``, width of ``action_params``.
        obs_normalizer, returns_normalizer: ``RunningMeanStd`` or ``None``.
    """

    def __init__(self, cfg: Any, obs_space: gym.Space, action_space: gym.Space,
                 encoder: nn.Module | None = None):
        super().__init__()
        self.obs_space = obs_space
        self.action_space = action_space
        self.dict_obs = isinstance(obs_space, gym.spaces.Dict)
        spec = obs_spec(obs_space)  # rejects spaces sfx cannot buffer
        self.obs_scale = float(getattr(cfg, "obs_scale", 255.0))
        if self.obs_scale <= 0:
            raise ConfigError(f"obs_scale {self.obs_scale} is not valid; allowed: a number > 0")
        normalize_input = bool(getattr(cfg, "normalize_input", True))
        # per key: integer images are scaled, float vectors standardized, integer vectors are
        # token ids (kept as integers), anything else passes through as float
        self.obs_kinds: dict[str, str] = {}
        self._chw_keys: set[str] = set()
        self._hwc_keys: set[str] = set()
        normalizers = {}
        for key, (shape, dtype) in spec.items():
            integer = np.issubdtype(dtype, np.integer)
            if len(shape) >= 2:
                self.obs_kinds[key] = "scaled" if integer else "float"
                if integer and len(shape) == 3 and not is_channels_last(shape):
                    # CHW frames become channels_last while still uint8 (a quarter of the bytes of
                    # the float copy the image encoders would otherwise make)
                    self._chw_keys.add(key)
                if normalize_input:
                    # statistics in (C, H, W) whatever the env's layout, so weights trained on HWC
                    # frames load into a model of the same env in CHW (and back)
                    if len(shape) == 3 and is_channels_last(shape):
                        self._hwc_keys.add(key)
                    normalizers[key] = RunningMeanStd(chw_shape(shape) if len(shape) == 3 else shape)
            elif len(shape) == 1 and integer and self.dict_obs:
                self.obs_kinds[key] = "tokens"
            elif len(shape) == 1 and normalize_input:
                self.obs_kinds[key] = "normalized"
                normalizers[key] = RunningMeanStd(shape)
            else:
                self.obs_kinds[key] = "float"
        if self.dict_obs:
            self.obs_normalizer: RunningMeanStd | None = None
            self.key_normalizers = nn.ModuleDict(normalizers)
        else:
            self.obs_normalizer = normalizers.get(BOX_KEY)
            self.key_normalizers = nn.ModuleDict()
        # returns are not clipped: a clipped target would cap what the critic can learn
        self.returns_normalizer: RunningMeanStd | None = (
            RunningMeanStd((), clip=None) if getattr(cfg, "normalize_returns", False) else None)

        if encoder is None:
            name, factory = resolve_encoder(cfg, obs_space)
            if factory is None:
                encoder = (DictEncoder(cfg, obs_space, name) if self.dict_obs
                           else make_builtin_encoder(name, cfg, obs_space.shape))
                init_weights(encoder, getattr(cfg, "policy_initialization", "orthogonal"),
                             float(getattr(cfg, "policy_init_gain", 1.0)))
            else:
                encoder = factory(cfg, obs_space)
        out_size = getattr(encoder, "out_size", None)
        if not isinstance(encoder, nn.Module) or not isinstance(out_size, (int, np.integer)) or out_size <= 0:
            raise ConfigError(f"encoder {type(encoder).__name__} has out_size {out_size!r}; "
                              f"allowed: an nn.Module with an integer out_size > 0")
        self.encoder = encoder

        self.core = make_core(cfg, int(out_size))
        self.rnn_state_size: int = self.core.state_size
        self.action_params_size: int = action_params_size(action_space)

        self.action_head = nn.Linear(self.core.out_size, self.action_params_size)
        self.value_head = nn.Linear(self.core.out_size, 1)
        import os as _os
        # The heads are initialised like the encoder (--policy_initialization, --policy_init_gain: orthogonal,
        # gain 1, as in Sample Factory). A near-uniform policy head (orthogonal gain 0.01, as "What matters in
        # on-policy RL" advises for separate policy and value networks) starves the shared trunk of policy
        # gradient: the head's tiny weights scale what reaches the trunk by 0.01, so the trunk learns only
        # the value function and Adam moves the policy a hundred times less per step. Measured: doom_basic
        # at Sample Factory's command line stayed at the uniform policy for 800k frames, and Acrobot with
        # normalized inputs never left -500 (both learn with gain 1).
        scheme = getattr(cfg, "policy_initialization", "orthogonal")
        gain = float(getattr(cfg, "policy_init_gain", 1.0))
        init_weights(self.action_head, scheme, gain)
        init_weights(self.value_head, scheme, gain)

    # ----- normalizers -----------------------------------------------------------------------

    @property
    def has_obs_normalizer(self) -> bool:
        return self.obs_normalizer is not None or len(self.key_normalizers) > 0

    def _normalizer(self, key: str) -> RunningMeanStd | None:
        if self.dict_obs:
            return self.key_normalizers[key] if key in self.key_normalizers else None
        return self.obs_normalizer

    def preprocess_obs(self, obs: torch.Tensor | Mapping[str, torch.Tensor]) -> Any:
        """Raw observations (as stored in buffers) -> encoder input: a float tensor for a Box
        space, ``{key: tensor}`` for a Dict space (token ids stay integers)."""
        out = {}
        for key, x in as_obs_dict(obs).items():
            kind = self.obs_kinds[key]
            if kind in ("scaled", "float") and x.dim() >= 3:  # images
                if key in self._chw_keys and x.dim() == 4:
                    x = x.contiguous(memory_format=torch.channels_last)
                scale = self.obs_scale if kind == "scaled" else 1.0
                norm = self._normalizer(key)
                if norm is None:
                    x = x.float()  # keeps the memory format
                    out[key] = x.div_(scale) if kind == "scaled" else x
                elif key in self._hwc_keys:  # statistics are (C, H, W): normalize a CHW view
                    out[key] = norm.normalize(x.movedim(-1, -3), scale).movedim(-3, -1)
                else:
                    out[key] = norm.normalize(x, scale)
            elif kind == "normalized":
                out[key] = self._normalizer(key).normalize(x.float())
            elif kind == "tokens":
                out[key] = x.long()
            else:
                out[key] = x.float()
        return out if self.dict_obs else out[BOX_KEY]

    @torch.no_grad()
    def update_obs_normalizer(self, obs: torch.Tensor | Mapping[str, torch.Tensor]) -> None:
        """Fold raw observations ``[..., *obs_shape]`` (per key for Dict spaces) into the input
        statistics (no-op if disabled)."""
        for key, x in as_obs_dict(obs).items():
            norm = self._normalizer(key)
            if norm is None:
                continue
            kind = self.obs_kinds.get(key)
            if kind == "normalized":
                norm.update(x.float())
            elif kind in ("scaled", "float"):
                if key in self._hwc_keys:
                    x = x.movedim(-1, -3)
                rows = x.reshape(-1, *norm.shape)
                if rows.shape[0] > IMAGE_STATS_ROWS:
                    # frame statistics from an evenly spread subset of the batch: an unbiased estimate at a
                    # fraction of the cost (a 2048-frame doom batch is 57M values)
                    pick = torch.linspace(0, rows.shape[0] - 1, IMAGE_STATS_ROWS, device=rows.device).long()
                    rows = rows.index_select(0, pick)
                norm.update(rows, scale=self.obs_scale if kind == "scaled" else 1.0)

    def normalize_values(self, v: torch.Tensor) -> torch.Tensor:
        """Returns in the reward scale -> the value head's scale (identity if disabled)."""
        return v if self.returns_normalizer is None else self.returns_normalizer.normalize(v)

    def denormalize_values(self, v: torch.Tensor) -> torch.Tensor:
        """The value head's scale -> the reward scale (identity if disabled)."""
        return v if self.returns_normalizer is None else self.returns_normalizer.denormalize(v)

    def for_inference(self) -> "ActorCritic":
        """Prepare a model that will only act, never train (policy workers, enjoy): submodules
        with a ``for_inference`` method (the built-in image encoders) switch to their fastest
        inference form. Returns the model, in eval mode."""
        for m in self.modules():
            if m is not self and callable(getattr(m, "for_inference", None)):
                m.for_inference()
        return self.eval()

    # ----- forward passes --------------------------------------------------------------------

    def forward_step(self, obs: torch.Tensor | Mapping[str, torch.Tensor],
                     rnn_states: torch.Tensor) -> dict[str, torch.Tensor]:
        """One step for a batch of agents.

        Args:
            obs: ``[B, *obs_shape]`` raw observations (``{key: [B, *shape]}`` for a Dict space; a
                Box observation may also come as ``{"obs": tensor}``).
            rnn_states: ``[B, S]`` state before this step (``S >= 1``; ignored without an RNN).

        Returns:
            ``action_params [B, P]``, ``values [B]`` (reward scale), ``values_normalized [B]``,
            ``new_rnn_states [B, S]``.
        """
        x = self.encoder(self.preprocess_obs(obs))
        x, new_states = self.core.forward_step(x, rnn_states)
        values_norm = self.value_head(x).squeeze(-1)
        return {
            "action_params": self.action_head(x),
            "values": self.denormalize_values(values_norm),
            "values_normalized": values_norm,
            "new_rnn_states": new_states,
        }

    def forward_sequence(self, obs: torch.Tensor | Mapping[str, torch.Tensor], rnn_init: torch.Tensor,
                         resets: torch.Tensor) -> dict[str, torch.Tensor]:
        """``T`` steps of ``B`` sequences at once; equals ``T`` calls of ``forward_step``.

        Args:
            obs: ``[B, T, *obs_shape]`` raw observations (per key for a Dict space).
            rnn_init: ``[B, S]`` state before step 0.
            resets: ``[B, T]`` bool; True zeroes the state before that step (episode start).

        Returns:
            ``action_params [B, T, P]``, ``values_normalized [B, T]``, ``values [B, T]``.
        """
        B, T = resets.shape
        flat = map_obs(lambda v: v.reshape(B * T, *v.shape[2:]), as_obs_dict(obs))
        x = self.encoder(self.preprocess_obs(flat))
        x = self.core.forward_sequence(x.reshape(B, T, -1), rnn_init, resets)
        x = x.reshape(B * T, -1)
        values_norm = self.value_head(x).reshape(B, T)
        return {
            "action_params": self.action_head(x).reshape(B, T, -1),
            "values_normalized": values_norm,
            "values": self.denormalize_values(values_norm),
        }


def create_actor_critic(cfg: Any, obs_space: gym.Space, action_space: gym.Space) -> ActorCritic:
    """Build the actor-critic ``cfg`` describes for these spaces.

    Reads (each with a default, so any namespace works): ``encoder_type`` (conv | resnet | mlp |
    a registered name), ``encoder_subtype``, ``hidden_size``, ``use_rnn``, ``rnn_type``,
    ``rnn_num_layers``, ``normalize_input``, ``normalize_returns``, ``obs_scale``,
    ``nonlinearity``, ``policy_initialization``, ``policy_init_gain``.
    """
    hidden = getattr(cfg, "hidden_size", 512)
    if not isinstance(hidden, (int, np.integer)) or hidden < 1:
        raise ConfigError(f"hidden_size {hidden!r} is not valid; allowed: an integer >= 1")
    return ActorCritic(cfg, obs_space, action_space)
