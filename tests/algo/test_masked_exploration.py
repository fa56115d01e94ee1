"""Masked choices (``action_mask``: the model sets their logits to ``MASKED_LOGIT``) have probability 0, so the
exploration terms are over the allowed choices only: the symmetric KL against the uniform policy over the
allowed choices (not over all of them, which would sit at its cap with zero gradient), and the entropy, to
which a masked choice adds 0 (never NaN). Checked against plain loops over the allowed choices."""

import math

import pytest
import torch

from sfx.algo.distributions import MASKED_LOGIT, Categorical, TupleCategorical
from sfx.algo.ppo import entropy_loss, symmetric_kl_loss

# float32 logits and softmax against a float64 loop: a few ulps (1.2e-7) per operation over ~n terms
RTOL, ATOL = 1e-5, 1e-6


def _masked_logits(seed, B=6, n=5):
    g = torch.Generator().manual_seed(seed)
    raw = (torch.randn(B, n, generator=g) * 1.5).requires_grad_(True)
    allowed = torch.rand(B, n, generator=g) < 0.6
    allowed[:, 0] = True  # every row has an allowed choice
    allowed[0] = False
    allowed[0, 0] = allowed[0, 2] = True  # two allowed choices
    allowed[1, 1:] = False  # one allowed choice only: both terms are 0 there
    allowed[2] = True  # nothing masked
    return raw, allowed, raw.masked_fill(~allowed, MASKED_LOGIT)


def symmetric_kl_loop(raw, allowed, valid):
    """mean over valid rows of 0.5 * (KL(pi || u) + KL(u || pi)), u uniform over the row's m allowed choices,
    pi the softmax over the allowed logits: sum_a pi_a log(pi_a m) and sum_a (1/m) log(1 / (m pi_a))."""
    total, rows = 0.0, 0
    for b in range(raw.shape[0]):
        if not valid[b]:
            continue
        idx = [a for a in range(raw.shape[1]) if allowed[b, a]]
        m = len(idx)
        z = sum(torch.exp(raw[b, a].double()) for a in idx)
        pi = {a: torch.exp(raw[b, a].double()) / z for a in idx}
        kl_pi_u = sum(pi[a] * torch.log(pi[a] * m) for a in idx)
        kl_u_pi = sum((1.0 / m) * torch.log(1.0 / (m * pi[a])) for a in idx)
        total = total + 0.5 * (kl_pi_u + kl_u_pi)
        rows += 1
    return total / rows


def entropy_loop(raw, allowed, valid):
    """-mean over valid rows of H(pi) = -sum_{a allowed} pi_a log pi_a."""
    total, rows = 0.0, 0
    for b in range(raw.shape[0]):
        if not valid[b]:
            continue
        idx = [a for a in range(raw.shape[1]) if allowed[b, a]]
        z = sum(torch.exp(raw[b, a].double()) for a in idx)
        h = -sum((torch.exp(raw[b, a].double()) / z) * torch.log(torch.exp(raw[b, a].double()) / z) for a in idx)
        total = total + h
        rows += 1
    return -total / rows


def _grad(loss, x):
    (g,) = torch.autograd.grad(loss, x)
    return g


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_symmetric_kl_gradient_is_the_loop_s_over_the_allowed_choices(seed):
    raw, allowed, logits = _masked_logits(seed)
    valid = torch.tensor([True, True, True, False, True, True])
    loss = symmetric_kl_loss(Categorical(logits).symmetric_kl_with_uniform(), valid)
    ref = symmetric_kl_loop(raw, allowed, valid)
    assert loss.item() < 30.0  # not at the cap
    assert loss.item() == pytest.approx(ref.item(), rel=RTOL, abs=ATOL)
    grad, ref_grad = _grad(loss, raw), _grad(ref, raw).float()
    assert torch.isfinite(grad).all()
    assert (grad[~allowed] == 0).all()
    assert grad[allowed & valid.unsqueeze(1)].abs().sum() > 0
    torch.testing.assert_close(grad, ref_grad, rtol=RTOL, atol=ATOL)
    # a row with several allowed choices gets a non-zero gradient on each of them (0 is a two-choice row)
    assert (grad[0, allowed[0]] != 0).all()


