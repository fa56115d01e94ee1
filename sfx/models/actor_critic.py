"""The actor-critic: preprocess -> trunk (encoder -> core) -> (action params head, value head).

One network serves both roles: policy workers call ``forward_step`` (one observation per agent,
recurrent state in and out), learners call ``forward_sequence`` (``[B, T]`` chunks with episode
resets inside) and the two agree exactly, so training on sequences sees what acting saw.

It is an assembly of the parts other agents reuse: :class:`~sfx.models.preprocess.ObsPreprocessor`
(scaling of integer images by ``cfg.obs_subtract_mean`` / ``cfg.obs_scale``, ``cfg.normalize_input``'s
running statistics, the action mask, ``cfg.use_prev_action_reward``'s extra input; see that module),
one or two :class:`~sfx.models.trunk.Trunk`, an :class:`~sfx.models.heads.ActionParamsHead` and a
:class:`~sfx.models.heads.ValueHead`. The input statistics are updated only through
``update_obs_normalizer`` by the learner. With ``cfg.normalize_returns`` (or ``cfg.popart``) the value
head predicts normalized returns (the learner updates the statistics from its targets); ``values``
are always given back in the env's reward scale.

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

from typing import Any, Mapping

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn

from sfx.errors import ConfigError
from sfx.models.encoders import init_weights
from sfx.models.heads import ActionParamsHead, ValueHead
from sfx.models.obs import BOX_KEY, as_obs_dict
from sfx.models.preprocess import IMAGE_STATS_ROWS, ObsPreprocessor  # noqa: F401 (IMAGE_STATS_ROWS: its old home)
from sfx.models.trunk import (Trunk, check_same_memory_len, join_memory_entries, join_states, make_trunk,
                              split_memory, split_states)


def _from_preprocessor(name: str) -> property:
    return property(lambda self: getattr(self.preprocessor, name), doc=f"``ObsPreprocessor.{name}``.")


def _relink_after_load(model: "ActorCritic", incompatible_keys: Any) -> None:
    model._relink_parts()


class ActorCritic(nn.Module):
    """Actor-critic over one observation / action space pair: one shared trunk, or (with
    ``cfg.actor_critic_share_weights=False``) an actor trunk and a critic trunk.

    Its parts are plain attributes: ``preprocessor`` (an ``ObsPreprocessor``), ``trunks`` (``[shared]`` or
    ``[actor, critic]``, each a ``Trunk``), ``policy_head`` (an ``ActionParamsHead`` on ``trunks[0]``) and
    ``critic_head`` (a ``ValueHead`` on ``trunks[-1]``). Their modules are registered on the actor-critic
    itself, under the names and in the order it had before it was split into parts (the attributes
    below), so checkpoints, published weights and optimizer states keep their layout.

    Attributes:
        obs_space, action_space: the gymnasium spaces it was built for.
        share_weights: ``cfg.actor_critic_share_weights``.
        encoder, core: the shared trunk's (``share_weights`` only). The encoder maps an observation
            ``[N, *obs_shape]`` to ``[N, encoder.out_size]``; the core is an ``IdentityCore``, an
            ``RnnCore`` or a registered core (see ``sfx.models.cores`` for the interface and the
            state layouts).
        actor_encoder, actor_core, critic_encoder, critic_core: the two trunks' (separate weights only).
        rnn_state_size: flat recurrent state size ``S`` (0 without an RNN; callers then keep
            one dummy column, which is passed through). Separate weights: actor's + critic's.
        memory_len, memory_width: the per-agent memory (a ``MemoryCore``: Transformer-XL; 0 without);
            separate weights: the two memories' entries side by side.
        action_params_size: ``P``, width of ``action_params``.
        action_head: ``[N, F] -> [N, P]``, or the means ``[N, P / 2]`` when ``action_log_std`` is set.
        action_log_std: the state-independent log-stddev ``[P / 2]`` (``adaptive_stddev=False`` with
            Box actions), else ``None``.
        value_head: ``nn.Linear(F, K)`` (``K`` = the tasks with PopArt, else 1).
        obs_normalizer, key_normalizers, returns_normalizer, popart: the statistics (or ``None``).
        aux: the auxiliary heads (``sfx.models.aux_heads``; learner only) or None.
    """

    # parameters and buffers the acting model does not need (sfx.engine.buffers.WeightsBuffer leaves them out)
    learner_only_prefixes = ("aux.",)

    obs_kinds = _from_preprocessor("obs_kinds")
    dict_obs = _from_preprocessor("dict_obs")
    obs_scale = _from_preprocessor("obs_scale")
    obs_subtract_mean = _from_preprocessor("obs_subtract_mean")
    action_mask_size = _from_preprocessor("action_mask_size")
    prev_action_reward = _from_preprocessor("prev_action_reward")
    extra_input_size = _from_preprocessor("extra_input_size")
    has_obs_normalizer = _from_preprocessor("has_obs_normalizer")

    def __init__(self, cfg: Any, obs_space: gym.Space, action_space: gym.Space,
                 encoder: nn.Module | None = None, num_tasks: int = 1):
        """``encoder``: a ready-made encoder for the shared trunk instead of the one ``cfg`` names
        (shared weights only: separate trunks each build their own). ``num_tasks``: the env's tasks; with
        ``cfg.popart`` the value head has one output per task."""
        super().__init__()
        self.num_tasks = int(num_tasks)
        self.obs_space = obs_space
        self.action_space = action_space
        self.share_weights = bool(cfg.actor_critic_share_weights)
        if encoder is not None and not self.share_weights:
            raise ValueError("a ready-made encoder needs actor_critic_share_weights=True; separate actor "
                             "and critic trunks each build their own encoder from cfg")
        preprocessor = ObsPreprocessor.from_cfg(cfg, obs_space, action_space)
        # construction order (encoders, cores, heads, aux) is that of the model before these options and parts
        # existed, so a seeded model starts from the same weights
        trunks = [make_trunk(cfg, preprocessor.encoder_space, preprocessor.extra_input_size, encoder)
                  for _ in range(1 if self.share_weights else 2)]
        self.memory_len: int = check_same_memory_len(trunks)
        self.memory_width: int = sum(t.memory_width for t in trunks)
        self.rnn_state_size: int = sum(t.state_size for t in trunks)
        policy_head = ActionParamsHead.from_cfg(cfg, trunks[0].out_size, action_space)
        critic_head = ValueHead.from_cfg(cfg, trunks[-1].out_size, self.num_tasks)
        self.action_params_size: int = policy_head.out_size
        # The heads are initialised like the encoder (--policy_initialization, --policy_init_gain: orthogonal,
        # gain 1, as in Sample Factory). A near-uniform policy head (orthogonal gain 0.01, as "What matters in
        # on-policy RL" advises for separate policy and value networks) starves the shared trunk of policy
        # gradient: the head's tiny weights scale what reaches the trunk by 0.01, so the trunk learns only
        # the value function and Adam moves the policy a hundred times less per step. Measured: doom_basic
        # at Sample Factory's command line stayed at the uniform policy for 800k frames, and Acrobot with
        # normalized inputs never left -500 (both learn with gain 1).
        init_weights(policy_head, cfg.policy_initialization, float(cfg.policy_init_gain))
        init_weights(critic_head, cfg.policy_initialization, float(cfg.policy_init_gain))

        self._register_parts(preprocessor, trunks, policy_head, critic_head)
        preprocessor.use_channels_last(_channels_last_keys([t.encoder for t in trunks]))

        # Brain Agent's auxiliary losses (sfx.models.aux_heads), built last so that the weights above start
        # the same with or without them. The learner trains them; policy workers never receive them.
        self.aux: nn.Module | None = None
        if cfg.aux_loss_reconstruction_coeff > 0 or cfg.aux_loss_future_pred_coeff > 0:
            from sfx.models.aux_heads import AuxiliaryHeads

            self.aux = AuxiliaryHeads(cfg, obs_space, action_space, trunks[0].encoder, trunks[0].out_size)

    def _register_parts(self, preprocessor: ObsPreprocessor, trunks: list[Trunk], policy_head: ActionParamsHead,
                        critic_head: ValueHead) -> None:
        """Keep the parts as plain attributes (not submodules) and register their modules on this model, once,
        under the names and in the order of the actor-critic before the split: checkpoints, published
        weights and optimizer states (which follow the parameters' order) keep their layout."""
        for name, part in (("preprocessor", preprocessor), ("trunks", trunks), ("policy_head", policy_head),
                           ("critic_head", critic_head)):
            object.__setattr__(self, name, part)
        self.obs_normalizer = preprocessor.obs_normalizer
        self.key_normalizers = preprocessor.key_normalizers
        self.popart = critic_head.popart
        # the acting interface's declaration (policy workers, export): forward_step wants each row's task for
        # PopArt's per-task value outputs; the engine names no model part
        self.reads_tasks = self.popart is not None
        self.returns_normalizer = critic_head.returns_normalizer
        for prefix, trunk in zip([""] if self.share_weights else ["actor_", "critic_"], trunks):
            setattr(self, prefix + "encoder", trunk.encoder)
            setattr(self, prefix + "core", trunk.core)
        self.action_head = policy_head.linear
        self.action_log_std = policy_head.log_std
        self.value_head = critic_head.linear
        # load_state_dict(assign=True), or a conversion that makes new tensors, replaces the parameter registered
        # here: the policy head must then read the new one
        self.register_load_state_dict_post_hook(_relink_after_load)

    def _relink_parts(self) -> None:
        if self.action_log_std is not None and self.policy_head.log_std is not self.action_log_std:
            self.policy_head.log_std = self.action_log_std

    def _apply(self, *args: Any, **kwargs: Any) -> "ActorCritic":
        module = super()._apply(*args, **kwargs)
        self._relink_parts()
        return module

    def train(self, mode: bool = True) -> "ActorCritic":
        """As ``nn.Module.train``, the parts (plain attributes) included."""
        super().train(mode)
        for part in (self.preprocessor, *self.trunks, self.policy_head, self.critic_head):
            part.train(mode)
        return self

    # ----- preprocessing and value scales ----------------------------------------------------

    def preprocess_obs(self, obs: torch.Tensor | Mapping[str, torch.Tensor]) -> Any:
        """Raw observations (as stored in buffers) -> encoder input (``ObsPreprocessor.encoder_input``):
        a float tensor for a Box space, ``{key: tensor}`` for a Dict space; with separate actor and
        critic both encoders read this one result (so neither may change it in place)."""
        return self.preprocessor.encoder_input(obs)

    def update_obs_normalizer(self, obs: torch.Tensor | Mapping[str, torch.Tensor], reduce: Any = None) -> None:
        """Fold raw observations ``[..., *obs_shape]`` (per key for Dict spaces) into the input
        statistics (no-op if disabled). ``reduce``: a sum over data-parallel ranks (the statistics are
        then all ranks' observations together; see ``RunningMeanStd.update``)."""
        self.preprocessor.update_normalizer(obs, reduce)

    def normalize_values(self, v: torch.Tensor, tasks: torch.Tensor | None = None) -> torch.Tensor:
        """Returns in the reward scale -> the value head's scale (identity if disabled). ``tasks`` (``[B]``,
        ``v`` is ``[B]`` or ``[B, T]``): each sample's task, for PopArt's per-task statistics (None = task 0)."""
        return self.critic_head.normalize(v, tasks)

    def denormalize_values(self, v: torch.Tensor, tasks: torch.Tensor | None = None) -> torch.Tensor:
        """The value head's scale -> the reward scale (identity if disabled); ``tasks`` as in
        :meth:`normalize_values`."""
        return self.critic_head.denormalize(v, tasks)

    def for_inference(self) -> "ActorCritic":
        """Prepare a model that will only act, never train (policy workers, enjoy): submodules
        with a ``for_inference`` method (the built-in image encoders) switch to their fastest
        inference form. Returns the model, in eval mode."""
        for m in self.modules():
            if m is not self and callable(getattr(m, "for_inference", None)):
                m.for_inference()
        return self.eval()

    # ----- forward passes --------------------------------------------------------------------

    @torch.no_grad()
    def initial_rnn_states(self, batch_size: int, device: torch.device | str | None = None) -> torch.Tensor:
        """``[batch_size, max(1, S)]`` float32 (detached): the state row an agent starts every
        episode from, i.e. what a reset writes. The cores' ``initial_state`` rows concatenated
        (actor first with separate weights); one zero dummy column without state."""
        if self.rnn_state_size == 0:
            return torch.zeros(batch_size, 1, device=device)
        return torch.cat([t.initial_state(batch_size, device).float() for t in self.trunks], dim=1)

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
            ``new_rnn_states [B, S]``, ``core_output [B, H]`` (the policy trunk's core output: the features
            replay's attentive and elite sampling compare); with a memory also ``memory_entry [B, memory_width]`` and
            ``memory_index [B]`` (long): the caller writes each agent's entry at that row of its memory.
        """
        self._check_memory(memory, rnn_states.shape[0])
        x, mask, extra = self.preprocessor(obs)
        states = split_states(rnn_states, self.trunks)
        steps = [trunk.forward_step(x, s, extra, m)
                 for trunk, s, m in zip(self.trunks, states, split_memory(memory, self.trunks))]
        values_norm = self.critic_head(steps[-1].out, tasks)
        out = {
            "action_params": self.policy_head(steps[0].out, mask),
            "values": self.denormalize_values(values_norm, tasks),
            "values_normalized": values_norm,
            "new_rnn_states": join_states([s.states for s in steps], rnn_states, self.trunks),
            "core_output": steps[0].out,
        }
        entry = join_memory_entries([s.memory_entry for s in steps])
        if entry is not None:
            out["memory_entry"] = entry
            out["memory_index"] = self.trunks[0].memory_index(states[0])
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
            ``action_params [B, T, P]``, ``values_normalized [B, T]``, ``values [B, T]``, and the (actor's)
            ``encoder_features [B * T, F]`` and ``core_outputs [B, T, H]`` (auxiliary heads, replay features).
        """
        B, T = resets.shape
        self._check_memory(memory, B)
        x, mask, extra = self.preprocessor(as_obs_dict(obs), batch_dims=2)  # [B, T, ...] -> [B * T, ...]
        seqs = [trunk.forward_sequence(x, s, resets, extra, m) for trunk, s, m in
                zip(self.trunks, split_states(rnn_init, self.trunks), split_memory(memory, self.trunks))]
        # one flat view per trunk: with shared weights both heads read the same node (the order in which
        # their gradients are summed is then what it was before the parts were split out)
        features = [s.out.reshape(B * T, -1) for s in seqs]
        step_tasks = None if tasks is None else tasks.reshape(B, 1).expand(B, T).reshape(B * T)
        values_norm = self.critic_head(features[-1], step_tasks).reshape(B, T)
        out = {
            "action_params": self.policy_head(features[0], mask).reshape(B, T, -1),
            "values_normalized": values_norm,
            "values": self.denormalize_values(values_norm, tasks),
        }
        out["encoder_features"], out["core_outputs"] = seqs[0].features, seqs[0].out
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
        # chunks are consecutive pieces of each trajectory: [chunks * R] is [B * T]
        features, core_out = out["encoder_features"], out["core_outputs"].reshape(B, T, -1)
        return TrajectoryOutputs(action_params=out["action_params"].reshape(B, T, -1),
                                 values=out["values"].reshape(B, T),
                                 values_normalized=out["values_normalized"].reshape(B, T),
                                 bootstrap_values=bootstrap, encoder_features=features, core_outputs=core_out)


def _channels_last_keys(encoders: list[nn.Module]) -> set[str]:
    """The observation keys whose images every one of ``encoders`` reads channels_last (an encoder, or for a
    Dict space each key's part, declares it with a ``memory_format`` attribute: sfx's conv encoders do)."""
    def wanted(encoder: nn.Module) -> set[str]:
        parts = getattr(encoder, "parts", None)
        if isinstance(parts, nn.ModuleDict):  # DictEncoder: one encoder per key
            return {k for k, p in parts.items() if getattr(p, "memory_format", None) == torch.channels_last}
        return {BOX_KEY} if getattr(encoder, "memory_format", None) == torch.channels_last else set()

    return set.intersection(*(wanted(e) for e in encoders))


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
