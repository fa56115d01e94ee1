"""The registered agents and env families as the parser's :class:`~sfx.cfg.parsing.Catalog`, and the parser's
functions with it handed in: what the entry points, tests and notebooks call.

``sfx.cfg`` imports neither registry (its arrows point down, DESIGN.md); this module sits above both and hands
them to it::

    from sfx.registries import default_cfg, parse_args

    cfg = default_cfg("gym_CartPole-v1", learning_rate=1e-3)
"""

from __future__ import annotations

import argparse
from typing import Any, Sequence

from sfx.agents.registry import find_agent, registered_agents
from sfx.cfg import parsing
from sfx.cfg.parsing import Catalog
from sfx.envs.registry import find_family, registered_prefixes

__all__ = ["CATALOG", "algo_name", "build_parser", "default_cfg", "parse_args"]

CATALOG = Catalog(find_agent=find_agent, registered_agents=registered_agents, find_family=find_family,
                  registered_prefixes=registered_prefixes)


def parse_args(argv: Sequence[str] | None = None, evaluation: bool = False, resume: bool = True,
               prog: str | None = None) -> argparse.Namespace:
    """:func:`sfx.cfg.parsing.parse_args` over the registered agents and env families."""
    return parsing.parse_args(argv, evaluation, resume, prog, catalog=CATALOG)


def default_cfg(env: str = "gym_CartPole-v1", evaluation: bool = False, **overrides: Any) -> argparse.Namespace:
    """:func:`sfx.cfg.parsing.default_cfg` over the registered agents and env families."""
    return parsing.default_cfg(env, evaluation, catalog=CATALOG, **overrides)


def build_parser(env: str | None, evaluation: bool = False, argv: Sequence[str] | None = None,
                 preset: dict | None = None) -> parsing.ArgParser:
    """:func:`sfx.cfg.parsing.build_parser` over the registered agents and env families."""
    return parsing.build_parser(env, evaluation, argv, preset, catalog=CATALOG)


def algo_name(name: str) -> str:
    """The registered agent's name ``--algo=name`` means (``appo`` -> ``APPO``); a ConfigError otherwise."""
    return parsing.algo_name(name, registered_agents())
