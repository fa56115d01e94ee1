"""The project passes its linter: ``ruff check .`` with the rules of ruff.toml (pyflakes' unused and undefined
names, likely bugs, blind excepts that do not say why, noqa comments that silence nothing)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 2 or "No module named ruff" not in proc.stderr, \
        "ruff is not installed in this interpreter: pip install ruff (scripts/setup_venv.sh installs it)"
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]


def test_ruff_checks_with_the_project_s_rules():
    """A finding of a selected rule fails (the configuration is read, the rules are on)."""
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--stdin-filename", "sfx/probe.py",
                           "-"], cwd=ROOT, input="import os\n\ntry:\n    pass\nexcept Exception:\n    pass\n",
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "F401" in proc.stdout and "BLE001" in proc.stdout, proc.stdout + proc.stderr
