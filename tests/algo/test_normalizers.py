"""RunningMeanStd: batch merging equals the statistics of the concatenation."""

import numpy as np
import pytest
import torch

from sfx.algo.normalizers import RunningMeanStd


@pytest.mark.parametrize("shape", [(), (3,), (2, 4)])
def test_merge_equals_numpy_of_concatenation(shape):
    rng = np.random.default_rng(0)
    rms = RunningMeanStd(shape)
    batches = [rng.normal(loc=3.0, scale=2.0, size=(n, *shape)) for n in (1, 7, 100, 33, 2)]
    for b in batches:
        rms.update(torch.tensor(b, dtype=torch.float32))
    everything = np.concatenate([b.astype(np.float32).astype(np.float64) for b in batches])
    np.testing.assert_allclose(rms.mean.numpy(), everything.mean(0), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(rms.var.numpy(), everything.var(0), rtol=1e-10)
    assert rms.count.item() == len(everything)


def test_empty_batch_is_ignored():
    rms = RunningMeanStd((2,))
    rms.update(torch.ones(5, 2))
    rms.update(torch.zeros(0, 2))
    assert rms.count.item() == 5
    np.testing.assert_allclose(rms.mean.numpy(), [1.0, 1.0])


def test_normalize_denormalize_round_trip():
    torch.manual_seed(0)
    rms = RunningMeanStd((3,), clip=None)
    rms.update(torch.randn(500, 3) * torch.tensor([1.0, 5.0, 0.1]) + torch.tensor([0.0, -4.0, 10.0]))
    x = torch.randn(20, 3) * torch.tensor([1.0, 5.0, 0.1]) + torch.tensor([0.0, -4.0, 10.0])
    y = rms.normalize(x)
    assert y.dtype == torch.float32
    torch.testing.assert_close(rms.denormalize(y), x, atol=1e-5, rtol=1e-5)
    # normalized data is roughly standard
    z = rms.normalize(torch.randn(5000, 3) * torch.tensor([1.0, 5.0, 0.1]) + torch.tensor([0.0, -4.0, 10.0]))
    torch.testing.assert_close(z.mean(0), torch.zeros(3), atol=0.1, rtol=0)
    torch.testing.assert_close(z.std(0), torch.ones(3), atol=0.1, rtol=0)


def test_clip_applied():
    rms = RunningMeanStd((), clip=2.0)
    rms.update(torch.tensor([-1.0, 1.0]))  # mean 0, var 1
    out = rms.normalize(torch.tensor([-100.0, 0.5, 100.0]))
    torch.testing.assert_close(out, torch.tensor([-2.0, 0.5, 2.0]), atol=1e-4, rtol=0)
    assert out.abs().max().item() == 2.0


def test_before_any_update_is_identity():
    rms = RunningMeanStd((2,), eps=0.0)
    x = torch.tensor([[0.5, -1.5]])
    torch.testing.assert_close(rms.normalize(x), x)


def test_integer_input_normalizes_to_float():
    rms = RunningMeanStd((2,))
    rms.update(torch.tensor([[0, 255], [255, 0]], dtype=torch.uint8))
    assert rms.normalize(torch.tensor([[0, 255]], dtype=torch.uint8)).dtype == torch.float32


def test_state_dict_round_trip():
    rms = RunningMeanStd((2,))
    rms.update(torch.tensor([[1.0, 2.0], [3.0, 6.0]]))
    state = rms.state_dict()
    assert set(state) == {"mean", "var", "count"}
    fresh = RunningMeanStd((2,))
    fresh.load_state_dict(state)
    for name in ("mean", "var", "count"):
        torch.testing.assert_close(getattr(fresh, name), getattr(rms, name))
    np.testing.assert_allclose(fresh.mean.numpy(), [2.0, 4.0])
    np.testing.assert_allclose(fresh.var.numpy(), [1.0, 4.0])


def test_inside_a_model_state_dict():
    model = torch.nn.Module()
    model.obs_norm = RunningMeanStd((4,))
    assert {"obs_norm.mean", "obs_norm.var", "obs_norm.count"} <= set(model.state_dict())
