"""Replay rules against plain loops written from the V-trace replay platform's description
(https://github.com/parralplex/elite_buffer_vtrace: queue / standard / custom buffers, attentive and elite
sampling, elite insertion, lambda annealing) and the parse errors of its ``replay_parameters`` list."""

import math
import random

import pytest
import torch

from sfx.algo.replay import (
    annealed_lambda,
    attentive_distance,
    attentive_sample,
    candidate_count,
    candidate_indices,
    cos_distance,
    count_samples,
    elite_insert,
    elite_sample,
    feature_distance,
    insertion_candidates,
    kl_div_distance,
    ln_norm_distance,
    ring_index,
    uniform_sample,
)
from sfx.algo.replay_parameters import BufferSpec, batch_composition, needs_features, parse_replay_parameters
from sfx.errors import ConfigError

PLATFORM_DEFAULT = ('[{"type": "queue", "capacity": 1, "sample_ratio": 0.5}, '
                    '{"type": "standard", "capacity": 1000, "sample_ratio": 0.5}]')
PLATFORM_ELITE = ('[{"type": "custom", "capacity": 1000, "sample_ratio": 0.5, "dist_function":"ln_norm", '
                  '"sample_strategy":"elite_sampling", "lambda_batch_multiplier":6, "alfa_annealing_factor":2.0} ,'
                  '{"type": "queue", "capacity": 1, "sample_ratio": 0.5}]')


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _within_sigmas(observed, trials, prob, sigmas=5.0):
    """A binomial count within ``sigmas`` standard deviations of its mean."""
    mean = trials * prob
    return abs(observed - mean) <= sigmas * math.sqrt(trials * prob * (1 - prob))


# ------------------------------------------------------------------------------------------------ parsing


def test_parse_platform_examples():
    queue, standard = parse_replay_parameters(PLATFORM_DEFAULT)
    assert queue == BufferSpec(type="queue", capacity=1, sample_ratio=0.5)
    assert standard == BufferSpec(type="standard", capacity=1000, sample_ratio=0.5)
    assert not queue.is_replay and standard.is_replay
    assert not needs_features((queue, standard))

    custom, queue = parse_replay_parameters(PLATFORM_ELITE)
    assert queue.type == "queue"
    assert custom == BufferSpec(type="custom", capacity=1000, sample_ratio=0.5, dist_function="ln_norm",
                                sample_strategy="elite_sampling", lambda_batch_multiplier=6, alfa_annealing_factor=2.0)
    # the platform's schema defaults
    assert (custom.p, custom.insert_strategy, custom.elite_sampling_strategy, custom.elite_batch_size) == \
        (2, None, "strategy3", 20)
    assert custom.needs_features and custom.stores_features and needs_features((custom, queue))


def test_parse_defaults_and_feature_needs():
    one = {"type": "custom", "capacity": 10, "sample_ratio": 1}
    bare = parse_replay_parameters([{**one, "dist_function": "kl_div"}])[0]
    assert (bare.p, bare.lambda_batch_multiplier, bare.alfa_annealing_factor) == (2, 1, 1.0)
    assert bare.sample_strategy is None and bare.insert_strategy is None
    assert not bare.needs_features and not bare.stores_features  # a plain uniform ring

    attentive = parse_replay_parameters([{**one, "dist_function": "cos_dist",
                                          "sample_strategy": "attentive_sampling"}])[0]
    assert attentive.needs_features and not attentive.stores_features  # compares current features only

    inserting = parse_replay_parameters([{**one, "dist_function": "ln_norm", "insert_strategy": "elite_insertion",
                                          "elite_batch_size": 5, "p": 1}])[0]
    assert inserting.needs_features and inserting.stores_features and inserting.elite_batch_size == 5


def test_parse_is_case_insensitive_and_takes_python_literals():
    text = ("[{'type': 'Queue', 'capacity': 1, 'sample_ratio': 0.25}, {'type': 'CUSTOM', 'capacity': 4, "
            "'sample_ratio': 0.75, 'dist_function': 'Cos_Dist', 'sample_strategy': 'Elite_Sampling', "
            "'elite_sampling_strategy': 'STRATEGY1'}]")
    queue, custom = parse_replay_parameters(text)
    assert queue.type == "queue"
    assert (custom.type, custom.dist_function, custom.sample_strategy, custom.elite_sampling_strategy) == \
        ("custom", "cos_dist", "elite_sampling", "strategy1")


