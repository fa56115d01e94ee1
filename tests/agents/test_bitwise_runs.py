"""Training is unchanged by a refactor: seeded serial runs of APPO (feed-forward, GRU, LSTM with epochs, PopArt,
replay with CLEAR, V-MPO on transitions, the KL-adaptive schedule), R2D2 and SAC give the losses and final weights
recorded in tests/agents/bitwise_reference.json (tests/agents/bitwise_runs.py makes both).

Why a committed reference and two strengths of comparison: the code that produced the reference is gone after a
refactor, so before and after cannot run in one process; the reference is what the code did when it was recorded.
On the machine it was recorded on (same CPU model and torch build: the fingerprint in the file) every statistic
and every tensor's SHA-256 must be identical: bit for bit. Elsewhere (CI's CPU, another MKL code path) float32
kernels round differently (a matrix product's blocking, a vectorised reduction's order: a few ulps, 2^-23
relative, per operation), and a few hundred optimizer steps carry such differences forward without amplifying
them beyond about a thousand ulps at these sizes; so each statistic must be within 2^-10 of the largest magnitude
that statistic takes in the run, and each tensor's sum within 2^-10 of its sum of absolute values. A change of
the training itself (another loss term, a reordered sum, another random draw) moves them far more. Recorded with
``ATEN_CPU_CAPABILITY=avx2`` and without on the reference's machine: identical (its fingerprint says which it was).

Re-record after an intended change of training: ``python -m tests.agents.bitwise_runs
tests/agents/bitwise_reference.json``, and say why in the commit."""

import json
import logging
import math
import os
from pathlib import Path

import pytest

from tests.agents.bitwise_runs import RUNS, differences, fingerprint, run_one

REFERENCE = json.loads((Path(__file__).parent / "bitwise_reference.json").read_text())
RELATIVE = 2.0 ** -10
# statistics that are zero in exact arithmetic (an on-policy step's KL and policy loss) are float32 rounding of
# differences of unit-scale quantities (log-probabilities, ratios): a few ulps of 1, 2^-23 each, whatever
# their own largest value in the run; 2^-20 is 8 such ulps
ABSOLUTE = 2.0 ** -20


# set, these pick other kernels than the reference's machine ran (the suite is also run as an AVX2 CPU computes)
KERNEL_ENV = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR")


def _same_machine() -> bool:
    here, there = fingerprint(), REFERENCE["fingerprint"]
    if any(os.environ.get(k) for k in KERNEL_ENV):
        return False
    return all(here[k] == there[k] for k in ("torch", "cpu", "cpu_capability"))


@pytest.mark.parametrize("name", list(RUNS))
def test_a_seeded_serial_training_gives_the_recorded_losses_and_weights(name, tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    expected = REFERENCE["runs"][name]
    got = run_one(name, RUNS[name], tmp_path)
    if _same_machine():
        bad = differences(got, expected)
    else:
        bad = differences(got, expected, rtol=RELATIVE, atol=ABSOLUTE, bitwise=False)
    assert not bad, f"{name} trained differently ({len(bad)} differences):\n" + "\n".join(bad[:20])


def test_the_comparison_catches_a_change_in_the_last_bit():
    """The bitwise comparison fails on one ulp of one statistic, and the tolerant one on a change of 2^-9."""
    run = REFERENCE["runs"]["appo_ff"]
    changed = json.loads(json.dumps(run))
    key = "loss/value"
    x = changed["steps"][3][key]
    changed["steps"][3][key] = math.nextafter(x, math.inf)
    assert differences(changed, run) == [f"step 3: {key} = {changed['steps'][3][key]!r}, expected {x!r}"]
    assert differences(changed, run, rtol=RELATIVE, bitwise=False) == []
    scale = max(abs(s[key]) for s in run["steps"])
    changed["steps"][3][key] = x + 2 * RELATIVE * scale
    assert differences(changed, run, rtol=RELATIVE, bitwise=False)
