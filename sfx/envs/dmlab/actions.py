"""Discrete action sets for DeepMind Lab, each action a 7-component ``np.intc`` vector.

DeepMind Lab's native action (``Lab.action_spec()``) has 7 integer components, in this order:

    LOOK_LEFT_RIGHT_PIXELS_PER_FRAME [-512, 512], LOOK_DOWN_UP_PIXELS_PER_FRAME [-512, 512],
    STRAFE_LEFT_RIGHT [-1, 1], MOVE_BACK_FORWARD [-1, 1], FIRE [0, 1], JUMP [0, 1], CROUCH [0, 1]

* ``IMPALA_ACTIONS`` (9 actions): the set of IMPALA (Espeholt et al. 2018) on DMLab-30: move
  forward/back, strafe, look left/right by 20 pixels per frame, look while moving forward, fire.
* ``EXTENDED_ACTIONS`` (15 actions): the larger set of PopArt multi-task training (Hessel et al.
  2019, "Multi-task Deep Reinforcement Learning with PopArt"): small (10) and large (60) look
  left/right, look up/down, each look left/right also combined with moving forward, and fire.
"""

from __future__ import annotations

import numpy as np

ACTION_COMPONENTS: tuple[str, ...] = (
    "LOOK_LEFT_RIGHT_PIXELS_PER_FRAME",
    "LOOK_DOWN_UP_PIXELS_PER_FRAME",
    "STRAFE_LEFT_RIGHT",
    "MOVE_BACK_FORWARD",
    "FIRE",
    "JUMP",
    "CROUCH",
)


def _action(look: int = 0, pitch: int = 0, strafe: int = 0, move: int = 0, fire: int = 0) -> tuple[int, ...]:
    # jump and crouch are never used by these sets (skymaze even disables jumping)
    return (look, pitch, strafe, move, fire, 0, 0)


# name -> 7-component action; dict order is the discrete action index
IMPALA_ACTIONS: dict[str, tuple[int, ...]] = {
    "forward": _action(move=1),
    "backward": _action(move=-1),
    "strafe_left": _action(strafe=-1),
    "strafe_right": _action(strafe=1),
    "look_left": _action(look=-20),
    "look_right": _action(look=20),
    "forward_look_left": _action(look=-20, move=1),
    "forward_look_right": _action(look=20, move=1),
    "fire": _action(fire=1),
}

EXTENDED_ACTIONS: dict[str, tuple[int, ...]] = {
    "forward": _action(move=1),
    "backward": _action(move=-1),
    "strafe_left": _action(strafe=-1),
    "strafe_right": _action(strafe=1),
    "small_look_left": _action(look=-10),
    "small_look_right": _action(look=10),
    "large_look_left": _action(look=-60),
    "large_look_right": _action(look=60),
    "look_down": _action(pitch=10),
    "look_up": _action(pitch=-10),
    "forward_small_look_left": _action(look=-10, move=1),
    "forward_small_look_right": _action(look=10, move=1),
    "forward_large_look_left": _action(look=-60, move=1),
    "forward_large_look_right": _action(look=60, move=1),
    "fire": _action(fire=1),
}


def action_table(extended: bool = False) -> np.ndarray:
    """``[num_actions, 7]`` ``np.intc`` array: row ``i`` is the native action of discrete action ``i``.

    Rows are read-only and C-contiguous, so ``table[i]`` can be passed to ``Lab.step`` as is.
    """
    actions = EXTENDED_ACTIONS if extended else IMPALA_ACTIONS
    table = np.array(list(actions.values()), dtype=np.intc)
    table.setflags(write=False)
    return table


def action_names(extended: bool = False) -> list[str]:
    """Names of the discrete actions, in index order."""
    return list((EXTENDED_ACTIONS if extended else IMPALA_ACTIONS).keys())
