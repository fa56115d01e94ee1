"""--inference_cuda_graphs: acting forward passes replayed from CUDA graphs (sfx.engine.cuda_graphs). The buckets
and the choice of where graphs apply are tested everywhere; the replays against eager forward passes where CUDA
is (the GPU machine's check, bench/results/gpu_run.sh)."""

from __future__ import annotations

import logging

import gymnasium as gym
import numpy as np
import pytest
import torch

from sfx.registries import default_cfg
from sfx.engine.buffers import WeightsBuffer
from sfx.engine.cuda_graphs import GraphedStep, bucket_sizes, pick_bucket
from sfx.models import create_actor_critic

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA GPU")


@pytest.mark.parametrize("max_rows", [1, 7, 8, 9, 88, 256, 512, 1000, 4096, 10_000])
def test_buckets_hold_every_batch_and_pad_less_than_half(max_rows):
    sizes = bucket_sizes(max_rows)
    assert sizes[0] == 8 and sizes == sorted(set(sizes))
    assert all(s % 8 == 0 for s in sizes)
    assert all(b <= max(1.5 * a, a + 8) for a, b in zip(sizes, sizes[1:]))
    assert sizes[-1] >= min(max_rows, 4096) and sizes[-1] <= 4096
    for n in range(1, min(max_rows, 4096) + 1):
        b = pick_bucket(sizes, n)
        assert b is not None and b >= n and (b == 8 or b <= 1.5 * n + 8)
    assert pick_bucket(sizes, sizes[-1] + 1) is None


def test_bad_max_rows_is_refused():
    with pytest.raises(ValueError, match="max_rows=0"):
        bucket_sizes(0)


def _doom_like(device="cpu", **overrides):
    cfg = default_cfg(env="gym_CartPole-v1", hidden_size=64, device=device, **overrides)
    obs_space = gym.spaces.Box(0, 255, (3, 36, 64), np.uint8)
    torch.manual_seed(3)
    return cfg, create_actor_critic(cfg, obs_space, gym.spaces.Discrete(5))


def test_graphs_apply_on_cuda_only_and_where_the_flag_asks():
    cfg, model = _doom_like()
    assert GraphedStep.create(cfg, model, torch.device("cpu"), 64) is None
    cfg.inference_cuda_graphs = False
    assert GraphedStep.create(cfg, model, torch.device("cuda"), 64) is None
    cfg.inference_cuda_graphs = True
    assert cfg is not None and default_cfg().inference_cuda_graphs is True  # the default


def test_models_with_a_memory_or_per_task_outputs_act_eagerly():
    cfg, _ = _doom_like()

    class WithMemory(torch.nn.Module):
        memory_len = 16

    class WithTasks(torch.nn.Module):
        reads_tasks = True

    for model in (WithMemory(), WithTasks()):
        assert GraphedStep.create(cfg, model, torch.device("cuda"), 64) is None


@pytest.fixture
def full_float32():
    """TF32 off for convolutions and matrix products, as sfx's --tf32=False (its default) sets them: PyTorch's own
    default takes TF32 convolutions, whose 10-bit mantissa differs between the algorithms cuDNN picks for a bucket's
    shape and for n rows (seen on an H200: action_params differed beyond 1e-4 at n=300 with TF32, equal without)."""
    before = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = before


@cuda
@pytest.mark.parametrize("mixed_precision", ["off", "auto"])
def test_replays_equal_eager_forward_passes_and_follow_weight_updates(mixed_precision, full_float32):
    dev = torch.device("cuda")
    cfg, model = _doom_like("gpu", mixed_precision=mixed_precision)
    model = model.to(dev).for_inference()
    graphs = GraphedStep.create(cfg, model, dev, max_rows=300)
    assert graphs is not None
    bf16 = any(p.dtype == torch.bfloat16 for p in model.parameters())
    tol = dict(rtol=2e-2, atol=1e-3) if bf16 else dict(rtol=1e-4, atol=1e-5)
    g = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        # sizes that hit, miss and pad the buckets, twice over (the second time replays): the padding rows hold
        # the previous batch's rows
        for n in [5, 88, 8, 300, 97, 88, 5, 301]:
            obs = {"obs": torch.randint(0, 256, (n, 3, 36, 64), generator=g, dtype=torch.uint8).to(dev)}
            rnn = torch.randn(n, model.initial_rnn_states(1).shape[1], generator=g).to(dev)
            got = graphs(obs, rnn)
            want = model.forward_step(obs, rnn)
            if n > graphs.sizes[-1]:
                assert got is None
                continue
            assert got is not None and set(got) == set(want)
            for k in want:
                # the graph runs the bucket's rows, eager n: cuDNN / cuBLAS may pick other algorithms, which sum in
                # another order. float32: a few ulps of sums over ~1e3 terms; a bf16 encoder: an output may round
                # to the next bf16 value (2^-8 relative)
                torch.testing.assert_close(got[k], want[k], **tol, msg=f"{k} at n={n}")
        assert len(graphs.graphs) == len({pick_bucket(graphs.sizes, n) for n in [5, 88, 8, 300, 97]})
        # a weight update in place (as WeightsBuffer.read_into does: parameters and buffers, the input and return
        # normalizers' statistics among them) is what the next replay acts with
        assert cfg.normalize_input and any("running" in n or "mean" in n for n, _ in model.named_buffers())
        with torch.no_grad():
            for t in WeightsBuffer.state_tensors(model):
                if t.is_floating_point():
                    t.mul_(0.5).add_(0.01)
        obs = {"obs": torch.randint(0, 256, (88, 3, 36, 64), generator=g, dtype=torch.uint8).to(dev)}
        rnn = torch.randn(88, model.initial_rnn_states(1).shape[1], generator=g).to(dev)
        got, want = graphs(obs, rnn), model.forward_step(obs, rnn)
        for k in want:
            torch.testing.assert_close(got[k], want[k], **tol)


@cuda
def test_a_forward_pass_that_cannot_be_captured_acts_eagerly_and_says_so_once(caplog):
    dev = torch.device("cuda")
    cfg, model = _doom_like("gpu")

    class Syncing(torch.nn.Module):
        memory_len, reads_tasks = 0, False

        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward_step(self, obs, rnn):
            out = self.inner.forward_step(obs, rnn)
            if float(out["values"].sum()) > 1e30:  # a host sync: not allowed while capturing
                out["values"] = out["values"] * 0
            return out

    wrapped = Syncing(model.to(dev).for_inference())
    graphs = GraphedStep.create(cfg, wrapped, dev, max_rows=64)
    with caplog.at_level(logging.WARNING, logger="sfx.engine.cuda_graphs"), torch.inference_mode():
        obs = {"obs": torch.zeros(10, 3, 36, 64, dtype=torch.uint8, device=dev)}
        rnn = torch.zeros(10, model.initial_rnn_states(1).shape[1], device=dev)
        assert graphs(obs, rnn) is None and graphs.broken
        assert graphs(obs, rnn) is None
        out = wrapped.forward_step(obs, rnn)  # the device is still usable
        assert torch.isfinite(out["values"]).all()
    assert sum("could not be captured" in r.message for r in caplog.records) == 1
