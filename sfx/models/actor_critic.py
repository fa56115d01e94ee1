"""The actor-critic: preprocess -> encoder -> core -> (action params head, value head).

One network serves both roles: policy workers call ``forward_step`` (one observation per agent,
recurrent state in and out), learners call ``forward_sequence`` (``[B, T]`` chunks with episode
resets inside) and the two agree exactly, so training on sequences sees what acting saw.

Preprocessing, before any encoder (built-in or custom):

* integer (e.g. uint8) image observations become ``(x - cfg.obs_subtract_mean) / cfg.obs_scale``
  (Sample Factory 1.x's ``--obs_subtract_mean`` and ``--obs_scale``); vectors are left alone;
* with ``cfg.normalize_input``, float vectors and images (scaled as above, which is what the
  statistics describe) are standardized per element by a running mean/std, clipped to +-5: for an
  image that is per pixel and channel, so the static background of a fixed-camera scene is
  subtracted and what moves stands out (Sample Factory 2's behaviour for the same flag). The
  statistics are buffers (they travel in ``state_dict`` and in published weights) and are updated
  only through ``update_obs_normalizer`` by the learner.

With ``cfg.normalize_returns`` the value head predicts returns standardized by
``returns_normalizer`` (the learner updates it from its targets); ``values`` are always given back
in the env's reward scale.

Two Sample Factory 1.x model options:

* ``cfg.actor_critic_share_weights=False``: the actor and the critic are separate networks, each
  with its own encoder and core (preprocessing and its statistics stay shared). With an RNN the
  engine's flat per-agent state is the two cores' states concatenated, actor first
  (``[B, S_actor + S_critic]``); an episode start resets the whole row, so both, to
  ``initial_rnn_states``.
* ``cfg.adaptive_stddev=False`` (Box actions only): the action head outputs the means only and the
  log-stddev is one learned parameter per action dimension, initialised to
  ``log(cfg.initial_stddev)`` and independent of the observation. ``action_params`` keep the layout
  ``[mean, log_std]`` either way, so buffers, policy workers and the learner are the same. With
  ``adaptive_stddev=True`` (the default) the log-stddev is a head output and ``initial_stddev`` is
  not used, as in Sample Factory 1.x (zero biases start it near log 1).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn

from sfx.algo.distributions import (LOG_STD_MAX, LOG_STD_MIN, MASKED_LOGIT, action_params_size, action_shape,
                                    categorical_sizes)
from sfx.algo.normalizers import RunningMeanStd
from sfx.algo.popart import select_task_values
from sfx.cfg import ConfigError
from sfx.models.cores import make_core
from sfx.models.encoders import DictEncoder, chw_shape, init_weights, is_channels_last, make_builtin_encoder
from sfx.models.obs import (ACTION_MASK_KEY, BOX_KEY, EXTRA_KEYS, PREV_ACTION_KEY, PREV_REWARD_KEY, as_obs_dict,
                            map_obs, obs_spec)
from sfx.models.popart import PopArt
from sfx.models.registry import resolve_encoder



IMAGE_STATS_ROWS = 256  # frames per learner iteration folded into the image statistics
# MASKED_LOGIT (sfx.algo.distributions) is the logit of a masked choice: the distributions recognise it


class ActorCritic(nn.Module):
    """Actor-critic over one observation / action space pair: one shared trunk, or (with
    ``cfg.actor_critic_share_weights=False``) an actor trunk and a critic trunk.

    Attributes:
        obs_space, action_space: the gymnasium spaces it was built for.
        share_weights: ``cfg.actor_critic_share_weights``.
        encoder, core: the shared trunk (``share_weights`` only). The encoder maps an observation
            ``[N, *obs_shape]`` to ``[N, encoder.out_size]``; the core is an ``IdentityCore``, an
            ``RnnCore`` or a registered core (see ``sfx.models.cores`` for the interface and the
            state layouts).
        actor_encoder, actor_core, critic_encoder, critic_core: the two trunks (separate weights only).
        rnn_state_size: flat recurrent state size ``S`` (0 without an RNN; callers then keep
            one dummy column, which is passed through). Separate weights: actor's + critic's.
        action_params_size: ``P``, width of ``action_params``.
        action_head: ``[N, F] -> [N, P]``, or the means ``[N, P / 2]`` when ``action_log_std`` is set.
        action_log_std: the state-independent log-stddev ``[P / 2]`` (``adaptive_stddev=False`` with
            Box actions), else ``None``.
        obs_normalizer, returns_normalizer: ``RunningMeanStd`` or ``None``.
    """

    def __init__(self, cfg: Any, obs_space: gym.Space, action_space: gym.Space,
                 encoder: nn.Module | None = None, num_tasks: int = 1):
        """``encoder``: a ready-made encoder for the shared trunk instead of the one ``cfg`` names
        (shared weights only: separate trunks each build their own). ``num_tasks``: the env's tasks; with
        ``cfg.popart`` the value head has one output per task."""
        super().__init__()
        self.num_tasks = int(num_tasks)
        self.obs_space = obs_space
        self.action_space = action_space
        self.dict_obs = isinstance(obs_space, gym.spaces.Dict)
        spec = obs_spec(obs_space)  # rejects spaces sfx cannot buffer
        # an action mask travels as an observation key but is not encoded (see sfx.models.obs)
        self.action_mask_size = 0
        encoder_space = obs_space  # what the encoders see: the observation without its action mask
        if self.dict_obs and ACTION_MASK_KEY in spec:
            self.action_mask_size = self._check_action_mask(spec.pop(ACTION_MASK_KEY)[0], action_space)
            encoder_space = gym.spaces.Dict({k: v for k, v in obs_space.spaces.items() if k != ACTION_MASK_KEY})
            if not encoder_space.spaces:
                raise ConfigError(f"the observation space {obs_space} holds only an {ACTION_MASK_KEY!r}; allowed: a Dict "
                                  f"with at least one more key to encode")
        self.obs_scale = float(cfg.obs_scale)
        if self.obs_scale <= 0:
            raise ConfigError(f"obs_scale {self.obs_scale} is not valid; allowed: a number > 0")
        self.obs_subtract_mean = float(cfg.obs_subtract_mean)
        if not math.isfinite(self.obs_subtract_mean):
            raise ConfigError(f"obs_subtract_mean {self.obs_subtract_mean} is not valid; allowed: a finite number")
        normalize_input = bool(cfg.normalize_input)
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
                    stats_shape = chw_shape(shape) if len(shape) == 3 else shape
                    normalizers[key] = RunningMeanStd(stats_shape, shift=self.obs_subtract_mean if integer else 0.0)
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
        # returns are not clipped: a clipped target would cap what the critic can learn. PopArt replaces it.
        self.popart: PopArt | None = (
            PopArt(self.num_tasks, float(cfg.popart_beta), float(cfg.popart_clip_min)) if cfg.popart else None)
        self.returns_normalizer: RunningMeanStd | None = (
            RunningMeanStd((), clip=None) if cfg.normalize_returns and self.popart is None else None)

        # --use_prev_action_reward: the core's input also gets the previous action (one-hot per categorical
        # head, as-is for continuous actions) and the previous reward clipped to [-1, 1]
        self.prev_action_reward = bool(cfg.use_prev_action_reward)
        self._action_sizes = categorical_sizes(action_space)  # None for Box actions
        self.extra_input_size = 0
        if self.prev_action_reward:
            self.extra_input_size = (sum(self._action_sizes) if self._action_sizes else action_shape(action_space)) + 1

        # Construction order (encoder, core, heads) is kept as before these options existed, so a
        # seeded shared-weights model starts from the same weights.
        self.share_weights = bool(cfg.actor_critic_share_weights)
        if self.share_weights:
            self.encoder = self._make_encoder(cfg, encoder_space, encoder)
            self.core = make_core(cfg, int(self.encoder.out_size) + self.extra_input_size)
            self.rnn_state_size: int = self.core.state_size
            actor_features = critic_features = self.core.out_size
        else:
            if encoder is not None:
                raise ValueError("a ready-made encoder needs actor_critic_share_weights=True; separate actor "
                                 "and critic trunks each build their own encoder from cfg")
            self.actor_encoder = self._make_encoder(cfg, encoder_space)
            self.actor_core = make_core(cfg, int(self.actor_encoder.out_size) + self.extra_input_size)
            self.critic_encoder = self._make_encoder(cfg, encoder_space)
            self.critic_core = make_core(cfg, int(self.critic_encoder.out_size) + self.extra_input_size)
            self.rnn_state_size = self.actor_core.state_size + self.critic_core.state_size
            actor_features, critic_features = self.actor_core.out_size, self.critic_core.out_size
        # a per-agent memory (a MemoryCore: Transformer-XL); with separate trunks the two memories side by side
        cores = [self.core] if self.share_weights else [self.actor_core, self.critic_core]
        lengths = {int(c.memory_len) for c in cores if getattr(c, "memory_len", 0)}
        if len(lengths) > 1:
            raise ConfigError(f"the actor's and the critic's cores keep memories of {sorted(lengths)} steps; "
                              f"allowed: the same memory_len for both")
        self.memory_len: int = lengths.pop() if lengths else 0
        self._memory_widths = [int(getattr(c, "memory_width", 0)) for c in cores]
        self.memory_width: int = sum(self._memory_widths)
        self.action_params_size: int = action_params_size(action_space)

        # Sample Factory 1.x's non-adaptive stddev: the head gives the means, the log-stddev is a
        # parameter of its own (discrete spaces have no stddev and ignore the option)
        self.action_log_std: nn.Parameter | None = None
        if isinstance(action_space, gym.spaces.Box) and not bool(cfg.adaptive_stddev):
            initial_stddev = float(cfg.initial_stddev)
            low, high = math.exp(LOG_STD_MIN), math.exp(LOG_STD_MAX)
            # DiagGaussian clamps log_std to [LOG_STD_MIN, LOG_STD_MAX]: a parameter starting outside
            # would get no gradient and never move
            if not low <= initial_stddev <= high:
                raise ConfigError(f"--initial_stddev={initial_stddev} is not valid with --adaptive_stddev=False; "
                                  f"allowed: a number in [{low:.4g}, {high:.4g}] (the stddev range of continuous "
                                  f"actions)")
            self.action_head = nn.Linear(actor_features, action_shape(action_space))
            self.action_log_std = nn.Parameter(torch.full((action_shape(action_space),), math.log(initial_stddev)))
        else:
            self.action_head = nn.Linear(actor_features, self.action_params_size)
        self.value_head = nn.Linear(critic_features, self.num_tasks if self.popart is not None else 1)
        # The heads are initialised like the encoder (--policy_initialization, --policy_init_gain: orthogonal,
        # gain 1, as in Sample Factory). A near-uniform policy head (orthogonal gain 0.01, as "What matters in
        # on-policy RL" advises for separate policy and value networks) starves the shared trunk of policy
        # gradient: the head's tiny weights scale what reaches the trunk by 0.01, so the trunk learns only
        # the value function and Adam moves the policy a hundred times less per step. Measured: doom_basic
        # at Sample Factory's command line stayed at the uniform policy for 800k frames, and Acrobot with
        # normalized inputs never left -500 (both learn with gain 1).
        scheme = cfg.policy_initialization
        gain = float(cfg.policy_init_gain)
        init_weights(self.action_head, scheme, gain)
        init_weights(self.value_head, scheme, gain)

        # Brain Agent's auxiliary losses (sfx.models.aux_heads), built last so that the weights above start
        # the same with or without them. The learner trains them; policy workers never receive them.
        self.aux: nn.Module | None = None
        if cfg.aux_loss_reconstruction_coeff > 0 or cfg.aux_loss_future_pred_coeff > 0:
            from sfx.models.aux_heads import AuxiliaryHeads

            encoder_ = self.encoder if self.share_weights else self.actor_encoder
            core_ = self.core if self.share_weights else self.actor_core
            self.aux = AuxiliaryHeads(cfg, obs_space, action_space, encoder_, int(core_.out_size))

    # parameters and buffers the acting model does not need (sfx.engine.buffers.WeightsBuffer leaves them out)
    learner_only_prefixes = ("aux.",)

    @staticmethod
    def _make_encoder(cfg: Any, obs_space: gym.Space, encoder: nn.Module | None = None) -> nn.Module:
        """The encoder ``cfg`` names (a custom factory is called once per call), checked."""
        if encoder is None:
            name, factory = resolve_encoder(cfg, obs_space)
            if factory is None:
                encoder = (DictEncoder(cfg, obs_space, name) if isinstance(obs_space, gym.spaces.Dict)
                           else make_builtin_encoder(name, cfg, obs_space.shape))
                init_weights(encoder, cfg.policy_initialization, float(cfg.policy_init_gain))
            else:
                encoder = factory(cfg, obs_space)
        out_size = getattr(encoder, "out_size", None)
        if not isinstance(encoder, nn.Module) or not isinstance(out_size, (int, np.integer)) or out_size <= 0:
            raise ConfigError(f"encoder {type(encoder).__name__} has out_size {out_size!r}; "
                              f"allowed: an nn.Module with an integer out_size > 0")
        return encoder

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
        space, ``{key: tensor}`` for a Dict space (token ids stay integers). Integer images become
        ``(x - obs_subtract_mean) / obs_scale``, then standardized with ``normalize_input``; with
        separate actor and critic both encoders read this one result (so neither may change it in
        place)."""
        out = {}
        for key, x in as_obs_dict(obs).items():
            if key in EXTRA_KEYS or key == ACTION_MASK_KEY:
                continue  # the previous action and reward go to the core, the action mask to the action head
            kind = self.obs_kinds[key]
            if kind in ("scaled", "float") and x.dim() >= 3:  # images
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

    @torch.no_grad()
    def update_obs_normalizer(self, obs: torch.Tensor | Mapping[str, torch.Tensor], reduce=None) -> None:
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

    def normalize_values(self, v: torch.Tensor, tasks: torch.Tensor | None = None) -> torch.Tensor:
        """Returns in the reward scale -> the value head's scale (identity if disabled). ``tasks`` (``[B]``,
        ``v`` is ``[B]`` or ``[B, T]``): each sample's task, for PopArt's per-task statistics (None = task 0)."""
        if self.popart is not None:
            return self.popart.normalize(v, tasks)
        return v if self.returns_normalizer is None else self.returns_normalizer.normalize(v)

    def denormalize_values(self, v: torch.Tensor, tasks: torch.Tensor | None = None) -> torch.Tensor:
        """The value head's scale -> the reward scale (identity if disabled); ``tasks`` as in :meth:`normalize_values`."""
        if self.popart is not None:
            return self.popart.denormalize(v, tasks)
        return v if self.returns_normalizer is None else self.returns_normalizer.denormalize(v)

    def _task_values(self, head_out: torch.Tensor, tasks: torch.Tensor | None) -> torch.Tensor:
        """The value head's ``[N, K]`` outputs -> each sample's own task's ``[N]`` (``tasks``: ``[N]``)."""
        if head_out.shape[-1] == 1:
            return head_out.squeeze(-1)
        return select_task_values(head_out, tasks)

    def for_inference(self) -> "ActorCritic":
        """Prepare a model that will only act, never train (policy workers, enjoy): submodules
        with a ``for_inference`` method (the built-in image encoders) switch to their fastest
        inference form. Returns the model, in eval mode."""
        for m in self.modules():
            if m is not self and callable(getattr(m, "for_inference", None)):
                m.for_inference()
        return self.eval()

    # ----- forward passes --------------------------------------------------------------------

    @staticmethod
    def _check_action_mask(shape: tuple, action_space: gym.Space) -> int:
        sizes = categorical_sizes(action_space)
        if sizes is None or tuple(shape) != (sum(sizes),):
            raise ConfigError(f"observation key {ACTION_MASK_KEY!r} has shape {tuple(shape)}; allowed: "
                              f"({sum(sizes) if sizes else 'n'},), one 0/1 entry per choice of the categorical action "
                              f"space {action_space} (continuous actions take no mask)")
        return int(sum(sizes))

    def _action_params(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Actor features ``[N, F]`` -> ``action_params [N, P]`` (``[mean, log_std]`` for Box actions);
        ``mask [N, P]`` (categorical actions): masked logits become ``MASKED_LOGIT`` (probability 0)."""
        params = self.action_head(x)
        if mask is not None:
            allowed = mask.reshape(params.shape).bool()
            sizes, start = self._action_sizes, 0
            for n in sizes:  # a head with no allowed choice (an agent that does not act) stays unmasked
                head = allowed[:, start:start + n]
                allowed[:, start:start + n] = head | ~head.any(dim=1, keepdim=True)
                start += n
            params = params.masked_fill(~allowed, MASKED_LOGIT)
        if self.action_log_std is None:
            return params
        return torch.cat([params, self.action_log_std.expand(params.shape[0], -1)], dim=-1)

    def _split_states(self, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Separate weights: ``[B, S]`` -> the actor's ``[B, S_a]`` and the critic's ``[B, S_c]``
        (without an RNN both get the dummy column, which they pass through)."""
        if self.rnn_state_size == 0:
            return states, states
        return states[:, :self.actor_core.state_size], states[:, self.actor_core.state_size:]

    @torch.no_grad()
    def initial_rnn_states(self, batch_size: int, device: torch.device | str | None = None) -> torch.Tensor:
        """``[batch_size, max(1, S)]`` float32 (detached): the state row an agent starts every
        episode from, i.e. what a reset writes. The cores' ``initial_state`` rows concatenated
        (actor first with separate weights); one zero dummy column without state."""
        if self.rnn_state_size == 0:
            return torch.zeros(batch_size, 1, device=device)
        cores = [self.core] if self.share_weights else [self.actor_core, self.critic_core]
        return torch.cat([c.initial_state(batch_size, device).float() for c in cores], dim=1)

    def _extra_input(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor | None:
        """``--use_prev_action_reward``: ``[N, E]`` from the observation's previous-action and -reward
        columns (see sfx.models.obs), or None when off."""
        if not self.prev_action_reward:
            return None
        if PREV_ACTION_KEY not in obs or PREV_REWARD_KEY not in obs:
            raise ValueError(f"this model was built with use_prev_action_reward: its observations need the "
                             f"{PREV_ACTION_KEY!r} and {PREV_REWARD_KEY!r} columns the rollout workers write")
        action, reward = obs[PREV_ACTION_KEY].float(), obs[PREV_REWARD_KEY].float().reshape(-1, 1)
        action = action.reshape(reward.shape[0], -1)
        if self._action_sizes is not None:
            # stored as choice + 1 (0 = none): one-hot of width n + 1 without its first column
            action = torch.cat([nn.functional.one_hot(action[:, i].round().long().clamp(0, n), n + 1)[:, 1:]
                                for i, n in enumerate(self._action_sizes)], dim=1).float()
        return torch.cat([action, reward.clamp(-1.0, 1.0)], dim=1)

    @staticmethod
    def _with_extra(features: torch.Tensor, extra: torch.Tensor | None) -> torch.Tensor:
        return features if extra is None else torch.cat([features, extra.to(features.dtype)], dim=1)

    def _split_memory(self, memory: torch.Tensor | None) -> list[torch.Tensor | None]:
        """``[B, M, W]`` -> each trunk's part (actor first with separate weights)."""
        if not self.memory_len or memory is None:
            return [None] * len(self._memory_widths)
        return list(memory.split(self._memory_widths, dim=-1))

    @staticmethod
    def _core_step(core: nn.Module, x: torch.Tensor, states: torch.Tensor,
                   memory: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        if getattr(core, "memory_len", 0):
            return core.forward_step(x, states, memory)
        out, new_states = core.forward_step(x, states)
        return out, new_states, None

    @staticmethod
    def _core_sequence(core: nn.Module, x: torch.Tensor, states: torch.Tensor, resets: torch.Tensor,
                       memory: torch.Tensor | None) -> torch.Tensor:
        if getattr(core, "memory_len", 0):
            return core.forward_sequence(x, states, resets, memory)
        return core.forward_sequence(x, states, resets)

    def _check_memory(self, memory: torch.Tensor | None, batch: int) -> None:
        if self.memory_len and (memory is None or tuple(memory.shape) != (batch, self.memory_len, self.memory_width)):
            got = None if memory is None else tuple(memory.shape)
            raise ValueError(f"this model's core keeps a memory: pass memory [{batch}, {self.memory_len}, "
                             f"{self.memory_width}], got {got}")

    def forward_step(self, obs: torch.Tensor | Mapping[str, torch.Tensor], rnn_states: torch.Tensor,
                     tasks: torch.Tensor | None = None, memory: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """One step for a batch of agents.

        Args:
            obs: ``[B, *obs_shape]`` raw observations (``{key: [B, *shape]}`` for a Dict space; a
                Box observation may also come as ``{"obs": tensor}``).
            rnn_states: ``[B, S]`` state before this step (``S >= 1``; ignored without an RNN); at
                an episode start, ``initial_rnn_states``.
            tasks: ``[B]`` each agent's task (PopArt: which value output and statistics); None = task 0.
            memory: ``[B, memory_len, memory_width]`` each agent's memory (a core with a memory only).

        Returns:
            ``action_params [B, P]``, ``values [B]`` (reward scale), ``values_normalized [B]``,
            ``new_rnn_states [B, S]``; with a memory also ``memory_entry [B, memory_width]`` and
            ``memory_index [B]`` (long): the caller writes each agent's entry at that row of its memory.
        """
        self._check_memory(memory, rnn_states.shape[0])
        obs = as_obs_dict(obs)
        extra = self._extra_input(obs)
        mask = obs.get(ACTION_MASK_KEY) if self.action_mask_size else None
        x = self.preprocess_obs(obs)
        mems = self._split_memory(memory)
        if self.share_weights:
            actor_x, new_states, entry = self._core_step(self.core, self._with_extra(self.encoder(x), extra),
                                                         rnn_states, mems[0])
            critic_x = actor_x
            index_core, index_states = self.core, rnn_states
        else:
            actor_states, critic_states = self._split_states(rnn_states)
            actor_x, new_actor, entry_a = self._core_step(self.actor_core, self._with_extra(self.actor_encoder(x), extra),
                                                          actor_states, mems[0])
            critic_x, new_critic, entry_c = self._core_step(self.critic_core,
                                                            self._with_extra(self.critic_encoder(x), extra),
                                                            critic_states, mems[1])
            new_states = rnn_states if self.rnn_state_size == 0 else torch.cat([new_actor, new_critic], dim=1)
            entry = None if entry_a is None else torch.cat([entry_a, entry_c], dim=1)
            index_core, index_states = self.actor_core, actor_states
        values_norm = self._task_values(self.value_head(critic_x), tasks)
        out = {
            "action_params": self._action_params(actor_x, mask),
            "values": self.denormalize_values(values_norm, tasks),
            "values_normalized": values_norm,
            "new_rnn_states": new_states,
        }
        if entry is not None:
            out["memory_entry"] = entry
            out["memory_index"] = index_core.memory_index(index_states)
        return out

    def forward_sequence(self, obs: torch.Tensor | Mapping[str, torch.Tensor], rnn_init: torch.Tensor,
                         resets: torch.Tensor, tasks: torch.Tensor | None = None,
                         memory: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """``T`` steps of ``B`` sequences at once; equals ``T`` calls of ``forward_step``.

        Args:
            obs: ``[B, T, *obs_shape]`` raw observations (per key for a Dict space).
            rnn_init: ``[B, S]`` state before step 0.
            resets: ``[B, T]`` bool; True: the state before that step is the cores' initial state
                (episode start), whatever ``rnn_init`` or the previous step hold.
            tasks: ``[B]`` each sequence's task (see :meth:`forward_step`).
            memory: ``[B, memory_len, memory_width]`` the memory before step 0 (a core with a memory only).

        Returns:
            ``action_params [B, T, P]``, ``values_normalized [B, T]``, ``values [B, T]``; with auxiliary
            heads also the (actor's) ``encoder_features [B * T, F]`` and ``core_outputs [B, T, H]``.
        """
        B, T = resets.shape
        self._check_memory(memory, B)
        flat = map_obs(lambda v: v.reshape(B * T, *v.shape[2:]), as_obs_dict(obs))
        extra = self._extra_input(flat)
        mask = flat.get(ACTION_MASK_KEY) if self.action_mask_size else None
        x = self.preprocess_obs(flat)
        mems = self._split_memory(memory)
        if self.share_weights:
            encoded = self.encoder(x)
            features = self._with_extra(encoded, extra).reshape(B, T, -1)
            actor_x = self._core_sequence(self.core, features, rnn_init, resets, mems[0])
            core_out = actor_x
            actor_x = critic_x = actor_x.reshape(B * T, -1)
        else:
            actor_init, critic_init = self._split_states(rnn_init)
            encoded = self.actor_encoder(x)
            actor_x = self._core_sequence(self.actor_core, self._with_extra(encoded, extra).reshape(B, T, -1),
                                          actor_init, resets, mems[0])
            core_out = actor_x
            critic_x = self._core_sequence(self.critic_core,
                                           self._with_extra(self.critic_encoder(x), extra).reshape(B, T, -1),
                                           critic_init, resets, mems[1])
            actor_x, critic_x = actor_x.reshape(B * T, -1), critic_x.reshape(B * T, -1)
        step_tasks = None if tasks is None else tasks.reshape(B, 1).expand(B, T).reshape(B * T)
        values_norm = self._task_values(self.value_head(critic_x), step_tasks).reshape(B, T)
        out = {
            "action_params": self._action_params(actor_x, mask).reshape(B, T, -1),
            "values_normalized": values_norm,
            "values": self.denormalize_values(values_norm, tasks),
        }
        if self.aux is not None:
            out["encoder_features"], out["core_outputs"] = encoded, core_out
        return out

    def forward_trajectories(self, obs: Mapping[str, torch.Tensor], rnn_states: torch.Tensor, dones: torch.Tensor,
                             recurrence: int, tasks: torch.Tensor | None = None,
                             memory: torch.Tensor | None = None) -> "TrajectoryOutputs":
        """A learner minibatch of trajectories, recomputed with the current weights.

        Each trajectory is cut into ``T / recurrence`` chunks; a chunk starts from the recurrent
        state the behaviour policy had at its first step and resets after every episode end, so the
        learner sees what acting saw (backpropagation through time stays within a chunk).

        Args:
            obs: ``{key: [B, T + 1, *shape]}`` raw observations; index ``T`` is the observation
                after the last step (a Box space's key is ``"obs"``).
            rnn_states: ``[B, T + 1, S]`` the state before each step, as stored when acting.
            dones: ``[B, T]`` bool, the episode ended (terminated or truncated) at that step.
            recurrence: chunk length ``R`` (``T`` without an RNN); ``T`` must be a multiple of it.
            tasks: ``[B]`` each trajectory's task (see :meth:`forward_step`); None = task 0.
            memory: a core with a memory: ``[B, memory_len, memory_width]``, the memory before step 0 as
                acting left it. Each trajectory is then one chunk (``recurrence`` is not used) of ``T + 1``
                steps: the memory before the rollout is the behaviour policy's (no gradient), the rollout's
                own steps are recomputed, and step ``T`` gives the bootstrap value.

        Returns:
            ``sfx.algo.appo.TrajectoryOutputs``: ``action_params [B, T, P]``, ``values [B, T]``,
            ``values_normalized [B, T]`` (all with gradient), ``bootstrap_values [B]`` (``V(x_T)``,
            no gradient).
        """
        from sfx.algo.appo import TrajectoryOutputs  # here so this method stays one self-contained block

        B, T = dones.shape
        # the state before step t is reset when the episode ended at step t - 1
        prev_done = torch.cat([torch.zeros_like(dones[:, :1]), dones[:, :-1]], dim=1)
        if self.memory_len:
            resets = torch.cat([prev_done, dones[:, -1:]], dim=1)  # [B, T + 1]
            out = self.forward_sequence(obs, rnn_states[:, 0], resets, tasks, memory)
            features = core_out = None
            if self.aux is not None:
                features = out["encoder_features"].reshape(B, T + 1, -1)[:, :T].reshape(B * T, -1)
                core_out = out["core_outputs"][:, :T]
            return TrajectoryOutputs(action_params=out["action_params"][:, :T],
                                     values=out["values"][:, :T],
                                     values_normalized=out["values_normalized"][:, :T],
                                     bootstrap_values=out["values"][:, T].detach(),
                                     encoder_features=features, core_outputs=core_out)
        if recurrence < 1 or T % recurrence:
            raise ValueError(f"forward_trajectories: recurrence={recurrence} is not valid for trajectories of "
                             f"{T} steps; allowed: a divisor of {T}")
        R, chunks = recurrence, B * T // recurrence
        seq_obs = {k: v[:, :T].reshape(chunks, R, *v.shape[2:]) for k, v in obs.items()}
        seq_init = rnn_states[:, 0:T:R].reshape(chunks, -1)
        chunk_tasks = None if tasks is None else tasks.reshape(B, 1).expand(B, T // R).reshape(chunks)
        out = self.forward_sequence(seq_obs, seq_init, prev_done.reshape(chunks, R), chunk_tasks)
        with torch.no_grad():
            bootstrap = self.forward_step({k: v[:, T] for k, v in obs.items()}, rnn_states[:, T], tasks)["values"]
        features = core_out = None
        if self.aux is not None:  # chunks are consecutive pieces of each trajectory: [chunks * R] is [B * T]
            features, core_out = out["encoder_features"], out["core_outputs"].reshape(B, T, -1)
        return TrajectoryOutputs(action_params=out["action_params"].reshape(B, T, -1),
                                 values=out["values"].reshape(B, T),
                                 values_normalized=out["values_normalized"].reshape(B, T),
                                 bootstrap_values=bootstrap, encoder_features=features, core_outputs=core_out)


def create_actor_critic(cfg: Any, obs_space: gym.Space, action_space: gym.Space, num_tasks: int = 1) -> ActorCritic:
    """Build the actor-critic ``cfg`` describes for these spaces.

    ``cfg`` is a parsed cfg (``sfx.cfg.parse_args`` or ``sfx.cfg.default_cfg``): the flags' defaults
    live in the parser only, so a field missing here is an AttributeError, never a quiet other default.
    Reads ``encoder_type`` (conv | resnet | mlp | a registered name), ``encoder_subtype``,
    ``hidden_size``, ``use_rnn``, ``rnn_type``, ``rnn_num_layers``, ``normalize_input``,
    ``normalize_returns``, ``obs_scale``, ``obs_subtract_mean``, ``nonlinearity``,
    ``policy_initialization``, ``policy_init_gain``, ``actor_critic_share_weights``,
    ``adaptive_stddev``, ``initial_stddev``, ``popart``, ``popart_beta``, ``popart_clip_min``, and for the
    image encoders ``mixed_precision`` and ``device``. ``num_tasks``: the env's tasks (PopArt's value outputs).
    """
    hidden = cfg.hidden_size
    if not isinstance(hidden, (int, np.integer)) or hidden < 1:
        raise ConfigError(f"hidden_size {hidden!r} is not valid; allowed: an integer >= 1")
    if not isinstance(num_tasks, (int, np.integer)) or num_tasks < 1:
        raise ConfigError(f"num_tasks {num_tasks!r} is not valid; allowed: an integer >= 1")
    return ActorCritic(cfg, obs_space, action_space, num_tasks=int(num_tasks))
