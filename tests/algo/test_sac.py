"""SAC's math against plain loops written from Haarnoja et al. 2018 ("Soft Actor-Critic Algorithms and
Applications"): the squashed Gaussian against a numerical change of variables, the clipped double-Q target,
the critic, actor and temperature losses and the Polyak update."""

import math

import numpy as np
import pytest
import torch

from sfx.algo.distributions import UnsupportedActionSpaceError
from sfx.algo.sac import (SAC_LOG_STD_MAX, SAC_LOG_STD_MIN, CriticLoss, SquashedGaussian, actor_loss,
                          check_action_bounds, clipped_double_q_target, critic_loss, default_target_entropy,
                          polyak_update_, temperature_loss)

F64 = torch.float64
EPS64 = torch.finfo(F64).eps


def _t(x, dtype=F64):
    return torch.tensor(x, dtype=dtype)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _random_policy(seed, n, d, mean_scale=1.0, dtype=F64):
    rng = np.random.default_rng(seed)
    mean = _t(rng.normal(0.0, mean_scale, size=(n, d)), dtype)
    log_std = _t(rng.uniform(-1.5, 0.5, size=(n, d)), dtype)
    low = _t(rng.uniform(-3.0, 0.0, size=d), dtype)
    high = low + _t(rng.uniform(0.5, 4.0, size=d), dtype)
    return mean, log_std, low, high


def _pre_squash(mean, log_std, seed):
    """The u = mean + std * eps that rsample(generator seeded ``seed``) draws."""
    eps = torch.randn(mean.shape, generator=_gen(seed), dtype=mean.dtype)
    return mean + log_std.clamp(SAC_LOG_STD_MIN, SAC_LOG_STD_MAX).exp() * eps


# ---------------------------------------------------------------- the squashed Gaussian


def _squash_row(u_row, low, high):
    return low + (torch.tanh(u_row) + 1.0) / 2.0 * (high - low)


def log_prob_by_change_of_variables(mean, log_std, low, high, u, jacobian="autograd"):
    """log p(a) = log p_u(u) - log |det da/du|, with p_u from torch.distributions.Normal and the Jacobian of
    the squash map taken numerically (autograd, or central finite differences), row by row, in float64."""
    normal = torch.distributions.Normal(mean, log_std.clamp(SAC_LOG_STD_MIN, SAC_LOG_STD_MAX).exp())
    log_pu = normal.log_prob(u).sum(-1)
    out = []
    for i in range(u.shape[0]):
        if jacobian == "autograd":
            jac = torch.autograd.functional.jacobian(lambda x: _squash_row(x, low, high), u[i])
        else:
            h = 1e-6
            cols = []
            for j in range(u.shape[1]):
                step = torch.zeros_like(u[i])
                step[j] = h
                cols.append((_squash_row(u[i] + step, low, high) - _squash_row(u[i] - step, low, high)) / (2 * h))
            jac = torch.stack(cols, dim=1)
        sign, logabsdet = torch.linalg.slogdet(jac)
        assert sign > 0
        out.append(log_pu[i] - logabsdet)
    return torch.stack(out)


