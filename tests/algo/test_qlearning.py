"""R2D2 / Ape-X pieces against plain loops written from the papers: value rescaling (Pohlen et al. 2018),
n-step double-Q targets (van Hasselt et al. 2016 with R2D2's n-step and h), sequence priorities (R2D2 2.3),
importance weights (Schaul et al. 2016, 3.4), actor epsilons (Horgan et al. 2018, 4.1) and the loss."""

import math

import numpy as np
import pytest
import torch

from sfx.algo.qlearning import (actor_epsilons, double_q_targets, importance_weights, r2d2_loss,
                                sequence_priorities, td_errors, value_rescale, value_rescale_inverse)
from tests.algo.test_nstep import n_step_from_definition


def h_paper(x, eps):
    return math.copysign(1.0, x) * (math.sqrt(abs(x) + 1.0) - 1.0) + eps * x if x != 0 else 0.0


def h_inv_paper(y, eps):
    if y == 0:
        return 0.0
    u = (math.sqrt(1.0 + 4.0 * eps * (abs(y) + 1.0 + eps)) - 1.0) / (2.0 * eps)
    return math.copysign(1.0, y) * (u ** 2 - 1.0)


# ----------------------------------------------------------------------------------------------------------
# Value rescaling
# ----------------------------------------------------------------------------------------------------------

MAGNITUDES = np.logspace(-6, 6, 241)
VALUES = np.concatenate([-MAGNITUDES[::-1], [0.0], MAGNITUDES])


