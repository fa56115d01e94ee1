"""Google Research Football's scenarios (gfootball 2.10.2's ``gfootball/scenarios``) as ``football_`` env names."""

from __future__ import annotations

import difflib
from typing import NamedTuple

from sfx.errors import ConfigError

PREFIX = "football_"


class Scenario(NamedTuple):
    """One scenario: its episode length and how many left-team players an agent can control."""

    game_duration: int   # env steps after which the engine ends an episode (a time limit: truncated)
    left_players: int    # left-team players, goalkeeper included (the most --football_left_players can be)
    what: str


# gfootball name -> facts read from the scenario files of gfootball 2.10.2 (game_duration, AddPlayer calls)
SCENARIOS: dict[str, Scenario] = {
    "11_vs_11_stochastic": Scenario(3000, 11, "full game against the medium built-in AI"),
    "11_vs_11_easy_stochastic": Scenario(3000, 11, "full game against the easy built-in AI (SEED RL's default)"),
    "11_vs_11_hard_stochastic": Scenario(3000, 11, "full game against the hard built-in AI"),
    "11_vs_11_competition": Scenario(3000, 11, "full game, competition settings"),
    "11_vs_11_kaggle": Scenario(3000, 11, "full game, the Kaggle competition's settings"),
    "5_vs_5": Scenario(3000, 5, "5 against 5"),
    "1_vs_1_easy": Scenario(500, 1, "1 against 1"),
    "academy_empty_goal_close": Scenario(400, 2, "one player with the ball close to an empty goal"),
    "academy_empty_goal": Scenario(400, 2, "one player with the ball in the middle, empty goal"),
    "academy_run_to_score": Scenario(400, 2, "run to an empty goal chased by 5 defenders"),
    "academy_run_to_score_with_keeper": Scenario(400, 2, "run to score chased by 5 defenders, against a keeper"),
    "academy_pass_and_shoot_with_keeper": Scenario(400, 3, "two attackers, one defender, a keeper"),
    "academy_run_pass_and_shoot_with_keeper": Scenario(400, 3, "run, pass and shoot: two attackers, one defender"),
    "academy_3_vs_1_with_keeper": Scenario(400, 4, "three attackers against one defender and a keeper"),
    "academy_corner": Scenario(400, 11, "a corner kick, full teams"),
    "academy_counterattack_easy": Scenario(400, 11, "4 attackers against 1 defender on a counterattack"),
    "academy_counterattack_hard": Scenario(400, 11, "4 attackers against 2 defenders on a counterattack"),
    "academy_single_goal_versus_lazy": Scenario(3000, 11, "full game against a team that does not move"),
}


def scenario_name(full_env_name: str) -> str:
    """``football_academy_corner`` -> ``academy_corner``."""
    return full_env_name[len(PREFIX):] if full_env_name.startswith(PREFIX) else full_env_name


def check_scenario(full_env_name: str) -> Scenario:
    """The scenario of ``full_env_name``; :class:`ConfigError` (one line, with every allowed name) if unknown."""
    name = scenario_name(full_env_name)
    if name in SCENARIOS:
        return SCENARIOS[name]
    close = difflib.get_close_matches(name, list(SCENARIOS), n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(PREFIX + c for c in close)}?" if close else ""
    raise ConfigError(f"--env={full_env_name} is not a Google Research Football scenario{hint} "
                      f"(allowed: {', '.join(PREFIX + n for n in SCENARIOS)})")
