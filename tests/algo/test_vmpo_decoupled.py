"""V-MPO's decoupled KL bounds for Gaussian policies (Song et al. 2019, appendix "Decoupled KL constraints for
continuous control") against plain loops written from the paper's equations with a hand-written KL of
one-dimensional Gaussians; and the single bound's path, bit for bit what it was before the decoupled form existed."""

import math

import pytest
import torch

from sfx.algo.distributions import DiagGaussian
from sfx.algo.policy_losses import (gaussian_kl_parts, top_half_mask, vmpo_decoupled_duals, vmpo_decoupled_loss,
                                    vmpo_dual_init, vmpo_duals, vmpo_loss)


def kl_1d(m0, s0, m1, s1):
    """KL(N(m0, s0^2) || N(m1, s1^2)) of one dimension, from the Gaussians' densities."""
    return math.log(s1 / s0) + (s0 ** 2 + (m0 - m1) ** 2) / (2 * s1 ** 2) - 0.5


def _gaussians(seed, shape=(4, 5), dim=3, move_mean=True, move_std=True):
    g = torch.Generator().manual_seed(seed)
    old_mean = torch.randn(*shape, dim, generator=g, dtype=torch.float64)
    old_log_std = torch.randn(*shape, dim, generator=g, dtype=torch.float64) * 0.5
    mean = old_mean + (torch.randn(*shape, dim, generator=g, dtype=torch.float64) * 0.3 if move_mean else 0.0)
    log_std = old_log_std + (torch.randn(*shape, dim, generator=g, dtype=torch.float64) * 0.2 if move_std else 0.0)
    return old_mean, old_log_std, mean.clone().requires_grad_(), log_std.clone().requires_grad_()


