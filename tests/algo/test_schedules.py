"""--lr_schedule against loops written from their sources: linear_decay against SEED RL's schedule (a polynomial
decay of power 1 over the run's learner iterations, from the flag's learning rate to lr * lr_decay_multiplier);
the KL-adaptive rule against its statement (rl_games / rsl_rl PPO, Rudin et al. 2021; Sample Factory 2's names)."""

import math


import pytest

from sfx.algo.schedules import LR_SCHEDULES, kl_adaptive_lr, linear_lr_factor, lr_factor
from sfx.registries import build_parser


def seed_rl_learning_rates(lr, decay_multiplier, iterations):
    """The rate each of ``iterations`` learner steps trains at: iteration i of N, (lr - end) * (1 - i / N) + end
    with end = lr * decay_multiplier, after which it stays at end."""
    end = lr * decay_multiplier
    rates = []
    for i in range(iterations + 3):  # and a few past the end
        progress = min(i, iterations) / iterations
        rates.append((lr - end) * (1 - progress) + end)
    return rates


@pytest.mark.parametrize("multiplier", [0.0, 0.1, 1.0])
def test_linear_decay_at_each_iteration_s_env_steps_is_seed_rl_s_rate(multiplier):
    lr, iterations, steps_per_iteration = 3e-4, 40, 2048
    expected = seed_rl_learning_rates(lr, multiplier, iterations)
    total = iterations * steps_per_iteration
    got = [lr * lr_factor("linear_decay", i * steps_per_iteration, total, multiplier) for i in range(iterations + 3)]
    assert got == pytest.approx(expected, rel=1e-12, abs=1e-18)
    assert got[0] == lr and got[-1] == pytest.approx(lr * multiplier, abs=1e-18)


def test_steps_in_between_and_past_the_end():
    assert linear_lr_factor(500, 1000) == 0.5
    assert linear_lr_factor(250, 1000, 0.2) == pytest.approx(0.8)  # 1 - 0.8 * 0.25
    assert linear_lr_factor(10**12, 1000) == 0.0  # a resumed run past its end, an overshooting last batch
    assert lr_factor("constant", 10**9, 1000) == 1.0


def test_bad_numbers_and_names_are_named():
    with pytest.raises(ValueError, match="total_env_steps=0 must be > 0"):
        linear_lr_factor(1, 0)
    with pytest.raises(ValueError, match="env_steps=-1 must be >= 0"):
        linear_lr_factor(-1, 10)
    with pytest.raises(ValueError, match=r"final_fraction=1.5 must be in \[0, 1\]"):
        linear_lr_factor(1, 10, 1.5)
    with pytest.raises(ValueError, match="'cosine' is not a learning-rate schedule of env steps; those are: "
                                         "constant, linear_decay"):
        lr_factor("cosine", 1, 10)
    with pytest.raises(ValueError, match="'kl_adaptive_epoch' is not a learning-rate schedule of env steps"):
        lr_factor("kl_adaptive_epoch", 1, 10)
    with pytest.raises(ValueError, match="threshold=0 must be > 0"):
        kl_adaptive_lr(1e-3, 0.1, 0, 1e-6, 1e-2)
    with pytest.raises(ValueError, match="lr_min=0.1, lr_max=0.01: need 0 < lr_min <= lr_max"):
        kl_adaptive_lr(1e-3, 0.1, 0.008, 0.1, 0.01)


def kl_adaptive_loop(lr, kls, threshold=0.008, lr_min=1e-6, lr_max=1e-2):
    """The rule as stated: after each KL, above 2 x threshold the rate is divided by 1.5 (not below lr_min),
    below threshold / 2 multiplied by 1.5 (not above lr_max), else kept."""
    rates = []
    for kl in kls:
        if kl > 2 * threshold:
            lr = lr / 1.5
            if lr < lr_min:
                lr = lr_min
        elif kl < threshold / 2:
            lr = lr * 1.5
            if lr > lr_max:
                lr = lr_max
        rates.append(lr)
    return rates


def test_kl_adaptive_rates_follow_the_rule_through_both_bounds():
    kls = [0.0, 0.003, 0.0041, 0.0159, 0.0161, 0.05, 0.5] + [1.0] * 30 + [0.0] * 40 + [math.nan, 0.008]
    lr, got = 3e-4, []
    for kl in kls:
        lr = kl_adaptive_lr(lr, kl, 0.008, 1e-6, 1e-2)
        got.append(lr)
    expected = kl_adaptive_loop(3e-4, kls)
    assert got == pytest.approx(expected, rel=1e-12)
    assert min(got) == 1e-6 and max(got) == 1e-2  # both bounds were reached
    assert got[-2] == got[-3] and got[-1] == got[-2]  # a NaN KL and one inside the band keep the rate


def test_the_flag_offers_exactly_the_schedules_there_are():
    action = next(a for a in build_parser("gym_CartPole-v1")._actions if a.dest == "lr_schedule")
    assert tuple(action.choices) == LR_SCHEDULES and action.default == "constant"
