"""DESIGN.md's arrows, checked in fresh interpreters: an arrow may only point down (entry points ->
engine -> algo / models / envs -> errors), pbt plugs into the engine as an observer, and the pure
maths imports neither processes nor models."""

import subprocess
import sys

import pytest

# module imported -> packages it must not load
FORBIDDEN = {
    "sfx.engine.coordinator": ["sfx.pbt", "sfx.train", "sfx.enjoy", "sfx.dummy_sampler"],  # and its runtime
    "sfx.dummy_sampler": ["sfx.pbt"],
    "sfx.algo": ["sfx.engine", "sfx.models", "sfx.envs", "sfx.cfg", "sfx.pbt"],
    "sfx.models": ["sfx.engine", "sfx.pbt", "sfx.train"],
    "sfx.envs": ["sfx.engine", "sfx.pbt", "sfx.models", "sfx.train"],
    "sfx.errors": ["sfx.cfg", "sfx.engine", "torch"],
}


def loaded_after_import(module: str) -> set[str]:
    code = f"import sys, {module}; print('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return set(out.stdout.split())


@pytest.mark.parametrize("module", sorted(FORBIDDEN))
def test_imports_point_down(module):
    loaded = loaded_after_import(module)
    bad = sorted(m for m in loaded for f in FORBIDDEN[module] if m == f or m.startswith(f + "."))
    assert not bad, f"importing {module} loads {bad}: an arrow pointing up (see DESIGN.md)"


def test_the_training_entry_point_registers_pbt():
    assert "sfx.pbt.observer" in loaded_after_import("sfx.train")