@pytest.mark.parametrize("seed", range(3))
def test_kl_parts_match_the_papers_definitions(seed):
    """C_mu = KL(N(mu_o, S_o) || N(mu, S_o)), C_Sigma = KL(N(mu_o, S_o) || N(mu_o, S)), summed over dimensions."""
    old_mean, old_log_std, mean, log_std = _gaussians(seed)
    parts = gaussian_kl_parts(old_mean, old_log_std, mean, log_std)
    m0, s0 = old_mean.reshape(-1, 3).tolist(), old_log_std.exp().reshape(-1, 3).tolist()
    m1, s1 = mean.detach().reshape(-1, 3).tolist(), log_std.detach().exp().reshape(-1, 3).tolist()
    c_mu = [sum(kl_1d(m0[n][i], s0[n][i], m1[n][i], s0[n][i]) for i in range(3)) for n in range(len(m0))]
    c_sigma = [sum(kl_1d(m0[n][i], s0[n][i], m0[n][i], s1[n][i]) for i in range(3)) for n in range(len(m0))]
    torch.testing.assert_close(parts.mean.reshape(-1), torch.tensor(c_mu, dtype=torch.float64), rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(parts.std.reshape(-1), torch.tensor(c_sigma, dtype=torch.float64), rtol=1e-12,
                               atol=1e-14)
    assert parts.mean.shape == parts.std.shape == (4, 5)
    # gradients: dC_mu/dmu = (mu - mu_o) / sigma_o^2, dC_Sigma/dlog sigma = 1 - sigma_o^2 / sigma^2, nothing across
    (parts.mean.sum() + parts.std.sum()).backward()
    torch.testing.assert_close(mean.grad, (mean.detach() - old_mean) / (2 * old_log_std).exp())
    torch.testing.assert_close(log_std.grad, 1.0 - (2 * (old_log_std - log_std.detach())).exp())


def test_kl_parts_are_the_whole_kl_when_only_one_moves():
    for move_mean in (True, False):
        old_mean, old_log_std, mean, log_std = _gaussians(7, move_mean=move_mean, move_std=not move_mean)
        parts = gaussian_kl_parts(old_mean, old_log_std, mean, log_std)
        old = DiagGaussian(torch.cat([old_mean, old_log_std], -1))
        new = DiagGaussian(torch.cat([mean, log_std], -1).detach())
        whole = old.kl_divergence(new)
        moved, still = (parts.mean, parts.std) if move_mean else (parts.std, parts.mean)
        torch.testing.assert_close(moved.detach(), whole, rtol=1e-12, atol=1e-14)
        assert float(still.detach().abs().max()) == 0.0
    # both moved: C_Sigma plus the mean's term under pi's covariance is the whole KL, C_mu uses pi_old's instead
    old_mean, old_log_std, mean, log_std = _gaussians(8)
    parts = gaussian_kl_parts(old_mean, old_log_std, mean, log_std)
    whole = DiagGaussian(torch.cat([old_mean, old_log_std], -1)).kl_divergence(
        DiagGaussian(torch.cat([mean, log_std], -1).detach()))
    mean_term_new_cov = 0.5 * (((mean - old_mean) / log_std.exp()) ** 2).sum(-1)
    torch.testing.assert_close(parts.std.detach() + mean_term_new_cov.detach(), whole)


def test_kl_parts_take_pi_old_as_a_constant():
    old_mean, old_log_std, mean, log_std = _gaussians(3)
    old_mean.requires_grad_()
    old_log_std.requires_grad_()
    parts = gaussian_kl_parts(old_mean, old_log_std, mean, log_std)
    (parts.mean.sum() + parts.std.sum()).backward()
    assert old_mean.grad is None and old_log_std.grad is None


def _sample(seed, shape=(4, 6), invalid=0.3):
    g = torch.Generator().manual_seed(seed)
    log_prob = torch.randn(shape, generator=g, dtype=torch.float64).requires_grad_()
    adv = torch.randn(shape, generator=g, dtype=torch.float64) * 2.0
    valids = torch.rand(shape, generator=g) > invalid
    kl_mu = (torch.rand(shape, generator=g, dtype=torch.float64) * 0.02).requires_grad_()
    kl_sigma = (torch.rand(shape, generator=g, dtype=torch.float64) * 1e-4).requires_grad_()
    return log_prob, adv, valids, kl_mu, kl_sigma


def decoupled_from_paper(log_prob, adv, valids, kl_mu, kl_sigma, eta, alpha_mu, alpha_sigma, eps_eta, eps_mu,
                         eps_sigma):
    """Eqs. 3-4 and the appendix's decoupled L_alpha as plain sums: (L_pi, L_eta, L_alpha_mu, L_alpha_sigma, psi by
    sample index, the valid indices)."""
    lp, a, v = log_prob.detach().reshape(-1).tolist(), adv.reshape(-1).tolist(), valids.reshape(-1).tolist()
    valid = [i for i in range(len(lp)) if v[i]]
    top = sorted(valid, key=lambda i: -a[i])[:math.ceil(len(valid) / 2)]
    z = sum(math.exp(a[i] / eta) for i in top)
    psi = {i: math.exp(a[i] / eta) / z for i in top}
    l_pi = -sum(psi[i] * lp[i] for i in top)
    l_eta = eta * eps_eta + eta * math.log(z / len(top))
    cm, cs = kl_mu.detach().reshape(-1).tolist(), kl_sigma.detach().reshape(-1).tolist()
    mean_mu, mean_sigma = sum(cm[i] for i in valid) / len(valid), sum(cs[i] for i in valid) / len(valid)
    l_mu = alpha_mu * (eps_mu - mean_mu) + alpha_mu * mean_mu
    l_sigma = alpha_sigma * (eps_sigma - mean_sigma) + alpha_sigma * mean_sigma
    return l_pi, l_eta, l_mu, l_sigma, psi, valid, mean_mu, mean_sigma


@pytest.mark.parametrize("seed,eta0,alpha_mu0,alpha_sigma0", [(0, 1.0, 5.0, 5.0), (1, 0.3, 1.0, 20.0),
                                                               (2, 2.5, 0.1, 0.5)])
def test_decoupled_loss_matches_the_paper_values_and_gradients(seed, eta0, alpha_mu0, alpha_sigma0):
    log_prob, adv, valids, kl_mu, kl_sigma = _sample(seed)
    raw = vmpo_dual_init(eta0, alpha_mu0, alpha_sigma0).double().requires_grad_()
    eta, alpha_mu, alpha_sigma = vmpo_decoupled_duals(raw)
    for value, start in ((eta, eta0), (alpha_mu, alpha_mu0), (alpha_sigma, alpha_sigma0)):
        assert value.item() == pytest.approx(start, rel=1e-6)
    eps = (0.01, 0.005, 5e-5)
    out = vmpo_decoupled_loss(log_prob, adv, kl_mu, kl_sigma, eta, alpha_mu, alpha_sigma, *eps, valids)
    l_pi, l_eta, l_mu, l_sigma, psi, valid, mean_mu, mean_sigma = decoupled_from_paper(
        log_prob, adv, valids, kl_mu, kl_sigma, eta.item(), alpha_mu.item(), alpha_sigma.item(), *eps)
    assert out.policy.item() == pytest.approx(l_pi, rel=1e-10)
    assert out.temperature.item() == pytest.approx(l_eta, rel=1e-10)
    assert out.trust_region_mu.item() == pytest.approx(l_mu, rel=1e-10)
    assert out.trust_region_sigma.item() == pytest.approx(l_sigma, rel=1e-10)
    assert out.trust_region.item() == pytest.approx(l_mu + l_sigma, rel=1e-10)
    assert out.total.item() == pytest.approx(l_pi + l_eta + l_mu + l_sigma, rel=1e-10)
    assert out.kl_mu.item() == pytest.approx(mean_mu, rel=1e-12)
    assert out.kl_sigma.item() == pytest.approx(mean_sigma, rel=1e-12)
    assert out.weights_kl.item() == pytest.approx(sum(p * math.log(p * len(psi)) for p in psi.values()), rel=1e-8,
                                                  abs=1e-12)
    eta.retain_grad()
    alpha_mu.retain_grad()
    alpha_sigma.retain_grad()
    out.total.backward()
    n = len(valid)
    for i, g in enumerate(log_prob.grad.reshape(-1).tolist()):
        assert g == pytest.approx(-psi.get(i, 0.0), rel=1e-9, abs=1e-12)
    # each part of the KL feels its own sg[alpha] / n at every valid sample
    torch.testing.assert_close(kl_mu.grad, torch.where(valids, alpha_mu.detach() / n, torch.zeros_like(kl_mu)))
    torch.testing.assert_close(kl_sigma.grad, torch.where(valids, alpha_sigma.detach() / n, torch.zeros_like(kl_mu)))
    # the duals: dL/dalpha_x = eps_alpha_x - mean C_x; dL/deta = eps_eta - KL(psi || U)
    assert alpha_mu.grad.item() == pytest.approx(eps[1] - mean_mu, rel=1e-9)
    assert alpha_sigma.grad.item() == pytest.approx(eps[2] - mean_sigma, rel=1e-9)
    assert eta.grad.item() == pytest.approx(eps[0] - out.weights_kl.item(), rel=1e-9)


def test_each_multiplier_answers_its_own_bound():
    """The mean moved within its bound and the covariance past its: a descent step lowers alpha_mu and raises
    alpha_Sigma (and the reverse)."""
    log_prob, adv = torch.zeros(8, requires_grad=True), torch.linspace(-1.0, 1.0, 8)
    small, large = torch.full((8,), 1e-4), torch.full((8,), 0.5)
    for kl_mu, kl_sigma, mu_sign, sigma_sign in ((small, large, 1, -1), (large, small, -1, 1)):
        alpha_mu = torch.tensor(1.0, requires_grad=True)
        alpha_sigma = torch.tensor(1.0, requires_grad=True)
        out = vmpo_decoupled_loss(log_prob, adv, kl_mu, kl_sigma, torch.tensor(1.0), alpha_mu, alpha_sigma,
                                  0.01, 0.01, 0.01)
        out.total.backward()
        assert math.copysign(1, alpha_mu.grad.item()) == mu_sign
        assert math.copysign(1, alpha_sigma.grad.item()) == sigma_sign


def test_decoupled_with_no_valid_sample_gives_zero_with_gradient():
    lp = torch.randn(4, requires_grad=True)
    eta, alpha_mu, alpha_sigma = vmpo_decoupled_duals(vmpo_dual_init(1.0, 5.0, 5.0).requires_grad_())
    out = vmpo_decoupled_loss(lp, torch.randn(4), torch.rand(4), torch.rand(4), eta, alpha_mu, alpha_sigma,
                              0.01, 0.005, 5e-5, torch.zeros(4, dtype=torch.bool))
    assert out.total.item() == 0.0 and out.total.requires_grad


def test_duals_shapes_and_bad_bounds():
    assert vmpo_dual_init(1.0, 5.0).shape == (2,) and vmpo_dual_init(1.0, 5.0, 0.5).shape == (3,)
    with pytest.raises(ValueError, match="vmpo_decoupled_duals"):
        vmpo_duals(vmpo_dual_init(1.0, 5.0, 0.5))
    with pytest.raises(ValueError, match="vmpo_duals"):
        vmpo_decoupled_duals(vmpo_dual_init(1.0, 5.0))
    eta, alpha_mu, alpha_sigma = vmpo_decoupled_duals(vmpo_dual_init(1.0, 1.0, 1.0))
    lp = torch.zeros(2, requires_grad=True)
    with pytest.raises(ValueError, match="eps_alpha_sigma=0.0"):
        vmpo_decoupled_loss(lp, torch.zeros(2), torch.zeros(2), torch.zeros(2), eta, alpha_mu, alpha_sigma,
                            0.01, 0.005, 0.0)


def vmpo_loss_before_decoupling(log_prob, advantages, kl, eta, alpha, eps_eta, eps_alpha, valids=None):
    """sfx's vmpo_loss as it was before the decoupled bounds (commit 6363921), kept to pin the single bound."""
    from sfx.algo.ppo import masked_mean
    adv = advantages.detach()
    top = top_half_mask(adv, valids)
    k = int(top.sum())
    a = adv[top]
    psi = torch.softmax(a / eta.detach(), dim=0)
    policy = -(psi * log_prob[top]).sum()
    temperature = eta * eps_eta + eta * (torch.logsumexp(a / eta, dim=0) - math.log(k))
    mean_kl = masked_mean(kl, valids)
    trust_region = alpha * (eps_alpha - mean_kl.detach()) + alpha.detach() * mean_kl
    weights_kl = (psi * torch.log(psi * k).clamp(min=-1e30)).sum().detach()
    return policy + temperature + trust_region, policy, temperature, trust_region, mean_kl.detach(), weights_kl


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("seed", range(3))
def test_single_bound_is_bit_for_bit_what_it_was(seed, dtype):
    results = []
    for fn in (vmpo_loss, vmpo_loss_before_decoupling):
        log_prob, adv, valids, kl, _ = _sample(seed)
        log_prob = log_prob.detach().to(dtype).requires_grad_()
        kl = kl.detach().to(dtype).requires_grad_()
        raw = vmpo_dual_init(0.7, 3.0).to(dtype).requires_grad_()
        eta, alpha = vmpo_duals(raw)
        out = tuple(fn(log_prob, adv.to(dtype), kl, eta, alpha, 0.01, 0.005, valids))
        out[0].backward()
        results.append((out, log_prob.grad, kl.grad, raw.grad))
    (new, *new_grads), (old, *old_grads) = results
    assert all(torch.equal(a, b) for a, b in zip(new, old))
    assert all(torch.equal(a, b) for a, b in zip(new_grads, old_grads))
