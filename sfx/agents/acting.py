"""Acting with a model outside the engine (``sfx.enjoy``, the evaluator): each agent's core state, core
memory (Transformer-XL) and previous action / reward kept exactly as the engine's rollout and policy
workers keep them, and the actions picked by the agent's acting rule (the one the policy workers use),
so an agent plays here as it played in training.
"""

from __future__ import annotations

from typing import Any, Mapping

import gymnasium as gym
import numpy as np
import torch

from sfx.agents.base import ActingRule
from sfx.algo import distributions
from sfx.models.obs import PREV_ACTION_KEY, PREV_REWARD_KEY


class AgentsActing:
    """``num_agents`` agents played by one model (an ``ActorCritic`` in eval mode) and the agent's acting rule.

    ``act(obs)`` picks every agent's action (the rule's: sampled, or its mode with ``deterministic``) and advances
    its state and memory; ``observe(rewards, dones)`` then records what the env answered: the previous
    action and reward for ``--use_prev_action_reward``, and a fresh state (the core's initial one, an
    empty previous action) for every agent whose episode ended (envs reset themselves).
    """

    def __init__(self, model: Any, rule: ActingRule, num_agents: int, device: torch.device | str,
                 deterministic: bool = False) -> None:
        self.model = model
        self.rule = rule
        self.n = int(num_agents)
        self.device = torch.device(device)
        self.deterministic = deterministic
        self.initial = model.initial_rnn_states(1, self.device)[0]
        self.states = self.initial.expand(self.n, -1).clone()
        self.memory = (torch.zeros(self.n, model.memory_len, model.memory_width, device=self.device)
                       if model.memory_len else None)
        self.prev_action = torch.zeros(self.n, distributions.action_shape(model.action_space), device=self.device)
        self.prev_reward = torch.zeros(self.n, 1, device=self.device)
        # categorical choices are stored + 1 (0 = no previous action), as the rollout workers store them
        self.prev_offset = 0.0 if isinstance(model.action_space, gym.spaces.Box) else 1.0
        self._rows = torch.arange(self.n, device=self.device)
        self._last_actions: torch.Tensor | None = None

    @torch.no_grad()
    def act(self, obs: Mapping[str, torch.Tensor], tasks: torch.Tensor | None = None) -> tuple[np.ndarray, dict]:
        """``obs {key: [N, ...]}`` -> (actions as stored ``[N, k]`` float32 numpy, the model's outputs)."""
        obs = {k: v.to(self.device) for k, v in obs.items()}
        if self.model.prev_action_reward:
            obs[PREV_ACTION_KEY], obs[PREV_REWARD_KEY] = self.prev_action.clone(), self.prev_reward.clone()
        if self.memory is None:
            out = self.model.forward_step(obs, self.states) if tasks is None else \
                self.model.forward_step(obs, self.states, tasks)
        else:
            out = self.model.forward_step(obs, self.states, tasks, self.memory)
            self.memory[self._rows, out["memory_index"]] = out["memory_entry"]
        acted = self.rule.act(out, deterministic=self.deterministic, actor_ids=self._rows)
        self.states = out["new_rnn_states"]
        self._last_actions = acted.actions.float().reshape(self.n, -1)
        return self._last_actions.cpu().numpy(), out

    def observe(self, rewards: Any, dones: Any) -> None:
        """After ``env.step``: per-agent rewards and episode ends (terminated or truncated)."""
        done = torch.as_tensor(np.asarray(dones, dtype=bool), device=self.device)
        self.prev_action = self._last_actions + self.prev_offset
        self.prev_reward = torch.as_tensor(np.asarray(rewards, dtype=np.float32), device=self.device).reshape(-1, 1)
        if bool(done.any()):
            self.reset(done)

    def reset(self, which: torch.Tensor) -> None:
        """Start new episodes for the agents where ``which [N]`` (bool) is set."""
        self.states[which] = self.initial
        self.prev_action[which] = 0.0
        self.prev_reward[which] = 0.0
