"""A stand-in for DeepMind Lab's ``deepmind_lab`` module, used only by sfx's tests.

DeepMind Lab has no pip package (it is built from source with Bazel), so the tests of the
``dmlab_`` family run against this module instead. It follows DeepMind Lab's documented Python
API (docs/users/python_api.md) and the behaviour of its C module on misuse:

* ``Lab(level, observations, config={}, renderer='software', level_cache=None)``: ``observations``
  must be a list (TypeError), ``config`` a dict of str -> str (TypeError), ``renderer`` 'software'
  or 'hardware' (RuntimeError), every observation name known (ValueError "Unknown observation"),
  the level known (RuntimeError "Failed to init environment").
* ``reset(episode=-1, seed=None)`` -> True; a seed that is not an int is a ValueError.
* ``step(action, num_steps=1)`` -> float reward summed over the frames; the action must be a
  numpy array (TypeError) of shape (7,) (ValueError) and dtype np.intc (ValueError); stepping an
  env that is not running is a RuntimeError "Environment in wrong status to advance.".
* ``observations()`` -> dict name -> numpy array (or str for 'INSTR'), RuntimeError when the
  env is not running (e.g. after the last frame of an episode).
* ``observation_spec()``, ``action_spec()``, ``num_steps()``, ``is_running()``, ``fps()``,
  ``events()``, ``close()`` (True the first time, False after; once closed only ``is_running()``
  may be called).

One stricter rule than the real engine (which calls it "undefined behaviour"): an action
component outside the bounds of ``action_spec()`` is a ValueError, so tests catch bad action sets.

The dynamics are fake but deterministic for a given ``(level, seed, mixerSeed)``: the agent
walks on a plane, turning with LOOK_LEFT_RIGHT and moving with MOVE_BACK_FORWARD/STRAFE; reaching
a goal gives reward +1 (and the goal moves), FIRE costs 0.01. An episode lasts a fixed number of
frames per level (a few hundred, so tests stay fast). Levels whose names start with ``explore_``
or ``rooms_`` or ``lt_``/``nav_maze_random`` generate a new "map" per episode and go through the
level cache: ``fetch(key, pk3_path)`` first, and on a miss the "compiled" map is written to
``pk3_path`` and ``write(key, pk3_path)`` is called. Language levels (``language_*``) fill
'INSTR' with an instruction; other levels give an empty string.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import weakref
from typing import Any

import numpy as np

_VERSION = "1.0-standin"
_runfiles_path = os.path.dirname(os.path.abspath(__file__))

# The 30 DMLab-30 levels plus their two held-out test variants, and a few classic levels.
_DMLAB30 = (
    "rooms_collect_good_objects_train", "rooms_collect_good_objects_test",
    "rooms_exploit_deferred_effects_train", "rooms_exploit_deferred_effects_test",
    "rooms_select_nonmatching_object", "rooms_watermaze", "rooms_keys_doors_puzzle",
    "language_select_described_object", "language_select_located_object", "language_execute_random_task",
    "language_answer_quantitative_question", "lasertag_one_opponent_small", "lasertag_three_opponents_small",
    "lasertag_one_opponent_large", "lasertag_three_opponents_large", "natlab_fixed_large_map",
    "natlab_varying_map_regrowth", "natlab_varying_map_randomized", "skymaze_irreversible_path_hard",
    "skymaze_irreversible_path_varied", "psychlab_arbitrary_visuomotor_mapping",
    "psychlab_continuous_recognition", "psychlab_sequential_comparison", "psychlab_visual_search",
    "explore_object_locations_small", "explore_object_locations_large", "explore_obstructed_goals_small",
    "explore_obstructed_goals_large", "explore_goal_locations_small", "explore_goal_locations_large",
    "explore_object_rewards_few", "explore_object_rewards_many",
)
_CLASSIC = (
    "seekavoid_arena_01", "stairway_to_melon", "nav_maze_static_01", "nav_maze_static_02", "nav_maze_static_03",
    "nav_maze_random_goal_01", "nav_maze_random_goal_02", "nav_maze_random_goal_03", "lt_chasm",
    "lt_hallway_slope", "lt_horseshoe_color", "lt_space_bounce_hard", "tests/empty_room_test",
)
LEVELS = frozenset([f"contributed/dmlab30/{n}" for n in _DMLAB30] + list(_CLASSIC))

_ACTION_SPEC = (
    ("LOOK_LEFT_RIGHT_PIXELS_PER_FRAME", -512, 512),
    ("LOOK_DOWN_UP_PIXELS_PER_FRAME", -512, 512),
    ("STRAFE_LEFT_RIGHT", -1, 1),
    ("MOVE_BACK_FORWARD", -1, 1),
    ("FIRE", 0, 1),
    ("JUMP", 0, 1),
    ("CROUCH", 0, 1),
)

_COLOURS = ("red", "green", "blue", "yellow", "cyan", "magenta", "white", "black")
_OBJECTS = ("hat", "car", "ball", "balloon", "cake", "fork", "chair", "tv")


def version() -> str:
    """Version of the wrapper (the real one never updates it either)."""
    return _VERSION


def runfiles_path() -> str:
    """Where the module's runtime files would live."""
    return _runfiles_path


