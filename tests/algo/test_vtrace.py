"""V-trace against a plain loop written from IMPALA eq. 1 (the explicit sum, not the recursion)."""

import math

import numpy as np
import pytest
import torch

from sfx.algo.vtrace import vtrace


def _clip(x: float, threshold: float | None) -> float:
    return x if threshold is None else min(threshold, x)


def vtrace_from_paper(log_rhos, discounts, rewards, values, bootstrap, rho_bar, pg_rho_bar, lam, c_bar=1.0):
    """Espeholt et al. 2018 eq. 1, summed term by term for every start s and every column b:

        v_s = V(x_s) + sum_{t=s}^{T-1} (prod_{i=s}^{t-1} gamma_i c_i) delta_t
        delta_t = rho_t (r_t + gamma_t V(x_{t+1}) - V(x_t))
        pg_t = rho^pg_t (r_t + gamma_t v_{t+1} - V(x_t))
    """
    T, B = values.shape
    vs = np.zeros((T, B))
    pg = np.zeros((T, B))
    for b in range(B):
        v_next = [values[t + 1, b] if t + 1 < T else bootstrap[b] for t in range(T)]
        rho = [math.exp(log_rhos[t, b]) for t in range(T)]
        for s in range(T):
            total = 0.0
            for t in range(s, T):
                weight = 1.0
                for i in range(s, t):
                    weight *= discounts[i, b] * lam * _clip(rho[i], c_bar)
                delta = _clip(rho[t], rho_bar) * (rewards[t, b] + discounts[t, b] * v_next[t] - values[t, b])
                total += weight * delta
            vs[s, b] = values[s, b] + total
        for t in range(T):
            vs_next = vs[t + 1, b] if t + 1 < T else bootstrap[b]
            pg[t, b] = _clip(rho[t], pg_rho_bar) * (rewards[t, b] + discounts[t, b] * vs_next - values[t, b])
    return vs, pg


def _random_inputs(rng, T, B):
    log_rhos = rng.normal(0.0, 0.8, size=(T, B))  # ratios both far above and below 1
    discounts = 0.97 * (rng.random((T, B)) > 0.2)  # ~20% episode ends
    rewards = rng.normal(size=(T, B))
    values = rng.normal(size=(T, B))
    bootstrap = rng.normal(size=B)
    return log_rhos, discounts, rewards, values, bootstrap


def _t(x):
    return torch.tensor(x, dtype=torch.float64)


@pytest.mark.parametrize("T,B", [(1, 1), (2, 3), (5, 4), (17, 2), (32, 5)])
@pytest.mark.parametrize(
    "rho_bar,pg_rho_bar,lam,c_bar",
    [(1.0, 1.0, 1.0, 1.0), (0.5, 1.0, 1.0, 1.0), (None, None, 1.0, None), (1.0, 0.5, 0.9, 1.0),
     (2.0, None, 0.7, 0.5), (None, 1.0, 0.95, 1.0)],
)
def test_matches_paper_eq1(T, B, rho_bar, pg_rho_bar, lam, c_bar):
    rng = np.random.default_rng(1000 * T + B)
    log_rhos, discounts, rewards, values, bootstrap = _random_inputs(rng, T, B)
    assert (discounts == 0).any() or T * B < 5  # episode ends are exercised

    out = vtrace(_t(log_rhos), _t(discounts), _t(rewards), _t(values), _t(bootstrap),
                 clip_rho_threshold=rho_bar, clip_pg_rho_threshold=pg_rho_bar, lambda_=lam,
                 clip_c_threshold=c_bar)
    vs, pg = out.returns, out.advantages
    vs_ref, pg_ref = vtrace_from_paper(log_rhos, discounts, rewards, values, bootstrap, rho_bar, pg_rho_bar, lam,
                                       c_bar)
    np.testing.assert_allclose(vs.numpy(), vs_ref, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(pg.numpy(), pg_ref, rtol=1e-6, atol=1e-9)


def test_hand_computed_tiny_case():
    # T=2, B=1, gamma=0.5; rho = [2, 0.5] -> clipped rho = c = [1, 0.5]
    # delta_1 = 0.5 * (1 + 0.5*3 - 2) = 0.25            vs_1 = 2 + 0.25 = 2.25
    # delta_0 = 1.0 * (1 + 0.5*2 - 1) = 1.0             vs_0 = 1 + 1.0 + 0.5*1*0.25 = 2.125
    # pg_0 = 1.0 * (1 + 0.5*2.25 - 1) = 1.125           pg_1 = 0.5 * (1 + 0.5*3 - 2) = 0.25
    log_rhos = _t([[math.log(2.0)], [math.log(0.5)]])
    out = vtrace(log_rhos, _t([[0.5], [0.5]]), _t([[1.0], [1.0]]), _t([[1.0], [2.0]]), _t([3.0]))
    vs, pg = out.returns, out.advantages
    np.testing.assert_allclose(vs.numpy(), [[2.125], [2.25]], rtol=1e-12)
    np.testing.assert_allclose(pg.numpy(), [[1.125], [0.25]], rtol=1e-12)


def test_on_policy_equals_n_step_return():
    rng = np.random.default_rng(7)
    T, B = 9, 4
    _, discounts, rewards, values, bootstrap = _random_inputs(rng, T, B)
    vs = vtrace(_t(np.zeros((T, B))), _t(discounts), _t(rewards), _t(values), _t(bootstrap)).returns
    # n-step return: G_t = r_t + gamma_t G_{t+1}, G_T = bootstrap; independent of the values
    expected = np.zeros((T, B))
    g = bootstrap.copy()
    for t in reversed(range(T)):
        g = rewards[t] + discounts[t] * g
        expected[t] = g
    np.testing.assert_allclose(vs.numpy(), expected, rtol=1e-10)


def test_no_gradient_and_dtype():
    T, B = 4, 3
    values = torch.randn(T, B, requires_grad=True)
    log_rhos = torch.randn(T, B, requires_grad=True)
    out = vtrace(log_rhos, torch.full((T, B), 0.9), torch.randn(T, B), values, torch.randn(B))
    vs, pg = out.returns, out.advantages
    assert not vs.requires_grad and not pg.requires_grad
    assert vs.shape == (T, B) and pg.shape == (T, B)
    assert vs.dtype == torch.float32


def test_shape_mismatch_is_reported():
    with pytest.raises(ValueError, match="bootstrap_value"):
        vtrace(torch.zeros(3, 2), torch.zeros(3, 2), torch.zeros(3, 2), torch.zeros(3, 2), torch.zeros(3))
    with pytest.raises(ValueError, match="rewards"):
        vtrace(torch.zeros(3, 2), torch.zeros(3, 2), torch.zeros(2, 2), torch.zeros(3, 2), torch.zeros(2))
