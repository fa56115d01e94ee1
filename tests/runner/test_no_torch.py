"""sfx_runner runs on a login node: importing it (and running its command) loads no torch or numpy."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "numpy")


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})


def test_importing_the_runner_and_every_backend_loads_no_torch():
    proc = run_python(f"""
        import sys
        import sfx_runner, sfx_runner.cli, sfx_runner.status, sfx_runner.state
        import sfx.runner.run
        from sfx_runner.backends import BACKENDS, get_backend
        for name in BACKENDS:
            get_backend(name)  # imports sfx_runner.backends.<name>
        loaded = sorted(m for m in sys.modules if m.startswith("sfx_runner.backends."))
        assert loaded == sorted([*BACKENDS.values(), "sfx_runner.backends.base"]), loaded
        heavy = [m for m in {HEAVY!r} if m in sys.modules]
        assert not heavy, heavy
        assert "submitit" not in sys.modules, "submitit is imported by the slurm backend only when it is used"
        print("ok")
    """)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr


def test_the_command_with_every_run_module_loads_no_torch(tmp_path):
    proc = run_python(f"""
        import contextlib, io, sys
        from sfx_runner.cli import available_run_modules, main
        runs = available_run_modules()
        assert "runs.quickstart" in runs, runs
        for run in runs:
            for extra in (["--dry_run"], ["--status"]):
                with contextlib.redirect_stdout(io.StringIO()):
                    assert main([f"--run={{run}}", "--train_dir={tmp_path}", *extra]) == 0, run
        assert main(["--help"]) == 0
        heavy = [m for m in {HEAVY!r} if m in sys.modules]
        assert not heavy, heavy
        print("ok")
    """)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout + proc.stderr
