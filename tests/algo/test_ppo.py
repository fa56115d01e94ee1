"""PPO loss terms on hand-computed cases."""

import math

import pytest
import torch

from sfx.algo.ppo import entropy_loss, kl_loss, masked_mean, ppo_policy_loss, ppo_value_loss


def _lp(ratios):
    """log_prob, old_log_prob giving the wanted ratios."""
    return torch.log(torch.tensor(ratios, dtype=torch.float64)), torch.zeros(len(ratios), dtype=torch.float64)


@pytest.mark.parametrize(
    "ratio,adv,expected_objective",
    [
        (1.1, 2.0, 2.2),      # inside the clip range: plain ratio * A
        (1.5, 2.0, 2.4),      # above 1+eps, A>0: clipped to 1.2 * A
        (0.5, 2.0, 1.0),      # below 1-eps, A>0: min picks the unclipped 0.5 * A
        (1.5, -2.0, -3.0),    # above 1+eps, A<0: min picks the unclipped 1.5 * A
        (0.5, -2.0, -1.6),    # below 1-eps, A<0: clipped to 0.8 * A
        (0.9, -1.0, -0.9),    # inside, A<0
    ],
)
def test_policy_loss_single_sample(ratio, adv, expected_objective):
    log_prob, old = _lp([ratio])
    loss, r = ppo_policy_loss(log_prob, old, torch.tensor([adv], dtype=torch.float64), 0.2)
    assert loss.item() == pytest.approx(-expected_objective, rel=1e-12)
    assert r.item() == pytest.approx(ratio, rel=1e-12)


def test_policy_loss_gradient_vanishes_when_clipped():
    log_prob = torch.log(torch.tensor([1.5, 1.1], dtype=torch.float64)).requires_grad_()
    loss, _ = ppo_policy_loss(log_prob, torch.zeros(2, dtype=torch.float64), torch.tensor([2.0, 2.0],
                                                                                           dtype=torch.float64), 0.2)
    loss.backward()
    # d(-mean(r*A))/dlogp = -r*A/2 for the unclipped sample, 0 for the clipped one
    assert log_prob.grad[0].item() == 0.0
    assert log_prob.grad[1].item() == pytest.approx(-1.1 * 2.0 / 2, rel=1e-12)


def test_policy_loss_masked():
    log_prob, old = _lp([1.1, 1.5, 0.5])
    adv = torch.tensor([2.0, 2.0, -2.0], dtype=torch.float64)
    valids = torch.tensor([True, False, True])
    loss, _ = ppo_policy_loss(log_prob, old, adv, 0.2, valids)
    assert loss.item() == pytest.approx(-(2.2 + -1.6) / 2, rel=1e-12)


def test_policy_loss_rejects_bad_clip():
    log_prob, old = _lp([1.0])
    with pytest.raises(ValueError, match="clip_ratio"):
        ppo_policy_loss(log_prob, old, torch.ones(1), 0.0)


def test_value_loss_unclipped():
    v = torch.tensor([1.0, 3.0])
    targets = torch.tensor([2.0, 0.0])
    expected = 0.5 * (1.0 + 9.0) / 2
    assert ppo_value_loss(v, torch.zeros(2), targets, 0.0).item() == pytest.approx(expected)
    assert ppo_value_loss(v, torch.zeros(2), targets, None).item() == pytest.approx(expected)
    assert ppo_value_loss(v, torch.zeros(2), targets, -1.0).item() == pytest.approx(expected)


def test_value_loss_clipped():
    # sample 0: old=0, v=1.0, clip 0.2 -> v_clip=0.2; R=2: (1-2)^2=1, (0.2-2)^2=3.24 -> 3.24
    # sample 1: old=0, v=3.0 -> v_clip=0.2; R=0: (3-0)^2=9, 0.04 -> 9
    # sample 2: old=1, v=1.1 (inside) -> both (1.1-0)^2 = 1.21
    v = torch.tensor([1.0, 3.0, 1.1], dtype=torch.float64)
    old = torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64)
    targets = torch.tensor([2.0, 0.0, 0.0], dtype=torch.float64)
    loss = ppo_value_loss(v, old, targets, 0.2)
    assert loss.item() == pytest.approx(0.5 * (3.24 + 9.0 + 1.21) / 3, rel=1e-12)
    # masking drops sample 1
    loss = ppo_value_loss(v, old, targets, 0.2, torch.tensor([True, False, True]))
    assert loss.item() == pytest.approx(0.5 * (3.24 + 1.21) / 2, rel=1e-12)