def set_runfiles_path(path: str) -> bool:
    """Set the runfiles path (a str)."""
    global _runfiles_path
    if not isinstance(path, str):
        raise TypeError(f"argument 1 must be str, not {type(path).__name__}")
    _runfiles_path = path
    return True


def _level_frames(level: str) -> int:
    """Episode length in frames: a few hundred, fixed per level (real levels last minutes)."""
    digest = hashlib.blake2s(level.encode(), digest_size=4).digest()
    return 240 + int.from_bytes(digest, "little") % 241  # 240 .. 480 frames


def _generates_maps(level: str) -> bool:
    name = level.rsplit("/", 1)[-1]
    return name.startswith(("explore_", "rooms_", "lt_", "nav_maze_random"))


class Lab:
    """One stand-in DeepMind Lab environment (see the module docstring)."""

    def __init__(self, level: str, observations: list, config: dict | None = None, renderer: str = "software",
                 level_cache: Any = None) -> None:
        if not isinstance(level, str):
            raise TypeError(f"argument 1 must be str, not {type(level).__name__}")
        if not isinstance(observations, list):
            got = "None" if observations is None else type(observations).__name__
            raise TypeError(f"argument 2 must be list, not {got}")
        if config is None:
            config = {}
        if not isinstance(config, dict):
            raise TypeError(f"argument 3 must be dict, not {type(config).__name__}")
        for key, value in config.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TypeError(f"bad argument type for config entry {key!r}: keys and values must be str")
        if renderer not in ("software", "hardware"):
            raise RuntimeError(f'Failed to set renderer must be "hardware" or "software" actual "{renderer}"!')

        self._closed = False
        self._running = False
        self._level = level
        self._config = dict(config)
        level_dir = config.get("levelDirectory", "")
        if level not in LEVELS and not level_dir:
            raise RuntimeError(f"Failed to init environment - \"Could not find level '{level}'\"")
        try:
            self._width = int(config.get("width", "320"))
            self._height = int(config.get("height", "240"))
            self._fps = int(config.get("fps", "60"))
            self._mixer_seed = int(config.get("mixerSeed", "0"))
        except ValueError as e:
            raise RuntimeError(f"Failed to apply setting - \"{e}\"") from None
        if self._width <= 0 or self._height <= 0:
            raise RuntimeError("Failed to init environment - \"width and height must be positive\"")

        self._obs_specs = {
            "RGB_INTERLEAVED": (np.uint8, (self._height, self._width, 3)),
            "RGBD_INTERLEAVED": (np.uint8, (self._height, self._width, 4)),
            "RGB": (np.uint8, (3, self._height, self._width)),
            "RGBD": (np.uint8, (4, self._height, self._width)),
            "BGR_INTERLEAVED": (np.uint8, (self._height, self._width, 3)),
            "MAP_FRAME_NUMBER": (np.float64, (1,)),
            "VEL.TRANS": (np.float64, (3,)),
            "VEL.ROT": (np.float64, (3,)),
            "INSTR": (str, ()),
            "DEBUG.POS.TRANS": (np.float64, (3,)),
            "DEBUG.POS.ROT": (np.float64, (3,)),
        }
        for name in observations:
            if not isinstance(name, str):
                raise TypeError(f"observation names must be str, not {type(name).__name__}")
            if name not in self._obs_specs:
                raise ValueError(f"Unknown observation '{name}'.")
        self._observations = list(observations)
        self._level_cache = level_cache
        self._episode = 0
        self._num_steps = 0
        self._episode_frames = _level_frames(level)
        self._events: list[tuple[str, list]] = []
        # Like DeepMind Lab's own temp folder for generated maps: gone on close() or when the env is collected.
        self._pk3_dir = tempfile.mkdtemp(prefix="dmlab_standin_")
        self._pk3_cleanup = weakref.finalize(self, shutil.rmtree, self._pk3_dir, True)

    # --- lifecycle -----------------------------------------------------------------------------

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise RuntimeError(f"Environment in wrong status for call to {what}()")

    def reset(self, episode: int = -1, seed: Any = None) -> bool:
        """Start an episode (``episode`` >= 0 picks it, else the next one); ``seed`` int or None."""
        self._check_open("reset")
        if not isinstance(episode, (int, np.integer)) or isinstance(episode, bool):
            raise TypeError(f"an integer is required (got type {type(episode).__name__})")
        if seed is None:
            seed = int.from_bytes(os.urandom(4), "little") >> 1
        elif not isinstance(seed, (int, np.integer)):
            raise ValueError(f"'seed' must be int or None, was '{type(seed).__name__}'.")
        if episode >= 0:
            self._episode = int(episode)
        seed = int(seed) & 0x7FFFFFFF
        self._rng = np.random.default_rng([seed, self._mixer_seed, self._episode])
        if _generates_maps(self._level):
            self._build_map(seed)
        self._num_steps = 0
        self._frame = 0
        self._pos = self._rng.uniform(-5.0, 5.0, size=2)
        self._yaw = float(self._rng.uniform(0.0, 360.0))
        self._pitch = 0.0
        self._vel = np.zeros(3)
        self._goal = self._rng.uniform(-5.0, 5.0, size=2)
        self._palette = self._rng.integers(0, 256, size=(3,), dtype=np.int64)
        name = self._level.rsplit("/", 1)[-1]
        if name.startswith("language_"):
            colour, room, obj = self._rng.integers(0, len(_COLOURS), size=3)
            self._instr = f"Pick the {_COLOURS[colour]} {_OBJECTS[obj % len(_OBJECTS)]} in the {_COLOURS[room]} room"
        else:
            self._instr = ""
        self._events = [("LOG", [f"Episode {self._episode} started"])]
        self._episode += 1
        self._running = True
        return True

    def _build_map(self, seed: int) -> None:
        """A new map per episode (one of 16 per level and mixer seed), through the level cache."""
        map_id = seed % 16
        key = hashlib.blake2s(f"{self._level}|{self._mixer_seed}|{map_id}".encode(), digest_size=16).hexdigest()
        pk3_path = os.path.join(self._pk3_dir, f"{key}.pk3")
        if self._level_cache is not None:
            if self._level_cache.fetch(key, pk3_path):
                with open(pk3_path, "rb") as f:
                    if not f.read().startswith(b"PK3-STANDIN"):
                        raise RuntimeError(f"Failed to start environment - \"corrupt cached map {key}\"")
                return
        with open(pk3_path, "wb") as f:
            f.write(b"PK3-STANDIN " + key.encode())
        if self._level_cache is not None:
            self._level_cache.write(key, pk3_path)

    def close(self) -> bool:
        """Release the env; True if it was open."""
        if self._closed:
            return False
        self._closed = True
        self._running = False
        self._pk3_cleanup()
        return True

    def is_running(self) -> bool:
        return self._running and not self._closed

    def num_steps(self) -> int:
        """Frames since the last reset."""
        self._check_open("num_steps")
        return self._num_steps

    def fps(self) -> int:
        self._check_open("fps")
        return self._fps

    # --- acting --------------------------------------------------------------------------------

    def step(self, action: np.ndarray, num_steps: int = 1) -> float:
        """Repeat ``action`` for ``num_steps`` frames -> the summed reward."""
        if not isinstance(action, np.ndarray):
            raise TypeError(f"argument 1 must be numpy.ndarray, not {type(action).__name__}")
        if not isinstance(num_steps, (int, np.integer)) or isinstance(num_steps, bool):
            raise TypeError(f"an integer is required (got type {type(num_steps).__name__})")
        if not self.is_running():
            raise RuntimeError("Environment in wrong status to advance.")
        if action.ndim != 1 or action.shape[0] != len(_ACTION_SPEC):
            raise ValueError(f"action must have shape ({len(_ACTION_SPEC)})")
        if action.dtype != np.intc:
            raise ValueError("action must have dtype np.intc")
        for value, (name, lo, hi) in zip(action.tolist(), _ACTION_SPEC):
            if not lo <= value <= hi:
                raise ValueError(f"action component {name}={value} outside [{lo}, {hi}] (stand-in check)")
        look, pitch, strafe, move, fire, _jump, _crouch = action.tolist()
        self._events = []
        reward = 0.0
        for _ in range(max(0, int(num_steps))):
            # 0.1 degree of yaw per pixel (a made-up scale, like the rest of the dynamics)
            self._yaw = (self._yaw + 0.1 * look) % 360.0
            self._pitch = float(np.clip(self._pitch + 0.1 * pitch, -90.0, 90.0))
            rad = np.deg2rad(self._yaw)
            fwd = np.array([np.cos(rad), np.sin(rad)])
            side = np.array([-np.sin(rad), np.cos(rad)])
            delta = 0.05 * (move * fwd + strafe * side)
            self._pos = np.clip(self._pos + delta, -6.0, 6.0)
            self._vel = np.array([delta[0], delta[1], 0.0]) * self._fps
            if np.linalg.norm(self._pos - self._goal) < 0.75:
                reward += 1.0
                self._goal = self._rng.uniform(-5.0, 5.0, size=2)
            if fire:
                reward -= 0.01
            self._frame += 1
            self._num_steps += 1
            if self._frame >= self._episode_frames:
                self._running = False
                self._events.append(("LOG", ["Episode ended"]))
                break
        return float(reward)

    # --- observing -----------------------------------------------------------------------------

    def _render_rgb_hwc(self) -> np.ndarray:
        h, w = self._height, self._width
        # a horizon that scrolls with the yaw, tinted by the episode's palette, and a goal marker
        # whose column tells the bearing to the goal: cheap, deterministic, and it depends on the state
        shift = int(self._yaw / 360.0 * w)
        cols = (np.arange(w) + shift) % w
        img = np.empty((h, w, 3), dtype=np.uint8)
        img[: h // 2] = (self._palette // 2).astype(np.uint8)
        img[h // 2:] = ((cols[None, :, None] * 255) // max(1, w - 1)).astype(np.uint8)
        to_goal = self._goal - self._pos
        bearing = (np.rad2deg(np.arctan2(to_goal[1], to_goal[0])) - self._yaw + 180.0) % 360.0 - 180.0
        if abs(bearing) < 60.0:
            col = int((bearing + 60.0) / 120.0 * (w - 1))
            dist = float(np.linalg.norm(to_goal))
            half = max(1, int(w / (4.0 * (1.0 + dist))))
            img[h // 4: 3 * h // 4, max(0, col - half): col + half + 1] = (255, 255, 0)
        return img

    def observations(self) -> dict:
        """The observations asked for at construction, by name."""
        if not self.is_running():
            raise RuntimeError("Environment in wrong status for call to observations()")
        out: dict[str, Any] = {}
        rgb = None
        for name in self._observations:
            if name in ("RGB_INTERLEAVED", "RGB", "RGBD_INTERLEAVED", "RGBD", "BGR_INTERLEAVED"):
                if rgb is None:
                    rgb = self._render_rgb_hwc()
                if name == "RGB_INTERLEAVED":
                    out[name] = rgb.copy()
                elif name == "BGR_INTERLEAVED":
                    out[name] = rgb[:, :, ::-1].copy()
                elif name == "RGB":
                    out[name] = np.ascontiguousarray(rgb.transpose(2, 0, 1))
                else:
                    depth = np.full((self._height, self._width, 1), 128, dtype=np.uint8)
                    rgbd = np.concatenate([rgb, depth], axis=2)
                    out[name] = rgbd if name == "RGBD_INTERLEAVED" else np.ascontiguousarray(rgbd.transpose(2, 0, 1))
            elif name == "INSTR":
                out[name] = self._instr
            elif name == "MAP_FRAME_NUMBER":
                out[name] = np.array([float(self._frame)])
            elif name == "VEL.TRANS":
                out[name] = self._vel.copy()
            elif name == "VEL.ROT":
                out[name] = np.zeros(3)
            elif name == "DEBUG.POS.TRANS":
                out[name] = np.array([self._pos[0], self._pos[1], 0.0])
            elif name == "DEBUG.POS.ROT":
                out[name] = np.array([self._pitch, self._yaw, 0.0])
        return out

    def observation_spec(self) -> list[dict]:
        """Every observation this env can give: name, dtype (numpy type or str), shape."""
        self._check_open("observation_spec")
        return [{"name": name, "dtype": dtype, "shape": tuple(shape)}
                for name, (dtype, shape) in self._obs_specs.items()]

    def action_spec(self) -> list[dict]:
        """The 7 integer action components: name, min, max."""
        self._check_open("action_spec")
        return [{"min": lo, "max": hi, "name": name} for name, lo, hi in _ACTION_SPEC]

    def events(self) -> list[tuple[str, list]]:
        """Events since the last reset() or step(): (name, [observations])."""
        self._check_open("events")
        return list(self._events)