@pytest.mark.parametrize("eps", [1e-3, 1e-2, 0.5])
def test_rescale_matches_paper_formulas(eps):
    x = torch.tensor(VALUES, dtype=torch.float64)
    np.testing.assert_allclose(value_rescale(x, eps).numpy(), [h_paper(v, eps) for v in VALUES], rtol=1e-9)
    # the textbook inverse cancels near 0 (s - 1, u^2 - 1): compare where it still has 6 digits in float64
    y = value_rescale(x, eps)
    safe = np.abs(VALUES) >= 1e-4
    ref = np.array([h_inv_paper(v, eps) for v in y.numpy()])
    np.testing.assert_allclose(value_rescale_inverse(y, eps).numpy()[safe], ref[safe], rtol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("eps", [1e-3, 1e-1])
def test_rescale_round_trip_to_float_tolerance(dtype, eps):
    """h^-1(h(x)) = x and h(h^-1(y)) = y over 1e-6 .. 1e6, both signs: relative error within a small multiple of
    the dtype's unit roundoff (each of the ~10 operations contributes at most half an ulp; 16 ulp of slack)."""
    rtol = 16 * torch.finfo(dtype).eps
    x = torch.tensor(VALUES, dtype=dtype)
    back = value_rescale_inverse(value_rescale(x, eps), eps)
    assert back.dtype == dtype
    np.testing.assert_allclose(back.double().numpy(), x.double().numpy(), rtol=rtol, atol=0)
    y = torch.tensor(VALUES, dtype=dtype)
    np.testing.assert_allclose(value_rescale(value_rescale_inverse(y, eps), eps).double().numpy(),
                               y.double().numpy(), rtol=rtol, atol=0)


def test_rescale_is_odd_monotone_and_differentiable():
    x = torch.linspace(-50, 50, 1001, dtype=torch.float64, requires_grad=True)
    y = value_rescale(x)
    assert torch.equal(value_rescale(-x.detach()), -y.detach())
    assert bool((y[1:] > y[:-1]).all())
    y.sum().backward()
    assert bool(torch.isfinite(x.grad).all()) and bool((x.grad > 0).all())
    assert value_rescale(torch.zeros(1)).item() == 0.0 and value_rescale_inverse(torch.zeros(1)).item() == 0.0


@pytest.mark.parametrize("eps", [0.0, -1e-3, float("inf"), float("nan")])
def test_rescale_bad_eps(eps):
    with pytest.raises(ValueError, match="eps="):
        value_rescale(torch.ones(2), eps)
    with pytest.raises(ValueError, match="eps="):
        value_rescale_inverse(torch.ones(2), eps)


# ----------------------------------------------------------------------------------------------------------
# Double-Q targets
# ----------------------------------------------------------------------------------------------------------


def double_q_from_paper(r, term, trunc, online_next, target_next, target_trunc, online_trunc, gamma, n, eps,
                        rescale, active=None):
    """Per (b, t): a* = argmax_a Q_online(x', a), V = h^-1(Q_target(x', a*)) (both for the next and the final
    observation), G_t by the n-step loop, y = h(G_t)."""
    B, T, _ = online_next.shape
    inv = (lambda v: h_inv_paper(v, eps)) if rescale else (lambda v: v)
    nv = [[inv(target_next[b, t, int(np.argmax(online_next[b, t]))]) for t in range(T)] for b in range(B)]
    tv = [[inv(target_trunc[b, t, int(np.argmax(online_trunc[b, t]))]) for t in range(T)] for b in range(B)]
    g, d, h = n_step_from_definition(r, term, trunc, nv, tv, gamma, n, active)
    y = np.vectorize(lambda v: h_paper(v, eps))(g) if rescale else g
    return y, g, d, h


@pytest.mark.parametrize("rescale", [True, False])
@pytest.mark.parametrize("n", [1, 5])
@pytest.mark.parametrize("with_inactive", [False, True])
def test_double_q_matches_paper(rescale, n, with_inactive):
    rng = np.random.default_rng(5 + n + 10 * rescale + 100 * with_inactive)
    B, T, A, gamma, eps = 3, 12, 4, 0.997, 1e-3
    r = rng.normal(size=(B, T))
    term = rng.random((B, T)) < 0.1
    trunc = rng.random((B, T)) < 0.1
    qs = [rng.normal(scale=3.0, size=(B, T, A)) for _ in range(4)]
    active = rng.random((B, T)) > 0.3 if with_inactive else None
    out = double_q_targets(torch.tensor(r), torch.tensor(term), torch.tensor(trunc), *map(torch.tensor, qs),
                           gamma=gamma, n=n, eps=eps, rescale=rescale,
                           active=None if active is None else torch.tensor(active))
    y, g, d, h = double_q_from_paper(r, term, trunc, *qs, gamma, n, eps, rescale, active)
    np.testing.assert_allclose(out.returns.numpy(), g, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(out.targets.numpy(), y, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(out.discounts.numpy(), d, rtol=1e-12)
    np.testing.assert_array_equal(out.horizon.numpy(), h)


def test_double_q_takes_argmax_from_online_and_value_from_target():
    # one step, gamma 1, no rescaling: target = r + Q_target(x', argmax Q_online(x', .))
    online = torch.tensor([[[0.0, 5.0, 1.0]]])
    target = torch.tensor([[[100.0, 2.0, 300.0]]])  # its own max (300) must not be used
    nan = torch.full((1, 1, 3), float("nan"))
    z = torch.zeros(1, 1, dtype=torch.bool)
    out = double_q_targets(torch.tensor([[1.0]]), z, z, online, target, nan, nan, gamma=1.0, n=1, rescale=False)
    assert out.targets.item() == 3.0
    # truncated: the final observation's Q-values are used instead of the (reset) next ones
    out = double_q_targets(torch.tensor([[1.0]]), z, ~z, nan, nan, target, online, gamma=1.0, n=1, rescale=False)
    assert out.targets.item() == 3.0


def test_double_q_no_gradient_and_bad_input():
    B, T, A = 2, 5, 3
    q = torch.randn(B, T, A, requires_grad=True)
    z = torch.zeros(B, T, dtype=torch.bool)
    out = double_q_targets(torch.randn(B, T), z, z, q, q, q, q, gamma=0.99, n=3)
    assert not out.targets.requires_grad and out.targets.shape == (B, T)
    with pytest.raises(ValueError, match="online_next_q has shape"):
        double_q_targets(torch.randn(B, T), z, z, torch.randn(B, T), q, q, q, gamma=0.99, n=3)
    with pytest.raises(ValueError, match="target_trunc_q has shape"):
        double_q_targets(torch.randn(B, T), z, z, q, q, torch.randn(B, T, A + 1), q, gamma=0.99, n=3)
    with pytest.raises(ValueError, match="gamma=1.1"):
        double_q_targets(torch.randn(B, T), z, z, q, q, q, q, gamma=1.1, n=3)
    with pytest.raises(ValueError, match="n=0"):
        double_q_targets(torch.randn(B, T), z, z, q, q, q, q, gamma=0.9, n=0)
    with pytest.raises(ValueError, match="eps=0"):
        double_q_targets(torch.randn(B, T), z, z, q, q, q, q, gamma=0.9, n=1, eps=0)


# ----------------------------------------------------------------------------------------------------------
# TD errors and loss
# ----------------------------------------------------------------------------------------------------------


def test_td_errors_and_loss_match_loop():
    rng = np.random.default_rng(2)
    B, T = 4, 7
    q = torch.tensor(rng.normal(size=(B, T)), requires_grad=True)
    y = torch.tensor(rng.normal(size=(B, T)))
    valids = rng.random((B, T)) > 0.3
    valids[1] = False  # a sequence with no valid step
    w = rng.random(B) + 0.1
    td = td_errors(q, y)
    out = r2d2_loss(td, torch.tensor(valids), torch.tensor(w))
    expected = 0.0
    for b in range(B):
        per_seq = sum(0.5 * (y[b, t].item() - q[b, t].item()) ** 2 for t in range(T) if valids[b, t])
        expected += w[b] * per_seq
    expected /= B
    assert math.isclose(out.loss.item(), expected, rel_tol=1e-12)
    np.testing.assert_allclose(out.td_abs.numpy(), np.where(valids, np.abs(y.numpy() - q.detach().numpy()), 0))
    assert not out.td_abs.requires_grad
    out.loss.backward()  # d loss / d q = -w_b (y - q) / B at valid steps
    grad = np.where(valids, -(w[:, None] * (y.numpy() - q.detach().numpy())) / B, 0)
    np.testing.assert_allclose(q.grad.numpy(), grad, rtol=1e-12, atol=1e-15)
    unweighted = r2d2_loss(td_errors(q, y), torch.tensor(valids))
    assert math.isclose(unweighted.loss.item(), r2d2_loss(td_errors(q, y), torch.tensor(valids),
                                                          torch.ones(B, dtype=torch.float64)).loss.item())


def test_loss_bad_shapes():
    with pytest.raises(ValueError, match="weights has shape"):
        r2d2_loss(torch.zeros(3, 4), torch.ones(3, 4, dtype=torch.bool), torch.ones(4))
    with pytest.raises(ValueError, match="valids has shape"):
        r2d2_loss(torch.zeros(3, 4), torch.ones(4, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="targets has shape"):
        td_errors(torch.zeros(3, 4), torch.zeros(3))


# ----------------------------------------------------------------------------------------------------------
# Priorities, importance weights, epsilons
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("eta", [0.0, 0.5, 0.9, 1.0])
def test_sequence_priorities_match_loop(eta):
    rng = np.random.default_rng(4)
    B, T = 5, 9
    td = rng.normal(size=(B, T))
    valids = rng.random((B, T)) > 0.4
    valids[2] = False
    valids[3] = True
    out = sequence_priorities(torch.tensor(np.abs(td)), torch.tensor(valids), eta)
    for b in range(B):
        chosen = [abs(td[b, t]) for t in range(T) if valids[b, t]]
        expected = eta * max(chosen) + (1 - eta) * sum(chosen) / len(chosen) if chosen else 0.0
        assert math.isclose(out[b].item(), expected, rel_tol=1e-12, abs_tol=1e-15)
    assert out.shape == (B,)


def test_sequence_priorities_bad_input():
    with pytest.raises(ValueError, match="eta=1.5"):
        sequence_priorities(torch.zeros(2, 3), torch.ones(2, 3, dtype=torch.bool), 1.5)
    with pytest.raises(ValueError, match="valids has shape"):
        sequence_priorities(torch.zeros(2, 3), torch.ones(2, 4, dtype=torch.bool))


@pytest.mark.parametrize("beta", [0.0, 0.4, 0.6, 1.0])
def test_importance_weights_match_paper(beta):
    rng = np.random.default_rng(6)
    size = 1000
    p = rng.random(32) / 100 + 1e-6
    w = importance_weights(torch.tensor(p), size, beta)
    raw = [(size * pi) ** -beta for pi in p]
    expected = [x / max(raw) for x in raw]  # normalised by the max over the sampled batch
    np.testing.assert_allclose(w.numpy(), expected, rtol=1e-12)
    assert math.isclose(w.max().item(), 1.0)


def test_importance_weights_bad_input():
    p = torch.tensor([0.1, 0.2])
    with pytest.raises(ValueError, match="size=0"):
        importance_weights(p, 0)
    with pytest.raises(ValueError, match="beta=-0.1"):
        importance_weights(p, 10, -0.1)
    with pytest.raises(ValueError, match="probability 0.0"):
        importance_weights(torch.tensor([0.1, 0.0]), 10)
    with pytest.raises(ValueError, match="probability -0.5"):
        importance_weights(torch.tensor([-0.5]), 10)
    with pytest.raises(ValueError, match="probabilities has shape"):
        importance_weights(torch.zeros(2, 2), 10)


@pytest.mark.parametrize("num_actors", [1, 2, 3, 256])
def test_actor_epsilons_match_apex(num_actors):
    eps = actor_epsilons(num_actors)
    assert eps.shape == (num_actors,) and eps.dtype == torch.float32
    if num_actors == 1:
        expected = [0.4]  # one actor: the base epsilon
    else:
        expected = [0.4 ** (1 + 7.0 * i / (num_actors - 1)) for i in range(num_actors)]
    np.testing.assert_allclose(eps.numpy(), expected, rtol=1e-6)
    if num_actors > 1:
        assert math.isclose(eps[0].item(), 0.4, rel_tol=1e-6)
        assert math.isclose(eps[-1].item(), 0.4 ** 8, rel_tol=1e-6)
        assert bool((eps[1:] < eps[:-1]).all())


def test_actor_epsilons_bad_input():
    with pytest.raises(ValueError, match="num_actors=0"):
        actor_epsilons(0)
    with pytest.raises(ValueError, match="base=1.5"):
        actor_epsilons(4, base=1.5)
    with pytest.raises(ValueError, match="alpha=-1"):
        actor_epsilons(4, alpha=-1)