def test_parse_ratio_tolerance():
    thirds = [{"type": "standard", "capacity": 5, "sample_ratio": 1 / 3} for _ in range(3)]
    assert len(parse_replay_parameters(thirds)) == 3
    parse_replay_parameters([{"type": "queue", "capacity": 1, "sample_ratio": 0.3},
                             {"type": "standard", "capacity": 5, "sample_ratio": 0.7 + 5e-7}])


def _custom(**extra):
    entry = {"type": "custom", "capacity": 100, "sample_ratio": 0.5, "dist_function": "ln_norm"}
    entry.update(extra)
    return [{"type": "queue", "capacity": 1, "sample_ratio": 0.5}, entry]


@pytest.mark.parametrize("value,message", [
    ("not json", r"replay_parameters: not valid JSON"),
    ("[]", r"replay_parameters: expected a non-empty list"),
    ('{"type": "queue"}', r"replay_parameters: expected a non-empty list"),
    ([5], r"replay_parameters\[0\]: expected an object"),
    ([{"capacity": 1, "sample_ratio": 1}], r"replay_parameters\[0\]: missing 'type'; allowed: queue, standard, custom"),
    ([{"type": "prioritized", "capacity": 1, "sample_ratio": 1}],
     r"replay_parameters\[0\]: unknown type 'prioritized' \(allowed: queue, standard, custom\)"),
    ([{"type": "standrd", "capacity": 1, "sample_ratio": 1}], r"unknown type 'standrd'; did you mean 'standard'\?"),
    ([{"type": "standard", "sample_ratio": 1}], r"replay_parameters\[0\] \(type 'standard'\): missing 'capacity'"),
    ([{"type": "standard", "capacity": 5}], r"\(type 'standard'\): missing 'sample_ratio'"),
    ([{"type": "standard", "capacity": 0, "sample_ratio": 1}], r"capacity must be an integer >= 1, got 0"),
    ([{"type": "standard", "capacity": 2.5, "sample_ratio": 1}], r"capacity must be an integer >= 1, got 2.5"),
    ([{"type": "standard", "capacity": True, "sample_ratio": 1}], r"capacity must be an integer >= 1, got True"),
    ([{"type": "standard", "capacity": "10", "sample_ratio": 1}], r"capacity must be an integer >= 1, got '10'"),
    ([{"type": "standard", "capacity": 5, "sample_ratio": -0.5}, {"type": "queue", "capacity": 1, "sample_ratio": 1.5}],
     r"replay_parameters\[0\] \(type 'standard'\): sample_ratio must be a finite number in \[0, 1\], got -0.5"),
    ([{"type": "standard", "capacity": 5, "sample_ratio": float("nan")}], r"sample_ratio must be a finite number"),
    ([{"type": "queue", "capacity": 1, "sample_ratio": 0.5}, {"type": "standard", "capacity": 5, "sample_ratio": 0.4}],
     r"replay_parameters: sample_ratio values sum to 0.9 \(0.5 \+ 0.4\); they must sum to 1"),
    ([{"type": "queue", "capacity": 1, "sample_ratio": 0.5}, {"type": "queue", "capacity": 1, "sample_ratio": 0.5}],
     r"2 queue buffers \(entries \[0, 1\]\); at most one queue"),
    ([{"type": "standard", "capacity": 5, "sample_ratio": 1, "capacty": 3}],
     r"\(type 'standard'\): unknown key 'capacty'; did you mean 'capacity'\?"),
    ([{"type": "standard", "capacity": 5, "sample_ratio": 1, "dist_function": "ln_norm"}],
     r"\(type 'standard'\): key 'dist_function' is only allowed on a custom buffer"),
    (_custom(sample_stratgy="elite_sampling"),
     r"replay_parameters\[1\] \(type 'custom'\): unknown key 'sample_stratgy'; did you mean 'sample_strategy'\?"),
    ([{"type": "custom", "capacity": 100, "sample_ratio": 1}],
     r"\(type 'custom'\): missing 'dist_function'; allowed: ln_norm, cos_dist, kl_div"),
    (_custom(dist_function="l2"), r"replay_parameters\[1\] \(type 'custom'\): unknown dist_function 'l2' "
                                  r"\(allowed: ln_norm, cos_dist, kl_div\)"),
    (_custom(sample_strategy="prioritized"), r"unknown sample_strategy 'prioritized' \(allowed: elite_sampling, "
                                             r"attentive_sampling\)"),
    (_custom(sample_strategy="elite"), r"unknown sample_strategy 'elite'"),
    (_custom(insert_strategy="elite"), r"unknown insert_strategy 'elite' \(allowed: elite_insertion\)"),
    (_custom(elite_sampling_strategy="strategy5"),
     r"unknown elite_sampling_strategy 'strategy5'; did you mean 'strategy\d'\? "
     r"\(allowed: strategy1, strategy2, strategy3, strategy4\)"),
    (_custom(elite_sampling_strategy=3), r"unknown elite_sampling_strategy 3"),
    (_custom(p=0), r"p must be a finite number >= 1, got 0"),
    (_custom(p=float("inf")), r"p must be a finite number >= 1, got inf"),
    (_custom(lambda_batch_multiplier=0.5), r"lambda_batch_multiplier must be a finite number >= 1, got 0.5"),
    (_custom(alfa_annealing_factor=0), r"alfa_annealing_factor must be a finite number > 0, got 0"),
    (_custom(alfa_annealing_factor=-2.0), r"alfa_annealing_factor must be a finite number > 0, got -2.0"),
    (_custom(elite_batch_size=0), r"elite_batch_size must be an integer >= 1, got 0"),
])
def test_parse_errors_name_the_entry_and_what_is_allowed(value, message):
    with pytest.raises(ConfigError, match=message) as info:
        parse_replay_parameters(value)
    assert "\n" not in str(info.value)