@pytest.mark.parametrize("seed", [0, 1])
def test_entropy_is_over_the_allowed_choices_and_never_nan(seed):
    raw, allowed, logits = _masked_logits(seed)
    valid = torch.ones(raw.shape[0], dtype=torch.bool)
    loss = entropy_loss(Categorical(logits).entropy(), valid)
    ref = entropy_loop(raw, allowed, valid)
    assert loss.item() == pytest.approx(ref.item(), rel=RTOL, abs=ATOL)
    grad = _grad(loss, raw)
    assert torch.isfinite(grad).all() and (grad[~allowed] == 0).all()
    torch.testing.assert_close(grad, _grad(ref, raw).float(), rtol=RTOL, atol=ATOL)
    # -inf logits too: entropy, symmetric KL and their gradients stay finite
    inf_raw = raw.detach().clone().requires_grad_(True)
    dist = Categorical(inf_raw.masked_fill(~allowed, float("-inf")))
    total = dist.entropy().sum() + dist.symmetric_kl_with_uniform().sum()
    assert torch.isfinite(total)
    g = _grad(total, inf_raw)
    assert torch.isfinite(g).all() and (g[~allowed] == 0).all()


def test_tuple_heads_mask_each_head():
    raw_a, allowed_a, logits_a = _masked_logits(3, n=4)
    raw_b, allowed_b, logits_b = _masked_logits(4, n=3)
    valid = torch.ones(raw_a.shape[0], dtype=torch.bool)
    dist = TupleCategorical(torch.cat([logits_a, logits_b], dim=1), [4, 3])
    loss = symmetric_kl_loss(dist.symmetric_kl_with_uniform(), valid)
    ref = symmetric_kl_loop(raw_a, allowed_a, valid) + symmetric_kl_loop(raw_b, allowed_b, valid)
    assert loss.item() == pytest.approx(ref.item(), rel=RTOL, abs=ATOL)
    ga, gb = torch.autograd.grad(loss, [raw_a, raw_b])
    ra, rb = torch.autograd.grad(ref, [raw_a, raw_b])
    torch.testing.assert_close(ga, ra.float(), rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(gb, rb.float(), rtol=RTOL, atol=ATOL)


def test_without_a_mask_nothing_changes():
    """Unmasked logits: the uniform prior over all n choices, 0.5 * (-H - mean_a log pi(a)), as before masks."""
    g = torch.Generator().manual_seed(9)
    logits = torch.randn(8, 6, generator=g) * 2
    dist = Categorical(logits)
    log_p = torch.log_softmax(logits, dim=-1)
    entropy = -(log_p.exp() * log_p).sum(-1)
    assert torch.equal(dist.entropy(), entropy)
    torch.testing.assert_close(dist.symmetric_kl_with_uniform(), 0.5 * (-entropy - log_p.mean(-1)),
                               rtol=0.0, atol=4 * torch.finfo(torch.float32).eps * math.log(6) * 10)
    # every choice allowed: the loop with all choices agrees too
    raw = logits.clone().requires_grad_(True)
    ref = symmetric_kl_loop(raw, torch.ones(8, 6, dtype=torch.bool), torch.ones(8, dtype=torch.bool))
    assert symmetric_kl_loss(Categorical(logits).symmetric_kl_with_uniform()).item() == pytest.approx(
        ref.item(), rel=RTOL, abs=ATOL)


def test_a_row_with_every_choice_masked_counts_them_all():
    """The model leaves such a head unmasked (an agent that does not act); the distribution does the same."""
    dist = Categorical(torch.full((1, 4), MASKED_LOGIT))
    assert dist.entropy().item() == pytest.approx(math.log(4), rel=1e-6)
    assert dist.symmetric_kl_with_uniform().item() == pytest.approx(0.0, abs=1e-6)
