"""PBT's pure decisions: mutation (bounds, records, resets, discrete steps) and replacement."""

import math
import random

import pytest

from sfx.pbt import ParamSpec, batch_size_choices, mutate, perturb, select_replacement

LR = ParamSpec("learning_rate", 1e-4, 1e-6, 1e-2)


def test_perturb_multiplies_or_divides_within_the_factor_range_and_bounds():
    rng = random.Random(0)
    ups = downs = 0
    for _ in range(2000):
        new, how = perturb(1e-4, LR, rng, 1.05, 1.5)
        ratio = new / 1e-4
        if how.startswith("x"):
            ups += 1
            assert 1.05 <= ratio <= 1.5 and float(how[1:]) == pytest.approx(ratio, rel=1e-3)
        else:
            downs += 1
            assert 1 / 1.5 <= ratio <= 1 / 1.05 and float(how[1:]) == pytest.approx(1 / ratio, rel=1e-3)
    assert 800 < ups < 1200 and ups + downs == 2000
    # bounds clip
    assert all(perturb(1e-2, LR, rng, 2, 3)[0] <= 1e-2 for _ in range(100))
    assert all(perturb(1e-6, LR, rng, 2, 3)[0] >= 1e-6 for _ in range(100))


def test_complement_keeps_gamma_below_one():
    gamma = ParamSpec("gamma", 0.99, 0.9, 0.9999, complement=True)
    rng = random.Random(1)
    for _ in range(500):
        new, how = perturb(0.99, gamma, rng, 1.05, 1.5)
        assert 0.9 <= new <= 0.9999 and new != 0.99
        rest = (1 - new) / 0.01
        assert 1 / 1.5 - 1e-9 <= rest <= 1.5 + 1e-9 and how.startswith("1-x")


def test_discrete_choices_move_one_step_and_turn_at_the_ends():
    spec = ParamSpec("batch_size", 1024, choices=(256, 512, 1024, 2048))
    rng = random.Random(2)
    seen = {perturb(1024, spec, rng, 1.1, 1.5)[0] for _ in range(100)}
    assert seen == {512, 2048}
    assert {perturb(2048, spec, rng, 1.1, 1.5)[0] for _ in range(20)} == {1024}
    assert {perturb(256, spec, rng, 1.1, 1.5) for _ in range(20)} == {(512, "step up")}


def test_batch_size_choices_are_whole_trajectories():
    choices = batch_size_choices(1024, 32)
    assert choices == (256, 512, 1024, 2048)
    assert all(c % 32 == 0 for c in batch_size_choices(96, 32))
    assert batch_size_choices(64, 64) == (64, 128)  # never below one trajectory


def test_mutate_records_every_change_and_keeps_unspecified_params():
    specs = [LR, ParamSpec("exploration_loss_coeff", 0.003, 1e-6, 0.1), ParamSpec("batch_size", 1024, choices=(512, 1024, 2048))]
    params = {"learning_rate": 1e-4, "exploration_loss_coeff": 0.003, "batch_size": 1024, "other": "kept"}
    new, records = mutate(params, specs, random.Random(3), mutation_rate=1.0, perturb_min=1.1, perturb_max=1.5,
                          reset_probability=0.0)
    assert params["learning_rate"] == 1e-4  # the input is not modified
    assert new["other"] == "kept"
    assert {r["param"] for r in records} == {"learning_rate", "exploration_loss_coeff", "batch_size"}
    for r in records:
        assert r["old"] == params[r["param"]] and r["new"] == new[r["param"]] and r["how"]
    assert isinstance(new["batch_size"], int)

    # rate 0: nothing; a fixed seed: the same decision
    assert mutate(params, specs, random.Random(3), 0.0, 1.1, 1.5) == (params, [])
    a = mutate(params, specs, random.Random(9), 0.5, 1.1, 1.5)
    b = mutate(params, specs, random.Random(9), 0.5, 1.1, 1.5)
    assert a == b

    # resets go back to the default and say so
    moved = dict(params, learning_rate=3e-3)
    new, records = mutate(moved, [LR], random.Random(4), 1.0, 1.1, 1.5, reset_probability=1.0)
    assert new["learning_rate"] == 1e-4 and records[0]["how"] == "reset to default"


def test_mutation_rate_is_the_per_parameter_probability():
    specs = [ParamSpec(f"p{i}", 1.0, 0.01, 100.0) for i in range(10)]
    params = {s.name: 1.0 for s in specs}
    rng = random.Random(5)
    changed = sum(len(mutate(params, specs, rng, 0.15, 1.1, 1.5)[1]) for _ in range(1000))
    assert 1200 < changed < 1800  # about 0.15 x 10 x 1000


def test_replacement_bottom_copies_top_only_past_both_gaps():
    rng = random.Random(6)
    objectives = {0: 10.0, 1: 5.0, 2: 1.0, 3: 9.0}
    # 4 policies, fraction 0.3 -> k = 1: only policy 2 (the worst) is replaced, by policy 0 (the best)
    assert select_replacement(2, objectives, 0.3, 0.1, 1e-6, rng)[0] == 0
    for p in (0, 1, 3):
        winner, reason = select_replacement(p, objectives, 0.3, 0.1, 1e-6, rng)
        assert winner is None and "not in the bottom" in reason
    # fraction 0.5 -> k = 2: policies 2 and 1 copy one of 0 and 3
    winners = {select_replacement(1, objectives, 0.5, 0.1, 1e-6, rng)[0] for _ in range(50)}
    assert winners == {0, 3}
    # relative gap: 10 vs 9.5 is a gap of 0.5 <= 0.1 x 10
    close = {0: 10.0, 1: 9.5}
    winner, reason = select_replacement(1, close, 0.5, 0.1, 1e-6, rng)
    assert winner is None and "0.1 x" in reason
    assert select_replacement(1, close, 0.5, 0.01, 1e-6, rng)[0] == 0
    # absolute gap
    winner, reason = select_replacement(1, close, 0.5, 0.0, 1.0, rng)
    assert winner is None and "absolute" in reason
    # negative objectives: the gap is relative to the best's magnitude
    assert select_replacement(1, {0: -10.0, 1: -20.0}, 0.5, 0.1, 1e-6, rng)[0] == 0
    # no episode yet (NaN) -> not ranked, never replaced, never copied
    assert select_replacement(1, {0: 3.0, 1: math.nan}, 0.5, 0.0, 0.0, rng)[0] is None
    assert select_replacement(1, {0: math.nan, 1: 1.0, 2: 2.0}, 0.5, 0.0, 0.0, rng)[0] == 2
