"""A missing (or too old) optional package is one line naming the env family and the extra that installs
it, not a traceback from wherever the family first imports it (issue 38). The import is made to fail in a
subprocess (``sys.modules[name] = None``: what Python does for a package that is not installed)."""

import subprocess
import sys

import pytest

CASES = [("vizdoom", "doom_basic", "doom"), ("ale_py", "atari_pong", "atari"), ("mujoco", "mujoco_hopper", "mujoco"),
         ("minigrid", "minigrid_MemoryS7", "minigrid"), ("pettingzoo", "pettingzoo_tictactoe_v3", "pettingzoo")]


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("module,env,extra", CASES)
def test_a_missing_package_is_one_line_with_the_extra(tmp_path, module, env, extra):
    r = _run(f"import sys; sys.modules[{module!r}] = None\n"
             f"from sfx.train import main\n"
             f"sys.exit(main(['--env={env}', '--experiment=x', '--train_dir={tmp_path}']))")
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    family = env.split("_")[0] + "_"
    assert lines[0].startswith(f"sfx: error: env family {family} needs the optional package")
    assert f"pip install -e .[{extra}]" in lines[0]


def test_an_old_vizdoom_is_one_line_with_the_upgrade(tmp_path):
    pytest.importorskip("vizdoom")
    r = _run("import sys, vizdoom; vizdoom.__version__ = '1.2.4'\n"
             "from sfx.train import main\n"
             f"sys.exit(main(['--env=doom_basic', '--experiment=x', '--train_dir={tmp_path}']))")
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == ("sfx: error: env family doom_ needs vizdoom>=1.3, found 1.2.4; upgrade it with: "
                                "pip install -U -e .[doom] (or pip install -U 'vizdoom>=1.3')")


def test_enjoy_says_the_same(tmp_path):
    r = _run("import sys; sys.modules['minigrid'] = None\n"
             "from sfx.enjoy import main\n"
             f"sys.exit(main(['--env=minigrid_MemoryS7', '--experiment=x', '--train_dir={tmp_path}']))")
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "pip install -e .[minigrid]" in r.stderr


def test_version_order():
    from sfx.envs.registry import _version_tuple

    assert _version_tuple("1.2.4") < _version_tuple("1.3") <= _version_tuple("1.3.0") < _version_tuple("1.10")
    assert _version_tuple("2.0.0rc1") == (2, 0, 0)
