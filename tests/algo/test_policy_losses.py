"""Vanilla PG, AWR and V-MPO against plain loops written from their papers (Williams 1992; Peng et al. 2019
eq. 14; Song et al. 2019 eqs. 2-5), values and gradients, and V-MPO's dual gradients' signs."""

import math

import numpy as np
import pytest
import torch

from sfx.algo.policy_losses import awr_loss, top_half_mask, vmpo_dual_init, vmpo_duals, vmpo_loss, vpg_loss


def _sample(seed, shape=(3, 5), invalid=0.3):
    g = torch.Generator().manual_seed(seed)
    log_prob = torch.randn(shape, generator=g, dtype=torch.float64).requires_grad_()
    adv = torch.randn(shape, generator=g, dtype=torch.float64) * 2.0
    valids = torch.rand(shape, generator=g) > invalid
    return log_prob, adv, valids


def _valid_items(log_prob, adv, valids):
    lp, a, v = log_prob.detach().reshape(-1).tolist(), adv.reshape(-1).tolist(), valids.reshape(-1).tolist()
    return [(i, lp[i], a[i]) for i in range(len(lp)) if v[i]]


@pytest.mark.parametrize("seed", range(4))
def test_vpg_matches_loop_and_gradient(seed):
    log_prob, adv, valids = _sample(seed)
    items = _valid_items(log_prob, adv, valids)
    ref = -sum(a * lp for _, lp, a in items) / len(items)
    loss = vpg_loss(log_prob, adv, valids)
    assert loss.item() == pytest.approx(ref, rel=1e-12)
    loss.backward()
    grad = torch.zeros(log_prob.numel(), dtype=torch.float64)
    for i, _, a in items:
        grad[i] = -a / len(items)
    torch.testing.assert_close(log_prob.grad.reshape(-1), grad)


@pytest.mark.parametrize("seed,beta,max_weight", [(0, 1.0, 20.0), (1, 0.05, 20.0), (2, 0.5, 3.0), (3, 2.0, 1.5)])
def test_awr_matches_loop_and_gradient(seed, beta, max_weight):
    log_prob, adv, valids = _sample(seed)
    items = _valid_items(log_prob, adv, valids)
    weights = {i: min(math.exp(a / beta), max_weight) for i, _, a in items}
    ref = -sum(weights[i] * lp for i, lp, _ in items) / len(items)
    out = awr_loss(log_prob, adv, beta, max_weight, valids)
    assert out.loss.item() == pytest.approx(ref, rel=1e-12)
    out.loss.backward()
    grad = torch.zeros(log_prob.numel(), dtype=torch.float64)
    for i in weights:
        grad[i] = -weights[i] / len(items)
    torch.testing.assert_close(log_prob.grad.reshape(-1), grad)
    assert not out.weights.requires_grad


def test_awr_huge_advantages_give_the_max_weight_not_inf():
    out = awr_loss(torch.zeros(3, requires_grad=True), torch.tensor([1e4, -1e4, 0.0]), 0.05, 20.0)
    torch.testing.assert_close(out.weights, torch.tensor([20.0, 0.0, 1.0]))
    assert torch.isfinite(out.loss)


def test_no_valid_sample_gives_zero():
    lp = torch.randn(4, requires_grad=True)
    none = torch.zeros(4, dtype=torch.bool)
    assert vpg_loss(lp, torch.randn(4), none).item() == 0.0
    assert awr_loss(lp, torch.randn(4), 1.0, 20.0, none).loss.item() == 0.0
    eta, alpha = vmpo_duals(vmpo_dual_init(1.0, 5.0).requires_grad_())
    out = vmpo_loss(lp, torch.randn(4), torch.rand(4), eta, alpha, 0.01, 0.01, none)
    assert out.total.item() == 0.0 and out.total.requires_grad


def vmpo_from_paper(log_prob, adv, kl, valids, eta, alpha, eps_eta, eps_alpha):
    """Song et al. 2019, eqs. 3-5, as plain sums over the samples: (L_pi, L_eta, L_alpha, top indices)."""
    items = _valid_items(log_prob, adv, valids)
    ranked = sorted(items, key=lambda x: -x[2])
    top = ranked[:math.ceil(len(items) / 2)]
    z = sum(math.exp(a / eta) for _, _, a in top)
    l_pi = -sum(math.exp(a / eta) / z * lp for _, lp, a in top)
    l_eta = eta * eps_eta + eta * math.log(z / len(top))
    kls = kl.detach().reshape(-1).tolist()
    mean_kl = sum(kls[i] for i, _, _ in items) / len(items)
    l_alpha = alpha * (eps_alpha - mean_kl) + alpha * mean_kl  # its value: alpha * eps_alpha
    return l_pi, l_eta, l_alpha, {i for i, _, _ in top}, [math.exp(a / eta) / z for _, _, a in top]