# ------------------------------------------------------------------------------------------------ batch


def _specs(*ratios, types=None):
    types = types or ["standard"] * len(ratios)
    return tuple(BufferSpec(type=t, capacity=10, sample_ratio=r) for t, r in zip(types, ratios))


def test_batch_composition_whole_shares():
    assert batch_composition(_specs(0.5, 0.5, types=["queue", "standard"]), 10) == [5, 5]
    assert batch_composition(_specs(0.2, 0.8), 30) == [6, 24]
    assert batch_composition(_specs(0.29, 0.71), 100) == [29, 71]  # 0.29 * 100 = 28.999999999999996
    assert batch_composition(_specs(1.0, 0.0), 7) == [7, 0]
    assert batch_composition(_specs(0.5, 0.5), 0) == [0, 0]


def test_batch_composition_fraction_is_the_platform_error():
    with pytest.raises(ConfigError, match=r"replay_parameters\[0\] \(type 'queue'\): sample_ratio 0.5 of a batch of 7 "
                                          r"trajectories is 3.5, not a whole number"):
        batch_composition(_specs(0.5, 0.5, types=["queue", "standard"]), 7)


def test_batch_composition_remainder_to_queue():
    for batch in range(0, 40):
        for types, ratios in ((["standard", "queue", "custom"], (0.3, 0.3, 0.4)),
                              (["standard", "custom", "standard"], (0.3, 0.4, 0.3))):
            counts = batch_composition(_specs(*ratios, types=types), batch, remainder="to_queue")
            floors = [int(batch * r + 1e-9) for r in ratios]
            target = types.index("queue") if "queue" in types else 1  # else the largest ratio
            expected = list(floors)
            expected[target] += batch - sum(floors)
            assert counts == expected and sum(counts) == batch


# ------------------------------------------------------------------------------------------------ distances


def _rand_features(seed, n=4, t=3, f=5):
    g = _gen(seed)
    a = torch.randn(n, t, f, generator=g, dtype=torch.float64)
    return a, torch.randn(n, t, f, generator=g, dtype=torch.float64)


def _flat(x):
    return [[v for step in traj for v in step] for traj in x.tolist()]


@pytest.mark.parametrize("p", [1, 2, 3, 2.5])
def test_ln_norm_matches_loop(p):
    a, b = _rand_features(int(p * 10))
    expected = [sum(abs(x - y) ** p for x, y in zip(ra, rb)) ** (1 / p) for ra, rb in zip(_flat(a), _flat(b))]
    torch.testing.assert_close(ln_norm_distance(a, b, p), torch.tensor(expected, dtype=torch.float64))
    torch.testing.assert_close(feature_distance("ln_norm", a, b, p), torch.tensor(expected, dtype=torch.float64))
    assert torch.all(ln_norm_distance(a, a, p) == 0)


