"""Action distributions against torch.distributions."""

import math

import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch import distributions as D

from sfx.algo.distributions import (
    LOG_STD_MAX,
    LOG_STD_MIN,
    Categorical,
    DiagGaussian,
    TupleCategorical,
    UnsupportedActionSpaceError,
    action_params_size,
    action_shape,
    action_to_env,
    make_action_distribution,
)

B = 6


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def test_sizes():
    assert (action_params_size(spaces.Discrete(5)), action_shape(spaces.Discrete(5))) == (5, 1)
    tup = spaces.Tuple([spaces.Discrete(3), spaces.Discrete(4)])
    assert (action_params_size(tup), action_shape(tup)) == (7, 2)
    assert (action_params_size(spaces.MultiDiscrete([2, 5])), action_shape(spaces.MultiDiscrete([2, 5]))) == (7, 2)
    box = spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float32)
    assert (action_params_size(box), action_shape(box)) == (6, 3)
    box2d = spaces.Box(-1.0, 1.0, shape=(2, 2), dtype=np.float32)
    assert (action_params_size(box2d), action_shape(box2d)) == (8, 4)


def test_categorical_matches_torch():
    logits = torch.randn(B, 5, dtype=torch.float64)
    other_logits = torch.randn(B, 5, dtype=torch.float64)
    dist = make_action_distribution(spaces.Discrete(5), logits)
    other = make_action_distribution(spaces.Discrete(5), other_logits)
    assert isinstance(dist, Categorical)
    ref, ref_other = D.Categorical(logits=logits), D.Categorical(logits=other_logits)

    actions = dist.sample()
    assert actions.shape == (B, 1) and actions.dtype == torch.int64
    assert ((actions >= 0) & (actions < 5)).all()
    torch.testing.assert_close(dist.log_prob(actions), ref.log_prob(actions[:, 0]))
    # float actions as stored in buffers
    torch.testing.assert_close(dist.log_prob(actions.float()), ref.log_prob(actions[:, 0]))
    torch.testing.assert_close(dist.entropy(), ref.entropy())
    torch.testing.assert_close(dist.kl_divergence(other), D.kl_divergence(ref, ref_other))
    assert torch.equal(dist.mode()[:, 0], logits.argmax(-1))


def test_categorical_sampling_frequencies():
    probs = torch.tensor([0.1, 0.6, 0.3])
    dist = Categorical(probs.log().expand(20000, 3))
    counts = torch.bincount(dist.sample()[:, 0], minlength=3).float() / 20000
    torch.testing.assert_close(counts, probs, atol=0.015, rtol=0)


def test_categorical_with_masked_out_action_is_finite():
    logits = torch.tensor([[0.0, float("-inf"), 1.0]])
    dist = Categorical(logits)
    assert torch.isfinite(dist.entropy()).all()
    assert torch.isfinite(dist.kl_divergence(Categorical(torch.zeros(1, 3)))).all()
    torch.testing.assert_close(dist.entropy(), D.Categorical(logits=logits).entropy())


def test_tuple_categorical_is_sum_of_components():
    space = spaces.Tuple([spaces.Discrete(3), spaces.Discrete(2), spaces.Discrete(4)])
    logits = torch.randn(B, 9, dtype=torch.float64)
    other_logits = torch.randn(B, 9, dtype=torch.float64)
    dist = make_action_distribution(space, logits)
    other = make_action_distribution(space, other_logits)
    assert isinstance(dist, TupleCategorical)
    refs = [D.Categorical(logits=x) for x in torch.split(logits, [3, 2, 4], dim=-1)]
    refs_other = [D.Categorical(logits=x) for x in torch.split(other_logits, [3, 2, 4], dim=-1)]

    actions = dist.sample()
    assert actions.shape == (B, 3) and actions.dtype == torch.int64
    assert (actions < torch.tensor([3, 2, 4])).all() and (actions >= 0).all()
    expected_lp = sum(r.log_prob(actions[:, i]) for i, r in enumerate(refs))
    torch.testing.assert_close(dist.log_prob(actions.float()), expected_lp)
    torch.testing.assert_close(dist.entropy(), sum(r.entropy() for r in refs))
    torch.testing.assert_close(dist.kl_divergence(other),
                               sum(D.kl_divergence(a, b) for a, b in zip(refs, refs_other)))
    assert dist.mode().shape == (B, 3)


def test_diag_gaussian_matches_torch():
    box = spaces.Box(-2.0, 2.0, shape=(3,), dtype=np.float32)
    # log_std well inside [LOG_STD_MIN, LOG_STD_MAX] so the clamp does not act
    params = torch.randn(B, 6, dtype=torch.float64) * 0.5
    other_params = torch.randn(B, 6, dtype=torch.float64) * 0.5
    dist = make_action_distribution(box, params)
    other = make_action_distribution(box, other_params)
    assert isinstance(dist, DiagGaussian)

    def ref_of(p):
        return D.Independent(D.Normal(p[:, :3], p[:, 3:].exp()), 1)

    ref, ref_other = ref_of(params), ref_of(other_params)
    actions = dist.sample()
    assert actions.shape == (B, 3) and actions.dtype == torch.float64
    torch.testing.assert_close(dist.log_prob(actions), ref.log_prob(actions))
    torch.testing.assert_close(dist.entropy(), ref.entropy())
    torch.testing.assert_close(dist.kl_divergence(other), D.kl_divergence(ref, ref_other))
    torch.testing.assert_close(dist.mode(), params[:, :3])


