"""One pygame in the venv, and the families that draw with it render (issue 38).

pygame and pygame-ce install into the same ``pygame/`` folder, so with both installed whichever was installed last
silently owns the files while both claim them. gymnasium, vizdoom, minigrid and pettingzoo require pygame-ce;
setup.py's extras ask for pygame-ce and scripts/setup_venv.sh removes a leftover pygame."""

import importlib.metadata as metadata
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]


def _installed(dist: str) -> bool:
    try:
        metadata.version(dist)
    except metadata.PackageNotFoundError:
        return False
    return True


def test_the_venv_has_exactly_one_pygame_and_it_is_pygame_ce():
    assert [d for d in ("pygame", "pygame-ce") if _installed(d)] == ["pygame-ce"], \
        "pygame and pygame-ce share one package folder: run scripts/setup_venv.sh (it removes pygame)"
    import pygame

    assert getattr(pygame, "IS_CE", False), "the pygame/ folder holds files of another pygame than pygame-ce"
    assert pygame.version.ver == metadata.version("pygame-ce")


def test_setup_py_asks_for_the_pygame_its_families_require():
    text = (REPO / "setup.py").read_text()
    assert '"pygame>=' not in text and '"pygame-ce>=2.4.0"' in text
    for dist in ("vizdoom", "minigrid", "gymnasium", "pettingzoo"):
        if _installed(dist):
            pygames = {r.split(">")[0].split("=")[0].split(";")[0].strip() for r in metadata.requires(dist) or ()
                       if r.lower().startswith("pygame")}
            assert pygames <= {"pygame-ce"}, (dist, pygames)


def _frame(env_name: str, *flags: str, render_mode: str = "rgb_array"):
    from sfx.registries import parse_args
    from sfx.envs import make_env

    cfg = parse_args([f"--env={env_name}", *flags])
    env = make_env(cfg, render_mode=render_mode)
    try:
        env.reset(seed=0)
        return env.render()
    finally:
        env.close()


def test_gym_classic_control_renders_frames_with_pygame():
    frame = np.asarray(_frame("gym_CartPole-v1"))
    assert frame.shape == (400, 600, 3) and frame.dtype == np.uint8 and frame.std() > 0


def test_pettingzoo_renders_frames_with_pygame():
    pytest.importorskip("pettingzoo")
    frame = np.asarray(_frame("pettingzoo_classic.connect_four_v3"))
    assert frame.ndim == 3 and frame.shape[2] == 3 and frame.std() > 0


def test_minigrid_and_classic_control_open_a_pygame_window():
    """``render_mode='human'`` draws into a pygame window (SDL's dummy video driver: no display needed)."""
    pytest.importorskip("minigrid")
    code = ("from sfx.registries import parse_args\nfrom sfx.envs import make_env\n"
            "import pygame\n"
            "for name in ('minigrid_Empty-5x5', 'gym_CartPole-v1'):\n"
            "    env = make_env(parse_args(['--env=' + name]), render_mode='human')\n"
            "    env.reset(seed=0)\n"
            "    env.render()\n"
            "    assert pygame.display.get_surface() is not None, name\n"
            "    env.close()\n"
            "print('windows drawn')\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "SDL_VIDEODRIVER": "dummy", "SDL_AUDIODRIVER": "dummy"})
    assert proc.returncode == 0 and "windows drawn" in proc.stdout, proc.stderr[-2000:]