def test_cos_distance_matches_loop():
    a, b = _rand_features(1)
    expected = []
    for ra, rb in zip(_flat(a), _flat(b)):
        dot = sum(x * y for x, y in zip(ra, rb))
        expected.append(1 - dot / (math.sqrt(sum(x * x for x in ra)) * math.sqrt(sum(y * y for y in rb))))
    torch.testing.assert_close(cos_distance(a, b), torch.tensor(expected, dtype=torch.float64))
    torch.testing.assert_close(feature_distance("cos_dist", a, b), torch.tensor(expected, dtype=torch.float64))
    torch.testing.assert_close(cos_distance(a, 3 * a), torch.zeros(4, dtype=torch.float64))  # scale-free
    torch.testing.assert_close(cos_distance(a, -a), torch.full((4,), 2.0, dtype=torch.float64))
    zero = torch.zeros_like(a)
    torch.testing.assert_close(cos_distance(zero, b), torch.ones(4, dtype=torch.float64))  # eps: no NaN


def _softmax(row):
    top = max(row)
    exps = [math.exp(x - top) for x in row]
    return [e / sum(exps) for e in exps]


def test_kl_div_matches_loop():
    behaviour, current = _rand_features(2)
    expected = []
    for traj_b, traj_c in zip(behaviour.tolist(), current.tolist()):
        total = 0.0
        for step_b, step_c in zip(traj_b, traj_c):
            p, q = _softmax(step_b), _softmax(step_c)
            total += sum(qf * (math.log(qf) - math.log(pf)) for pf, qf in zip(p, q))  # KL(current || behaviour)
        expected.append(total)
    torch.testing.assert_close(kl_div_distance(behaviour, current), torch.tensor(expected, dtype=torch.float64))
    torch.testing.assert_close(feature_distance("kl_div", behaviour, current),
                               torch.tensor(expected, dtype=torch.float64))
    assert torch.all(kl_div_distance(behaviour, behaviour + 7.0).abs() < 1e-12)  # softmax is shift-free


@pytest.mark.parametrize("dist_function", ["ln_norm", "cos_dist", "kl_div"])
def test_attentive_distance_repeats_the_reference_per_step(dist_function):
    current, _ = _rand_features(3)
    reference = torch.randn(5, generator=_gen(4), dtype=torch.float64)
    repeated = torch.stack([torch.stack([reference] * 3)] * 4)  # [N, T, F], every step the reference
    torch.testing.assert_close(attentive_distance(dist_function, current, reference, p=2),
                               feature_distance(dist_function, repeated, current, p=2))


def test_distance_shape_errors():
    with pytest.raises(ValueError, match="ln_norm_distance"):
        ln_norm_distance(torch.zeros(2, 3, 4), torch.zeros(2, 3, 5))
    with pytest.raises(ValueError, match="attentive_distance: reference"):
        attentive_distance("ln_norm", torch.zeros(2, 3, 4), torch.zeros(5))
    with pytest.raises(ValueError, match="unknown dist_function"):
        feature_distance("l2", torch.zeros(2, 3, 4), torch.zeros(2, 3, 4))


# ------------------------------------------------------------------------------------------------ sampling


def test_uniform_sample_is_uniform_with_replacement():
    n, draws = 10, 20000
    idx = uniform_sample(n, draws, _gen(0))
    assert idx.dtype == torch.int64 and idx.shape == (draws,)
    assert int(idx.min()) >= 0 and int(idx.max()) < n
    counts = torch.bincount(idx, minlength=n).tolist()
    assert all(_within_sigmas(c, draws, 1 / n) for c in counts), counts
    assert torch.equal(idx, uniform_sample(n, draws, _gen(0)))  # seeded
    assert uniform_sample(3, 50, _gen(1)).unique().numel() <= 3  # k > stored: repeats
    assert uniform_sample(0, 0).numel() == 0
    with pytest.raises(ValueError, match="empty buffer"):
        uniform_sample(0, 4)


def test_count_samples_matches_loop():
    counts = torch.tensor([1, 3, 1, 2, 1])
    picked = torch.tensor([4, 1, 4, 0, 4])
    expected = counts.tolist()
    for i in picked.tolist():
        expected[i] += 1
    assert count_samples(counts, picked).tolist() == expected
    assert counts.tolist() == [1, 3, 1, 2, 1]  # not in place


