"""A recurrent Q-network: preprocess -> trunk (encoder -> core) -> dueling Q head (R2D2's network).

The same parts as the actor-critic (:class:`~sfx.models.preprocess.ObsPreprocessor`,
:func:`~sfx.models.trunk.make_trunk`: any encoder, no core / LSTM / GRU / a registered core), with
:class:`DuelingQHead` on the core's output (Wang et al. 2016, "Dueling Network Architectures"; as in
R2D2, Kapturowski et al. 2019). It has the acting interface the engine's policy workers, the
evaluator, ``sfx.enjoy`` and export use (``forward_step``, ``initial_rnn_states``, ``rnn_state_size``,
``memory_len`` / ``memory_width``, ``reads_tasks``, ``for_inference``) and ``forward_sequence`` for the
learner. Q-values are in the units the agent trains them in (R2D2: rescaled returns, see
:func:`sfx.algo.qlearning.value_rescale`).
"""

from __future__ import annotations

from typing import Any, Mapping

import gymnasium as gym
import torch
import torch.nn as nn

from sfx.algo.distributions import MASKED_LOGIT
from sfx.errors import ConfigError
from sfx.models.encoders import init_weights
from sfx.models.obs import as_obs_dict, map_obs
from sfx.models.preprocess import ObsPreprocessor, PreprocessedModel
from sfx.models.trunk import make_trunk


class DuelingQHead(nn.Module):
    """Features ``[N, F]`` -> ``Q [N, A]`` = ``V(s) + A(s, a) - mean_a' A(s, a')`` (the mean over the allowed
    actions when an action mask is given; masked actions get ``MASKED_LOGIT``, so they are never the argmax)."""

    def __init__(self, in_features: int, num_actions: int) -> None:
        super().__init__()
        self.num_actions = int(num_actions)
        self.value = nn.Linear(in_features, 1)
        self.advantage = nn.Linear(in_features, self.num_actions)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        v = self.value(x)
        a = self.advantage(x)
        if mask is None:
            return v + a - a.mean(dim=1, keepdim=True)
        allowed = mask.reshape(a.shape).bool()
        allowed = allowed | ~allowed.any(dim=1, keepdim=True)  # an agent with no allowed action: all count
        mean = (a * allowed).sum(dim=1, keepdim=True) / allowed.sum(dim=1, keepdim=True)
        return (v + a - mean).masked_fill(~allowed, MASKED_LOGIT)


def discrete_actions(action_space: gym.Space, algo: str) -> int:
    """The number of actions of a ``Discrete`` space; :class:`ConfigError` naming any other space."""
    if isinstance(action_space, gym.spaces.Discrete):
        return int(action_space.n)
    raise ConfigError(f"--algo={algo} needs a Discrete action space (one choice among n); this env's is "
                      f"{action_space}: allowed: a Discrete space, or --algo=APPO for any space"
                      + (" (or --algo=SAC for Box actions)" if isinstance(action_space, gym.spaces.Box) else ""))


class QNetwork(PreprocessedModel):
    """See the module docstring.

    Attributes:
        preprocessor, trunk, q_head: the parts (submodules).
        num_actions: ``A``.
        rnn_state_size: the core's state size ``S`` (0 without a core: callers keep one dummy column).
    """

    learner_only_prefixes: tuple[str, ...] = ()
    reads_tasks = False  # forward_step reads no task
    returns_normalizer = None
    memory_len = 0
    memory_width = 0

    def __init__(self, cfg: Any, obs_space: gym.Space, action_space: gym.Space, num_tasks: int = 1) -> None:
        super().__init__()
        self.obs_space, self.action_space = obs_space, action_space
        self.num_tasks = int(num_tasks)
        self.num_actions = discrete_actions(action_space, cfg.algo)
        self.preprocessor = ObsPreprocessor.from_cfg(cfg, obs_space, action_space)
        self.trunk = make_trunk(cfg, self.preprocessor.encoder_space, self.preprocessor.extra_input_size)
        if self.trunk.memory_len:
            raise ConfigError(f"--algo={cfg.algo} stores one recurrent state per sequence; --rnn_type={cfg.rnn_type} "
                              f"keeps a memory of past steps: allowed: --use_rnn=False, or --rnn_type gru / lstm "
                              f"(or a registered core without a memory)")
        self.q_head = DuelingQHead(self.trunk.out_size, self.num_actions)
        init_weights(self.q_head, cfg.policy_initialization, float(cfg.policy_init_gain))
        self.rnn_state_size: int = self.trunk.state_size
        self.trunks = [self.trunk]  # the acting interface's name for the policy trunk (replay features)

    @torch.no_grad()
    def initial_rnn_states(self, batch_size: int, device: torch.device | str | None = None) -> torch.Tensor:
        """``[batch_size, max(1, S)]``: the state an episode starts from (a zero dummy column without a core)."""
        if self.rnn_state_size == 0:
            return torch.zeros(batch_size, 1, device=device)
        return self.trunk.initial_state(batch_size, device).float()

    def forward_step(self, obs: torch.Tensor | Mapping[str, torch.Tensor], rnn_states: torch.Tensor,
                     tasks: torch.Tensor | None = None, memory: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """One step of ``B`` agents -> ``q_values [B, A]``, ``new_rnn_states [B, S]``, ``core_output [B, H]``."""
        x, mask, extra = self.preprocessor(obs)
        step = self.trunk.forward_step(x, rnn_states, extra)
        return {"q_values": self.q_head(step.out, mask), "new_rnn_states": step.states, "core_output": step.out}

    def forward_sequence(self, obs: torch.Tensor | Mapping[str, torch.Tensor], rnn_init: torch.Tensor,
                         resets: torch.Tensor) -> torch.Tensor:
        """``B`` sequences of ``T`` steps (equal to ``T`` calls of :meth:`forward_step`): ``obs [B, T, ...]``,
        ``rnn_init [B, S]`` the state before step 0, ``resets [B, T]`` bool (the state before that step is the
        initial one) -> ``q_values [B, T, A]``."""
        B, T = resets.shape
        x, mask, extra = self.preprocessor(map_obs(lambda v: v.reshape(B * T, *v.shape[2:]), as_obs_dict(obs)))
        out = self.trunk.forward_sequence(x, rnn_init, resets, extra).out
        return self.q_head(out.reshape(B * T, -1), mask).reshape(B, T, -1)

    @torch.no_grad()
    def advance_states(self, obs: torch.Tensor | Mapping[str, torch.Tensor], rnn_init: torch.Tensor,
                       resets: torch.Tensor) -> torch.Tensor:
        """The recurrent state after ``T`` steps (R2D2's burn-in): arguments as :meth:`forward_sequence`
        -> ``[B, S]`` (``rnn_init`` itself without a core). No gradient."""
        B, T = resets.shape
        if self.rnn_state_size == 0 or T == 0:
            return rnn_init
        x, _, extra = self.preprocessor(map_obs(lambda v: v.reshape(B * T, *v.shape[2:]), as_obs_dict(obs)))
        features = self.trunk._core_input(self.trunk.encoder(x), extra).reshape(B, T, -1)
        core, h = self.trunk.core, rnn_init
        for t in range(T):
            h = core.step(features[:, t], core.reset_states(h, resets[:, t])).states
        return h
