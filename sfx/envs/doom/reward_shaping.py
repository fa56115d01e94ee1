"""Reward shaping for Doom: named components with weights, ``--doom_reward_shaping=kill=1,death=-1``.

Each component is computed from the change of the tracked game variables during one agent step
(all frames of the frame skip) and added to the scenario's own reward, times its weight:

==============  ==============================================================
health_delta    change of HEALTH (negative when hurt)
armor_delta     change of ARMOR
ammo_delta      change of SELECTED_WEAPON_AMMO (negative when shooting)
kill            monsters killed (KILLCOUNT increase)
item            items picked up (ITEMCOUNT increase)
damage          damage dealt (DAMAGECOUNT increase)
death           1 on the step where the player dies
==============  ==============================================================

The weights are a plain ``dict`` (:attr:`RewardShaping.weights`), so population-based training can
read and replace them on a running env (``env.reward_shaping.weights = {...}``).
"""

from __future__ import annotations

from typing import Mapping

from sfx.errors import ConfigError

COMPONENTS = ("health_delta", "armor_delta", "ammo_delta", "kill", "item", "damage", "death")

# game variables (vizdoom.GameVariable names) every doom env tracks, in this order; they feed
# the shaping components, the episode statistics and info['measurements']
TRACKED_VARIABLES = ("HEALTH", "ARMOR", "SELECTED_WEAPON_AMMO", "KILLCOUNT", "ITEMCOUNT", "DAMAGECOUNT",
                     "DEATHCOUNT")

_DELTA_OF = {"health_delta": "HEALTH", "armor_delta": "ARMOR", "ammo_delta": "SELECTED_WEAPON_AMMO",
             "kill": "KILLCOUNT", "item": "ITEMCOUNT", "damage": "DAMAGECOUNT"}
# counters only grow within an episode: a decrease is not a negative kill
_COUNTERS = ("kill", "item", "damage")


def parse_reward_shaping(text: str | None) -> dict[str, float]:
    """``"kill=1,death=-0.5"`` -> ``{'kill': 1.0, 'death': -0.5}``; ``None``/``""``/``"off"`` -> ``{}``.

    Raises:
        ConfigError: naming the bad item and the allowed components.
    """
    if text is None or text.strip().lower() in ("", "off", "none"):
        return {}
    weights: dict[str, float] = {}
    for item in text.split(","):
        name, sep, value = item.strip().partition("=")
        name = name.strip()
        if not sep or name not in COMPONENTS:
            raise ConfigError(f"--doom_reward_shaping item {item.strip()!r} is not name=weight with a name among: "
                              f"{', '.join(COMPONENTS)}")
        try:
            weights[name] = float(value)
        except ValueError:
            raise ConfigError(f"--doom_reward_shaping item {item.strip()!r}: weight {value!r} is not a number") from None
    return weights


class RewardShaping:
    """Shaped reward of one step from the tracked variables before and after it.

    Args:
        weights: component name -> weight (components left out count 0).
    """

    def __init__(self, weights: Mapping[str, float] | None = None) -> None:
        self.weights = dict(weights or {})

    def components(self, before: Mapping[str, float], after: Mapping[str, float], died: bool) -> dict[str, float]:
        """Every component's unweighted value for the step ``before -> after``."""
        out = {}
        for name, var in _DELTA_OF.items():
            delta = after[var] - before[var]
            out[name] = max(delta, 0.0) if name in _COUNTERS else delta
        out["death"] = 1.0 if died else 0.0
        return out

    def __call__(self, before: Mapping[str, float], after: Mapping[str, float], died: bool) -> float:
        """The weighted sum of the components (0 when no weights are set)."""
        if not self.weights:
            return 0.0
        values = self.components(before, after, died)
        return float(sum(w * values[name] for name, w in self.weights.items()))
