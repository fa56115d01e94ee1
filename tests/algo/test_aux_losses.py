"""Auxiliary losses (Brain Agent's reconstruction and future prediction) against plain loops."""

import pytest
import torch

from sfx.algo.aux_losses import (frame_targets, future_mask, future_prediction_loss, reconstruction_loss,
                                 sample_horizons, sample_start_times)


def masked_frame_mse_loop(pred, target, valid):
    """mean over valid n of mean over (c, h, w) of (pred - target)^2, element by element."""
    total, count = 0.0, 0
    N, C, H, W = pred.shape
    for n in range(N):
        if not valid[n]:
            continue
        err = 0.0
        for c in range(C):
            for h in range(H):
                for w in range(W):
                    err += (float(pred[n, c, h, w]) - float(target[n, c, h, w])) ** 2
        total += err / (C * H * W)
        count += 1
    return total / count if count else 0.0


def future_mask_loop(dones, valids, K):
    """Entry (b, t, k - 1): o_{t+k} exists (t + k <= T), the start is valid and no episode ended at
    steps t .. t + k - 1 (a done at step s makes o_{s+1} the next episode's first frame)."""
    B, T = dones.shape
    out = torch.zeros(B, T, K, dtype=torch.bool)
    for b in range(B):
        for t in range(T):
            for k in range(1, K + 1):
                if t + k > T or not valids[b, t]:
                    continue
                crossed = False
                for s in range(t, t + k):
                    if dones[b, s]:
                        crossed = True
                out[b, t, k - 1] = not crossed
    return out


def test_frame_targets_range():
    frames = torch.tensor([0, 1, 127, 128, 254, 255], dtype=torch.uint8).view(1, 1, 2, 3)
    out = frame_targets(frames)
    assert out.dtype == torch.float32 and out.shape == frames.shape
    expected = torch.tensor([0, 1, 127, 128, 254, 255], dtype=torch.float32) / 127.5 - 1
    torch.testing.assert_close(out.flatten(), expected)
    assert out.min() == -1.0 and out.max() == 1.0
    full = frame_targets(torch.randint(0, 256, (5, 3, 4, 4), dtype=torch.uint8))
    assert full.min() >= -1.0 and full.max() <= 1.0
    floats = frame_targets(torch.tensor([-3.0, -1.0, 0.25, 1.0, 7.0], dtype=torch.float64).view(1, 1, 1, 5))
    assert floats.dtype == torch.float32
    torch.testing.assert_close(floats.flatten(), torch.tensor([-1.0, -1.0, 0.25, 1.0, 1.0]))


@pytest.mark.parametrize("loss_fn", [reconstruction_loss, future_prediction_loss])
def test_masked_frame_losses_against_a_loop(loss_fn):
    gen = torch.Generator().manual_seed(1)
    pred = torch.rand(7, 2, 3, 4, generator=gen, dtype=torch.float64) * 2 - 1
    target = torch.rand(7, 2, 3, 4, generator=gen, dtype=torch.float64) * 2 - 1
    valid = torch.tensor([True, False, True, True, False, False, True])
    # an invalid sample may hold anything, even NaN
    target[1] = float("nan")
    got = loss_fn(pred, target, valid)
    assert got.dim() == 0
    assert got.item() == pytest.approx(masked_frame_mse_loop(pred, target, valid), rel=1e-6)
    target[1] = 0.0
    assert loss_fn(pred, target, torch.ones(7, dtype=torch.bool)).item() == pytest.approx(
        masked_frame_mse_loop(pred, target, [True] * 7), rel=1e-6)


@pytest.mark.parametrize("loss_fn", [reconstruction_loss, future_prediction_loss])
def test_all_invalid_gives_zero_with_a_graph(loss_fn):
    pred = torch.randn(3, 1, 2, 2, requires_grad=True)
    loss = loss_fn(pred.tanh(), torch.zeros(3, 1, 2, 2), torch.zeros(3, dtype=torch.bool))
    assert loss.item() == 0.0
    assert loss.requires_grad
    loss.backward()
    assert torch.equal(pred.grad, torch.zeros_like(pred))


def test_losses_do_not_backpropagate_into_the_target():
    pred = torch.randn(2, 1, 2, 2, requires_grad=True)
    target = torch.randn(2, 1, 2, 2, requires_grad=True)
    reconstruction_loss(pred, target, torch.ones(2, dtype=torch.bool)).backward()
    assert pred.grad is not None and target.grad is None


def test_shape_mismatch_is_an_error():
    with pytest.raises(ValueError, match="differs"):
        reconstruction_loss(torch.zeros(2, 3, 4, 4), torch.zeros(2, 3, 4, 5), torch.ones(2, dtype=torch.bool))


@pytest.mark.parametrize("K", [1, 2, 3, 5, 12])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_future_mask_against_a_loop(K, seed):
    gen = torch.Generator().manual_seed(seed)
    B, T = 4, 9
    dones = torch.rand(B, T, generator=gen) < 0.2
    valids = torch.rand(B, T, generator=gen) < 0.8
    got = future_mask(dones, valids, K)
    assert got.shape == (B, T, K) and got.dtype == torch.bool
    assert torch.equal(got, future_mask_loop(dones, valids, K))


def test_future_mask_by_hand():
    # T = 4, a done at step 1: o_2 already belongs to the next episode
    dones = torch.tensor([[False, True, False, False]])
    valids = torch.tensor([[True, True, True, False]])
    got = future_mask(dones, valids, 3)[0]
    expected = torch.tensor([
        [True, False, False],   # t=0: o_1 yes; o_2, o_3 cross the done at step 1
        [False, False, False],  # t=1: o_2 is the next episode's
        [True, True, False],    # t=2: o_3, o_4; o_5 does not exist (T + 1 = 5 frames)
        [False, False, False],  # t=3: not valid
    ])
    assert torch.equal(got, expected)


def test_future_mask_rejects_a_zero_horizon():
    with pytest.raises(ValueError, match="horizon=0"):
        future_mask(torch.zeros(1, 3, dtype=torch.bool), torch.ones(1, 3, dtype=torch.bool), 0)


def test_sampling_ranges_and_determinism():
    gen = torch.Generator().manual_seed(3)
    starts = sample_start_times(5, 8, 6, generator=gen)
    assert starts.shape == (5, 6) and starts.dtype == torch.int64
    assert starts.min() >= 0 and starts.max() < 8
    assert all(len(set(row.tolist())) == 6 for row in starts)
    horizons = sample_horizons(5, 6, 10, 2, generator=gen)
    assert horizons.shape == (5, 6, 2)
    assert horizons.min() >= 1 and horizons.max() <= 10
    assert (horizons[..., 0] != horizons[..., 1]).all()
    # more asked than there are: all of them, each once
    assert sorted(sample_start_times(1, 4, 6)[0].tolist()) == [0, 1, 2, 3]
    assert sorted(sample_horizons(1, 1, 3, 5)[0, 0].tolist()) == [1, 2, 3]
    a = sample_start_times(3, 20, 6, generator=torch.Generator().manual_seed(7))
    b = sample_start_times(3, 20, 6, generator=torch.Generator().manual_seed(7))
    assert torch.equal(a, b)
    # every start time and horizon gets drawn (uniform, not only those with a full horizon ahead)
    many = sample_start_times(2000, 8, 2, generator=gen)
    assert torch.bincount(many.flatten(), minlength=8).min() > 0.8 * 2000 * 2 / 8
