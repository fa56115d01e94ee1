"""PopArt against plain loops written from the papers (van Hasselt et al. 2016, Algorithm 1; Hessel et
al. 2019, per-task statistics from the learner's batch), the output-preserving property, per-task
independence, masking, data-parallel reduction, the sigma clip, K = 1 and dtypes."""

import math

import numpy as np
import pytest
import torch

from sfx.algo.popart import (
    POPART_SIGMA_MAX,
    PopArtStats,
    popart_advantages,
    popart_normalize,
    popart_preserve_,
    popart_rescaled_head,
    popart_step,
    popart_unnormalize,
    popart_update,
    select_task_values,
)

CLIP_MIN = 1e-4


# ---------------------------------------------------------------- references written from the papers

def sigma_from_paper(mu, nu, clip_min=CLIP_MIN, clip_max=POPART_SIGMA_MAX):
    """sigma = sqrt(nu - mu^2), kept in [clip_min, clip_max] (a negative or zero variance gives clip_min)."""
    var = nu - mu * mu
    s = math.sqrt(var) if var > 0 else 0.0
    return min(clip_max, max(clip_min, s))


def art_from_paper(mu, nu, targets, tasks, valid, beta):
    """Hessel et al. 2019: per task, one moving-average step towards the mean target and the mean squared
    target of that task's samples in the batch; a task without samples keeps its statistics."""
    mu, nu = list(mu), list(nu)
    for k in range(len(mu)):
        mine = [float(g) for g, i, v in zip(targets, tasks, valid) if v and i == k]
        if not mine:
            continue
        mean = sum(mine) / len(mine)
        mean2 = sum(g * g for g in mine) / len(mine)
        mu[k] = (1 - beta) * mu[k] + beta * mean
        nu[k] = (1 - beta) * nu[k] + beta * mean2
    return mu, nu


def algorithm1_from_paper(mu, nu, weight, bias, samples, beta, clip_min=CLIP_MIN):
    """van Hasselt et al. 2016, Algorithm 1 without the gradient step, one sample (Y_t of task k) at a time:
    new statistics from Y_t, then W_k <- sigma_old / sigma_new W_k and
    b_k <- (sigma_old b_k + mu_old - mu_new) / sigma_new.
    Only task k's statistics (and so only row k) change."""
    mu, nu = list(mu), list(nu)
    weight = [list(row) for row in weight]
    bias = list(bias)
    for y, k in samples:
        old_mu, old_sigma = mu[k], sigma_from_paper(mu[k], nu[k], clip_min)
        mu[k] = (1 - beta) * mu[k] + beta * y
        nu[k] = (1 - beta) * nu[k] + beta * y * y
        new_sigma = sigma_from_paper(mu[k], nu[k], clip_min)
        weight[k] = [w * old_sigma / new_sigma for w in weight[k]]
        bias[k] = (old_sigma * bias[k] + old_mu - mu[k]) / new_sigma
    return mu, nu, weight, bias


def _f64(x):
    return torch.tensor(x, dtype=torch.float64)


def _random_stats(rng, k):
    mu = rng.normal(0.0, 10.0, size=k)
    sd = 10.0 ** rng.uniform(-2, 3, size=k)
    return PopArtStats(mu=torch.tensor(mu), nu=torch.tensor(sd * sd + mu * mu))


# ---------------------------------------------------------------- the update rule

