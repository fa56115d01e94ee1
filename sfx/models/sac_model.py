"""SAC's networks: a squashed-Gaussian actor and twin Q(s, a) critics over one observation preprocessor.

Haarnoja et al. 2018 ("Soft Actor-Critic Algorithms and Applications"): the actor gives the mean and log-std of
a diagonal Gaussian that :class:`~sfx.algo.sac.SquashedGaussian` squashes onto the env's Box bounds; two
critics ``Q_1, Q_2`` take the observation and the action. The parts, by observation:

* **a plain vector** (a 1-D Box with the built-in ``mlp`` encoder, e.g. MuJoCo): separate networks, as in the
  paper: the actor an MLP over the observation, each critic an MLP over ``[observation, action]`` (two
  hidden layers of ``--hidden_size`` with ``--nonlinearity`` each; the paper's 256 ReLU units with
  ``--hidden_size=256 --nonlinearity=relu``), then a linear output.
* **anything else** (images, Dict observations, a registered encoder): one encoder (``--encoder_type`` /
  ``--encoder_subtype``, :func:`~sfx.models.trunk.make_encoder`) shared by the actor and both critics and
  trained by the critic loss only: the actor reads its features detached (as is usual for pixel SAC, e.g.
  Yarats et al. 2021, "Improving Sample Efficiency in Model-Free RL from Images"). Actor and critics are
  then MLPs over the features (the critics' over ``[features, action]``).

Observation scaling and normalisation (``--normalize_input``) are the :class:`~sfx.models.preprocess.
ObsPreprocessor`'s, shared by actor and critics; ``--use_prev_action_reward`` appends the previous action and
reward to every MLP's input. No core: ``--use_rnn=True`` is refused (a recurrent SAC would replay sequences
with burn-in, like R2D2; the transition replay stores single steps).

The acting interface (policy workers, evaluator, ``sfx.enjoy``, export) is the actor's alone:
``forward_step -> action_mean, action_log_std`` (pre-squash) and ``new_rnn_states`` (the engine's dummy column
passed through). The critics are ``learner_only_prefixes``: policy workers never receive them (a shared
encoder is published, the actor reads it).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import gymnasium as gym
import torch
import torch.nn as nn

from sfx.errors import ConfigError
from sfx.models.encoders import MlpEncoder, init_weights
from sfx.models.obs import as_obs_dict
from sfx.models.preprocess import ObsPreprocessor, Preprocessed, PreprocessedModel
from sfx.models.registry import resolve_encoder
from sfx.models.trunk import make_encoder


def box_actions(action_space: gym.Space, algo: str) -> int:
    """The dimension of a 1-D ``Box`` action space with finite bounds; :class:`ConfigError` naming any other."""
    if not isinstance(action_space, gym.spaces.Box) or len(action_space.shape) != 1:
        hint = "--algo=APPO or --algo=R2D2" if isinstance(action_space, gym.spaces.Discrete) else "--algo=APPO"
        raise ConfigError(f"--algo={algo} needs a 1-D Box action space (continuous actions); this env's is "
                          f"{action_space}: use {hint} for it")
    low, high = action_space.low, action_space.high
    if not (all(math.isfinite(float(v)) for v in low) and all(math.isfinite(float(v)) for v in high)
            and bool((low < high).all())):
        raise ConfigError(f"--algo={algo} squashes its actions onto the action space's bounds; this env's are "
                          f"low={low.tolist()}, high={high.tolist()}: allowed: finite bounds with low < high "
                          f"(wrap the env to rescale its actions)")
    return int(action_space.shape[0])


class MlpHead(nn.Module):
    """``[N, in]`` -> two hidden layers (:class:`MlpEncoder`: ``--hidden_size`` units, ``--nonlinearity``) ->
    linear ``[N, out]``."""

    def __init__(self, cfg: Any, in_size: int, out_size: int) -> None:
        super().__init__()
        self.body = MlpEncoder(cfg, (int(in_size),))
        init_weights(self.body, cfg.policy_initialization, float(cfg.policy_init_gain))
        self.out = nn.Linear(self.body.out_size, int(out_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.body(x))


class TwinCritic(nn.Module):
    """``Q_1, Q_2`` over ``[obs features, action (, extra)]``; ``encoder`` (None for a plain vector) turns the
    preprocessed observation into those features. Its target copy is a deep copy of this module."""

    def __init__(self, cfg: Any, encoder: nn.Module | None, obs_features: int, action_dim: int,
                 extra_size: int) -> None:
        super().__init__()
        self.encoder = encoder
        in_size = obs_features + action_dim + extra_size
        self.q1 = MlpHead(cfg, in_size, 1)
        self.q2 = MlpHead(cfg, in_size, 1)

    def features(self, x: Any) -> torch.Tensor:
        """The observation's features ``[N, F]`` (the flattened vector when there is no encoder)."""
        return x.flatten(1) if self.encoder is None else self.encoder(x)

    def heads(self, features: torch.Tensor, actions: torch.Tensor,
              extra: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(Q_1, Q_2)``, ``[N]`` each, from features ``[N, F]`` and actions ``[N, d]`` (the learner's units:
        scaled to ``[-1, 1]``, see :mod:`sfx.agents.sac`)."""
        parts = [features, actions.to(features.dtype)] + ([] if extra is None else [extra.to(features.dtype)])
        inp = torch.cat(parts, dim=1)
        return self.q1(inp).squeeze(1), self.q2(inp).squeeze(1)


class SACModel(PreprocessedModel):
    """See the module docstring.

    Attributes:
        preprocessor, actor, critic: the parts (``critic`` a :class:`TwinCritic`; ``critic.encoder`` the shared
            encoder, None for a plain vector observation).
        action_dim: ``d``; ``low``, ``high``: the action bounds (buffers, ``[d]``).
        shared_encoder: whether actor and critics read one encoder.
    """

    reads_tasks = False  # forward_step reads no task
    returns_normalizer = None
    memory_len = 0
    memory_width = 0
    rnn_state_size = 0

    def __init__(self, cfg: Any, obs_space: gym.Space, action_space: gym.Space, num_tasks: int = 1) -> None:
        super().__init__()
        self.obs_space, self.action_space = obs_space, action_space
        self.num_tasks = int(num_tasks)
        self.action_dim = box_actions(action_space, cfg.algo)
        if cfg.use_rnn:
            raise ConfigError(f"--algo={cfg.algo} learns from single replayed transitions, without a recurrent "
                              f"state: --use_rnn={cfg.use_rnn} is not supported; allowed: --use_rnn=False "
                              f"(or --algo=APPO / --algo=R2D2 for a recurrent core)")
        self.preprocessor = ObsPreprocessor.from_cfg(cfg, obs_space, action_space)
        space = self.preprocessor.encoder_space
        extra = self.preprocessor.extra_input_size
        plain = (isinstance(space, gym.spaces.Box) and len(space.shape) == 1
                 and resolve_encoder(cfg, space)[1] is None)
        self.shared_encoder = not plain
        if plain:
            encoder, obs_features = None, int(space.shape[0])
        else:
            encoder = make_encoder(cfg, space)
            obs_features = int(encoder.out_size)
        self.critic = TwinCritic(cfg, encoder, obs_features, self.action_dim, extra)
        self.actor = MlpHead(cfg, obs_features + extra, 2 * self.action_dim)
        self.register_buffer("low", torch.as_tensor(action_space.low, dtype=torch.float32).reshape(-1))
        self.register_buffer("high", torch.as_tensor(action_space.high, dtype=torch.float32).reshape(-1))
        # what policy workers need: the actor (and the shared encoder it reads), never the critics' heads
        self.learner_only_prefixes: tuple[str, ...] = ("critic.q1.", "critic.q2.") if self.shared_encoder \
            else ("critic.",)

    # ---------------------------------------------------------------- the engine's acting interface

    @torch.no_grad()
    def initial_rnn_states(self, batch_size: int, device: torch.device | str | None = None) -> torch.Tensor:
        """``[batch_size, 1]`` zeros: the engine's dummy state column (no core)."""
        return torch.zeros(batch_size, 1, device=device)

    def forward_step(self, obs: torch.Tensor | Mapping[str, torch.Tensor], rnn_states: torch.Tensor,
                     tasks: torch.Tensor | None = None, memory: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """One step of ``B`` agents -> ``action_mean [B, d]``, ``action_log_std [B, d]`` (the pre-squash Gaussian)
        and ``new_rnn_states`` (``rnn_states`` itself)."""
        mean, log_std = self.policy(self.preprocess(obs))
        return {"action_mean": mean, "action_log_std": log_std, "new_rnn_states": rnn_states}

    # ---------------------------------------------------------------- the learner's parts

    def preprocess(self, obs: torch.Tensor | Mapping[str, torch.Tensor]) -> Preprocessed:
        return self.preprocessor(as_obs_dict(obs))

    def policy(self, pre: Preprocessed, features: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mean, log_std)`` ``[N, d]`` each; ``features``: the critic-side observation features when already
        computed (read detached: the actor loss never trains a shared encoder)."""
        if features is None:
            features = self.critic.features(pre.x)
        inp = features.detach()
        if pre.extra is not None:
            inp = torch.cat([inp, pre.extra.to(inp.dtype)], dim=1)
        out = self.actor(inp)
        return out[:, :self.action_dim], out[:, self.action_dim:]

    def q_values(self, pre: Preprocessed, actions: torch.Tensor, features: torch.Tensor | None = None,
                 critic: TwinCritic | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(Q_1, Q_2)`` ``[N]`` of ``critic`` (default: the online one; pass the target copy for targets)."""
        critic = self.critic if critic is None else critic
        if features is None:
            features = critic.features(pre.x)
        return critic.heads(features, actions, pre.extra)