def test_masked_mean_excludes_invalid_and_handles_empty():
    x = torch.tensor([[1.0, 100.0], [3.0, float("nan")]])
    valids = torch.tensor([[True, False], [True, False]])
    assert masked_mean(x, valids).item() == pytest.approx(2.0)
    assert masked_mean(x[:, :1]).item() == pytest.approx(2.0)
    # float 0/1 masks work too
    assert masked_mean(x, valids.float()).item() == pytest.approx(2.0)

    none_valid = torch.zeros_like(valids)
    assert masked_mean(x, none_valid).item() == 0.0
    log_prob = torch.zeros(2, 2, requires_grad=True)
    loss, _ = ppo_policy_loss(log_prob, torch.zeros(2, 2), torch.ones(2, 2), 0.2, none_valid)
    vloss = ppo_value_loss(log_prob, torch.zeros(2, 2), torch.ones(2, 2), 0.2, none_valid)
    assert loss.item() == 0.0 and vloss.item() == 0.0
    (loss + vloss).backward()
    assert torch.isfinite(log_prob.grad).all() and (log_prob.grad == 0).all()


def test_entropy_and_kl_losses():
    ent = torch.tensor([1.0, 2.0, 5.0])
    valids = torch.tensor([True, True, False])
    assert entropy_loss(ent, valids).item() == pytest.approx(-1.5)
    assert entropy_loss(ent).item() == pytest.approx(-8.0 / 3)
    assert kl_loss(ent, valids).item() == pytest.approx(1.5)
    assert kl_loss(torch.tensor([0.1, 0.3])).item() == pytest.approx(0.2)
    assert not math.isnan(kl_loss(ent, torch.zeros(3, dtype=torch.bool)).item())


def test_symmetric_kl_loss_is_a_capped_masked_mean():
    from sfx.algo.ppo import symmetric_kl_loss

    kl = torch.tensor([[0.5, 1.5], [200.0, 2.0]])
    valids = torch.tensor([[True, True], [False, True]])
    assert float(symmetric_kl_loss(kl, valids)) == pytest.approx((0.5 + 1.5 + 2.0) / 3)
    assert float(symmetric_kl_loss(kl)) == pytest.approx(30.0)  # capped: a collapsed policy's gradient stays finite


def _per_sample_grads(loss_fn, x):
    """Gradient of each sample's own term: the loss of a batch of one, sample by sample."""
    out = []
    for i in range(x.numel()):
        xi = x.detach().reshape(-1)[i:i + 1].clone().requires_grad_()
        loss_fn(xi, i).backward()
        out.append(float(xi.grad[0]))
    return torch.tensor(out)


def test_policy_no_gradient_mask_is_where_autograd_gives_zero():
    from sfx.algo.ppo import ppo_policy_no_gradient

    g = torch.Generator().manual_seed(0)
    log_prob = torch.randn(200, generator=g, dtype=torch.float64) * 0.4
    old = torch.zeros(200, dtype=torch.float64)
    adv = torch.randn(200, generator=g, dtype=torch.float64)
    grads = _per_sample_grads(lambda lp, i: ppo_policy_loss(lp, old[i:i + 1], adv[i:i + 1], 0.2)[0], log_prob)
    mask = ppo_policy_no_gradient(torch.exp(log_prob - old), adv, 0.2)
    assert torch.equal(mask, grads == 0)
    assert 0 < int(mask.sum()) < 200  # both kinds present: the test can fail


def test_value_no_gradient_mask_is_where_autograd_gives_zero():
    from sfx.algo.ppo import ppo_value_no_gradient

    g = torch.Generator().manual_seed(1)
    values = torch.randn(200, generator=g, dtype=torch.float64) * 2
    old = torch.randn(200, generator=g, dtype=torch.float64)
    targets = torch.randn(200, generator=g, dtype=torch.float64) * 2
    grads = _per_sample_grads(lambda v, i: ppo_value_loss(v, old[i:i + 1], targets[i:i + 1], 0.5), values)
    mask = ppo_value_no_gradient(values, old, targets, 0.5)
    assert torch.equal(mask, grads == 0)
    assert 0 < int(mask.sum()) < 200
    assert not ppo_value_no_gradient(values, old, targets, 0.0).any()
