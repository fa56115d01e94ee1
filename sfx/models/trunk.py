"""The trunk: encoder -> (+ extra input) -> core, the part of a model between preprocessing and heads.

A model uses one trunk (shared by its heads) or several (e.g. ``--actor_critic_share_weights=False``:
an actor trunk and a critic trunk; a SAC actor and its critics): :func:`make_trunk` builds one from
cfg, called once per trunk. The engine keeps one flat state row and one memory per agent whatever the
model: :func:`split_states` / :func:`join_states` / :func:`split_memory` lay several trunks' states and
memories side by side in it (in the trunks' order), so the engine never sees how many there are.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn

from sfx.errors import ConfigError
from sfx.models.cores import Core, CoreStep, make_core
from sfx.models.encoders import DictEncoder, init_weights, make_builtin_encoder
from sfx.models.registry import resolve_encoder


class TrunkSequence(NamedTuple):
    """:meth:`Trunk.forward_sequence`'s result for ``B`` sequences of ``T`` steps."""

    out: torch.Tensor       # [B, T, out_size] the core's outputs
    features: torch.Tensor  # [B * T, encoder.out_size] the encoder's (before the extra input is appended)


class Trunk(nn.Module):
    """``encoder`` then ``core``, with an optional extra input (e.g. the previous action and reward)
    appended to the encoder's features before the core.

    Attributes:
        encoder: ``[N, *obs]`` (what :class:`~sfx.models.preprocess.ObsPreprocessor` gives) ->
            ``[N, encoder.out_size]``.
        core: a :class:`~sfx.models.cores.Core` over ``encoder.out_size + extra_input_size`` features.
        out_size, state_size, memory_len, memory_width: the core's (see ``sfx.models.cores``).
    """

    def __init__(self, encoder: nn.Module, core: Core, extra_input_size: int = 0):
        super().__init__()
        self.encoder = encoder
        self.core = core
        self.extra_input_size = int(extra_input_size)
        self.out_size: int = int(core.out_size)
        self.state_size: int = int(core.state_size)
        self.memory_len: int = int(core.memory_len)
        self.memory_width: int = int(core.memory_width)

    def initial_state(self, batch_size: int, device: torch.device | str | None = None) -> torch.Tensor:
        """``[batch_size, state_size]``: the core's state at an episode start."""
        return self.core.initial_state(batch_size, device)

    def memory_index(self, states: torch.Tensor) -> torch.Tensor:
        """``[B]`` long: the memory row a step taken from ``states [B, S]`` writes (a core with a memory)."""
        return self.core.memory_index(states)

    def _core_input(self, features: torch.Tensor, extra: torch.Tensor | None) -> torch.Tensor:
        return features if extra is None else torch.cat([features, extra.to(features.dtype)], dim=1)

    def forward_step(self, x: Any, states: torch.Tensor, extra: torch.Tensor | None = None,
                     memory: torch.Tensor | None = None) -> CoreStep:
        """One step of ``B`` agents: encoder input ``x [B, ...]``, ``states [B, S]``, ``extra [B, E]``,
        ``memory [B, memory_len, memory_width]`` (a core with a memory only) -> :class:`CoreStep`."""
        return self.core.step(self._core_input(self.encoder(x), extra), states, memory)

    def forward_sequence(self, x: Any, states: torch.Tensor, resets: torch.Tensor, extra: torch.Tensor | None = None,
                         memory: torch.Tensor | None = None) -> TrunkSequence:
        """``B`` sequences of ``T`` steps: encoder input ``x [B * T, ...]`` (sequence-major), ``states [B, S]``
        and ``memory`` as before step 0, ``resets [B, T]`` bool (the state before that step is the initial
        one), ``extra [B * T, E]`` -> :class:`TrunkSequence`."""
        B, T = resets.shape
        features = self.encoder(x)
        out = self.core.unroll(self._core_input(features, extra).reshape(B, T, -1), states, resets, memory)
        return TrunkSequence(out, features)


def encoder_initialization(cfg: Any) -> str:
    """The built-in encoders' initialization: ``--encoder_initialization``, or ``--policy_initialization`` where
    that says ``policy`` (the default; a cfg.json saved before the flag existed resumes with it)."""
    scheme = cfg.encoder_initialization
    return cfg.policy_initialization if scheme == "policy" else scheme


