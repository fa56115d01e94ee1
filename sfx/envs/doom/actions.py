"""Doom buttons -> gymnasium action spaces.

Buttons that cancel each other (left/right, forward/backward ...) form one group: pressing both
is never useful, so a group is one choice among "none" and each of its buttons. Every other
button is a group of its own (pressed or not).

* ``discrete``: one ``Discrete`` over every combination of the groups' choices (the product),
  e.g. basic (MOVE_LEFT/MOVE_RIGHT, ATTACK) -> 3 x 2 = 6 actions. Action 0 presses nothing.
* ``tuple``: a ``Tuple`` of one ``Discrete(len(group) + 1)`` per group, choice 0 = none.
* ``single``: one ``Discrete`` over "none" and each button pressed alone, in button order: basic ->
  idle, left, right, attack (4 actions), Sample Factory 2's doom_basic space. Combinations are not
  reachable (no moving while shooting).
"""

from __future__ import annotations

import itertools
from typing import Any, Sequence

import gymnasium
import numpy as np

from sfx.errors import ConfigError

ACTION_SPACE_KINDS = ("discrete", "tuple", "single")

# pairs of buttons that cancel each other
_OPPOSITES = (
    ("MOVE_LEFT", "MOVE_RIGHT"),
    ("TURN_LEFT", "TURN_RIGHT"),
    ("MOVE_FORWARD", "MOVE_BACKWARD"),
    ("LOOK_UP", "LOOK_DOWN"),
    ("MOVE_UP", "MOVE_DOWN"),
    ("SELECT_NEXT_WEAPON", "SELECT_PREV_WEAPON"),
)


def button_groups(buttons: Sequence[str]) -> list[tuple[int, ...]]:
    """Indices of ``buttons`` grouped: opposite pairs together, every other button alone, in button order.

    Raises:
        ConfigError: for delta (analog) buttons, which have no discrete form here.
    """
    delta = [b for b in buttons if b.endswith("_DELTA")]
    if delta:
        raise ConfigError(f"doom buttons {delta} are delta (analog) buttons; the doom_ family supports binary "
                          f"buttons only")
    index = {b: i for i, b in enumerate(buttons)}
    partner = {}
    for a, b in _OPPOSITES:
        if a in index and b in index:
            partner[a], partner[b] = b, a
    groups: list[tuple[int, ...]] = []
    seen: set[str] = set()
    for b in buttons:
        if b in seen:
            continue
        if b in partner:
            groups.append(tuple(sorted((index[b], index[partner[b]]))))
            seen.update((b, partner[b]))
        else:
            groups.append((index[b],))
            seen.add(b)
    return groups


class DoomActions:
    """The action space of a button set and the conversion of its actions into button vectors.

    Args:
        buttons: the game's button names, in the game's order.
        kind: ``discrete``, ``tuple`` or ``single`` (see the module docstring).
    """

    def __init__(self, buttons: Sequence[str], kind: str) -> None:
        if kind not in ACTION_SPACE_KINDS:
            raise ConfigError(f"--doom_action_space={kind} is not known; allowed: {', '.join(ACTION_SPACE_KINDS)}")
        self.buttons = list(buttons)
        self.kind = kind
        self.groups = button_groups(self.buttons)
        choices = [range(len(g) + 1) for g in self.groups]
        # every (group choice, ...) combination as a full button vector, built once: stepping is a lookup
        self._combos = [self._buttons_of(c) for c in itertools.product(*choices)]
        if kind == "single":
            # none first, then each button alone in the game's button order (not the groups' product order)
            self._combos = [[0.0] * len(self.buttons)] + [[float(i == b) for i in range(len(self.buttons))]
                                                         for b in range(len(self.buttons))]
        if kind in ("discrete", "single"):
            self.space: gymnasium.Space = gymnasium.spaces.Discrete(len(self._combos))
        else:
            self.space = gymnasium.spaces.Tuple([gymnasium.spaces.Discrete(len(g) + 1) for g in self.groups])

    def _buttons_of(self, choice: Sequence[int]) -> list[float]:
        pressed = [0.0] * len(self.buttons)
        for group, c in zip(self.groups, choice):
            if c > 0:
                pressed[group[c - 1]] = 1.0
        return pressed

    def to_buttons(self, action: Any) -> list[float]:
        """One action of :attr:`space` -> the button vector ``make_action`` takes."""
        if self.kind in ("discrete", "single"):
            return self._combos[int(action)]
        choice = [int(a) for a in np.asarray(action).reshape(-1)]
        if len(choice) != len(self.groups):
            raise ValueError(f"a tuple doom action has {len(self.groups)} components, got {len(choice)}")
        return self._buttons_of(choice)

    def describe(self) -> list[str]:
        """Readable names of the groups, e.g. ``['MOVE_LEFT|MOVE_RIGHT', 'ATTACK']``."""
        return ["|".join(self.buttons[i] for i in g) for g in self.groups]
