"""A PettingZoo Parallel API env as an sfx :class:`MultiAgentEnv` (rules: the package docstring)."""

from __future__ import annotations

from typing import Any

from sfx.envs.pettingzoo.views import AgentMatch, PettingZooMatchEnv, RandomPlayer


class PettingZooParallelEnv(PettingZooMatchEnv):
    """Every agent in the match acts each step; one that is out (done early, not joined yet) sits out.

    Args:
        env: a PettingZoo ``ParallelEnv``.
        env_name: the sfx env name (for messages).
        random_agents: agents played by :class:`RandomPlayer` inside the env, not by sfx.
        seed: seeds the first :meth:`reset` that gets no seed of its own, and the random players.
    """

    def __init__(self, env: Any, env_name: str, random_agents: list[str] = (), seed: int | None = None) -> None:
        super().__init__(env, env_name, random_agents, seed)
        self.env_obs: dict = {}     # the env's last observations and infos (masks of the next step)
        self.env_infos: dict = {}

    def _start_match(self, seed: int | None = None) -> list[Any]:
        self.env_obs, self.env_infos = self.env.reset(seed=seed)
        self.env_infos = dict(self.env_infos or {})
        self.match = [AgentMatch(joined=a in self.env_obs) for a in self.agents]
        return [self._sfx_obs(a) for a in self.agents]

    def _sfx_obs(self, agent: str) -> Any:
        if agent not in self.env_obs:
            return self.view.placeholder()
        obs = self.env_obs[agent]
        if self.view.mask_sizes is None:
            return self.view.convert(obs)
        mask = self.view.env_mask(obs, self.env_infos.get(agent))
        return self.view.convert(obs, self.view.all_allowed() if mask is None else mask)

    def step(self, actions: list[Any]) -> tuple[list[Any], list[float], list[bool], list[bool], list[dict]]:
        live = set(self.env.agents)
        env_actions = {}
        for i, agent in enumerate(self.agents):
            if agent in live:
                env_actions[agent] = actions[i]
                mask = self.view.env_mask(self.env_obs.get(agent), self.env_infos.get(agent))
                self.match[i].illegal_moves += self.view.is_illegal(actions[i], mask)
        for agent in self.random_agents:
            if agent in live:
                mask = self.view.env_mask(self.env_obs.get(agent), self.env_infos.get(agent))
                env_actions[agent] = self.random_player.act(self.env.action_space(agent), mask)
        obs, rewards, terms, truncs, infos = self.env.step(env_actions)
        self.env_obs, self.env_infos = obs, dict(infos or {})

        sfx_rewards, infos_out = [], []
        for i, agent in enumerate(self.agents):
            m = self.match[i]
            acted = agent in live
            reward = float(rewards.get(agent, 0.0))
            m.reward += reward
            sfx_rewards.append(reward)
            infos_out.append({"is_active": acted})
            if acted:
                m.steps += 1
                m.turns += 1
                if terms.get(agent) or truncs.get(agent) or agent not in self.env.agents:
                    m.left = "terminated" if terms.get(agent) or not truncs.get(agent) else "truncated"
                    m.final_obs = self._sfx_obs(agent) if agent in obs else self.view.placeholder()
            elif agent in obs and m.left is None:
                m.joined = True  # joined late: acts from the next step

        if not self._match_over():
            return ([self._sfx_obs(a) if a in self.env.agents else self.view.placeholder() for a in self.agents],
                    sfx_rewards, [False] * self.num_agents, [False] * self.num_agents, infos_out)
        return self._end_match(sfx_rewards, infos_out, with_turns=False)

    def _match_over(self) -> bool:
        """Over when the env has no agent left, or only random players while every sfx agent has played."""
        if not self.env.agents:
            return True
        learners_in = any(a in self.env.agents for a in self.agents)
        return not learners_in and all(m.joined for m in self.match)

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()

    def __repr__(self) -> str:
        return f"PettingZooParallelEnv({self.env_name}, agents={self.agents}, random={self.random_agents})"