def lambda_from_platform(lambda0, alfa, horizon, steps):
    """The platform's rule, one sample at a time: lower lambda by (L - 1) / (horizon * alfa), floor at 1."""
    lam = lambda0
    for _ in range(steps):
        lam -= (lambda0 - 1) / (horizon * alfa)
        if lam < 1:
            lam = 1
    return lam


@pytest.mark.parametrize("lambda0,alfa,horizon", [(6, 2.0, 100), (3, 0.5, 40), (1, 1.0, 10), (2.5, 1.0, 7)])
def test_annealed_lambda_matches_platform_loop(lambda0, alfa, horizon):
    for step in [0, 1, 2, 17, int(horizon * alfa) - 1, int(horizon * alfa), int(horizon * alfa) + 5, 10**6]:
        assert annealed_lambda(lambda0, alfa, horizon, step) == pytest.approx(
            lambda_from_platform(lambda0, alfa, horizon, step), abs=1e-9)
    assert annealed_lambda(lambda0, alfa, horizon, 0) == lambda0
    assert annealed_lambda(lambda0, alfa, horizon, 10**6) == 1.0


def test_candidates():
    assert [candidate_count(10, lam) for lam in (1.0, 1.25, 6.0, 1.99)] == [10, 12, 60, 19]
    cand = candidate_indices(7, 4, 2.5, _gen(5))
    assert cand.shape == (10,) and int(cand.min()) >= 0 and int(cand.max()) < 7