@pytest.mark.parametrize("jacobian", ["autograd", "finite_differences"])
@pytest.mark.parametrize("n,d,seed", [(1, 1, 0), (4, 3, 1), (6, 5, 2)])
def test_log_prob_matches_numerical_change_of_variables(n, d, seed, jacobian):
    mean, log_std, low, high = _random_policy(seed, n, d)
    action, log_prob = SquashedGaussian(mean, log_std, low, high).rsample(generator=_gen(seed))
    u = _pre_squash(mean, log_std, seed)
    expected = log_prob_by_change_of_variables(mean, log_std, low, high, u, jacobian)
    # autograd's Jacobian is exact up to rounding; central differences with h = 1e-6 carry ~h^2 + eps/h ~ 1e-10
    tol = 1e-10 if jacobian == "autograd" else 1e-7
    np.testing.assert_allclose(log_prob.numpy(), expected.numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(action.numpy(), torch.stack([_squash_row(r, low, high) for r in u]).numpy(),
                               rtol=0, atol=4 * EPS64 * float((high - low).abs().max() + low.abs().max()))


def test_log_prob_of_given_actions_inverts_the_squash():
    mean, log_std, low, high = _random_policy(3, 8, 4)
    dist = SquashedGaussian(mean, log_std, low, high)
    action, log_prob = dist.rsample(generator=_gen(3))
    # atanh(y) amplifies y's rounding by 1/(1 - y^2); the pre-squash values here are O(1)
    np.testing.assert_allclose(dist.log_prob(action).numpy(), log_prob.numpy(), rtol=1e-8, atol=1e-8)


def test_density_integrates_to_one_in_1d():
    # trapezoid rule in s on a = low + (high - low) (1 - cos(pi s)) / 2, s in [0, 1]: points cluster near the
    # bounds, where a wide policy still puts mass in a thin sliver (and the density is not tanh-based)
    s = torch.linspace(0.0, 1.0, 100_001, dtype=F64)[1:-1]
    for mean, log_std, low, high in [(0.0, 0.0, -1.0, 1.0), (0.7, -0.5, -2.0, 3.0), (-1.2, -1.0, 0.0, 0.5),
                                     (0.3, 0.3, -10.0, -4.0), (2.0, -3.0, -1.0, 1.0)]:
        a = low + (high - low) * (1.0 - torch.cos(math.pi * s)) / 2.0
        da_ds = (high - low) * math.pi / 2.0 * torch.sin(math.pi * s)
        dist = SquashedGaussian(torch.full((len(a), 1), mean, dtype=F64), torch.full((len(a), 1), log_std, dtype=F64),
                                _t([low]), _t([high]))
        total = torch.trapezoid(dist.log_prob(a.unsqueeze(1)).exp() * da_ds, s).item()
        assert abs(total - 1.0) < 1e-6, (mean, log_std, low, high, total)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_samples_inside_bounds_unclipped_and_log_probs_finite(dtype):
    n, d = 2000, 3
    gen = _gen(5)
    mean = (torch.randn(n, d, generator=gen, dtype=dtype) * 30.0)  # many saturate tanh to +-1 in float32
    log_std = torch.rand(n, d, generator=gen, dtype=dtype) * 4.0 - 2.0
    low, high = _t([-1.0, 0.0, -7.5], dtype), _t([1.0, 0.25, 12.0], dtype)
    dist = SquashedGaussian(mean, log_std, low, high)
    action, log_prob = dist.rsample(generator=_gen(6))
    assert action.shape == (n, d) and log_prob.shape == (n,)
    assert ((action >= low) & (action <= high)).all()
    assert torch.isfinite(log_prob).all() and torch.isfinite(dist.log_prob(action)).all()
    # the samples are the squash of the Gaussian's samples, not clipped ones (well inside: no rounding involved)
    u = _pre_squash(mean, log_std, 6)
    inside = u.abs() < 3  # [n, d]
    assert inside.sum() > 50 and (~inside).sum() > 1000
    np.testing.assert_allclose(action[inside].double().numpy(),
                               (low + (torch.tanh(u) + 1) / 2 * (high - low))[inside].double().numpy(),
                               rtol=0, atol=50 * torch.finfo(dtype).eps)


def test_mode_is_the_squashed_mean_inside_bounds():
    low, high = _t([-2.0, 1.0]), _t([2.0, 3.0])
    mean = _t([[0.0, 0.0], [100.0, -100.0], [0.5, -0.3]])
    mode = SquashedGaussian(mean, torch.zeros_like(mean), low, high).mode()
    np.testing.assert_allclose(mode[0].numpy(), [0.0, 2.0])  # tanh(0) = 0: the middle of the bounds
    assert ((mode >= low) & (mode <= high)).all()
    np.testing.assert_allclose(mode[2].numpy(), [2.0 * math.tanh(0.5), 2.0 + math.tanh(-0.3)], rtol=1e-12)


def test_log_prob_at_the_bounds_is_finite():
    low, high = _t([-1.0, 0.0]), _t([1.0, 2.0])
    mean, log_std = torch.zeros(3, 2, dtype=F64), torch.zeros(3, 2, dtype=F64)
    action = _t([[-1.0, 0.0], [1.0, 2.0], [1.5, -1.0]])  # on the bounds, and outside (evaluated at the bound)
    log_prob = SquashedGaussian(mean, log_std, low, high).log_prob(action)
    assert torch.isfinite(log_prob).all()
    for dtype in (torch.float32,):
        lp = SquashedGaussian(mean.to(dtype), log_std.to(dtype), low, high).log_prob(action.to(dtype))
        assert torch.isfinite(lp).all()


def test_log_std_clamped_to_documented_range():
    low, high = _t([-1.0]), _t([1.0])
    mean = torch.zeros(1, 1, dtype=F64)
    action = _t([[0.3]])
    for outside, edge in ((-30.0, SAC_LOG_STD_MIN), (5.0, SAC_LOG_STD_MAX)):
        log_std = torch.full((1, 1), outside, dtype=F64, requires_grad=True)
        dist = SquashedGaussian(mean, log_std, low, high)
        lp = dist.log_prob(action)
        assert lp.item() == SquashedGaussian(mean, torch.full((1, 1), edge, dtype=F64), low, high).log_prob(action)
        lp.sum().backward()
        assert log_std.grad.item() == 0.0
    assert (SAC_LOG_STD_MIN, SAC_LOG_STD_MAX) == (-20.0, 2.0)


def test_rsample_is_reparameterised_and_sample_is_not():
    mean, log_std, low, high = _random_policy(7, 3, 2)
    mean.requires_grad_(True)
    log_std.requires_grad_(True)
    dist = SquashedGaussian(mean, log_std, low, high)
    action, log_prob = dist.rsample(generator=_gen(0))
    (action.sum() + log_prob.sum()).backward()
    assert mean.grad.abs().sum() > 0 and log_std.grad.abs().sum() > 0
    sampled = dist.sample(generator=_gen(0))
    assert not sampled.action.requires_grad and not sampled.log_prob.requires_grad
    torch.testing.assert_close(sampled.action, action.detach(), rtol=0, atol=0)


# ---------------------------------------------------------------- targets and losses


def target_from_paper(rewards, terminated, next_q1, next_q2, next_log_prob, alpha, gamma, discounts=None):
    """y_b = r_b + gamma (1 - d_b) (min(Q'_1, Q'_2) - alpha log pi(a'|s')), element by element (eq. 3, sec. 5)."""
    out = []
    for b in range(len(rewards)):
        factor = gamma * (1.0 - terminated[b]) if discounts is None else discounts[b] * (1.0 - terminated[b])
        out.append(rewards[b] + factor * (min(next_q1[b], next_q2[b]) - alpha * next_log_prob[b]))
    return np.array(out)


def _transitions(seed, B=9):
    rng = np.random.default_rng(seed)
    terminated = (rng.random(B) < 0.3).astype(np.float64)
    truncated = (rng.random(B) < 0.3).astype(np.float64)
    terminated[0], truncated[0] = 1.0, 1.0  # both: termination wins
    terminated[1], truncated[1] = 0.0, 1.0
    return (rng.normal(size=B), terminated, truncated, rng.normal(size=B), rng.normal(size=B),
            rng.normal(size=B) - 1.0)


@pytest.mark.parametrize("alpha,gamma", [(0.2, 0.99), (0.0, 0.9), (1.5, 1.0), (0.05, 0.0)])
def test_clipped_double_q_target_matches_paper(alpha, gamma):
    r, term, trunc, q1, q2, lp = _transitions(11)
    y = clipped_double_q_target(_t(r), _t(term).bool(), _t(trunc).bool(), _t(q1), _t(q2), _t(lp), alpha, gamma)
    np.testing.assert_allclose(y.numpy(), target_from_paper(r, term, q1, q2, lp, alpha, gamma), rtol=1e-14,
                               atol=1e-14)
    y_tensor_alpha = clipped_double_q_target(_t(r), _t(term), _t(trunc), _t(q1), _t(q2), _t(lp),
                                             torch.tensor(alpha, dtype=F64, requires_grad=True), gamma)
    assert not y_tensor_alpha.requires_grad
    torch.testing.assert_close(y_tensor_alpha, y, rtol=0, atol=0)


def test_terminations_cut_truncations_bootstrap_from_final_observation_values():
    r, term, trunc, q1, q2, lp = _transitions(12)
    args = dict(alpha=0.3, gamma=0.9)
    base = clipped_double_q_target(_t(r), _t(term), _t(trunc), _t(q1), _t(q2), _t(lp), **args)
    # the values of the stored final observation of truncated rows change: only those (not terminated) targets move
    final_q1, final_q2 = q1.copy(), q2.copy()
    moved = (trunc == 1) & (term == 0)
    final_q1[moved] += 10.0
    final_q2[moved] += 10.0
    y = clipped_double_q_target(_t(r), _t(term), _t(trunc), _t(final_q1), _t(final_q2), _t(lp), **args)
    np.testing.assert_allclose((y - base).numpy(), np.where(moved, 0.9 * 10.0, 0.0), atol=1e-12)
    # terminated rows: y = r whatever the next values
    cut = term == 1
    np.testing.assert_allclose(y.numpy()[cut], r[cut], rtol=0, atol=0)
    # the truncated flag alone changes nothing: truncation bootstraps like an ordinary step
    no_trunc = clipped_double_q_target(_t(r), _t(term), torch.zeros(len(r), dtype=F64), _t(q1), _t(q2), _t(lp), **args)
    torch.testing.assert_close(no_trunc, base, rtol=0, atol=0)


def test_n_step_discounts_replace_gamma():
    r, term, trunc, q1, q2, lp = _transitions(13)
    gamma, n = 0.97, 3
    rng = np.random.default_rng(0)
    horizon = rng.integers(1, n + 1, size=len(r))
    discounts = np.where(term == 1, 0.0, gamma ** horizon)
    y = clipped_double_q_target(_t(r), _t(term), _t(trunc), _t(q1), _t(q2), _t(lp), 0.1, gamma, discounts=_t(discounts))
    np.testing.assert_allclose(y.numpy(), target_from_paper(r, term, q1, q2, lp, 0.1, gamma, discounts), rtol=1e-14,
                               atol=1e-14)


def test_target_dtype_and_no_gradient():
    B = 5
    q1 = torch.randn(B, requires_grad=True)
    y = clipped_double_q_target(torch.randn(B), torch.zeros(B, dtype=torch.bool), torch.zeros(B, dtype=torch.bool),
                                q1, torch.randn(B), torch.randn(B), 0.2, 0.99)
    assert y.dtype == torch.float32 and y.shape == (B,) and not y.requires_grad


@pytest.mark.parametrize("weighted", [False, True])
def test_critic_loss_matches_paper(weighted):
    rng = np.random.default_rng(21)
    B = 7
    q1, q2, y, w = rng.normal(size=B), rng.normal(size=B), rng.normal(size=B), rng.uniform(0.1, 1.0, size=B)
    w_ref = w if weighted else np.ones(B)
    q1_t, q2_t = _t(q1).requires_grad_(True), _t(q2).requires_grad_(True)
    target = _t(y).requires_grad_(True)
    out = critic_loss(q1_t, q2_t, target, _t(w) if weighted else None)
    assert isinstance(out, CriticLoss)
    ref1 = sum(0.5 * w_ref[b] * (q1[b] - y[b]) ** 2 for b in range(B)) / B  # eq. 5: E[1/2 (Q - y)^2]
    ref2 = sum(0.5 * w_ref[b] * (q2[b] - y[b]) ** 2 for b in range(B)) / B
    np.testing.assert_allclose([out.q1_loss.item(), out.q2_loss.item(), out.loss.item()], [ref1, ref2, ref1 + ref2],
                               rtol=1e-14)
    out.loss.backward()
    assert target.grad is None  # the target is detached
    np.testing.assert_allclose(q1_t.grad.numpy(), w_ref * (q1 - y) / B, rtol=1e-13)


@pytest.mark.parametrize("alpha", [0.0, 0.2, 3.0])
def test_actor_loss_matches_paper(alpha):
    rng = np.random.default_rng(31)
    B = 6
    lp, q1, q2 = rng.normal(size=B), rng.normal(size=B), rng.normal(size=B)
    loss = actor_loss(_t(lp), _t(q1), _t(q2), alpha)
    ref = sum(alpha * lp[b] - min(q1[b], q2[b]) for b in range(B)) / B  # eq. 7 with twin critics
    assert math.isclose(loss.item(), ref, rel_tol=1e-14, abs_tol=1e-14)


def test_actor_loss_gradient_flows_through_the_reparameterised_action():
    """With a fixed noise draw the actor loss is a smooth function of (mean, log_std): autograd's gradient
    equals the numerical one (gradcheck), and gradient descent moves the mode towards the critic's optimum."""
    low, high = _t([-2.0, 0.0]), _t([2.0, 1.0])
    best = _t([1.0, 0.2])

    def q(action):  # a critic peaked at ``best``
        return -((action - best) ** 2).sum(-1)

    def loss_of(mean, log_std, alpha=0.1):
        action, log_prob = SquashedGaussian(mean, log_std, low, high).rsample(generator=_gen(4))
        return actor_loss(log_prob, q(action), q(action) + 0.5, torch.tensor(alpha, dtype=F64, requires_grad=True))

    mean = (torch.randn(5, 2, generator=_gen(1), dtype=F64) * 0.5).requires_grad_(True)
    log_std = torch.full((5, 2), -1.0, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(loss_of, (mean, log_std), eps=1e-6, atol=1e-7)

    # fresh noise each step, a narrow fixed std: the mode goes to the critic's optimum
    mean = torch.zeros(5, 2, dtype=F64, requires_grad=True)
    log_std = torch.full((5, 2), -6.0, dtype=F64)
    opt = torch.optim.SGD([mean], lr=1.0)
    for step in range(300):
        opt.zero_grad()
        action, log_prob = SquashedGaussian(mean, log_std, low, high).rsample(generator=_gen(step))
        actor_loss(log_prob, q(action), q(action) + 0.5, 0.0).backward()
        opt.step()
    mode = SquashedGaussian(mean, log_std, low, high).mode()
    np.testing.assert_allclose(mode.detach().numpy(), best.expand(5, 2).numpy(), atol=0.01)


def test_actor_loss_leaves_alpha_alone():
    alpha = torch.tensor(0.5, requires_grad=True)
    log_prob = torch.randn(4, requires_grad=True)
    actor_loss(log_prob, torch.randn(4), torch.randn(4), alpha).backward()
    assert alpha.grad is None and log_prob.grad is not None


@pytest.mark.parametrize("target_entropy", [-3.0, 0.0, 2.5])
def test_temperature_loss_matches_paper(target_entropy):
    rng = np.random.default_rng(41)
    B = 8
    lp = rng.normal(size=B)
    log_alpha = torch.tensor(math.log(0.3), dtype=F64, requires_grad=True)
    log_prob = _t(lp).requires_grad_(True)
    loss = temperature_loss(log_alpha, log_prob, target_entropy)
    ref = sum(-math.log(0.3) * (lp[b] + target_entropy) for b in range(B)) / B
    assert math.isclose(loss.item(), ref, rel_tol=1e-14)
    loss.backward()
    # d/d(log alpha): -(mean log pi + H_bar), the sign of eq. 18's gradient in alpha
    assert math.isclose(log_alpha.grad.item(), -(lp.mean() + target_entropy), rel_tol=1e-13)
    assert log_prob.grad is None


@pytest.mark.parametrize("entropy,grows", [(-5.0, True), (1.0, False)])
def test_alpha_grows_when_entropy_is_below_target(entropy, grows):
    target_entropy = default_target_entropy(2)  # -2
    log_alpha = torch.zeros((), requires_grad=True)
    log_prob = torch.full((16,), -entropy)  # E[-log pi] = entropy
    opt = torch.optim.SGD([log_alpha], lr=0.1)
    opt.zero_grad()
    temperature_loss(log_alpha, log_prob, target_entropy).backward()
    opt.step()
    assert (log_alpha.item() > 0) == grows and log_alpha.item() != 0


def test_default_target_entropy():
    assert default_target_entropy(1) == -1.0 and default_target_entropy(6) == -6.0


# ---------------------------------------------------------------- Polyak averaging


def _params(seed, dtype=F64):
    g = _gen(seed)
    return [torch.randn(3, 4, generator=g, dtype=dtype), torch.randn(4, generator=g, dtype=dtype),
            torch.randn((), generator=g, dtype=dtype)]


def test_polyak_tau_one_copies_tau_zero_keeps():
    target, online = _params(0), _params(1)
    before = [t.clone() for t in target]
    polyak_update_(target, online, 0.0)
    for t, b in zip(target, before):
        assert torch.equal(t, b)
    polyak_update_(target, online, 1.0)
    for t, o in zip(target, online):
        assert torch.equal(t, o)


def test_polyak_matches_closed_form_and_plain_loop():
    tau, k = 0.005, 40
    target, online = _params(2), _params(3)
    t0 = [t.clone() for t in target]
    for _ in range(k):
        polyak_update_(target, online, tau)
    # constant online weights: theta'_k = theta + (1 - tau)^k (theta'_0 - theta)
    for t, t_init, o in zip(target, t0, online):
        np.testing.assert_allclose(t.numpy(), (o + (1 - tau) ** k * (t_init - o)).numpy(), rtol=1e-12, atol=1e-13)

    # changing online weights, element by element: theta' <- (1 - tau) theta' + tau theta
    target = [torch.randn(5, generator=_gen(4), dtype=F64)]
    ref = target[0].tolist()
    for step in range(10):
        online = [torch.randn(5, generator=_gen(100 + step), dtype=F64)]
        polyak_update_(target, online, 0.3)
        ref = [(1 - 0.3) * ref[j] + 0.3 * online[0][j].item() for j in range(5)]
    np.testing.assert_allclose(target[0].numpy(), ref, rtol=1e-13)


def test_polyak_on_modules_averages_parameters_and_copies_buffers():
    torch.manual_seed(0)
    online = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4)).double()
    target = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4)).double()
    online.train()
    online(torch.randn(8, 3, dtype=F64))  # running stats and num_batches_tracked move in the online net only
    before = [p.detach().clone() for p in target.parameters()]
    polyak_update_(target, online, 0.25)
    for p, b, o in zip(target.parameters(), before, online.parameters()):
        torch.testing.assert_close(p.detach(), 0.75 * b + 0.25 * o.detach(), rtol=1e-14, atol=1e-15)
        assert p.requires_grad
    for tb, ob in zip(target.buffers(), online.buffers()):
        assert torch.equal(tb, ob)


