"""GAE against a plain loop written from Schulman et al. 2016 eq. 16."""

import numpy as np
import pytest
import torch

from sfx.algo.gae import gae


def gae_from_paper(rewards, values, bootstrap, dones, gamma, lam):
    """A_t = sum_{l>=0} (gamma lambda)^l delta_{t+l}, the sum stopping after a terminated step."""
    T, B = values.shape
    adv = np.zeros((T, B))
    for b in range(B):
        for t in range(T):
            total = 0.0
            for j in range(T - t):
                k = t + j
                v_next = 0.0 if dones[k, b] else (values[k + 1, b] if k + 1 < T else bootstrap[b])
                delta = rewards[k, b] + gamma * v_next - values[k, b]
                total += (gamma * lam) ** j * delta
                if dones[k, b]:
                    break
            adv[t, b] = total
    return adv


def _inputs(seed, T, B):
    rng = np.random.default_rng(seed)
    dones = rng.random((T, B)) < 0.2
    return rng.normal(size=(T, B)), rng.normal(size=(T, B)), rng.normal(size=B), dones


def _t(x):
    return torch.tensor(x, dtype=torch.float64)


@pytest.mark.parametrize("T,B", [(1, 1), (3, 2), (16, 3), (40, 2)])
@pytest.mark.parametrize("gamma,lam", [(0.99, 0.95), (0.9, 0.0), (0.97, 0.5), (1.0, 1.0)])
def test_matches_paper(T, B, gamma, lam):
    rewards, values, bootstrap, dones = _inputs(T * 31 + B, T, B)
    discounts = gamma * (1.0 - dones)
    out = gae(_t(rewards), _t(values), _t(bootstrap), _t(discounts), lam)
    adv, ret = out.advantages, out.returns
    ref = gae_from_paper(rewards, values, bootstrap, dones, gamma, lam)
    np.testing.assert_allclose(adv.numpy(), ref, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(ret.numpy(), ref + values, rtol=1e-6, atol=1e-9)


def test_lambda_one_is_monte_carlo_return_minus_values():
    T, B, gamma = 12, 3, 0.95
    rewards, values, bootstrap, dones = _inputs(3, T, B)
    assert dones.any()
    out = gae(_t(rewards), _t(values), _t(bootstrap), _t(gamma * (1.0 - dones)), 1.0)
    adv, ret = out.advantages, out.returns
    mc = np.zeros((T, B))
    g = bootstrap.copy()
    for t in reversed(range(T)):
        g = rewards[t] + gamma * (1.0 - dones[t]) * g
        mc[t] = g
    np.testing.assert_allclose(ret.numpy(), mc, rtol=1e-10)
    np.testing.assert_allclose(adv.numpy(), mc - values, rtol=1e-10, atol=1e-12)


def test_lambda_zero_is_one_step_td_error():
    rewards, values, bootstrap, dones = _inputs(5, 6, 2)
    discounts = 0.9 * (1.0 - dones)
    adv = gae(_t(rewards), _t(values), _t(bootstrap), _t(discounts), 0.0).advantages
    v_next = np.concatenate([values[1:], bootstrap[None]], 0)
    np.testing.assert_allclose(adv.numpy(), rewards + discounts * v_next - values, rtol=1e-12)


def test_no_gradient():
    values = torch.randn(5, 2, requires_grad=True)
    out = gae(torch.randn(5, 2), values, torch.randn(2), torch.full((5, 2), 0.99), 0.95)
    adv, ret = out.advantages, out.returns
    assert not adv.requires_grad and not ret.requires_grad