@pytest.mark.parametrize("num_tasks", [1, 3, 7])
@pytest.mark.parametrize("beta", [3e-4, 0.1, 1.0])
def test_update_matches_per_task_batch_loop(num_tasks, beta):
    rng = np.random.default_rng(num_tasks * 100 + int(beta * 1000))
    stats = PopArtStats.initial(num_tasks)
    mu, nu = [0.0] * num_tasks, [1.0] * num_tasks
    scales = 10.0 ** rng.uniform(-1, 3, size=num_tasks)  # tasks of very different reward scales
    for n in (1, 5, 64, 200, 3):
        tasks = rng.integers(0, num_tasks, size=n)
        targets = rng.normal(3.0, 1.0, size=n) * scales[tasks]
        valid = rng.random(n) > 0.25
        stats = popart_update(stats, torch.tensor(targets), torch.tensor(tasks), beta, valid=torch.tensor(valid))
        mu, nu = art_from_paper(mu, nu, targets, tasks, valid, beta)
        np.testing.assert_allclose(stats.mu.numpy(), mu, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(stats.nu.numpy(), nu, rtol=1e-12, atol=1e-12)
        sigma_ref = [sigma_from_paper(m, v) for m, v in zip(mu, nu)]
        np.testing.assert_allclose(stats.sigma(CLIP_MIN).numpy(), sigma_ref, rtol=1e-10)


def test_one_sample_per_step_is_algorithm_1():
    """With one sample per learner step, the batch rule is van Hasselt's per-sample Algorithm 1, rescale included."""
    rng = np.random.default_rng(1)
    num_tasks, hidden = 4, 5
    head = torch.nn.Linear(hidden, num_tasks).double()
    w0, b0 = head.weight.detach().numpy().copy(), head.bias.detach().numpy().copy()
    samples = [(float(rng.normal(0, 10.0 ** (k % 3))), int(k)) for k in rng.integers(0, num_tasks, size=60)]
    beta = 0.05
    stats = PopArtStats.initial(num_tasks)
    for y, k in samples:
        stats = popart_step(stats, head, _f64([y]), torch.tensor([k]), beta, CLIP_MIN).stats
    mu, nu, w, b = algorithm1_from_paper([0.0] * num_tasks, [1.0] * num_tasks, w0, b0, samples, beta)
    np.testing.assert_allclose(stats.mu.numpy(), mu, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(stats.nu.numpy(), nu, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(head.weight.detach().numpy(), w, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(head.bias.detach().numpy(), b, rtol=1e-10, atol=1e-12)


def test_batch_rule_differs_from_folding_samples_in_one_by_one():
    """The documented choice: one step per task per batch, not n sequential steps (mu would move by 1-(1-beta)^n)."""
    stats = PopArtStats.initial(1)
    batch = popart_update(stats, torch.full((10,), 2.0), None, 0.5)
    assert batch.mu.item() == pytest.approx(1.0)  # 0.5 * 0 + 0.5 * 2
    one_by_one = stats
    for _ in range(10):
        one_by_one = popart_update(one_by_one, torch.tensor([2.0]), None, 0.5)
    assert one_by_one.mu.item() == pytest.approx(2.0 * (1 - 0.5 ** 10))


def test_a_task_with_one_sample_moves_towards_that_sample():
    stats = PopArtStats(mu=_f64([1.0, -2.0]), nu=_f64([5.0, 8.0]))
    targets = torch.tensor([10.0, 0.5, 0.7, 0.9])
    tasks = torch.tensor([0, 1, 1, 1])
    new = popart_update(stats, targets, tasks, 0.1)
    assert new.mu[0].item() == pytest.approx(0.9 * 1.0 + 0.1 * 10.0)
    assert new.nu[0].item() == pytest.approx(0.9 * 5.0 + 0.1 * 100.0)
    assert new.mu[1].item() == pytest.approx(0.9 * -2.0 + 0.1 * 0.7)
    assert new.nu[1].item() == pytest.approx(0.9 * 8.0 + 0.1 * (0.25 + 0.49 + 0.81) / 3)


def test_beta_one_gives_the_batch_moments():
    rng = np.random.default_rng(2)
    g = rng.normal(4.0, 3.0, size=1000)
    new = popart_update(PopArtStats.initial(1), torch.tensor(g), None, 1.0)
    assert new.mu.item() == pytest.approx(g.mean(), rel=1e-12)
    assert new.sigma(CLIP_MIN).item() == pytest.approx(g.std(), rel=1e-9)  # population std


def test_update_does_not_modify_its_inputs():
    stats = PopArtStats.initial(2)
    targets = torch.tensor([1.0, 2.0])
    popart_update(stats, targets, torch.tensor([0, 1]), 0.5)
    assert stats.mu.tolist() == [0.0, 0.0] and stats.nu.tolist() == [1.0, 1.0]
    assert targets.tolist() == [1.0, 2.0]


# ---------------------------------------------------------------- independence, masking, absent tasks

def test_a_task_never_moves_on_a_batch_of_another_task():
    rng = np.random.default_rng(3)
    stats = _random_stats(rng, 3)
    for _ in range(5):
        new = popart_update(stats, torch.tensor(rng.normal(0, 100, size=50)), torch.full((50,), 1), 0.3)
        assert torch.equal(new.mu[[0, 2]], stats.mu[[0, 2]]) and torch.equal(new.nu[[0, 2]], stats.nu[[0, 2]])
        assert not torch.equal(new.mu[1], stats.mu[1])
        stats = new


def test_masked_samples_never_count():
    rng = np.random.default_rng(4)
    stats = _random_stats(rng, 3)
    targets = torch.tensor(rng.normal(size=40))
    tasks = torch.tensor(rng.integers(0, 3, size=40))
    valid = torch.tensor(rng.random(40) > 0.5)
    expected = popart_update(stats, targets[valid], tasks[valid], 0.2)
    # masked-out samples may hold anything: NaN, inf, task ids out of range
    garbage_targets = torch.where(valid, targets, torch.tensor([math.nan, math.inf] * 20, dtype=torch.float64))
    garbage_tasks = torch.where(valid, tasks, torch.tensor([-1, 99] * 20))
    got = popart_update(stats, garbage_targets, garbage_tasks, 0.2, valid=valid)
    torch.testing.assert_close(got.mu, expected.mu, rtol=0, atol=0)
    torch.testing.assert_close(got.nu, expected.nu, rtol=0, atol=0)


def test_all_tasks_absent_changes_nothing():
    rng = np.random.default_rng(5)
    stats = _random_stats(rng, 4)
    for targets, tasks, valid in [(torch.zeros(0), torch.zeros(0, dtype=torch.long), None),
                                  (torch.randn(6), torch.tensor([0, 1, 2, 3, 0, 1]), torch.zeros(6, dtype=torch.bool))]:
        new = popart_update(stats, targets, tasks, 0.5, valid=valid)
        assert torch.equal(new.mu, stats.mu) and torch.equal(new.nu, stats.nu)


def test_tasks_and_valid_per_trajectory_broadcast_over_time():
    rng = np.random.default_rng(6)
    stats = _random_stats(rng, 3)
    targets = torch.tensor(rng.normal(size=(4, 6)))
    tasks = torch.tensor([2, 0, 2, 1])
    valid = torch.tensor([True, False, True, True])
    got = popart_update(stats, targets, tasks, 0.1, valid=valid)
    full = popart_update(stats, targets, tasks[:, None].expand(4, 6), 0.1, valid=valid[:, None].expand(4, 6))
    assert torch.equal(got.mu, full.mu) and torch.equal(got.nu, full.nu)
    assert torch.equal(got.mu[0], stats.mu[0])  # the only task-0 trajectory is masked


# ---------------------------------------------------------------- data-parallel ranks

def test_reduce_over_two_ranks_equals_one_update_on_the_concatenation():
    rng = np.random.default_rng(7)
    num_tasks = 5
    stats = _random_stats(rng, num_tasks)
    halves = []
    for n in (30, 17):
        halves.append((torch.tensor(rng.normal(0, 50, size=n)), torch.tensor(rng.integers(0, num_tasks - 1, size=n)),
                       torch.tensor(rng.random(n) > 0.2)))
    # task 4 appears on no rank; task 3 on rank 1 only
    halves[0][1][halves[0][1] == 3] = 0

    local = {}

    def capture(rank):
        def reduce(m):
            local[rank] = m.clone()
            return m
        return reduce

    for rank, (g, t, v) in enumerate(halves):
        popart_update(stats, g, t, 0.2, valid=v, reduce=capture(rank))

    calls = []

    def all_reduce(rank):
        def reduce(m):
            calls.append((rank, tuple(m.shape), m.dtype))
            return m + local[1 - rank]
        return reduce

    per_rank = [popart_update(stats, g, t, 0.2, valid=v, reduce=all_reduce(rank))
                for rank, (g, t, v) in enumerate(halves)]
    assert calls == [(0, (3, num_tasks), torch.float64), (1, (3, num_tasks), torch.float64)]  # one call per update
    whole = popart_update(stats, torch.cat([h[0] for h in halves]), torch.cat([h[1] for h in halves]), 0.2,
                          valid=torch.cat([h[2] for h in halves]))
    for got in per_rank:
        torch.testing.assert_close(got.mu, whole.mu, rtol=1e-13, atol=1e-12)
        torch.testing.assert_close(got.nu, whole.nu, rtol=1e-13, atol=1e-12)
    assert torch.equal(per_rank[0].mu[4], stats.mu[4])


def test_reduce_is_called_even_with_nothing_to_count():
    calls = []
    stats = PopArtStats.initial(2)
    popart_update(stats, torch.zeros(0), torch.zeros(0, dtype=torch.long), 0.1, reduce=lambda m: calls.append(1) or m)
    assert calls == [1]  # a collective: a rank with an empty batch must still take part


# ---------------------------------------------------------------- preserving outputs

@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-9), (torch.float32, 2e-4)])
def test_rescale_preserves_unnormalized_outputs_for_every_task(dtype, tol):
    gen = torch.Generator().manual_seed(8)
    rng = np.random.default_rng(8)
    for num_tasks in (1, 6):
        for _ in range(10):
            head = torch.nn.Linear(16, num_tasks).to(dtype)
            h = torch.randn(32, 16, generator=gen, dtype=dtype)
            old, new = _random_stats(rng, num_tasks), _random_stats(rng, num_tasks)
            old_sigma, new_sigma = old.sigma(CLIP_MIN), new.sigma(CLIP_MIN)
            with torch.no_grad():
                before = head(h).double() * old_sigma + old.mu  # [N, K]: every task's value in the reward scale
                popart_preserve_(head, old.mu, old_sigma, new.mu, new_sigma)
                after = head(h).double() * new_sigma + new.mu
            scale = before.abs().max().item() + 1.0
            torch.testing.assert_close(after, before, rtol=tol, atol=tol * scale)


def test_rescale_preserves_outputs_through_per_sample_gather():
    rng = np.random.default_rng(9)
    head = torch.nn.Linear(8, 4).double()
    h = torch.randn(20, 8, dtype=torch.float64)
    tasks = torch.tensor(rng.integers(0, 4, size=20))
    stats = _random_stats(rng, 4)
    with torch.no_grad():
        before = popart_unnormalize(select_task_values(head(h), tasks), tasks, stats.mu, stats.sigma(CLIP_MIN))
        targets = torch.tensor(rng.normal(0, 1000, size=20))
        step = popart_step(stats, head, targets, tasks, 0.3, CLIP_MIN)
        after = popart_unnormalize(select_task_values(head(h), tasks), tasks, step.stats.mu, step.sigma)
    torch.testing.assert_close(after, before, rtol=1e-10, atol=1e-8)
    assert not torch.equal(step.sigma, step.old_sigma)  # the statistics did change
    torch.testing.assert_close(step.old_sigma, stats.sigma(CLIP_MIN))
    assert torch.equal(step.old_mu, stats.mu)


def test_rescaled_head_pure_matches_the_formula():
    w = torch.tensor([[1.0, -2.0], [0.5, 4.0]])
    b = torch.tensor([0.25, -1.0])
    old_mu, old_sigma = torch.tensor([1.0, 10.0], dtype=torch.float64), torch.tensor([2.0, 5.0], dtype=torch.float64)
    mu, sigma = torch.tensor([3.0, 0.0], dtype=torch.float64), torch.tensor([4.0, 1.0], dtype=torch.float64)
    new_w, new_b = popart_rescaled_head(w, b, old_mu, old_sigma, mu, sigma)
    assert new_w.dtype == torch.float32 and new_b.dtype == torch.float32
    torch.testing.assert_close(new_w, torch.tensor([[0.5, -1.0], [2.5, 20.0]]))
    torch.testing.assert_close(new_b, torch.tensor([(2 * 0.25 + 1 - 3) / 4, (5 * -1.0 + 10 - 0) / 1]))
    assert w.tolist() == [[1.0, -2.0], [0.5, 4.0]]  # inputs untouched


def test_preserve_in_place_keeps_the_parameters_and_the_optimizer():
    head = torch.nn.Linear(3, 2)
    weight, bias = head.weight, head.bias
    opt = torch.optim.SGD(head.parameters(), lr=0.1)
    stats = PopArtStats.initial(2)
    popart_step(stats, head, torch.tensor([100.0, -50.0]), torch.tensor([0, 1]), 0.5, CLIP_MIN)
    assert head.weight is weight and head.bias is bias
    assert weight.is_leaf and weight.grad_fn is None and weight.requires_grad
    assert opt.param_groups[0]["params"][0] is weight


def test_head_without_bias_or_with_wrong_shape_is_rejected():
    stats = PopArtStats.initial(2)
    sigma = stats.sigma(CLIP_MIN)
    with pytest.raises(ValueError, match="no bias"):
        popart_preserve_(torch.nn.Linear(3, 2, bias=False), stats.mu, sigma, stats.mu, sigma)
    with pytest.raises(ValueError, match="K=2"):
        popart_preserve_(torch.nn.Linear(3, 5), stats.mu, sigma, stats.mu, sigma)


# ---------------------------------------------------------------- sigma clip, K = 1, numerics, dtypes

def test_initial_statistics_are_the_identity():
    stats = PopArtStats.initial(3)
    assert stats.num_tasks == 3
    assert stats.mu.dtype == torch.float64 and stats.nu.dtype == torch.float64
    sigma = stats.sigma(CLIP_MIN)
    assert sigma.tolist() == [1.0, 1.0, 1.0]
    x = torch.randn(10)
    tasks = torch.randint(0, 3, (10,))
    assert torch.equal(popart_normalize(x, tasks, stats.mu, sigma), x)
    assert torch.equal(popart_unnormalize(x, tasks, stats.mu, sigma), x)


def test_sigma_clip_engages_when_the_variance_vanishes():
    # constant targets: nu - mu^2 = 0 -> sigma = clip_min, never 0 or NaN (float32 values square exactly in
    # float64, so the variance is exactly 0 here, even at 1e5)
    for c in (0.0, 0.1, 3.3, 123456.789):
        new = popart_update(PopArtStats.initial(1), torch.full((7,), c), None, 1.0)
        assert new.sigma(CLIP_MIN).item() == CLIP_MIN
        assert new.sigma(1e-2).item() == 1e-2
        z = popart_normalize(torch.tensor([c + 1.0]), None, new.mu, new.sigma(CLIP_MIN))
        assert torch.isfinite(z).all()
    # a negative variance (nu < mu^2, e.g. loaded or rounded statistics) is clipped too
    assert PopArtStats(mu=_f64([2.0]), nu=_f64([3.0])).sigma(CLIP_MIN).item() == CLIP_MIN
    # and the upper bound
    huge = PopArtStats(mu=_f64([0.0]), nu=_f64([1e20]))
    assert huge.sigma(CLIP_MIN).item() == POPART_SIGMA_MAX
    assert huge.sigma(CLIP_MIN, clip_max=1e4).item() == 1e4


def test_k1_is_scalar_popart():
    rng = np.random.default_rng(10)
    stats_none, stats_zero = PopArtStats.initial(1), PopArtStats.initial(1)
    mu, nu = 0.0, 1.0
    for n in (3, 50, 1):
        g = rng.normal(20.0, 5.0, size=(n, 4))
        stats_none = popart_update(stats_none, torch.tensor(g), None, 0.1)
        stats_zero = popart_update(stats_zero, torch.tensor(g), torch.zeros(n, dtype=torch.long), 0.1)
        mu = 0.9 * mu + 0.1 * g.mean()  # the single-task rule: one step towards the batch's moments
        nu = 0.9 * nu + 0.1 * (g * g).mean()
    for s in (stats_none, stats_zero):
        assert s.mu.shape == (1,)
        assert s.mu.item() == pytest.approx(mu, rel=1e-12) and s.nu.item() == pytest.approx(nu, rel=1e-12)
    sigma = stats_none.sigma(CLIP_MIN)
    out = torch.randn(6, 1)  # a one-output value head
    v = select_task_values(out, None)
    assert v.shape == (6,)
    torch.testing.assert_close(popart_unnormalize(v, None, stats_none.mu, sigma),
                               out[:, 0] * sigma.float() + stats_none.mu.float())


def test_float32_targets_give_float64_statistics_and_values_keep_their_dtype():
    stats = PopArtStats.initial(2)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        new = popart_update(stats, torch.tensor([1.0, 2.0, 3.0], dtype=dtype), torch.tensor([0, 1, 1]), 0.5)
        assert new.mu.dtype == torch.float64 and new.nu.dtype == torch.float64
        sigma = new.sigma(CLIP_MIN)
        assert sigma.dtype == torch.float64
        x = torch.tensor([0.5, -0.5], dtype=dtype)
        assert popart_normalize(x, torch.tensor([0, 1]), new.mu, sigma).dtype == dtype
        assert popart_unnormalize(x, torch.tensor([0, 1]), new.mu, sigma).dtype == dtype
        assert popart_advantages(x, torch.tensor([0, 1]), sigma).dtype == dtype


def test_huge_targets_stay_accurate():
    rng = np.random.default_rng(11)
    g32 = (1e6 + 1e3 * rng.normal(size=(64, 32))).astype(np.float32)
    g = g32.astype(np.float64)
    stats = popart_update(PopArtStats.initial(1), torch.tensor(g32), None, 1.0)
    assert stats.mu.item() == pytest.approx(g.mean(), rel=1e-12)
    assert stats.sigma(CLIP_MIN).item() == pytest.approx(g.std(), rel=1e-8)
    # EMA over many steps from the initial statistics: still the paper's numbers
    stats, mu, nu = PopArtStats.initial(1), 0.0, 1.0
    for _ in range(20):
        stats = popart_update(stats, torch.tensor(g32), None, 0.3)
        mu, nu = 0.7 * mu + 0.3 * g.mean(), 0.7 * nu + 0.3 * (g * g).mean()
    assert stats.mu.item() == pytest.approx(mu, rel=1e-12)
    assert stats.sigma(CLIP_MIN).item() == pytest.approx(math.sqrt(nu - mu * mu), rel=1e-9)
    # normalised float32 targets are standard to float32 precision
    z = popart_normalize(torch.tensor(g32), None, stats.mu, stats.sigma(CLIP_MIN))
    assert z.dtype == torch.float32 and torch.isfinite(z).all()
    z_ref = (g - mu) / math.sqrt(nu - mu * mu)
    np.testing.assert_allclose(z.numpy(), z_ref, atol=1e-3)
    back = popart_unnormalize(z, None, stats.mu, stats.sigma(CLIP_MIN))
    np.testing.assert_allclose(back.numpy(), g, atol=0.25)  # a few float32 ulps at 1e6
    # in float64 the round trip is exact to float64 precision
    z64 = popart_normalize(torch.tensor(g), None, stats.mu, stats.sigma(CLIP_MIN))
    np.testing.assert_allclose(z64.numpy(), z_ref, rtol=1e-6, atol=1e-6)
    back64 = popart_unnormalize(z64, None, stats.mu, stats.sigma(CLIP_MIN))
    np.testing.assert_allclose(back64.numpy(), g, rtol=1e-12)


# ---------------------------------------------------------------- per-sample gathers

def test_normalize_and_unnormalize_gather_each_samples_task():
    rng = np.random.default_rng(12)
    stats = _random_stats(rng, 5)
    sigma = stats.sigma(CLIP_MIN)
    values = torch.tensor(rng.normal(0, 100, size=(3, 7)))
    tasks = torch.tensor(rng.integers(0, 5, size=(3, 7)))
    z = popart_normalize(values, tasks, stats.mu, sigma)
    for i in range(3):
        for j in range(7):
            k = int(tasks[i, j])
            assert z[i, j].item() == pytest.approx((values[i, j].item() - stats.mu[k].item()) / sigma[k].item(),
                                                   rel=1e-12, abs=1e-12)
    torch.testing.assert_close(popart_unnormalize(z, tasks, stats.mu, sigma), values, rtol=1e-12, atol=1e-10)
    per_row = torch.tensor([4, 0, 2])
    torch.testing.assert_close(popart_normalize(values, per_row, stats.mu, sigma),
                               popart_normalize(values, per_row[:, None].expand(3, 7), stats.mu, sigma))


def test_select_task_values_takes_each_samples_column_and_its_gradient():
    out = torch.randn(4, 3, 5, requires_grad=True)  # [B, T, K]
    tasks = torch.tensor([4, 0, 2, 4])  # one task per trajectory
    v = select_task_values(out, tasks)
    assert v.shape == (4, 3)
    torch.testing.assert_close(v, out.detach()[torch.arange(4)[:, None], torch.arange(3)[None, :], tasks[:, None]])
    v.sum().backward()
    expected = torch.zeros(4, 3, 5)
    expected[torch.arange(4), :, tasks] = 1.0
    assert torch.equal(out.grad, expected)


def test_popart_advantages_are_hessel_normalised_advantages():
    """(r + gamma v_next - mu_k) / sigma_k - n_k(x)  ==  (r + gamma v_next - V_k(x)) / sigma_k."""
    rng = np.random.default_rng(13)
    stats = _random_stats(rng, 3)
    sigma = stats.sigma(CLIP_MIN)
    tasks = torch.tensor(rng.integers(0, 3, size=(5, 6)))
    n = torch.tensor(rng.normal(size=(5, 6)))  # the head's normalised values
    values = popart_unnormalize(n, tasks, stats.mu, sigma)
    bootstrap_target = torch.tensor(rng.normal(0, 50, size=(5, 6)))  # r_t + gamma v_{t+1}, reward scale
    hessel = popart_normalize(bootstrap_target, tasks, stats.mu, sigma) - n
    torch.testing.assert_close(popart_advantages(bootstrap_target - values, tasks, sigma), hessel,
                               rtol=1e-9, atol=1e-9)


# ---------------------------------------------------------------- bad input

def test_bad_input_is_reported():
    stats = PopArtStats.initial(3)
    with pytest.raises(ValueError, match="task id 3 out of range"):
        popart_update(stats, torch.zeros(2), torch.tensor([0, 3]), 0.1)
    with pytest.raises(ValueError, match="task id -1 out of range"):
        popart_update(stats, torch.zeros(2), torch.tensor([-1, 0]), 0.1)
    with pytest.raises(ValueError, match="integer task ids"):
        popart_update(stats, torch.zeros(2), torch.tensor([0.0, 1.0]), 0.1)
    with pytest.raises(ValueError, match="tasks has shape"):
        popart_update(stats, torch.zeros(2, 3), torch.tensor([0, 1, 2]), 0.1)
    with pytest.raises(ValueError, match="valid has shape"):
        popart_update(stats, torch.zeros(2, 3), None, 0.1, valid=torch.ones(3, dtype=torch.bool))
    for beta in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="beta"):
            popart_update(stats, torch.zeros(2), None, beta)
    with pytest.raises(ValueError, match="float64"):
        popart_update(PopArtStats(mu=torch.zeros(2), nu=torch.ones(2)), torch.zeros(2), None, 0.1)
    with pytest.raises(ValueError, match="clip_min"):
        stats.sigma(0.0)
    with pytest.raises(ValueError, match="clip_max"):
        stats.sigma(1e-4, clip_max=1e-5)
    with pytest.raises(ValueError, match="num_tasks"):
        PopArtStats.initial(0)