def test_polyak_mixed_dtypes_and_integer_tensors():
    target = [torch.zeros(3), torch.zeros(2, dtype=F64), torch.zeros(2, dtype=torch.int64)]
    online = [torch.ones(3), torch.ones(2, dtype=F64), torch.tensor([5, 7])]
    polyak_update_(target, online, 0.5)
    assert torch.equal(target[0], torch.full((3,), 0.5)) and torch.equal(target[1], torch.full((2,), 0.5, dtype=F64))
    assert target[2].tolist() == [5, 7]  # counters are copied, not averaged


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize("tau", [-0.1, 1.5, float("nan"), torch.tensor(0.5)])
def test_bad_tau(tau):
    with pytest.raises(ValueError, match=r"tau=.*\[0, 1\]"):
        polyak_update_(_params(0), _params(1), tau)


def test_polyak_mismatched_networks():
    with pytest.raises(ValueError, match="target has 2 parameters"):
        polyak_update_(_params(0)[:2], _params(1), 0.1)
    with pytest.raises(ValueError, match="shape"):
        polyak_update_([torch.zeros(3)], [torch.zeros(4)], 0.1)


@pytest.mark.parametrize("gamma", [-0.1, 1.01, float("nan")])
def test_bad_gamma(gamma):
    B = 3
    z = torch.zeros(B)
    with pytest.raises(ValueError, match=r"gamma=.* outside \[0, 1\]"):
        clipped_double_q_target(z, z, z, z, z, z, 0.2, gamma)


