"""A PettingZoo AEC (turn-based) env as an sfx :class:`MultiAgentEnv` (rules: the package docstring)."""

from __future__ import annotations

from typing import Any

from sfx.envs.pettingzoo.views import AgentMatch, PettingZooMatchEnv, RandomPlayer

# env.step calls one sfx step may make for random players' turns and dead agents' removal; past this
# the env is taken to be stuck (an env whose random players never hand the turn back nor end the match)
MAX_INTERNAL_STEPS = 100_000


class PettingZooAECEnv(PettingZooMatchEnv):
    """One turn per sfx step: the agent whose turn it is (``env.agent_selection``) acts, the others wait.

    Args:
        env: a PettingZoo ``AECEnv``.
        env_name: the sfx env name (for messages).
        random_agents: agents played by :class:`RandomPlayer` inside the env, not by sfx: their turns
            are played within the sfx step that hands them the turn.
        seed: seeds the first :meth:`reset` that gets no seed of its own, and the random players.
    """

    def __init__(self, env: Any, env_name: str, random_agents: list[str] = (), seed: int | None = None) -> None:
        super().__init__(env, env_name, random_agents, seed)
        self.actor_mask: Any = None   # the env's mask in the actor's last observation (for illegal_moves)
        self.pending = [0.0] * self.num_agents  # rewards of turns played before the first sfx step

    # ----- the match ---------------------------------------------------------------------------

    def _start_match(self, seed: int | None = None) -> list[Any]:
        self.env.reset(seed=seed)
        self.match = [AgentMatch(joined=a in self.env.agents) for a in self.agents]
        self.pending = [0.0] * self.num_agents
        self._play_others(self.pending)
        return self._observations()

    def _actor(self) -> int | None:
        """Index of the sfx agent whose turn it is (None once the match is over)."""
        if not self.env.agents:
            return None
        return self.index.get(self.env.agent_selection)

    def _collect(self, rewards: list[float]) -> None:
        """After one env.step: every agent's reward of that step (``env.rewards``), and who left the match.

        An agent's flags and last observation are read here, before the dead step that removes it."""
        for agent, r in self.env.rewards.items():
            i = self.index.get(agent)
            if i is not None:
                rewards[i] += float(r)
        for agent in self.env.agents:
            i = self.index.get(agent)
            if i is None:
                continue
            m = self.match[i]
            m.joined = True
            if m.left is None and (self.env.terminations.get(agent) or self.env.truncations.get(agent)):
                m.left = "terminated" if self.env.terminations.get(agent) else "truncated"
                m.final_obs = self.view.convert(self.env.observe(agent))

    def _play_others(self, rewards: list[float]) -> None:
        """Step the env until it is an sfx agent's turn or the match is over: random players' turns, and the
        ``step(None)`` that removes each agent that is done (PettingZoo's dead steps)."""
        for _ in range(MAX_INTERNAL_STEPS):
            if not self.env.agents:
                return
            agent = self.env.agent_selection
            if self.env.terminations.get(agent) or self.env.truncations.get(agent):
                self.env.step(None)
            elif agent in self.random_agents:
                mask = self.view.env_mask(self.env.observe(agent), self.env.infos.get(agent))
                self.env.step(self.random_player.act(self.env.action_space(agent), mask))
            else:
                return
            self._collect(rewards)
        raise RuntimeError(f"{self.env_name}: {MAX_INTERNAL_STEPS} turns of random players or dead agents in a row "
                           f"without an sfx agent's turn or the end of the match")

    def _observations(self) -> list[Any]:
        """Everyone's observation now: the actor's with the env's mask, a waiting agent's with the sit-out
        mask, an agent out of the match a placeholder."""
        actor = self._actor()
        out = []
        self.actor_mask = None
        for i, agent in enumerate(self.agents):
            if agent not in self.env.agents or self.match[i].left is not None:
                out.append(self.view.placeholder())
                continue
            obs = self.env.observe(agent)
            if obs is None:  # an env that shows nothing to an agent between its turns
                out.append(self.view.placeholder())
                continue
            if i != actor or self.view.mask_sizes is None:
                out.append(self.view.convert(obs))
                continue
            mask = self.view.env_mask(obs, self.env.infos.get(agent))
            self.actor_mask = mask
            out.append(self.view.convert(obs, self.view.all_allowed() if mask is None else mask))
        return out

    # ----- one sfx step -------------------------------------------------------------------------

    def step(self, actions: list[Any]) -> tuple[list[Any], list[float], list[bool], list[bool], list[dict]]:
        rewards, self.pending = self.pending, [0.0] * self.num_agents
        actor = self._actor()
        in_match = [self.match[i].left is None and a in self.env.agents for i, a in enumerate(self.agents)]
        if actor is not None:
            action = actions[actor]
            self.match[actor].illegal_moves += self.view.is_illegal(action, self.actor_mask)
            self.match[actor].turns += 1
            self.env.step(action)
            self._collect(rewards)
            self._play_others(rewards)
        for i, m in enumerate(self.match):
            m.reward += rewards[i]
            m.steps += in_match[i]
        infos: list[dict] = [{"is_active": i == actor} for i in range(self.num_agents)]
        if self.env.agents:
            return self._observations(), rewards, [False] * self.num_agents, [False] * self.num_agents, infos
        return self._end_match(rewards, infos, with_turns=True)

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()

    def __repr__(self) -> str:
        return f"PettingZooAECEnv({self.env_name}, agents={self.agents}, random={sorted(self.random_agents)})"