def test_rescaling_between_forward_and_backward_is_caught_by_autograd():
    """The learner must rescale after the optimizer step (or before the forward pass), never in between."""
    head = torch.nn.Linear(3, 2)
    out = head(torch.randn(4, 3, requires_grad=True))
    popart_step(PopArtStats.initial(2), head, torch.tensor([5.0, 7.0]), torch.tensor([0, 1]), 0.5, CLIP_MIN)
    with pytest.raises(RuntimeError, match="inplace"):
        out.sum().backward()


def test_learning_step_order_of_the_module_docstring_runs_and_converges():
    """Statistics, rescale, head again on the same features, loss on normalised targets, backward, step:
    a regression onto targets of two tasks 1000x apart learns both (the point of PopArt)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # hundreds of tiny steps: thread hand-offs would cost more than the math
    try:
        _learn_two_tasks()
    finally:
        torch.set_num_threads(threads)


def _learn_two_tasks():
    torch.manual_seed(14)
    encoder, head = torch.nn.Linear(2, 16), torch.nn.Linear(16, 2)
    opt = torch.optim.SGD([*encoder.parameters(), *head.parameters()], lr=0.3)
    stats = PopArtStats.initial(2)
    for _ in range(300):
        x = torch.randn(64, 2)
        tasks = torch.randint(0, 2, (64,))
        # task 0: targets of scale 1; task 1: the same function times 1000 plus 5000
        vs = torch.where(tasks == 0, x[:, 0] - x[:, 1], 1000.0 * (x[:, 0] - x[:, 1]) + 5000.0)
        features = torch.tanh(encoder(x))
        values = popart_unnormalize(select_task_values(head(features), tasks), tasks, stats.mu,
                                    stats.sigma(CLIP_MIN))
        step = popart_step(stats, head, vs, tasks, 0.1, CLIP_MIN)
        stats = step.stats
        n_new = select_task_values(head(features), tasks)
        # the rescale preserved the values the targets were computed from
        torch.testing.assert_close(popart_unnormalize(n_new.detach(), tasks, stats.mu, step.sigma), values.detach(),
                                   rtol=1e-4, atol=1e-2)
        loss = 0.5 * (n_new - popart_normalize(vs, tasks, stats.mu, step.sigma)).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert encoder.weight.grad is not None
    x = torch.randn(256, 2)
    with torch.no_grad():
        n = head(torch.tanh(encoder(x)))
    sigma = stats.sigma(CLIP_MIN)
    for k, (scale, shift) in enumerate([(1.0, 0.0), (1000.0, 5000.0)]):
        v = popart_unnormalize(n[:, k], torch.full((256,), k), stats.mu, sigma)
        target = scale * (x[:, 0] - x[:, 1]) + shift
        err = (v - target).abs().mean().item()
        baseline = (target - target.mean()).abs().mean().item()  # predicting the mean
        assert err < 0.15 * baseline, (k, err, baseline)  # ~0.06 over seeds