def test_bad_alpha_and_target_entropy():
    z = torch.zeros(3)
    with pytest.raises(ValueError, match=r"alpha=-0.1 must be a finite number >= 0"):
        clipped_double_q_target(z, z, z, z, z, z, -0.1, 0.99)
    with pytest.raises(ValueError, match="alpha must be a scalar"):
        actor_loss(z, z, z, torch.ones(3))
    with pytest.raises(ValueError, match="target_entropy=inf"):
        temperature_loss(torch.zeros((), requires_grad=True), z, float("inf"))
    with pytest.raises(ValueError, match="action_dim=0"):
        default_target_entropy(0)


@pytest.mark.parametrize("low,high", [([-1.0, 1.0], [1.0, 1.0]), ([0.0], [-1.0])])
def test_low_not_below_high(low, high):
    d = len(low)
    with pytest.raises(ValueError, match=r"low < high .*bad at index"):
        SquashedGaussian(torch.zeros(2, d), torch.zeros(2, d), _t(low, torch.float32), _t(high, torch.float32))


@pytest.mark.parametrize("low,high", [([-math.inf], [1.0]), ([-1.0], [math.inf]), ([math.nan], [1.0])])
def test_infinite_bounds_say_sac_needs_finite_bounds(low, high):
    with pytest.raises(UnsupportedActionSpaceError, match="SAC needs finite action bounds"):
        SquashedGaussian(torch.zeros(2, 1), torch.zeros(2, 1), _t(low, torch.float32), _t(high, torch.float32))
    with pytest.raises(ValueError, match="finite"):
        check_action_bounds(np.array(low), np.array(high))


