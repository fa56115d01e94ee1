"""Creating and closing VizDoom games, and turning their screens into observations.

This part has no gymnasium in it so that multiplayer matches (a host and joiners, each its own
game) can build their games the same way and add their network arguments through
``GameSettings.game_args``.

Where VizDoom writes files: the engine keeps its settings in ``_vizdoom.ini`` (written when the
game closes) and creates a ``_vizdoom/`` folder in the working directory of the process that calls
``init()``. ``set_doom_config_path`` moves the ini, but nothing moves the folder, so each game gets
its own temporary directory: the ini path points there and the working directory is switched to
it only for the ``init()`` call (under a lock, so threads of one process making games do not
race on the process-wide working directory). ``close_game`` deletes the directory. Nothing lands
in the repository or the experiment folder, and no settings leak from one game to the next.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Iterator, Sequence

import cv2
import numpy as np
import vizdoom as vzd

from sfx.cfg.flag_types import FALSE_STRINGS, TRUE_STRINGS, str2bool
from sfx.errors import ConfigError
from sfx.envs.doom.reward_shaping import TRACKED_VARIABLES
from sfx.envs.doom.scenarios import DoomScenario

PIXEL_FORMATS = ("rgb", "gray")
# --resize_interpolation: OpenCV's filters for the render -> observation resize. area averages each output
# pixel's footprint (no aliasing; ~100 us per 160x120 -> 128x72 RGB frame, one core: a quarter of a
# doom_basic step at frameskip 4); linear weighs the two-by-two nearest pixels (~20 us); nearest takes one
# pixel (~10 us, Sample Factory's choice). linear is the default: doom_basic learned as well as with area
# (3 seeds x 800k frames each) with 1.36x area's raw env steps per second; nearest learned less
# (docs/benchmarks.md, "The frame resize").
INTERPOLATIONS = {"area": cv2.INTER_AREA, "linear": cv2.INTER_LINEAR, "nearest": cv2.INTER_NEAREST}

# --doom_render: VizDoom's render options (``DoomGame.set_render_<name>``), set over what the scenario's .cfg says.
# VizDoom's bundled scenario files and Sample Factory's copies of them disagree on several (its basic.cfg: hud on,
# decals and particles off; VizDoom's: hud off, decals and particles on), and agents see different frames.
RENDER_OPTIONS = ("hud", "minimal_hud", "crosshair", "weapon", "decals", "particles", "effects_sprites", "messages",
                  "corpses", "screen_flashes", "all_frames")

_CWD_LOCK = threading.Lock()


def parse_render(spec: str | None) -> tuple[tuple[str, bool], ...]:
    """``--doom_render`` ``"hud=1,decals=0"`` -> ``(("hud", True), ("decals", False))``; ``None`` or empty: ``()``
    (the scenario's .cfg decides). :class:`ConfigError` naming a bad entry and what is allowed."""
    if not spec:
        return ()
    out: dict[str, bool] = {}
    for item in spec.split(","):
        name, sep, value = item.strip().partition("=")
        name, value = name.strip(), value.strip().lower()
        if not sep or name not in RENDER_OPTIONS or value not in TRUE_STRINGS + FALSE_STRINGS:
            raise ConfigError(f"--doom_render={spec!r}: {item.strip()!r} is not name=on|off with a name from "
                              f"{', '.join(RENDER_OPTIONS)} (values: {'/'.join(TRUE_STRINGS)} or "
                              f"{'/'.join(FALSE_STRINGS)})")
        if name in out:
            raise ConfigError(f"--doom_render={spec!r}: {name} is set twice")
        out[name] = str2bool(value)
    return tuple(out.items())


def apply_render(game: vzd.DoomGame, render: tuple[tuple[str, bool], ...]) -> None:
    """Set each ``(name, on)`` of :func:`parse_render`'s result on ``game`` (after its .cfg is loaded)."""
    for name, on in render:
        getattr(game, f"set_render_{name}")(bool(on))


def native_resolutions() -> list[tuple[int, int]]:
    """Every ``(width, height)`` VizDoom can render, smallest first."""
    sizes = []
    for name in dir(vzd.ScreenResolution):
        if name.startswith("RES_"):
            w, h = name[4:].split("X")
            sizes.append((int(w), int(h)))
    return sorted(sizes, key=lambda s: (s[0] * s[1], s))


def render_resolution(res_w: int, res_h: int, wide_aspect_ratio: bool) -> tuple[int, int]:
    """The native resolution a ``res_w x res_h`` observation is rendered at before resizing.

    Wide: the smallest 16:9 resolution at least as large (128x72 -> 256x144, whose field of view
    is wider than 4:3). Not wide: the smallest 4:3 one at least as large (128x72 -> 160x120, the
    field of view the scenarios were designed for, squeezed to the requested shape; about 1.6x
    faster to render than 256x144). An exact native match is always used as is.
    """
    natives = native_resolutions()
    if (res_w, res_h) in natives:
        return res_w, res_h
    num, den = (16, 9) if wide_aspect_ratio else (4, 3)
    for w, h in natives:
        if w * den == h * num and w >= res_w and h >= res_h:
            return w, h
    raise ConfigError(f"--res_w={res_w} --res_h={res_h}: no native {num}:{den} VizDoom resolution is that large "
                      f"(largest: {max((s for s in natives if s[0] * den == s[1] * num), default=None)})")


@dataclass(frozen=True)
class GameSettings:
    """What a game is built with, besides its scenario.

    Attributes:
        res_w, res_h: observation size in pixels.
        wide_aspect_ratio: render 16:9 (else 4:3) before resizing to ``res_w x res_h``.
        pixel_format: ``rgb`` (3 channels) or ``gray`` (1 channel); observations are CHW uint8.
        interpolation: the resize's filter, a key of :data:`INTERPOLATIONS`.
        seed: seed of the game's random generator (``None``: VizDoom's own).
        game_args: extra engine arguments (e.g. a multiplayer host's ``-host 2 -port 5029``).
        mode: ``vizdoom.Mode`` (``PLAYER``: synchronous, the engine waits for each action).
        render: render options set over the scenario's .cfg (:func:`parse_render`'s ``(name, on)`` pairs).
    """

    res_w: int = 128
    res_h: int = 72
    wide_aspect_ratio: bool = False
    pixel_format: str = "rgb"
    interpolation: str = "linear"
    seed: int | None = None
    game_args: tuple[str, ...] = ()
    mode: vzd.Mode = vzd.Mode.PLAYER
    render: tuple[tuple[str, bool], ...] = ()


class FrameConverter:
    """Screen buffer of the game -> observation ``(C, res_h, res_w)`` uint8.

    Renders straight into CHW (``CRCGCB``) when no resize is needed; otherwise renders HWC, resizes
    with ``interpolation`` (a key of :data:`INTERPOLATIONS`; ``linear`` by default) and moves the
    channels first.
    """

    def __init__(self, render_size: tuple[int, int], obs_size: tuple[int, int], pixel_format: str,
                 interpolation: str = "linear") -> None:
        if pixel_format not in PIXEL_FORMATS:
            raise ConfigError(f"--pixel_format={pixel_format} is not known; allowed: {', '.join(PIXEL_FORMATS)}")
        if interpolation not in INTERPOLATIONS:
            raise ConfigError(f"--resize_interpolation={interpolation} is not known; "
                              f"allowed: {', '.join(INTERPOLATIONS)}")
        self.interpolation = INTERPOLATIONS[interpolation]
        self.render_size, self.obs_size = render_size, obs_size
        self.gray = pixel_format == "gray"
        self.resize = render_size != obs_size
        if self.gray:
            self.screen_format = vzd.ScreenFormat.GRAY8
        else:
            self.screen_format = vzd.ScreenFormat.RGB24 if self.resize else vzd.ScreenFormat.CRCGCB
        self.shape = (1 if self.gray else 3, obs_size[1], obs_size[0])

    def __call__(self, screen: np.ndarray) -> np.ndarray:
        if self.resize:
            screen = cv2.resize(screen, self.obs_size, interpolation=self.interpolation)
            if not self.gray:
                return np.ascontiguousarray(screen.transpose(2, 0, 1))
        if self.gray:
            return screen.reshape(self.shape)
        return screen


@contextlib.contextmanager
def _working_dir(path: str) -> Iterator[None]:
    with _CWD_LOCK:
        old = os.getcwd()
        os.chdir(path)
        try:
            yield
        finally:
            os.chdir(old)


def create_game(scenario: DoomScenario, settings: GameSettings,
                buttons: Sequence[str] | None = None) -> tuple[vzd.DoomGame, FrameConverter, str]:
    """Build and ``init()`` a headless game of ``scenario``.

    Args:
        scenario: the scenario (its ``.cfg`` is loaded first; sfx's settings override it).
        settings: resolution, pixel format, seed, extra engine arguments, mode.
        buttons: button names replacing the scenario's (``None``: the scenario's choice).

    Returns:
        ``(game, frame_converter, workdir)``: close with :func:`close_game` ``(game, workdir)``.
    """
    render_size = render_resolution(settings.res_w, settings.res_h, settings.wide_aspect_ratio)
    converter = FrameConverter(render_size, (settings.res_w, settings.res_h), settings.pixel_format,
                               settings.interpolation)
    game = vzd.DoomGame()
    game.load_config(scenario.cfg_path())
    if scenario.wad_file is not None:
        game.set_doom_scenario_path(scenario.wad_path())
    game.set_window_visible(False)
    game.set_sound_enabled(False)
    game.set_mode(settings.mode)
    game.set_screen_resolution(getattr(vzd.ScreenResolution, f"RES_{render_size[0]}X{render_size[1]}"))
    game.set_screen_format(converter.screen_format)
    apply_render(game, settings.render)
    chosen = buttons if buttons is not None else scenario.buttons
    if chosen is not None:
        game.set_available_buttons([getattr(vzd.Button, b) for b in chosen])
    # the tracked variables come after the scenario's own, whose order users of the cfg expect
    have = {v.name for v in game.get_available_game_variables()}
    for name in TRACKED_VARIABLES:
        if name not in have:
            game.add_available_game_variable(getattr(vzd.GameVariable, name))
    for arg in (*scenario.game_args, *settings.game_args):
        game.add_game_args(arg)
    if settings.seed is not None:
        game.set_seed(int(settings.seed) % (2 ** 32))
    workdir = tempfile.mkdtemp(prefix="sfx_vizdoom_")
    game.set_doom_config_path(os.path.join(workdir, "_vizdoom.ini"))
    try:
        with _working_dir(workdir):
            game.init()
    except Exception:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    return game, converter, workdir


def close_game(game: vzd.DoomGame | None, workdir: str | None) -> None:
    """Stop the game's engine process and delete its working directory (safe to call twice)."""
    if game is not None:
        game.close()
    if workdir is None:
        return
    # the engine process writes _vizdoom.ini as it exits, which can be just after close() returns:
    # a removal racing that write leaves the folder behind, so try again briefly
    for _ in range(40):
        shutil.rmtree(workdir, ignore_errors=True)
        if not os.path.exists(workdir):
            return
        time.sleep(0.05)
