"""The sum tree's sampling distribution against P(i) = p_i / sum_j p_j (Schaul et al. 2016, section 3.3, with
the exponent applied by PrioritizedSampler), checked with a seeded generator and a chi-square bound from the
sample count; stratification (one draw per equal segment of the total), zero priorities, updates."""

import math

import numpy as np
import pytest
import torch

from sfx.algo.prioritized import PrioritizedSampler, SumTree


def _draw_counts(sampler, capacity, k, batches, seed):
    gen = torch.Generator().manual_seed(seed)
    counts = np.zeros(capacity, dtype=np.int64)
    for _ in range(batches):
        idx = sampler.sample(k, gen).indices
        counts += np.bincount(idx.numpy(), minlength=capacity)
    return counts


def chi_square(counts, expected_p):
    """Pearson's statistic over the cells of positive expected probability, and its degrees of freedom."""
    n = counts.sum()
    cells = expected_p > 0
    expected = n * expected_p[cells]
    return float(((counts[cells] - expected) ** 2 / expected).sum()), int(cells.sum()) - 1


def chi_square_bound(df):
    """mean + 6 standard deviations of a chi-square with df degrees of freedom (mean df, variance 2 df): a
    multinomial sample exceeds it with probability well below 1e-6, and stratified draws vary less."""
    return df + 6.0 * math.sqrt(2.0 * df)


def _assert_distribution(counts, p):
    stat, df = chi_square(counts, p)
    assert stat < chi_square_bound(df), (stat, df)
    # the test has power: the same counts against a clearly different (uniform over the support) law fail
    wrong = np.where(p > 0, 1.0, 0.0) / (p > 0).sum()
    assert chi_square(counts, wrong)[0] > chi_square_bound(df)


def test_distribution_matches_priorities():
    rng = np.random.default_rng(0)
    capacity = 37  # not a power of two: padding leaves must stay unreachable
    p = rng.random(capacity) ** 3  # spread over three orders of magnitude
    p[[0, 5, 36]] = 0.0
    tree = SumTree(capacity)
    tree.update(torch.arange(capacity), torch.tensor(p))
    assert math.isclose(tree.total(), p.sum(), rel_tol=1e-12)
    counts = _draw_counts(tree, capacity, k=64, batches=300, seed=1)
    assert counts[[0, 5, 36]].sum() == 0
    _assert_distribution(counts, p / p.sum())


def test_sample_probabilities_are_weight_over_total():
    p = torch.tensor([1.0, 3.0, 0.0, 4.0], dtype=torch.float64)
    tree = SumTree(4)
    tree.update(torch.arange(4), p)
    sample = tree.sample(100, torch.Generator().manual_seed(0))
    np.testing.assert_allclose(sample.probabilities.numpy(), (p[sample.indices] / 8.0).numpy(), rtol=1e-15)


def test_updates_change_the_distribution():
    rng = np.random.default_rng(2)
    capacity = 50
    p = rng.random(capacity) + 0.1
    tree = SumTree(capacity)
    tree.update(torch.arange(capacity), torch.tensor(p))
    changed = np.array([3, 7, 7, 20, 49, 3])  # repeated indices: the last value wins
    new = np.array([5.0, 0.0, 2.0, 10.0, 0.0, 0.25])
    tree.update(torch.tensor(changed), torch.tensor(new))
    for i, v in zip(changed, new):
        p[i] = v
    np.testing.assert_allclose(tree.get(torch.arange(capacity)).numpy(), p, rtol=0)
    assert p[7] == 2.0 and p[3] == 0.25
    assert math.isclose(tree.total(), p.sum(), rel_tol=1e-12)
    counts = _draw_counts(tree, capacity, k=128, batches=150, seed=3)
    assert counts[49] == 0
    _assert_distribution(counts, p / p.sum())


def test_every_node_is_the_sum_of_its_children_after_many_updates():
    rng = np.random.default_rng(4)
    capacity = 1000
    tree = SumTree(capacity)
    for _ in range(50):
        idx = rng.integers(0, capacity, size=64)
        tree.update(torch.tensor(idx), torch.tensor(rng.random(64) * (rng.random(64) > 0.2)))
    for level in range(tree.depth):
        children = tree.levels[level + 1]
        np.testing.assert_array_equal(tree.levels[level].numpy(), (children[0::2] + children[1::2]).numpy())
    assert len(tree.levels[-1]) == 1024 and tree.levels[-1][capacity:].sum() == 0