def test_shape_mismatches_are_reported():
    z3, z4 = torch.zeros(3), torch.zeros(4)
    with pytest.raises(ValueError, match="next_q2 has shape"):
        clipped_double_q_target(z3, z3, z3, z3, z4, z3, 0.2, 0.99)
    with pytest.raises(ValueError, match="discounts has shape"):
        clipped_double_q_target(z3, z3, z3, z3, z3, z3, 0.2, 0.99, discounts=z4)
    with pytest.raises(ValueError, match="rewards must be"):
        clipped_double_q_target(torch.zeros(3, 1), z3, z3, z3, z3, z3, 0.2, 0.99)
    with pytest.raises(ValueError, match="weights has shape"):
        critic_loss(z3, z3, z3, weights=z4)
    with pytest.raises(ValueError, match="q2_pi has shape"):
        actor_loss(z3, z3, z4, 0.2)
    with pytest.raises(ValueError, match="log_std has shape"):
        SquashedGaussian(torch.zeros(2, 3), torch.zeros(2, 2), torch.zeros(3) - 1, torch.ones(3))
    with pytest.raises(ValueError, match=r"low has shape \(2,\), expected \(3,\)"):
        SquashedGaussian(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2) - 1, torch.ones(3))
    with pytest.raises(ValueError, match="mean must be"):
        SquashedGaussian(torch.zeros(3), torch.zeros(3), -1.0, 1.0)
    with pytest.raises(ValueError, match="action has shape"):
        SquashedGaussian(torch.zeros(2, 3), torch.zeros(2, 3), -1.0, 1.0).log_prob(torch.zeros(2, 2))


