"""The single-player VizDoom scenarios of the ``doom_`` family, all bundled with the ``vizdoom`` package.

Each scenario is a ``.cfg`` file in ``vizdoom.scenarios_path`` plus what sfx adds: which buttons the
agent gets (when not the cfg's own), extra game arguments, a command sent after every new episode,
and its default ``--reward_scale`` (applied as the env's default, shown by ``--help``, saved in
cfg.json, overridden by the command line): 0.01 where Sample Factory 2's VizDoom examples scale
the scenario's rewards (basic, deadly_corridor), and where the rewards would otherwise hit the
trainer's reward clip of 10 (health_gathering*, take_cover: +4 per agent step at frameskip 4 and
-100 for dying); 1.0 elsewhere.

=============================  ===========================================  ==================
env name                       what happens                                 default
                                                                            --reward_scale
=============================  ===========================================  ==================
doom_basic                     one monster on the far wall: shoot it        0.01
doom_defend_the_center         turn in place, shoot monsters that approach  1.0
doom_defend_the_line           shoot monsters across the room               1.0
doom_health_gathering          pick up medkits on an acid floor             0.01
doom_health_gathering_supreme  the same in a maze with poison vials         0.01
doom_my_way_home               find the vest in a maze (sparse reward)      1.0
doom_deadly_corridor           reach the armour past shooting monsters      0.01
doom_take_cover                dodge fireballs                              0.01
doom_predict_position          hit a moving monster with a rocket           1.0
doom_benchmark                 throughput runs (below)                      1.0
=============================  ===========================================  ==================

``doom_benchmark`` plays ``deathmatch.wad`` (the bundled arena full of monsters, weapons and
items, the heaviest bundled single-player map to render and simulate) with the 7 binary
move/turn/attack buttons and the player made invulnerable (the ``god`` cheat after each new
episode). Nothing ends an episode early, so every episode runs the full 4200-tic timeout
(1050 agent steps at frameskip 4): each step costs about the same whatever the policy does,
which makes steps/s comparable between runs and machines.

Multiplayer matches (``doom_duel``, ``doom_duel_bots``, ``doom_deathmatch``, ``doom_deathmatch_bots``)
are not in this table but in :data:`MULTIPLAYER_SCENARIOS` below (maps and default players); each
needs a match process of its own, which :mod:`sfx.envs.doom.multiplayer` runs (its docstring
describes them). Both tables live here so that every module of the family looks a scenario name up
in one place, and the multiplayer env imports its table from here, never the other way round.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass

from sfx.errors import ConfigError


@dataclass(frozen=True)
class DoomScenario:
    """How to build one scenario.

    Attributes:
        name: the part of the env name after ``doom_``.
        cfg_file: the scenario's ``.cfg``: a file name in ``vizdoom.scenarios_path`` or an absolute path.
        wad_file: the map (``.wad``) to play instead of the cfg's ``doom_scenario_path``: a file name
            in ``vizdoom.scenarios_path`` or an absolute path (``None``: the cfg's own), so a cfg of
            your own can play a bundled map without knowing where the package is installed.
        buttons: button names that replace the cfg's ``available_buttons`` (``None`` keeps them).
        game_args: extra engine arguments (``+name value`` console variables).
        episode_commands: console commands sent after every new episode.
        reward_scale: the default of ``--reward_scale`` for this scenario's env.
        description: one line for help texts.
        action_space: the default of ``--doom_action_space`` for this scenario's env.
    """

    name: str
    cfg_file: str
    wad_file: str | None = None
    buttons: tuple[str, ...] | None = None
    game_args: tuple[str, ...] = ()
    episode_commands: tuple[str, ...] = ()
    reward_scale: float = 1.0
    description: str = ""
    action_space: str = "discrete"

    def cfg_path(self) -> str:
        """Absolute path of the scenario's ``.cfg``."""
        return _bundled_or_absolute(self.cfg_file)

    def wad_path(self) -> str | None:
        """Absolute path of the map to play, or ``None`` for the cfg's own."""
        return None if self.wad_file is None else _bundled_or_absolute(self.wad_file)


def _bundled_or_absolute(file_name: str) -> str:
    if os.path.isabs(file_name):
        return file_name
    import vizdoom

    return os.path.join(vizdoom.scenarios_path, file_name)


_MOVE_TURN_ATTACK = ("ATTACK", "MOVE_FORWARD", "MOVE_BACKWARD", "MOVE_LEFT", "MOVE_RIGHT", "TURN_LEFT", "TURN_RIGHT")

SCENARIOS: dict[str, DoomScenario] = {s.name: s for s in (
    # Sample Factory's doom_basic acts with idle, left, right, attack (README, "Late learning")
    DoomScenario("basic", "basic.cfg", reward_scale=0.01, action_space="single",
                 description="shoot the single monster; 300-tic timeout"),
    DoomScenario("defend_the_center", "defend_the_center.cfg", description="survive and kill in a circular room"),
    DoomScenario("defend_the_line", "defend_the_line.cfg", description="kill monsters across the room"),
    DoomScenario("health_gathering", "health_gathering.cfg", reward_scale=0.01,
                 description="collect medkits on an acid floor"),
    DoomScenario("health_gathering_supreme", "health_gathering_supreme.cfg", reward_scale=0.01,
                 description="collect medkits in a maze, avoid poison"),
    DoomScenario("my_way_home", "my_way_home.cfg", description="navigate a maze to the vest (sparse reward)"),
    DoomScenario("deadly_corridor", "deadly_corridor.cfg", reward_scale=0.01,
                 description="reach the armour through a corridor of shooters"),
    DoomScenario("take_cover", "take_cover.cfg", reward_scale=0.01, description="dodge fireballs"),
    DoomScenario("predict_position", "predict_position.cfg", description="rocket a moving target"),
    DoomScenario("benchmark", "deathmatch.cfg", buttons=_MOVE_TURN_ATTACK, game_args=("+sv_cheats 1",),
                 episode_commands=("god",),
                 description="fixed-cost throughput scenario: deathmatch.wad, invulnerable player, "
                             "full 4200-tic episodes"),
)}

PREFIX = "doom_"


def scenario_of(full_env_name: str) -> DoomScenario:
    """``doom_basic`` -> its :class:`DoomScenario`; :class:`ConfigError` with close matches otherwise."""
    name = full_env_name[len(PREFIX):] if full_env_name.startswith(PREFIX) else full_env_name
    if name in SCENARIOS:
        return SCENARIOS[name]
    known = [PREFIX + n for n in (*SCENARIOS, *MULTIPLAYER_SCENARIOS)]
    close = difflib.get_close_matches(PREFIX + name, known, n=3, cutoff=0.6)
    hint = f"; did you mean: {', '.join(close)}?" if close else ""
    raise ConfigError(f"--env={full_env_name}: unknown doom scenario{hint} (known: {', '.join(known)})")


# ----------------------------------------------------------------------------- multiplayer matches

MAX_PLAYERS = 8  # ZDoom's limit, agents and bots together
_MATCH_BUTTONS = _MOVE_TURN_ATTACK


@dataclass(frozen=True)
class MultiplayerScenario:
    """A multiplayer env: its map, how many starts it has and its default players.

    Attributes:
        name: the part of the env name after ``doom_``.
        cfg_file: scenario ``.cfg`` in ``vizdoom.scenarios_path`` (wad and defaults).
        doom_map: map lump.
        max_players: deathmatch starts usable (agents + bots).
        num_agents, num_bots: defaults.
        min_agents: fewest agents allowed.
        buttons: every agent's buttons.
        description: one line for help texts.
    """

    name: str
    cfg_file: str
    doom_map: str
    max_players: int
    num_agents: int
    num_bots: int
    min_agents: int = 1
    buttons: tuple[str, ...] = _MATCH_BUTTONS
    description: str = ""

    def cfg_path(self) -> str:
        """Absolute path of the ``.cfg``."""
        return _bundled_or_absolute(self.cfg_file)


MULTIPLAYER_SCENARIOS: dict[str, MultiplayerScenario] = {s.name: s for s in (
    MultiplayerScenario("duel", "multi_duel.cfg", "map01", 2, num_agents=2, num_bots=0, min_agents=2,
                        description="2 agents duel on multi_duel.wad (self-play)"),
    MultiplayerScenario("duel_bots", "multi_duel.cfg", "map01", 2, num_agents=1, num_bots=1,
                        description="1 agent duels 1 built-in bot on multi_duel.wad"),
    MultiplayerScenario("deathmatch", "cig.cfg", "map01", MAX_PLAYERS, num_agents=4, num_bots=0, min_agents=2,
                        buttons=(*_MATCH_BUTTONS, "SELECT_NEXT_WEAPON", "SELECT_PREV_WEAPON"),
                        description="4 agents deathmatch on cig.wad MAP01 (self-play)"),
    MultiplayerScenario("deathmatch_bots", "cig.cfg", "map01", MAX_PLAYERS, num_agents=1, num_bots=7,
                        buttons=(*_MATCH_BUTTONS, "SELECT_NEXT_WEAPON", "SELECT_PREV_WEAPON"),
                        description="agents and built-in bots deathmatch on cig.wad MAP01"),
)}


def multiplayer_scenario_of(full_env_name: str) -> MultiplayerScenario | None:
    """``doom_duel`` -> its :class:`MultiplayerScenario`; ``None`` for any other name."""
    name = full_env_name.removeprefix(PREFIX)
    return MULTIPLAYER_SCENARIOS.get(name)
