"""Atari game names: the Atari-57 benchmark list and the lookup of any ROM bundled with ale-py."""

from __future__ import annotations

import difflib
import functools

from sfx.errors import ConfigError

PREFIX = "atari_"

# The 57 games of the usual benchmark (Badia et al. 2020, "Agent57"), as ale-py ROM ids.
ATARI_57: tuple[str, ...] = (
    "alien", "amidar", "assault", "asterix", "asteroids", "atlantis", "bank_heist", "battle_zone",
    "beam_rider", "berzerk", "bowling", "boxing", "breakout", "centipede", "chopper_command",
    "crazy_climber", "defender", "demon_attack", "double_dunk", "enduro", "fishing_derby", "freeway",
    "frostbite", "gopher", "gravitar", "hero", "ice_hockey", "jamesbond", "kangaroo", "krull",
    "kung_fu_master", "montezuma_revenge", "ms_pacman", "name_this_game", "phoenix", "pitfall", "pong",
    "private_eye", "qbert", "riverraid", "road_runner", "robotank", "seaquest", "skiing", "solaris",
    "space_invaders", "star_gunner", "surround", "tennis", "time_pilot", "tutankham", "up_n_down",
    "venture", "video_pinball", "wizard_of_wor", "yars_revenge", "zaxxon",
)


@functools.lru_cache(maxsize=1)
def all_rom_ids() -> tuple[str, ...]:
    """Every ROM id ale-py knows (the Atari-57 and about 50 more); reads a small json, loads no ROM."""
    from ale_py import roms

    return tuple(sorted(roms.get_all_rom_ids()))


def game_name(full_env_name: str) -> str:
    """``atari_breakout`` -> ``breakout``."""
    return full_env_name[len(PREFIX):] if full_env_name.startswith(PREFIX) else full_env_name


def check_game(full_env_name: str) -> str:
    """The ALE ROM id of ``atari_<game>``; :class:`ConfigError` with close matches for an unknown game."""
    game = game_name(full_env_name)
    known = all_rom_ids()
    if game in known:
        return game
    # CamelCase habits (atari_SpaceInvaders, atari_MontezumaRevenge) map to snake_case suggestions
    folded = game.lower().replace("-", "_")
    close = difflib.get_close_matches(folded, known, n=3, cutoff=0.6)
    if not close:
        squashed = {g.replace("_", ""): g for g in known}
        close = [squashed[m] for m in difflib.get_close_matches(folded.replace("_", ""), squashed, n=3, cutoff=0.6)]
    hint = f"did you mean: {', '.join(PREFIX + c for c in close)}?" if close else \
        f"known games are the ale-py ROM ids in snake_case, e.g. {PREFIX}breakout, {PREFIX}space_invaders"
    raise ConfigError(f"--env={full_env_name}: no Atari game {game!r}; {hint}")
