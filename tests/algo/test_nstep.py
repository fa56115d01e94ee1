"""n-step targets against a plain loop written from the definition (Sutton and Barto 2018, eq. 7.1, with
Gymnasium's episode ends: termination cuts, truncation bootstraps from the final observation), one raw step
at a time, inactive steps included."""

import math

import numpy as np
import pytest
import torch

from sfx.algo.nstep import n_step_targets


def n_step_from_definition(r, term, trunc, nv, tv, gamma, n, active=None):
    """One window per (b, t), walked over the raw steps ``j = t, t+1, ..``; ``k`` counts the agent's steps
    already summed. Returns (targets, discounts, horizon) as nested lists."""
    B, T = len(r), len(r[0])
    active = [[True] * T for _ in range(B)] if active is None else active
    out_g, out_d, out_h = np.zeros((B, T)), np.zeros((B, T)), np.zeros((B, T), dtype=np.int64)
    for b in range(B):
        for t in range(T):
            if not active[b][t]:
                continue
            g, k, disc = 0.0, 0, None
            j = t
            while True:
                if active[b][j] and k == n:  # window full: the agent decides again at j
                    g += gamma ** k * nv[b][j - 1]
                    disc = gamma ** k
                    break
                g += gamma ** k * r[b][j]
                if active[b][j]:
                    k += 1
                if term[b][j]:
                    disc = 0.0
                    break
                if trunc[b][j]:
                    g += gamma ** k * tv[b][j]
                    disc = gamma ** k
                    break
                if j == T - 1:  # the sequence ends: bootstrap from the last next value
                    g += gamma ** k * nv[b][j]
                    disc = gamma ** k
                    break
                j += 1
            out_g[b, t], out_d[b, t], out_h[b, t] = g, disc, k
    return out_g, out_d, out_h


def _random(rng, B, T, p_term=0.1, p_trunc=0.1, p_inactive=0.0):
    r = rng.normal(size=(B, T))
    term = rng.random((B, T)) < p_term
    trunc = rng.random((B, T)) < p_trunc  # some steps both: termination wins
    nv = rng.normal(size=(B, T))
    tv = rng.normal(size=(B, T))
    active = rng.random((B, T)) >= p_inactive
    return r, term, trunc, nv, tv, active


def _t(x, dtype=torch.float64):
    return torch.tensor(np.asarray(x), dtype=dtype if np.asarray(x).dtype != bool else torch.bool)


