"""N-step and Monte-Carlo returns against plain loops written from their definitions (Sutton & Barto 2018
eq. 7.1; Andrychowicz et al. 2021 section 3): the explicit sum of each window, term by term."""

import numpy as np
import pytest
import torch

from sfx.algo.gae import gae
from sfx.algo.returns import monte_carlo_returns, nstep_returns
from tests.algo.test_inactive_steps import carried, without_inactive_steps


def nstep_from_definition(rewards, values, bootstrap, discounts, n):
    """One column: R_t = sum_{j<n} (prod_{i<j} d_{t+i}) r_{t+j} + (prod_{i<n} d_{t+i}) V(x_{t+n}); the window
    stops at a step with discount 0 (no bootstrap after it) or at the rollout's end (bootstrap from V(x_T))."""
    T = len(values)
    out = []
    for t in range(T):
        total, weight = 0.0, 1.0
        j = 0
        while j < n and t + j < T:
            total += weight * rewards[t + j]
            weight *= discounts[t + j]
            j += 1
        nxt = values[t + j] if t + j < T else bootstrap
        out.append(total + weight * nxt)
    return out


def mc_from_definition(rewards, bootstrap, discounts):
    """One column: G_t = sum_j (prod_{i<j} d_{t+i}) r_{t+j} + (prod d) V(x_T), the sum cut where d = 0."""
    T = len(rewards)
    out = []
    for t in range(T):
        total, weight = 0.0, 1.0
        for k in range(t, T):
            total += weight * rewards[k]
            weight *= discounts[k]
        out.append(total + weight * bootstrap)
    return out


def _inputs(seed, T, B, done_rate=0.2, gamma=0.97):
    rng = np.random.default_rng(seed)
    dones = rng.random((T, B)) < done_rate
    return rng.normal(size=(T, B)), rng.normal(size=(T, B)), rng.normal(size=B), gamma * (1.0 - dones)


def _t(x):
    return torch.tensor(np.asarray(x), dtype=torch.float64)