def make_encoder(cfg: Any, obs_space: gym.Space, encoder: nn.Module | None = None) -> nn.Module:
    """The encoder ``cfg`` names for ``obs_space`` (a built-in, initialised by :func:`encoder_initialization`, or
    a registered factory's, called once per call), or the ready-made ``encoder``; checked either way.

    Raises:
        ConfigError: the encoder is not an ``nn.Module`` with an integer ``out_size > 0``.
    """
    if encoder is None:
        name, factory = resolve_encoder(cfg, obs_space)
        if factory is None:
            encoder = (DictEncoder(cfg, obs_space, name) if isinstance(obs_space, gym.spaces.Dict)
                       else make_builtin_encoder(name, cfg, obs_space.shape))
            init_weights(encoder, encoder_initialization(cfg), float(cfg.policy_init_gain))
        else:
            encoder = factory(cfg, obs_space)
    out_size = getattr(encoder, "out_size", None)
    if not isinstance(encoder, nn.Module) or not isinstance(out_size, (int, np.integer)) or out_size <= 0:
        raise ConfigError(f"encoder {type(encoder).__name__} has out_size {out_size!r}; "
                          f"allowed: an nn.Module with an integer out_size > 0")
    return encoder


def make_trunk(cfg: Any, obs_space: gym.Space, extra_input_size: int = 0, encoder: nn.Module | None = None) -> Trunk:
    """A trunk from cfg: the encoder (:func:`make_encoder`; ``obs_space`` is what it sees, e.g.
    ``ObsPreprocessor.encoder_space``), then the core ``--use_rnn`` / ``--rnn_type`` name
    (``sfx.models.cores.make_core``) over its features and ``extra_input_size`` more. Call it once per
    trunk: each call builds new weights."""
    encoder = make_encoder(cfg, obs_space, encoder)
    return Trunk(encoder, make_core(cfg, int(encoder.out_size) + int(extra_input_size)), extra_input_size)


def check_same_memory_len(trunks: Sequence[Trunk]) -> int:
    """The ``memory_len`` the trunks share (0: no memory), as the engine keeps one memory per agent.

    Raises:
        ConfigError: two trunks keep memories of different lengths.
    """
    lengths = {t.memory_len for t in trunks if t.memory_len}
    if len(lengths) > 1:
        raise ConfigError(f"the trunks' cores keep memories of {sorted(lengths)} steps; allowed: the same "
                          f"memory_len for every trunk")
    return lengths.pop() if lengths else 0


def split_states(states: torch.Tensor, trunks: Sequence[Trunk]) -> list[torch.Tensor]:
    """The engine's flat ``[B, S]`` row (the trunks' states side by side, ``S = sum(state_size)``) -> each
    trunk's ``[B, S_i]``. Without any state every trunk gets the engine's dummy column, which it passes
    through."""
    if len(trunks) == 1 or sum(t.state_size for t in trunks) == 0:
        return [states] * len(trunks)
    return list(states.split([t.state_size for t in trunks], dim=1))


def join_states(new_states: Sequence[torch.Tensor], states: torch.Tensor, trunks: Sequence[Trunk]) -> torch.Tensor:
    """Each trunk's state after a step -> the flat row (``states``, the row before the step, when stateless)."""
    if len(trunks) == 1:
        return new_states[0]
    return states if sum(t.state_size for t in trunks) == 0 else torch.cat(list(new_states), dim=1)


def split_memory(memory: torch.Tensor | None, trunks: Sequence[Trunk]) -> list[torch.Tensor | None]:
    """The agent's ``[B, M, W]`` memory (the trunks' entries side by side, ``W = sum(memory_width)``) -> each
    trunk's ``[B, M, W_i]`` (None for all without a memory)."""
    if memory is None or not any(t.memory_len for t in trunks):
        return [None] * len(trunks)
    return list(memory.split([t.memory_width for t in trunks], dim=-1))


def join_memory_entries(entries: Sequence[torch.Tensor | None]) -> torch.Tensor | None:
    """Each trunk's ``[B, W_i]`` memory entry of a step -> the agent's ``[B, W]`` (None without a memory)."""
    if entries[0] is None:
        return None
    return entries[0] if len(entries) == 1 else torch.cat(list(entries), dim=1)