def test_n_step_soft_target_from_n_step_targets_matches_paper_loop():
    """n-step transitions built with sfx.algo.nstep (zero values: summed rewards, discounts, horizon) and the
    clipped double-Q target with those discounts equal, step by step,

        y_t = sum_{k<h} gamma^k r_{t+k} + gamma^h (min Q'(s_{t+h}) - alpha log pi(a'|s_{t+h}))

    cut at a termination, bootstrapping from the stored final observation at a truncation."""
    from sfx.algo.nstep import n_step_targets

    rng = np.random.default_rng(51)
    B, T, n, gamma, alpha = 3, 12, 4, 0.9, 0.25
    r = rng.normal(size=(B, T))
    term = rng.random((B, T)) < 0.12
    trunc = (rng.random((B, T)) < 0.12) & ~term
    next_q1, next_q2, next_lp = rng.normal(size=(3, B, T))  # at the observation after step j
    final_q1, final_q2, final_lp = rng.normal(size=(3, B, T)) + 5.0  # at the final observation of a truncated j
    assert term.any() and trunc.any()

    zeros = torch.zeros(B, T, dtype=F64)
    summed, discounts, horizon = n_step_targets(_t(r), torch.from_numpy(term), torch.from_numpy(trunc), zeros, zeros,
                                                gamma, n)
    j = torch.arange(T).expand(B, T) + horizon - 1  # the window's last step
    last_trunc = torch.from_numpy(trunc).gather(1, j)

    def at_bootstrap(next_x, final_x):
        return torch.where(last_trunc, _t(final_x).gather(1, j), _t(next_x).gather(1, j))

    y = clipped_double_q_target(summed.flatten(), torch.zeros(B * T), last_trunc.flatten(),
                                at_bootstrap(next_q1, final_q1).flatten(), at_bootstrap(next_q2, final_q2).flatten(),
                                at_bootstrap(next_lp, final_lp).flatten(), alpha, gamma,
                                discounts=discounts.flatten()).view(B, T)

    expected = np.zeros((B, T))
    for b in range(B):
        for t in range(T):
            g, k = 0.0, 0
            while True:
                s = t + k
                g += gamma ** k * r[b, s]
                if term[b, s]:
                    break
                if trunc[b, s]:
                    g += gamma ** (k + 1) * (min(final_q1[b, s], final_q2[b, s]) - alpha * final_lp[b, s])
                    break
                if k == n - 1 or s == T - 1:
                    g += gamma ** (k + 1) * (min(next_q1[b, s], next_q2[b, s]) - alpha * next_lp[b, s])
                    break
                k += 1
            expected[b, t] = g
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-12, atol=1e-12)