@pytest.mark.parametrize("T,B", [(1, 1), (4, 3), (16, 2), (33, 3)])
@pytest.mark.parametrize("n", [1, 2, 5, 16, 100])
def test_nstep_matches_definition(T, B, n):
    rewards, values, bootstrap, discounts = _inputs(T * 7 + B + n, T, B)
    out = nstep_returns(_t(rewards), _t(values), _t(bootstrap), _t(discounts), n)
    ref = np.stack([nstep_from_definition(rewards[:, b], values[:, b], bootstrap[b], discounts[:, b], n)
                    for b in range(B)], axis=1)
    np.testing.assert_allclose(out.returns.numpy(), ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(out.advantages.numpy(), ref - values, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("T,B", [(1, 1), (5, 2), (40, 3)])
def test_monte_carlo_matches_definition_and_long_nstep(T, B):
    rewards, values, bootstrap, discounts = _inputs(T + B, T, B)
    out = monte_carlo_returns(_t(rewards), _t(values), _t(bootstrap), _t(discounts))
    ref = np.stack([mc_from_definition(rewards[:, b], bootstrap[b], discounts[:, b]) for b in range(B)], axis=1)
    np.testing.assert_allclose(out.returns.numpy(), ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(out.advantages.numpy(), ref - values, rtol=1e-10, atol=1e-12)
    # the two limits: N >= T is Monte Carlo, GAE with lambda = 1 is too
    np.testing.assert_allclose(nstep_returns(_t(rewards), _t(values), _t(bootstrap), _t(discounts), T).returns,
                               ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gae(_t(rewards), _t(values), _t(bootstrap), _t(discounts), 1.0).returns, ref,
                               rtol=1e-10, atol=1e-12)


def test_one_step_is_td_target():
    rewards, values, bootstrap, discounts = _inputs(3, 6, 2)
    out = nstep_returns(_t(rewards), _t(values), _t(bootstrap), _t(discounts), 1)
    v_next = np.concatenate([values[1:], bootstrap[None]], 0)
    np.testing.assert_allclose(out.returns.numpy(), rewards + discounts * v_next, rtol=1e-12)


def test_termination_cuts_and_values_after_it_do_not_count():
    """A step with discount 0 (terminated) ends every window through it: changing the values or rewards after it
    changes nothing before it."""
    rewards, values, bootstrap, discounts = _inputs(5, 8, 1, done_rate=0.0)
    discounts[3, 0] = 0.0
    a = nstep_returns(_t(rewards), _t(values), _t(bootstrap), _t(discounts), 5).returns.numpy()
    values2, rewards2 = values.copy(), rewards.copy()
    values2[4:] += 100.0
    rewards2[4:] -= 50.0
    for fn in (lambda r, v: nstep_returns(_t(r), _t(v), _t(bootstrap + 7.0), _t(discounts), 5),
               lambda r, v: monte_carlo_returns(_t(r), _t(v), _t(bootstrap + 7.0), _t(discounts))):
        np.testing.assert_allclose(fn(rewards2, values2).returns.numpy()[:4], fn(rewards, values).returns.numpy()[:4])
    assert a[3, 0] == pytest.approx(rewards[3, 0])


INACTIVE = {
    "last steps inactive": [[1, 1], [1, 0], [1, 1], [0, 1], [0, 0], [0, 0]],
    "middle inactive": [[1, 1], [0, 0], [0, 1], [1, 0], [0, 0], [1, 1]],
    "turn-based": [[0, 1], [1, 0], [0, 1], [1, 0], [0, 1], [1, 0], [0, 1]],
    "none active": [[0], [0], [0]],
}


@pytest.mark.parametrize("pattern", sorted(INACTIVE))
@pytest.mark.parametrize("method,n", [("nstep", 1), ("nstep", 2), ("nstep", 10), ("mc", None)])
def test_inactive_steps_are_transparent(pattern, method, n):
    """An active step's return is the one of the trajectory with its inactive steps cut out (their rewards added to
    the active step before them); an inactive step carries the next one's; its advantage is 0 (as GAE's)."""
    active = np.array(INACTIVE[pattern], dtype=bool)
    T, B = active.shape
    rng = np.random.default_rng(T * 3 + B)
    rewards, values, bootstrap = rng.normal(size=(T, B)), rng.normal(size=(T, B)), rng.normal(size=B)
    dones = rng.random((T, B)) < 0.15
    discounts = np.where(active, 0.97, 1.0) * (1.0 - dones)
    ref_ret, ref_adv = np.zeros((T, B)), np.zeros((T, B))
    for b in range(B):
        act = [bool(x) for x in active[:, b]]
        steps, macro_r, macro_d = without_inactive_steps(list(rewards[:, b]), list(discounts[:, b]), act)
        v = [values[t, b] for t in steps]
        own = (nstep_from_definition(macro_r, v, bootstrap[b], macro_d, n) if method == "nstep"
               else mc_from_definition(macro_r, bootstrap[b], macro_d))
        own_ret = dict(zip(steps, own))
        ref_ret[:, b] = carried(own_ret, bootstrap[b], rewards[:, b], discounts[:, b], act)
        ref_adv[:, b] = [own_ret[t] - values[t, b] if act[t] else 0.0 for t in range(T)]
    args = (_t(rewards), _t(values), _t(bootstrap), _t(discounts))
    out = (nstep_returns(*args, n, active=torch.as_tensor(active)) if method == "nstep"
           else monte_carlo_returns(*args, active=torch.as_tensor(active)))
    np.testing.assert_allclose(out.returns.numpy(), ref_ret, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(out.advantages.numpy(), ref_adv, rtol=1e-10, atol=1e-12)


def test_all_active_mask_is_the_unmasked_result():
    rewards, values, bootstrap, discounts = _inputs(11, 9, 3)
    args = (_t(rewards), _t(values), _t(bootstrap), _t(discounts))
    every = torch.ones(9, 3, dtype=torch.bool)
    assert torch.equal(nstep_returns(*args, 3).returns, nstep_returns(*args, 3, active=every).returns)
    assert torch.equal(monte_carlo_returns(*args).returns, monte_carlo_returns(*args, active=every).returns)


def test_bad_n_and_shapes_and_no_gradient():
    values = torch.randn(5, 2, requires_grad=True)
    args = (torch.randn(5, 2), values, torch.randn(2), torch.full((5, 2), 0.99))
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="n="):
            nstep_returns(*args, bad)
    with pytest.raises(ValueError, match="bootstrap_value"):
        nstep_returns(args[0], values, torch.randn(3), args[3], 2)
    out = nstep_returns(*args, 3)
    assert not out.returns.requires_grad and not out.advantages.requires_grad
    assert not monte_carlo_returns(*args).returns.requires_grad
