"""Observation preprocessing, the first part of every sfx model: raw observations as the buffers store
them -> what encoders read, the action mask and the core's extra input.

* integer (e.g. uint8) image observations become ``(x - obs_subtract_mean) / obs_scale``
  (Sample Factory 1.x's ``--obs_subtract_mean`` and ``--obs_scale``); vectors are left alone;
* with ``normalize_input``, float vectors and images (scaled as above, which is what the statistics
  describe) are standardized per element by a running mean/std, clipped to +-5: for an image that is
  per pixel and channel, so the static background of a fixed-camera scene is subtracted and what moves
  stands out (Sample Factory 2's behaviour for the same flag). The statistics are buffers (they travel
  in ``state_dict`` and in published weights) and are updated only through ``update_normalizer``;
* an ``action_mask`` key (see :mod:`sfx.models.obs`) travels with the observation but is not encoded:
  it goes to the action head;
* with ``prev_action_reward`` (``--use_prev_action_reward``) the previous action (one-hot per
  categorical head, as-is for continuous actions) and the previous reward clipped to ``[-1, 1]``
  become an extra input the trunk appends to the encoder's features, before the core.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, NamedTuple

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn

from sfx.algo.distributions import action_shape, categorical_sizes
from sfx.algo.normalizers import RunningMeanStd
from sfx.errors import ConfigError
from sfx.models.encoders import chw_shape, is_channels_last
from sfx.models.obs import ACTION_MASK_KEY, BOX_KEY, EXTRA_KEYS, PREV_ACTION_KEY, PREV_REWARD_KEY, as_obs_dict, obs_spec
from sfx.models.scratch import Scratch

IMAGE_STATS_ROWS = 256  # frames per learner iteration folded into the image statistics

Observation = torch.Tensor | Mapping[str, torch.Tensor]


class Preprocessed(NamedTuple):
    """What :meth:`ObsPreprocessor.forward` gives for ``N`` observations."""

    x: Any                      # encoder input: [N, *shape] float for a Box space, {key: tensor} for a Dict space
    mask: torch.Tensor | None   # [N, P] the action mask (0/1 per categorical choice), None without one
    extra: torch.Tensor | None  # [N, E] previous action and reward, None without prev_action_reward


class ObsPreprocessor(nn.Module):
    """Raw observations -> encoder input, action mask and extra core input (see the module docstring).

    Attributes:
        obs_space, action_space: the gymnasium spaces it was built for.
        encoder_space: what encoders see: ``obs_space`` without its action mask.
        dict_obs: the observation space is a Dict.
        obs_kinds: per key, ``scaled`` (integer image), ``float``, ``normalized`` (float vector with
            ``normalize_input``) or ``tokens`` (integer vector of a Dict space: int64 token ids).
        obs_normalizer: a Box space's ``RunningMeanStd`` (``normalize_input``), else None.
        key_normalizers: a Dict space's ``RunningMeanStd`` per normalized key (empty for a Box space).
        action_mask_size: ``P`` of the ``action_mask`` key, 0 without one.
        extra_input_size: ``E``, width of the extra input (0 without ``prev_action_reward``).
    """

    def __init__(self, obs_space: gym.Space, action_space: gym.Space, obs_scale: float = 1.0,
                 obs_subtract_mean: float = 0.0, normalize_input: bool = False, prev_action_reward: bool = False):
        super().__init__()
        self.obs_space = obs_space
        self.action_space = action_space
        self.dict_obs = isinstance(obs_space, gym.spaces.Dict)
        spec = obs_spec(obs_space)  # rejects spaces sfx cannot buffer
        self.action_mask_size = 0
        self.encoder_space = obs_space
        if self.dict_obs and ACTION_MASK_KEY in spec:
            self.action_mask_size = _check_action_mask(spec.pop(ACTION_MASK_KEY)[0], action_space)
            self.encoder_space = gym.spaces.Dict({k: v for k, v in obs_space.spaces.items() if k != ACTION_MASK_KEY})
            if not self.encoder_space.spaces:
                raise ConfigError(f"the observation space {obs_space} holds only an {ACTION_MASK_KEY!r}; allowed: "
                                  f"a Dict with at least one more key to encode")
        self.obs_scale = float(obs_scale)
        if self.obs_scale <= 0:
            raise ConfigError(f"obs_scale {self.obs_scale} is not valid; allowed: a number > 0")
        self.obs_subtract_mean = float(obs_subtract_mean)
        if not math.isfinite(self.obs_subtract_mean):
            raise ConfigError(f"obs_subtract_mean {self.obs_subtract_mean} is not valid; allowed: a finite number")
        # per key: integer images are scaled, float vectors standardized, integer vectors are
        # token ids (kept as integers), anything else passes through as float
        self.obs_kinds: dict[str, str] = {}
        self._chw_keys: set[str] = set()
        self._hwc_keys: set[str] = set()
        self._scratch = Scratch()  # the float copies of integer images (see _integer_image)
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
                    stats_shape = chw_shape(shape) if len(shape) == 3 else shape
                    normalizers[key] = RunningMeanStd(stats_shape, shift=self.obs_subtract_mean if integer else 0.0)
            elif len(shape) == 1 and integer and self.dict_obs:
                self.obs_kinds[key] = "tokens"
            elif len(shape) == 1 and normalize_input:
                self.obs_kinds[key] = "normalized"
                normalizers[key] = RunningMeanStd(shape)
            else:
                self.obs_kinds[key] = "float"
        # registered in this order (the actor-critic's state-dict order before the parts were split out)
        self.obs_normalizer: RunningMeanStd | None = None if self.dict_obs else normalizers.get(BOX_KEY)
        self.key_normalizers = nn.ModuleDict(normalizers if self.dict_obs else {})

        self.prev_action_reward = bool(prev_action_reward)
        self.action_sizes = categorical_sizes(action_space)  # None for Box actions
        self.extra_input_size = 0
        if self.prev_action_reward:
            self.extra_input_size = (sum(self.action_sizes) if self.action_sizes else action_shape(action_space)) + 1

    @classmethod
    def from_cfg(cls, cfg: Any, obs_space: gym.Space, action_space: gym.Space) -> "ObsPreprocessor":
        """Reads ``obs_scale``, ``obs_subtract_mean``, ``normalize_input`` and ``use_prev_action_reward``."""
        return cls(obs_space, action_space, cfg.obs_scale, cfg.obs_subtract_mean, bool(cfg.normalize_input),
                   bool(cfg.use_prev_action_reward))

    @property
    def has_obs_normalizer(self) -> bool:
        return self.obs_normalizer is not None or len(self.key_normalizers) > 0

    def _normalizer(self, key: str) -> RunningMeanStd | None:
        if self.dict_obs:
            return self.key_normalizers[key] if key in self.key_normalizers else None
        return self.obs_normalizer

    def forward(self, obs: Observation, batch_dims: int = 1) -> Preprocessed:
        """``obs``: ``[N, *obs_shape]`` (``{key: [N, *shape]}`` for a Dict space; a Box observation may also
        come as ``{"obs": tensor}``, and must with ``prev_action_reward``) -> :class:`Preprocessed`.
        ``batch_dims``: leading dimensions that make ``N`` (2 for ``[B, T, *obs_shape]``: flattened here,
        an integer image in the same copy as its conversion to float)."""
        obs = as_obs_dict(obs)
        x = self.encoder_input(obs, batch_dims)
        if batch_dims != 1:
            obs = {k: v.reshape(-1, *v.shape[batch_dims:]) for k, v in obs.items()
                   if k in EXTRA_KEYS or k == ACTION_MASK_KEY}
        extra = self.extra_input(obs)  # a model missing its previous action and reward says so
        return Preprocessed(x, self.action_mask(obs), extra)

    def use_channels_last(self, keys: set[str]) -> None:
        """Give channels_last frames only for these of the CHW integer image keys (the model's encoders that
        read them run channels_last convolutions); the others stay in the contiguous layout (a pooling or
        attention encoder reads NCHW faster: adaptive average pooling ran 5x slower on channels_last)."""
        self._chw_keys &= set(keys)

    def encoder_input(self, obs: Observation, batch_dims: int = 1) -> Any:
        """Raw observations -> encoder input: a float tensor for a Box space, ``{key: tensor}`` for a Dict
        space (token ids stay integers). Integer images become ``(x - obs_subtract_mean) / obs_scale``,
        then standardized with ``normalize_input``; a caller feeding several encoders hands each this one
        result (so none may change it in place). ``batch_dims``: as in :meth:`forward`."""
        out = {}
        for key, x in as_obs_dict(obs).items():
            if key in EXTRA_KEYS or key == ACTION_MASK_KEY:
                continue  # the previous action and reward go to the core, the action mask to the action head
            kind = self.obs_kinds[key]
            image = kind in ("scaled", "float") and x.dim() - batch_dims >= 2
            if image and self._normalizer(key) is None and not x.is_floating_point():
                out[key] = self._integer_image(key, kind, x, batch_dims)
                continue
            if batch_dims != 1:
                x = x.reshape(-1, *x.shape[batch_dims:])
            if image:
                if key in self._chw_keys and x.dim() == 4:
                    x = x.contiguous(memory_format=torch.channels_last)
                scale = self.obs_scale if kind == "scaled" else 1.0
                norm = self._normalizer(key)
                if norm is None:
                    x = x.float()  # keeps the memory format
                    if kind == "scaled" and self.obs_subtract_mean != 0.0:
                        # in place on the float copy, and exactly SF1's (x - mean) / scale; a promoting
                        # torch.sub(uint8, mean) instead of the plain conversion measured slower
                        x.sub_(self.obs_subtract_mean)
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

    def _integer_image(self, key: str, kind: str, x: torch.Tensor, batch_dims: int) -> torch.Tensor:
        """An integer image without input statistics in one strided copy: the leading dimensions flattened,
        channels_last where the encoder reads it, converted to float (a step slice [:, :T] of [B, T + 1]
        frames, reshaped, then made channels_last, then converted, was three passes over the learner's
        frames), then ``(x - obs_subtract_mean) / obs_scale`` in place (exactly SF1's)."""
        shape = (math.prod(x.shape[:batch_dims]), *x.shape[batch_dims:])
        layout = torch.channels_last if key in self._chw_keys and len(shape) == 4 else torch.contiguous_format
        # reused memory on the CPU (sfx.models.scratch): a fresh copy of a learner's batch is mostly page faults
        y = self._scratch.empty(shape, torch.float32, x.device, memory_format=layout)
        y.view(x.shape).copy_(x)
        if kind != "scaled":
            return y
        if self.obs_subtract_mean != 0.0:
            y.sub_(self.obs_subtract_mean)
        return y.div_(self.obs_scale)

    def action_mask(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor | None:
        """The observation's ``[N, P]`` action mask, or None when the space has none."""
        return obs.get(ACTION_MASK_KEY) if self.action_mask_size else None

    def extra_input(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor | None:
        """``prev_action_reward``: ``[N, E]`` from the observation's previous-action and -reward columns
        (see sfx.models.obs), or None when off."""
        if not self.prev_action_reward:
            return None
        if PREV_ACTION_KEY not in obs or PREV_REWARD_KEY not in obs:
            raise ValueError(f"this model was built with use_prev_action_reward: its observations need the "
                             f"{PREV_ACTION_KEY!r} and {PREV_REWARD_KEY!r} columns the rollout workers write")
        action, reward = obs[PREV_ACTION_KEY].float(), obs[PREV_REWARD_KEY].float().reshape(-1, 1)
        action = action.reshape(reward.shape[0], -1)
        if self.action_sizes is not None:
            # stored as choice + 1 (0 = none): one-hot of width n + 1 without its first column
            action = torch.cat([nn.functional.one_hot(action[:, i].round().long().clamp(0, n), n + 1)[:, 1:]
                                for i, n in enumerate(self.action_sizes)], dim=1).float()
        return torch.cat([action, reward.clamp(-1.0, 1.0)], dim=1)

    @torch.no_grad()
    def update_normalizer(self, obs: Observation, reduce: Any = None) -> None:
        """Fold raw observations ``[..., *obs_shape]`` (per key for Dict spaces) into the input
        statistics (no-op if disabled). ``reduce``: a sum over data-parallel ranks (the statistics are
        then all ranks' observations together; see ``RunningMeanStd.update``)."""
        for key, x in as_obs_dict(obs).items():
            norm = None if key in EXTRA_KEYS or key == ACTION_MASK_KEY else self._normalizer(key)
            if norm is None:
                continue
            kind = self.obs_kinds.get(key)
            if kind == "normalized":
                norm.update(x.float(), reduce=reduce)
            elif kind in ("scaled", "float"):
                if key in self._hwc_keys:
                    x = x.movedim(-1, -3)
                rows = x.reshape(-1, *norm.shape)
                if rows.shape[0] > IMAGE_STATS_ROWS:
                    # frame statistics from an evenly spread subset of the batch: an unbiased estimate at a
                    # fraction of the cost (a 2048-frame doom batch is 57M values)
                    pick = torch.linspace(0, rows.shape[0] - 1, IMAGE_STATS_ROWS, device=rows.device).long()
                    rows = rows.index_select(0, pick)
                norm.update(rows, scale=self.obs_scale if kind == "scaled" else 1.0, reduce=reduce)


def _check_action_mask(shape: tuple, action_space: gym.Space) -> int:
    sizes = categorical_sizes(action_space)
    if sizes is None or tuple(shape) != (sum(sizes),):
        raise ConfigError(f"observation key {ACTION_MASK_KEY!r} has shape {tuple(shape)}; allowed: "
                          f"({sum(sizes) if sizes else 'n'},), one 0/1 entry per choice of the categorical action "
                          f"space {action_space} (continuous actions take no mask)")
    return int(sum(sizes))


class PreprocessedModel(nn.Module):
    """What a model built on an :class:`ObsPreprocessor` (attribute ``preprocessor``) gives the engine's acting
    interface beside its forward passes: the input statistics' switch and update, the previous action and
    reward switch, and ``for_inference``. The agents' models (``QNetwork``, ``SACModel``) subclass it."""

    preprocessor: ObsPreprocessor

    @property
    def has_obs_normalizer(self) -> bool:
        return self.preprocessor.has_obs_normalizer

    @property
    def prev_action_reward(self) -> bool:
        return self.preprocessor.prev_action_reward

    def update_obs_normalizer(self, obs: Any, reduce: Any = None) -> None:
        """Fold raw observations into the input statistics (``reduce``: a sum over data-parallel ranks)."""
        self.preprocessor.update_normalizer(obs, reduce)

    def for_inference(self) -> "PreprocessedModel":
        """A model that will only act (policy workers, enjoy): submodules with a ``for_inference`` method switch to
        their fastest inference form; returns the model in eval mode."""
        for m in self.modules():
            if m is not self and callable(getattr(m, "for_inference", None)):
                m.for_inference()
        return self.eval()