def _check(out, ref):
    g, d, h = ref
    np.testing.assert_allclose(out.targets.numpy(), g, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out.discounts.numpy(), d, rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(out.horizon.numpy(), h)
    assert out.horizon.dtype == torch.int64


@pytest.mark.parametrize("B,T", [(1, 1), (1, 7), (3, 5), (4, 20)])
@pytest.mark.parametrize("n", [1, 2, 3, 5, 25])
@pytest.mark.parametrize("gamma", [0.0, 0.9, 0.997, 1.0])
def test_matches_definition_all_active(B, T, n, gamma):
    rng = np.random.default_rng(100 * B + T + 1000 * n)
    r, term, trunc, nv, tv, _ = _random(rng, B, T)
    out = n_step_targets(_t(r), _t(term), _t(trunc), _t(nv), _t(tv), gamma, n)
    _check(out, n_step_from_definition(r, term, trunc, nv, tv, gamma, n))


@pytest.mark.parametrize("B,T", [(1, 6), (3, 9), (5, 24)])
@pytest.mark.parametrize("n", [1, 2, 4])
@pytest.mark.parametrize("p_inactive", [0.3, 0.7])
def test_matches_definition_with_inactive_steps(B, T, n, p_inactive):
    rng = np.random.default_rng(7 * B + T + 100 * n + int(10 * p_inactive))
    r, term, trunc, nv, tv, active = _random(rng, B, T, p_inactive=p_inactive)
    active[0, 0] = False  # a row that starts with an inactive step
    out = n_step_targets(_t(r), _t(term), _t(trunc), _t(nv), _t(tv), 0.9, n, active=_t(active))
    _check(out, n_step_from_definition(r, term, trunc, nv, tv, 0.9, n, active))


def test_all_active_mask_equals_none():
    rng = np.random.default_rng(3)
    r, term, trunc, nv, tv, _ = _random(rng, 3, 11)
    a = n_step_targets(_t(r), _t(term), _t(trunc), _t(nv), _t(tv), 0.95, 3)
    b = n_step_targets(_t(r), _t(term), _t(trunc), _t(nv), _t(tv), 0.95, 3, active=torch.ones(3, 11, dtype=torch.bool))
    for x, y in zip(a, b):
        assert torch.equal(x, y)


def test_hand_computed_window_with_ends():
    # T = 6, n = 3, gamma = 0.5; step 2 truncated (final value 8), step 4 terminated
    r = [[1.0, 2.0, 4.0, 1.0, 2.0, 3.0]]
    term = [[False, False, False, False, True, False]]
    trunc = [[False, False, True, False, False, False]]
    nv = [[10.0, 20.0, float("nan"), 40.0, float("nan"), 60.0]]  # NaN where no window may read it
    tv = [[float("nan"), float("nan"), 8.0, float("nan"), float("nan"), float("nan")]]
    out = n_step_targets(_t(r), _t(term), _t(trunc), _t(nv), _t(tv), 0.5, 3)
    expected = [
        1 + 0.5 * 2 + 0.25 * 4 + 0.125 * 8,  # t=0: truncation at the window's last step
        2 + 0.5 * 4 + 0.25 * 8,              # t=1: truncation inside the window
        4 + 0.5 * 8,                         # t=2: truncated at once
        1 + 0.5 * 2,                         # t=3: terminated at step 4: no bootstrap
        2.0,                                 # t=4: terminated
        3 + 0.5 * 60,                        # t=5: the last step: bootstraps from the value after it
    ]
    np.testing.assert_allclose(out.targets.numpy()[0], expected, rtol=1e-15)
    np.testing.assert_allclose(out.discounts.numpy()[0], [0.125, 0.25, 0.5, 0.0, 0.0, 0.5])
    np.testing.assert_array_equal(out.horizon.numpy()[0], [3, 2, 1, 2, 1, 1])


def test_short_windows_at_the_end_bootstrap_from_the_last_value():
    T, n, gamma = 4, 10, 0.9
    r = torch.ones(1, T, dtype=torch.float64)
    z = torch.zeros(1, T, dtype=torch.bool)
    nv = torch.tensor([[float("nan")] * (T - 1) + [5.0]], dtype=torch.float64)
    out = n_step_targets(r, z, z, nv, torch.full((1, T), float("nan"), dtype=torch.float64), gamma, n)
    for t in range(T):
        h = T - t
        assert out.horizon[0, t] == h
        assert math.isclose(out.targets[0, t].item(), sum(gamma ** k for k in range(h)) + gamma ** h * 5.0)
        assert math.isclose(out.discounts[0, t].item(), gamma ** h)


def test_inactive_hand_computed():
    # active, inactive (reward 2), active, inactive (terminates, reward 4), active; n = 1, gamma = 0.5
    r = [[1.0, 2.0, 3.0, 4.0, 5.0]]
    active = [[True, False, True, False, True]]
    term = [[False, False, False, True, False]]
    z = [[False] * 5]
    nv = [[float("nan"), 20.0, float("nan"), float("nan"), 50.0]]
    tv = [[float("nan")] * 5]
    out = n_step_targets(_t(r), _t(term), _t(z), _t(nv), _t(tv), 0.5, 1, active=_t(active))
    # t=0: r0 + gamma r1 (the waiting step's reward) + gamma V(obs the agent decides on next = after step 1)
    # t=2: r2 + gamma r3, cut by the termination at the inactive step 3; t=4: r4 + gamma * 50
    np.testing.assert_allclose(out.targets.numpy()[0], [1 + 1 + 10, 0, 3 + 2, 0, 5 + 25])
    np.testing.assert_allclose(out.discounts.numpy()[0], [0.5, 0, 0, 0, 0.5])
    np.testing.assert_array_equal(out.horizon.numpy()[0], [1, 0, 1, 0, 1])


def test_no_gradient_dtype_and_float32():
    rng = np.random.default_rng(0)
    r, term, trunc, nv, tv, _ = _random(rng, 2, 8)
    nv32 = torch.tensor(nv, dtype=torch.float32, requires_grad=True)
    out = n_step_targets(_t(r, torch.float32), _t(term), _t(trunc), nv32, _t(tv, torch.float32), 0.99, 3)
    assert out.targets.dtype == torch.float32 and not out.targets.requires_grad
    g, _, _ = n_step_from_definition(r, term, trunc, nv, tv, 0.99, 3)
    np.testing.assert_allclose(out.targets.numpy(), g, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("gamma,n,match", [(-0.1, 1, "gamma=-0.1"), (1.5, 1, "gamma=1.5"), (0.9, 0, "n=0"),
                                           (0.9, 2.0, "n=2.0"), (float("nan"), 1, "gamma=nan")])
def test_bad_gamma_or_n(gamma, n, match):
    x = torch.zeros(2, 3)
    z = torch.zeros(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match=match):
        n_step_targets(x, z, z, x, x, gamma, n)


def test_shape_mismatch_is_reported():
    x = torch.zeros(2, 3)
    z = torch.zeros(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="next_values has shape"):
        n_step_targets(x, z, z, torch.zeros(2, 4), x, 0.9, 2)
    with pytest.raises(ValueError, match="active has shape"):
        n_step_targets(x, z, z, x, x, 0.9, 2, active=torch.ones(3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"rewards must be a \[B, T\]"):
        n_step_targets(torch.zeros(3), z, z, x, x, 0.9, 2)


@pytest.mark.parametrize("n,lam", [(1, 0.0), (40, 1.0)])
def test_agrees_with_gae_carry_semantics(n, lam):
    """The inactive-step semantics are those of ``sfx.algo.targets`` (GAE / V-trace): with the value of the
    observation at step t equal to next_values[t - 1], GAE's lambda = 0 returns are the 1-step targets and its
    lambda = 1 returns the n >= T step ones, at every active step (truncation folded into the reward as
    ``appo_targets`` does)."""
    from sfx.algo.gae import gae

    rng = np.random.default_rng(11)
    B, T, gamma = 4, 16, 0.9
    r, term, trunc, nv, tv, active = _random(rng, B, T, p_inactive=0.4)
    trunc &= ~term
    values = np.concatenate([rng.normal(size=(B, 1)), nv[:, :-1]], axis=1)  # V(x_t) = next_values[t - 1]
    g = np.where(active, gamma, 1.0)
    r_aug = r + g * trunc * tv
    discounts = g * (1.0 - (term | trunc))
    ref = gae(_t(r_aug).T, _t(values).T, _t(nv[:, -1]), _t(discounts).T, lam, active=_t(active).T).returns.T
    out = n_step_targets(_t(r), _t(term), _t(trunc), _t(nv), _t(tv), gamma, n, active=_t(active))
    np.testing.assert_allclose(out.targets.numpy()[active], ref.numpy()[active], rtol=1e-10, atol=1e-10)