def elite_from_description(candidates, distances, counts, k, strategy):
    """The platform's rules as described, one list walk each.

    Merge repeated candidates (first appearance keeps its place and distance; count how often each was drawn),
    insertion-sort them by distance (equal distances keep first-appearance order), then
    strategy1: walk the sorted list, each index as often as drawn; strategy2: every c-th of the sorted list;
    strategy3: for j = 1, 2, ...: the sorted entries whose sample count is j; strategy4: per chunk of c sorted
    entries, the first one with the fewest samples; with c = max(1, U // k). Stop at k; start over if short.
    """
    merged = []  # [index, distance, count, times drawn]
    for i, index in enumerate(candidates):
        for entry in merged:
            if entry[0] == index:
                entry[3] += 1
                break
        else:
            merged.append([index, distances[i], counts[index], 1])
    ranked = []
    for entry in merged:
        pos = len(ranked)
        while pos > 0 and ranked[pos - 1][1] > entry[1]:
            pos -= 1
        ranked.insert(pos, entry)
    chunk = max(1, len(ranked) // k)

    picks = []
    while len(picks) < k:
        one_pass = []
        if strategy == "strategy1":
            for entry in ranked:
                one_pass += [entry] * entry[3]
        elif strategy == "strategy2":
            for r, entry in enumerate(ranked):
                if r % chunk == 0:
                    one_pass.append(entry)
        elif strategy == "strategy3":
            j = 1
            while len(one_pass) < len(ranked):
                for entry in ranked:
                    if entry[2] == j:
                        one_pass.append(entry)
                j += 1
        elif strategy == "strategy4":
            for start in range(0, len(ranked), chunk):
                if start + chunk > len(ranked):
                    break
                best = None
                for entry in ranked[start:start + chunk]:
                    if best is None or entry[2] < best[2]:
                        best = entry
                one_pass.append(best)
        for entry in one_pass:
            if len(picks) < k:
                picks.append(entry)
    return [e[0] for e in picks], [e[1] for e in picks]


STRATEGIES = ["strategy1", "strategy2", "strategy3", "strategy4"]


def test_elite_strategies_hand_computed():
    # distinct in first-appearance order: 5 (0.4, count 1), 2 (0.1, count 2, drawn twice), 7 (0.3, count 1),
    # 9 (0.9, count 1), 1 (0.3, count 3); ranked by distance: 2, 7, 1, 5, 9
    candidates = torch.tensor([5, 2, 7, 2, 9, 1])
    distances = torch.tensor([0.4, 0.1, 0.3, 0.1, 0.9, 0.3])
    counts = torch.ones(10, dtype=torch.int64)
    counts[2], counts[1] = 2, 3
    expected = {
        2: {"strategy1": [2, 2], "strategy2": [2, 1], "strategy3": [7, 5], "strategy4": [7, 5]},  # c = 2
        3: {"strategy1": [2, 2, 7], "strategy2": [2, 7, 1], "strategy3": [7, 5, 9],
            "strategy4": [2, 7, 1]},  # c = 5 // 3 = 1
    }
    for k, by_strategy in expected.items():
        for strategy, picks in by_strategy.items():
            out = elite_sample(candidates, distances, counts, k, strategy)
            assert out.indices.tolist() == picks, (k, strategy)
            assert out.distances.tolist() == pytest.approx([float(distances[candidates.tolist().index(i)])
                                                            for i in picks])
            assert out.sample_counts.tolist() == count_samples(counts, out.indices).tolist()


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("seed", range(25))
def test_elite_sample_matches_description(strategy, seed):
    rng = random.Random(seed)
    n_stored = rng.randint(1, 40)
    k = rng.randint(1, 12)
    lam = rng.choice([1.0, 1.5, 2.0, 3.0, 6.0])
    g = _gen(seed)
    candidates = candidate_indices(n_stored, k, lam, g)
    per_index = [rng.choice([0.1, 0.2, 0.5, rng.random()]) for _ in range(n_stored)]  # ties on purpose
    distances = torch.tensor([per_index[i] for i in candidates.tolist()], dtype=torch.float64)
    counts = torch.tensor([rng.randint(1, 4) for _ in range(n_stored)])

    out = elite_sample(candidates, distances, counts, k, strategy)
    picks, picked_distances = elite_from_description(candidates.tolist(), distances.tolist(), counts.tolist(), k,
                                                     strategy)
    assert out.indices.tolist() == picks
    assert out.distances.tolist() == picked_distances
    assert out.indices.shape == (k,) and set(out.indices.tolist()) <= set(candidates.tolist())
    expected_counts = counts.tolist()
    for i in picks:
        expected_counts[i] += 1
    assert out.sample_counts.tolist() == expected_counts

    same = attentive_sample(candidates, distances, counts, k, strategy)  # the platform's attentive = same rule
    assert torch.equal(same.indices, out.indices)


def test_strategy1_is_the_lowest_distances():
    distances = torch.tensor([0.5, 0.1, 0.9, 0.3, 0.7, 0.2])
    out = elite_sample(torch.arange(6), distances, torch.ones(6, dtype=torch.int64), 3, "strategy1")
    assert out.indices.tolist() == [1, 5, 3]


def test_all_distances_equal_keeps_draw_order():
    candidates = torch.tensor([3, 0, 4, 1, 2, 5])
    counts = torch.tensor([1, 2, 1, 1, 3, 1])
    equal = torch.full((6,), 0.25)
    assert elite_sample(candidates, equal, counts, 3, "strategy1").indices.tolist() == [3, 0, 4]
    assert elite_sample(candidates, equal, counts, 3, "strategy2").indices.tolist() == [3, 4, 2]
    assert elite_sample(candidates, equal, counts, 3, "strategy3").indices.tolist() == [3, 0, 2]  # count 1 first
    assert elite_sample(candidates, equal, counts, 3, "strategy4").indices.tolist() == [3, 1, 2]


def test_fewer_distinct_candidates_than_k_repeat_the_pass():
    candidates = torch.tensor([4, 4, 1, 4, 1, 1])  # 2 distinct, k = 5
    distances = torch.tensor([0.2, 0.2, 0.1, 0.2, 0.1, 0.1])
    counts = torch.tensor([1, 2, 1, 1, 1])
    assert elite_sample(candidates, distances, counts, 5, "strategy1").indices.tolist() == [1, 1, 1, 4, 4]
    for strategy, picks in (("strategy2", [1, 4, 1, 4, 1]), ("strategy3", [4, 1, 4, 1, 4]),
                            ("strategy4", [1, 4, 1, 4, 1])):
        assert elite_sample(candidates, distances, counts, 5, strategy).indices.tolist() == picks, strategy


def test_elite_sample_edges():
    counts = torch.ones(4, dtype=torch.int64)
    empty = elite_sample(torch.tensor([2, 1]), torch.tensor([0.3, 0.1]), counts, 0)
    assert empty.indices.numel() == 0 and torch.equal(empty.sample_counts, counts)
    nan = elite_sample(torch.tensor([0, 1, 2]), torch.tensor([float("nan"), 0.5, 0.2]), counts, 3, "strategy1")
    assert nan.indices.tolist() == [2, 1, 0]  # NaN ranks last
    with pytest.raises(ValueError, match="no candidates"):
        elite_sample(torch.tensor([], dtype=torch.int64), torch.tensor([]), counts, 2)
    with pytest.raises(ValueError, match="unknown strategy"):
        elite_sample(torch.tensor([0]), torch.tensor([0.0]), counts, 1, "strategy9")
    with pytest.raises(ValueError, match=r"must be \[M\]"):
        elite_sample(torch.tensor([0, 1]), torch.tensor([0.0]), counts, 1)


def test_elite_sampling_prefers_close_trajectories_statistically():
    # distances equal to the stored index: strategy1 picks among the lowest of lambda * k uniform candidates,
    # so its mean index is far below the uniform mean (n - 1) / 2
    n, k, lam, rounds = 100, 8, 4.0, 300
    g = _gen(11)
    counts = torch.ones(n, dtype=torch.int64)
    picked = []
    for _ in range(rounds):
        cand = candidate_indices(n, k, lam, g)
        picked += elite_sample(cand, cand.double(), counts, k, "strategy1").indices.tolist()
    # the k lowest of 32 uniform draws on [0, 100) average about 100 * (k + 1) / 2 / 33 ~ 13.6
    assert sum(picked) / len(picked) < 20


# ------------------------------------------------------------------------------------------------ insertion


def test_ring_index():
    assert [ring_index(i, 4) for i in range(10)] == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
    with pytest.raises(ValueError):
        ring_index(0, 0)


def test_insertion_candidates_distinct_and_uniform():
    capacity, batch, trials = 10, 3, 20000
    g = _gen(2)
    hits = [0] * capacity
    for _ in range(trials):
        cand = insertion_candidates(capacity, batch, g).tolist()
        assert len(cand) == batch and len(set(cand)) == batch
        for i in cand:
            hits[i] += 1
    assert all(_within_sigmas(h, trials, batch / capacity) for h in hits), hits
    assert sorted(insertion_candidates(4, 20, g).tolist()) == [0, 1, 2, 3]  # elite_batch_size > capacity


def elite_insert_from_description(candidates, distances):
    """Sort the candidates by distance, largest first (equal distances keep draw order); replace the first."""
    best_index, best_distance = None, None
    for index, distance in zip(candidates, distances):
        if best_distance is None or distance > best_distance:
            best_index, best_distance = index, distance
    return best_index, best_distance


@pytest.mark.parametrize("seed", range(10))
def test_elite_insert_replaces_the_farthest(seed):
    rng = random.Random(seed)
    cand = insertion_candidates(30, 8, _gen(seed))
    distances = torch.tensor([rng.choice([0.5, 1.0, rng.random()]) for _ in range(8)], dtype=torch.float64)
    out = elite_insert(cand, distances)
    assert (out.index, out.distance) == elite_insert_from_description(cand.tolist(), distances.tolist())


def test_elite_insert_ties_and_nan():
    assert elite_insert(torch.tensor([7, 3, 5]), torch.tensor([0.2, 0.9, 0.9])).index == 3
    assert elite_insert(torch.tensor([7, 3, 5]), torch.tensor([0.2, float("nan"), 0.9])).index == 3
    with pytest.raises(ValueError, match="elite_insert"):
        elite_insert(torch.tensor([], dtype=torch.int64), torch.tensor([]))


def test_elite_pipeline_with_features():
    # one elite sample end to end: stored behaviour features, candidates, recomputed features, distances, picks
    n, t, f, k = 12, 4, 6, 3
    g = _gen(21)
    stored = torch.randn(n, t, f, generator=g)
    drift = torch.linspace(0.0, 2.0, n).view(n, 1, 1)  # trajectory i drifted by drift[i]
    current_all = stored + drift
    cand = candidate_indices(n, k, 3.0, g)
    dist = feature_distance("ln_norm", stored[cand], current_all[cand], p=2)
    out = elite_sample(cand, dist, torch.ones(n, dtype=torch.int64), k, "strategy1")
    distinct_sorted = sorted(set(cand.tolist()))
    assert out.indices.tolist()[0] == distinct_sorted[0]  # least drifted candidate first
