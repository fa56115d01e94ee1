"""``--algo`` -> the :class:`~sfx.agents.base.Agent` that learns. Built-in: ``APPO`` (the default), ``R2D2``,
``SAC`` and ``DUMMY_SAMPLER``; users add theirs before parsing the command line::

    from sfx.agents import Agent, register_agent

    class MyAgent(Agent):
        name = "MY_PG"
        ...

    register_agent(MyAgent)       # python -m sfx.train --algo=MY_PG ...

The class travels to worker processes by reference (define it at module level, in an importable module).
"""

from __future__ import annotations

import difflib

from sfx.agents.base import Agent
from sfx.errors import ConfigError

DEFAULT_AGENT = "APPO"

_agents: dict[str, type[Agent]] = {}
_builtin_loaded = False


def register_agent(agent: type[Agent]) -> type[Agent]:
    """Make ``agent`` selectable as ``--algo=<agent.name>`` (again: replaces the earlier one). Returns it,
    so it can decorate the class."""
    if not (isinstance(agent, type) and issubclass(agent, Agent)):
        raise TypeError(f"register_agent takes an Agent subclass, got {agent!r}")
    if not agent.name or not agent.name.replace("_", "").isalnum():
        raise ValueError(f"agent {agent.__name__} needs a name of letters, digits and '_' (got {agent.name!r})")
    _agents[agent.name] = agent
    return agent


def unregister_agent(name: str) -> None:
    _agents.pop(name, None)


def registered_agents() -> list[str]:
    _load_builtin()
    return sorted(_agents)


def find_agent(name: str) -> type[Agent]:
    """The agent registered as ``name``; a ConfigError naming the registered ones otherwise."""
    _load_builtin()
    if name not in _agents:
        close = difflib.get_close_matches(str(name), list(_agents), n=1, cutoff=0.5)
        hint = f"; did you mean --algo={close[0]}?" if close else ""
        raise ConfigError(f"--algo={name} is not a registered algorithm; allowed: {', '.join(sorted(_agents))}{hint}")
    return _agents[name]


def ensure_registered(agent: type[Agent]) -> None:
    """Register ``agent`` in this process if it is not there (worker processes get the coordinator's
    agent this way, even one registered inside ``if __name__ == '__main__'``)."""
    if _agents.get(agent.name) is not agent:
        _agents[agent.name] = agent


def _load_builtin() -> None:
    """The built-in agents, imported on first use (APPO imports the models: torch's whole stack)."""
    global _builtin_loaded
    if not _builtin_loaded:
        from sfx.agents.appo import APPO
        from sfx.agents.dummy import DummySampler
        from sfx.agents.r2d2 import R2D2
        from sfx.agents.sac import SAC

        for agent in (APPO, DummySampler, R2D2, SAC):
            _agents.setdefault(agent.name, agent)  # a user's agent registered under the name first stays
        _builtin_loaded = True
