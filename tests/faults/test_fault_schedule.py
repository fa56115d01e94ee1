"""The seeded fault injector (bench.faults) against a real sweep: one fault of every kind, at random moments,
then the invariants (budgets reached, resumes from the newest intact checkpoint, checkpoints load, nothing
leaked, cfg.json intact, every fault accounted for in the logs). And its bad input: one line each."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.faults.schedule import KINDS, ROLES, FaultInputError, make_schedule

REPO = Path(__file__).resolve().parents[2]


def _faults(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "bench.faults", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


def test_a_schedule_replays_from_its_seed_and_holds_every_kind():
    a = make_schedule(7, 180, 12)
    assert a == make_schedule(7, 180, 12) and a != make_schedule(8, 180, 12)
    assert {f.kind for f in a} == set(KINDS)
    assert all(b.at_sec - x.at_sec >= 2.0 for x, b in zip(a, a[1:]))
    signals = [f for f in make_schedule(3, 600, 40) if f.role]
    assert {f.role for f in signals} == set(ROLES)  # every role, in turn, before any repeats
    with pytest.raises(FaultInputError, match="do not fit"):
        make_schedule(1, 40, 30)


@pytest.mark.parametrize("args, line", [
    (["--kinds=sigkill,bogus"], "bench.faults: error: unknown fault kind 'bogus'; known: sigkill, sigstop, "),
    (["--targets=learnr"], "bench.faults: error: unknown target 'learnr'; known: rollout_worker, "),
    (["--sweep=/nonexistent.py"], "bench.faults: error: --sweep='/nonexistent.py': not small, full, nor a run "),
])
def test_bad_input_is_one_line(args, line, tmp_path):
    proc = _faults(*args, f"--train_dir={tmp_path / 'td'}")
    assert proc.returncode == 2 and proc.stderr.startswith(line) and proc.stderr.count("\n") == 1, proc.stderr


@pytest.mark.slow
@pytest.mark.timeout(1500)
@pytest.mark.fault("a 3-minute seeded schedule, one fault of each kind, against a 3-experiment sweep")
def test_a_sweep_survives_one_fault_of_each_kind(tmp_path):
    disk = ["--disk_mb=256"] if os.geteuid() == 0 else []
    kinds = KINDS if disk else tuple(k for k in KINDS if k != "disk_full")
    report = tmp_path / "report.md"
    # signals to the roles every training of this sweep has at every moment (no evaluator, no second rank), and
    # budgets that outlast the 150-s schedule on a quiet 2-core machine too (there 100k steps were done in ~90 s,
    # and the last three faults found no process to hit, 2026-12-02): every fault lands on a running sweep
    proc = _faults("--sweep=suite", "--seed=10", "--duration_sec=150", f"--faults={len(kinds) + 3}",
                   "--warmup_sec=35", f"--kinds={','.join(kinds)}", "--targets=learner,rollout_worker,policy_worker,"
                   "coordinator,runner", f"--train_dir={tmp_path / 'td'}", "--steps=250000", "--end_timeout_sec=900",
                   f"--report={report}", *disk, timeout=1400)
    text = report.read_text() if report.exists() else proc.stdout
    print(text)
    assert proc.returncode == 0, text + proc.stderr[-3000:]
    for kind in kinds:
        rows = [r for r in text.splitlines() if r.startswith("| ") and f"| {kind} |" in r]
        assert rows and any("skipped" not in r for r in rows), f"no {kind} landed:\n{text}"
    assert "**" not in text  # nothing unaccounted for, no invariant broken
    assert "Leaks: none" in text