def test_diag_gaussian_sampling_moments():
    params = torch.tensor([[1.0, -2.0, np.log(0.5), np.log(2.0)]], dtype=torch.float32).expand(50000, 4)
    samples = DiagGaussian(params).sample()
    torch.testing.assert_close(samples.mean(0), torch.tensor([1.0, -2.0]), atol=0.05, rtol=0)
    torch.testing.assert_close(samples.std(0), torch.tensor([0.5, 2.0]), atol=0.05, rtol=0)


def test_diag_gaussian_log_std_is_clamped():
    params = torch.tensor([[0.0, 0.0, -50.0, 50.0]])
    dist = DiagGaussian(params)
    torch.testing.assert_close(dist.log_std, torch.tensor([[LOG_STD_MIN, LOG_STD_MAX]]))
    assert torch.isfinite(dist.log_prob(torch.tensor([[1.0, 1.0]]))).all()
    assert torch.isfinite(dist.entropy()).all()


def test_action_to_env():
    assert action_to_env(spaces.Discrete(4), np.array([3.0], dtype=np.float32)) == 3
    assert type(action_to_env(spaces.Discrete(4), np.array([3.0], dtype=np.float32))) is int
    assert action_to_env(spaces.Discrete(4, start=-1), np.array([0.0])) == -1

    tup = spaces.Tuple([spaces.Discrete(3), spaces.Discrete(2, start=1)])
    a = action_to_env(tup, np.array([2.0, 1.0], dtype=np.float32))
    assert a == (2, 2) and all(type(x) is int for x in a)
    assert tup.contains(a)

    md = spaces.MultiDiscrete([3, 5])
    a = action_to_env(md, np.array([2.0, 4.0], dtype=np.float32))
    assert md.contains(a)

    box = spaces.Box(-1.0, 1.0, shape=(2, 2), dtype=np.float32)
    a = action_to_env(box, np.array([0.5, -3.0, 2.0, 0.25]))
    assert a.dtype == np.float32 and a.shape == (2, 2)
    np.testing.assert_array_equal(a, np.array([[0.5, -1.0], [1.0, 0.25]], dtype=np.float32))
    assert box.contains(a)


def test_sample_round_trips_through_float_buffer_to_env():
    space = spaces.Tuple([spaces.Discrete(3), spaces.Discrete(7)])
    dist = make_action_distribution(space, torch.randn(B, 10))
    stored = dist.sample().float()  # how buffers keep actions
    for row in stored.numpy():
        assert space.contains(action_to_env(space, row))
    torch.testing.assert_close(dist.log_prob(stored), dist.log_prob(stored.long()))


@pytest.mark.parametrize(
    "space",
    [
        spaces.Dict({"move": spaces.Discrete(2)}),
        spaces.Tuple([spaces.Discrete(2), spaces.Box(-1, 1, shape=(1,))]),
        spaces.MultiBinary(3),
    ],
)
def test_unsupported_space_is_named(space):
    for fn in (action_params_size, action_shape, lambda s: make_action_distribution(s, torch.zeros(1, 2)),
               lambda s: action_to_env(s, np.zeros(2))):
        with pytest.raises(ValueError, match="unsupported action space") as err:
            fn(space)
        assert repr(space) in str(err.value)
        assert isinstance(err.value, UnsupportedActionSpaceError)
        assert "\n" not in str(err.value)


def test_wrong_params_width():
    with pytest.raises(ValueError, match="width 4"):
        make_action_distribution(spaces.Discrete(5), torch.zeros(2, 4))


def _symmetric_kl_loop(logits_row: torch.Tensor) -> float:
    """0.5 * (KL(pi || u) + KL(u || pi)) for one categorical, written out term by term."""
    p = torch.softmax(logits_row.double(), -1).tolist()
    n = len(p)
    kl_pu = sum(pi * math.log(pi / (1.0 / n)) for pi in p)
    kl_up = sum((1.0 / n) * math.log((1.0 / n) / pi) for pi in p)
    return 0.5 * (kl_pu + kl_up)


def test_symmetric_kl_with_uniform_matches_a_loop():
    logits = torch.randn(B, 5) * 2
    got = Categorical(logits).symmetric_kl_with_uniform()
    want = torch.tensor([_symmetric_kl_loop(r) for r in logits], dtype=got.dtype)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    # zero exactly at the uniform policy, positive elsewhere
    assert float(Categorical(torch.zeros(B, 5)).symmetric_kl_with_uniform().abs().max()) < 1e-6
    assert bool((got > 0).all())
    # a tuple of categoricals: the sum over its components
    tl = torch.randn(B, 2 + 3)
    tup = TupleCategorical(tl, [2, 3]).symmetric_kl_with_uniform()
    want = torch.tensor([_symmetric_kl_loop(r[:2]) + _symmetric_kl_loop(r[2:]) for r in tl], dtype=tup.dtype)
    torch.testing.assert_close(tup, want, atol=1e-5, rtol=1e-5)


def test_symmetric_kl_needs_discrete_actions():
    with pytest.raises(UnsupportedActionSpaceError, match="--exploration_loss=entropy"):
        DiagGaussian(torch.zeros(B, 4)).symmetric_kl_with_uniform()