@pytest.mark.parametrize("capacity", [1, 2, 3, 64, 1000])
def test_zero_priorities_are_never_drawn(capacity):
    rng = np.random.default_rng(capacity)
    p = np.zeros(capacity)
    support = rng.choice(capacity, size=max(1, capacity // 3), replace=False)
    # tiny priorities next to zeros and huge ones: interval edges where rounding could step into an empty slot
    p[support] = rng.choice([1e-12, 1e-3, 1.0, 1e9], size=len(support))
    tree = SumTree(capacity)
    tree.update(torch.arange(capacity), torch.tensor(p))
    counts = _draw_counts(tree, capacity, k=257, batches=40, seed=capacity)
    assert counts[p == 0].sum() == 0
    assert counts.sum() == 257 * 40


@pytest.mark.parametrize("u", [0.0, 1.0 - 2.0 ** -53])
def test_draws_at_the_very_edges_skip_empty_slots(monkeypatch, u):
    """U = 0 and U just below 1 in every segment: values exactly on the cumulative edges of the slots and just
    below the total, where rounding could step into the empty slots around the two non-empty ones."""
    tree = SumTree(8)
    tree.update(torch.tensor([2, 5]), torch.tensor([0.1, 0.7]))
    monkeypatch.setattr(torch, "rand", lambda k, **kw: torch.full((k,), u, dtype=kw["dtype"]))
    for k in (1, 2, 3, 7, 8, 1000):
        idx = tree.sample(k).indices
        assert set(idx.tolist()) <= {2, 5}
        assert idx[0].item() == 2 if u == 0.0 else idx[-1].item() == 5  # the first and the last non-empty slot


@pytest.mark.parametrize("k", [1, 4, 10, 33])
def test_sampling_is_stratified(k):
    """Draw i falls in the i-th of k equal segments of [0, total): its slot's cumulative interval meets it."""
    rng = np.random.default_rng(k)
    capacity = 20
    p = rng.random(capacity) * (rng.random(capacity) > 0.25)
    tree = SumTree(capacity)
    tree.update(torch.arange(capacity), torch.tensor(p))
    upper = np.cumsum(p)
    lower = upper - p
    total = p.sum()
    gen = torch.Generator().manual_seed(k)
    for _ in range(20):
        idx = tree.sample(k, gen).indices.numpy()
        assert (np.diff(idx) >= 0).all()
        for i, slot in enumerate(idx):
            seg_lo, seg_hi = i * total / k, (i + 1) * total / k
            assert lower[slot] <= seg_hi + 1e-12 and upper[slot] >= seg_lo - 1e-12


def test_equal_priorities_and_k_equal_capacity_draw_each_slot_once():
    tree = SumTree(16)
    tree.update(torch.arange(16), torch.ones(16))
    for seed in range(5):
        assert tree.sample(16, torch.Generator().manual_seed(seed)).indices.tolist() == list(range(16))


@pytest.mark.parametrize("alpha", [0.0, 0.5, 0.9, 1.0])
def test_prioritized_sampler_applies_alpha(alpha):
    rng = np.random.default_rng(int(alpha * 10))
    capacity = 30
    p = rng.random(capacity) * 5
    p[[1, 2]] = 0.0
    sampler = PrioritizedSampler(capacity, alpha)
    sampler.update(torch.arange(capacity), torch.tensor(p))
    expected = np.where(p > 0, p ** alpha, 0.0)  # a zero priority stays out, even where 0^0 = 1
    expected /= expected.sum()
    assert math.isclose(sampler.total(), np.where(p > 0, p ** alpha, 0.0).sum(), rel_tol=1e-12)
    np.testing.assert_array_equal(sampler.get(torch.arange(capacity)).numpy(), p)
    counts = _draw_counts(sampler, capacity, k=64, batches=150, seed=7)
    assert counts[[1, 2]].sum() == 0
    stat, df = chi_square(counts, expected)
    assert stat < chi_square_bound(df)
    sample = sampler.sample(10, torch.Generator().manual_seed(0))
    np.testing.assert_allclose(sample.probabilities.numpy(), expected[sample.indices.numpy()], rtol=1e-12)
    sampler.update(torch.tensor([4, 4]), torch.tensor([1.0, 0.0]))  # last wins: slot 4 taken out
    assert sampler.get(torch.tensor([4])).item() == 0.0 and sampler.tree.get(torch.tensor([4])).item() == 0.0


def test_large_capacity_is_vectorised():
    capacity = 1 << 18
    tree = SumTree(capacity)
    gen = torch.Generator().manual_seed(0)
    idx = torch.randint(0, capacity, (20_000,), generator=gen)
    tree.update(idx, torch.rand(20_000, generator=gen, dtype=torch.float64))
    sample = tree.sample(4096, gen)
    assert bool((tree.get(sample.indices) > 0).all())


@pytest.mark.parametrize("capacity", [0, -3, 2.5, True])
def test_bad_capacity(capacity):
    with pytest.raises(ValueError, match=f"capacity={capacity!r}"):
        SumTree(capacity)
    with pytest.raises(ValueError, match=f"capacity={capacity!r}"):
        PrioritizedSampler(capacity)


def test_bad_updates_and_samples():
    tree = SumTree(4)
    with pytest.raises(ValueError, match="priority -1.0"):
        tree.update(torch.tensor([0]), torch.tensor([-1.0]))
    with pytest.raises(ValueError, match="priority nan"):
        tree.update(torch.tensor([0]), torch.tensor([float("nan")]))
    with pytest.raises(ValueError, match="weights has shape"):
        tree.update(torch.tensor([0, 1]), torch.tensor([1.0]))
    with pytest.raises(ValueError, match="index 4; slots are 0 .. 3"):
        tree.update(torch.tensor([4]), torch.tensor([1.0]))
    with pytest.raises(ValueError, match="integer tensor"):
        tree.get(torch.tensor([0.5]))
    with pytest.raises(ValueError, match="every priority is 0"):
        tree.sample(3)
    tree.update(torch.tensor([1]), torch.tensor([2.0]))
    with pytest.raises(ValueError, match="k=0"):
        tree.sample(0)
    with pytest.raises(ValueError, match="alpha=1.5"):
        PrioritizedSampler(4, alpha=1.5)
    sampler = PrioritizedSampler(4)
    with pytest.raises(ValueError, match="priority -2.0 in priorities"):
        sampler.update(torch.tensor([0, 1]), torch.tensor([1.0, -2.0]))
    assert sampler.total() == 0.0  # a rejected update changes nothing
