"""sfx_tb.stats against small cases computed by hand (issue 38)."""

import numpy as np
import pytest

from sfx_tb.stats import (interquartile_mean, optimality_gap, performance_profile, probability_of_improvement,
                          stratified_bootstrap)


def test_interquartile_mean_by_hand():
    # 8 scores sorted: 0 1 2 3 4 5 6 100; drop 2 from each end -> mean(2, 3, 4, 5) = 3.5
    scores = np.array([[100, 0], [3, 2], [1, 6], [5, 4]])
    assert interquartile_mean(scores) == 3.5
    # 5 scores: floor(5/4) = 1 dropped each end -> mean(2, 3, 4) = 3
    assert interquartile_mean([1, 2, 3, 4, 50]) == 3.0


def test_optimality_gap_by_hand():
    # min(score, 1): 0.5, 1, 0, 1 -> mean 0.625 -> gap 0.375
    assert optimality_gap([[0.5, 1.2], [0.0, 3.0]]) == pytest.approx(0.375)
    assert optimality_gap([[2.0]], gamma=1.0) == 0.0


def test_probability_of_improvement_by_hand():
    # task 0: x (1, 3) vs y (2, 2): pairs 1>2 no, 1>2 no, 3>2, 3>2 -> 2/4 = 0.5
    # task 1: x (5, 5) vs y (5, 4): 5=5 half, 5>4, 5=5 half, 5>4 -> (0.5 + 1 + 0.5 + 1) / 4 = 0.75
    x = [[1, 5], [3, 5]]
    y = [[2, 5], [2, 4]]
    assert probability_of_improvement(x, y) == pytest.approx((0.5 + 0.75) / 2)
    assert probability_of_improvement(y, x) == pytest.approx(1 - (0.5 + 0.75) / 2)


def test_performance_profile_by_hand():
    scores = [[0.2, 1.5], [0.8, 0.4]]
    # tau 0.5: task 0 1/2 above, task 1 1/2 above -> 0.5; tau 0: 1; tau 1: task 1 only 1/2 -> 0.25
    assert performance_profile(scores, [0.0, 0.5, 1.0]).tolist() == [1.0, 0.5, 0.25]


def test_stratified_bootstrap_keeps_tasks_and_brackets_the_value():
    # every run of a task scores the same: any resample of runs within tasks gives the same IQM
    constant = np.tile([[1.0, 2.0, 3.0, 4.0]], (5, 1))
    assert tuple(stratified_bootstrap(interquartile_mean, constant, reps=50)) == (2.5, 2.5, 2.5)
    rng = np.random.default_rng(1)
    scores = rng.normal(1.0, 0.3, size=(10, 3))
    ci = stratified_bootstrap(interquartile_mean, scores, reps=500)
    assert ci.low < ci.value < ci.high and ci.high - ci.low < 0.6
    # a 2-sample statistic: X better than Y everywhere -> P(X > Y) = 1 in every replicate
    ci = stratified_bootstrap(probability_of_improvement, scores + 10, scores, reps=100)
    assert tuple(ci) == (1.0, 1.0, 1.0)