@pytest.mark.parametrize("seed,eta0,alpha0", [(0, 1.0, 5.0), (1, 0.3, 1.0), (2, 2.5, 0.1), (3, 0.05, 10.0)])
def test_vmpo_matches_paper_values_and_policy_gradient(seed, eta0, alpha0):
    log_prob, adv, valids = _sample(seed, shape=(4, 6))
    kl = torch.rand(4, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(seed)).requires_grad_()
    raw = vmpo_dual_init(eta0, alpha0).double().requires_grad_()
    eta, alpha = vmpo_duals(raw)
    assert eta.item() == pytest.approx(eta0, rel=1e-6) and alpha.item() == pytest.approx(alpha0, rel=1e-6)
    out = vmpo_loss(log_prob, adv, kl, eta, alpha, 0.01, 0.005, valids)
    l_pi, l_eta, l_alpha, top, psi = vmpo_from_paper(log_prob, adv, kl, valids, eta.item(), alpha.item(), 0.01, 0.005)
    assert out.policy.item() == pytest.approx(l_pi, rel=1e-10)
    assert out.temperature.item() == pytest.approx(l_eta, rel=1e-10)
    assert out.trust_region.item() == pytest.approx(l_alpha, rel=1e-10)
    assert out.total.item() == pytest.approx(l_pi + l_eta + l_alpha, rel=1e-10)
    assert out.weights_kl.item() == pytest.approx(sum(p * math.log(p * len(psi)) for p in psi), rel=1e-8, abs=1e-12)
    out.total.backward()
    # log pi's gradient: -psi on the top half, nothing elsewhere (the trust region reaches pi through kl only)
    g = log_prob.grad.reshape(-1).tolist()
    top_sorted = sorted(top, key=lambda i: -adv.reshape(-1)[i].item())
    for i in range(len(g)):
        expected = -psi[top_sorted.index(i)] if i in top else 0.0
        assert g[i] == pytest.approx(expected, rel=1e-9, abs=1e-12)
    # the KL's gradient is sg[alpha] / n_valid at every valid sample
    n = int(valids.sum())
    torch.testing.assert_close(kl.grad, torch.where(valids, alpha.detach() / n, torch.zeros_like(kl)))


@pytest.mark.parametrize("seed", range(3))
def test_vmpo_dual_gradients_from_paper(seed):
    """dL/deta = eps_eta + log mean_top exp(A / eta) - sum psi A / eta = eps_eta - KL(psi || uniform);
    dL/dalpha = eps_alpha - mean KL."""
    log_prob, adv, valids = _sample(seed, shape=(5, 4))
    kl = torch.rand(5, 4, dtype=torch.float64)
    eta = torch.tensor(0.7, dtype=torch.float64, requires_grad=True)
    alpha = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    out = vmpo_loss(log_prob, adv, kl, eta, alpha, 0.02, 0.003, valids)
    out.total.backward()
    _, _, _, top, psi = vmpo_from_paper(log_prob, adv, kl, valids, 0.7, 2.0, 0.02, 0.003)
    a_top = sorted((adv.reshape(-1)[i].item() for i in top), reverse=True)
    d_eta = 0.02 + math.log(sum(math.exp(a / 0.7) for a in a_top) / len(a_top)) - sum(
        p * a for p, a in zip(psi, a_top)) / 0.7
    assert eta.grad.item() == pytest.approx(d_eta, rel=1e-9)
    assert eta.grad.item() == pytest.approx(0.02 - out.weights_kl.item(), rel=1e-9)
    mean_kl = kl[valids].mean().item()
    assert alpha.grad.item() == pytest.approx(0.003 - mean_kl, rel=1e-9)


def test_vmpo_dual_descent_directions():
    """Peaked weights (KL(psi || U) > eps_eta): eta's gradient is negative, a descent step raises eta (flatter
    weights); flat weights: positive, eta falls. A policy further than eps_alpha from pi_old: alpha rises."""
    log_prob = torch.zeros(8, requires_grad=True)
    spread = torch.tensor([10.0, 5.0, 1.0, 0.5, 0.0, -1.0, -2.0, -3.0])
    eta = torch.tensor(0.1, requires_grad=True)
    alpha = torch.tensor(1.0, requires_grad=True)
    far, near = torch.full((8,), 0.5), torch.full((8,), 1e-4)
    vmpo_loss(log_prob, spread, far, eta, alpha, 0.01, 0.01).total.backward()
    assert eta.grad.item() < 0 and alpha.grad.item() < 0
    eta.grad, alpha.grad = None, None
    flat = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]) * 1e-3
    eta2 = torch.tensor(10.0, requires_grad=True)
    vmpo_loss(log_prob, flat, near, eta2, alpha, 0.01, 0.01).total.backward()
    assert eta2.grad.item() > 0 and alpha.grad.item() > 0


def test_top_half_mask():
    adv = torch.tensor([[3.0, -1.0, 2.0], [0.5, 9.0, -4.0]])
    valids = torch.tensor([[True, True, False], [True, False, True]])
    # valid: 3, -1, 0.5, -4 -> top 2: 3 and 0.5 (2.0 and 9.0 are invalid)
    assert top_half_mask(adv, valids).tolist() == [[True, False, False], [True, False, False]]
    assert int(top_half_mask(torch.arange(5.0)).sum()) == 3  # ceil(5 / 2)
    assert top_half_mask(adv, torch.zeros_like(valids)).sum() == 0


def test_bad_hyperparameters():
    lp = torch.zeros(2, requires_grad=True)
    with pytest.raises(ValueError, match="beta"):
        awr_loss(lp, torch.zeros(2), 0.0, 20.0)
    eta, alpha = vmpo_duals(vmpo_dual_init(1.0, 1.0))
    with pytest.raises(ValueError, match="eps_eta"):
        vmpo_loss(lp, torch.zeros(2), torch.zeros(2), eta, alpha, 0.0, 0.1)
    assert np.isfinite(vmpo_dual_init(1e-6, 1e4).numpy()).all()
