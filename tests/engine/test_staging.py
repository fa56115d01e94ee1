"""The host<->device data path (sfx/engine/staging.py): rows gathered for the device (page-locked on
CUDA) and a batch's outputs brought back in one packed copy. The packing is device-agnostic, so its arithmetic
(offsets, alignment, dtypes, shapes) is checked here on the CPU; the page-locked part needs CUDA."""

import pytest
import torch

from sfx.engine.staging import HostStaging, pack_bytes, to_host, unpack_bytes


def _outputs(n: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(n)
    return {"actions": torch.randint(0, 7, (n,), generator=g),                      # int64
            "new_rnn": torch.randn(n, 3, generator=g),                               # float32, 12 bytes a row
            "field.log_prob": torch.randn(n, generator=g, dtype=torch.float64),
            "field.tuple_actions": torch.randint(-5, 5, (n, 3), generator=g, dtype=torch.int16),
            "field.done": torch.rand(n, generator=g) > 0.5,                          # bool: 1 byte each
            "truncation_values": torch.randn(n, 1, generator=g, dtype=torch.bfloat16)}


@pytest.mark.parametrize("n", [1, 3, 5, 64])
def test_packed_outputs_come_back_equal_in_dtype_shape_and_value(n):
    outs = _outputs(n)
    packed = pack_bytes(outs)
    assert packed.dtype == torch.uint8 and packed.dim() == 1
    back = unpack_bytes(packed.clone(), outs)
    assert list(back) == list(outs)
    for k, v in outs.items():
        assert back[k].dtype == v.dtype and back[k].shape == v.shape, k
        assert torch.equal(back[k], v), k
        assert back[k].storage_offset() * back[k].element_size() % 16 == 0, k  # every part starts aligned


def test_to_host_on_the_cpu_returns_the_tensors_themselves():
    outs = _outputs(4)
    host = to_host(outs)
    assert all(host[k] is outs[k] for k in outs)
    assert to_host({}) == {}


def test_a_non_contiguous_output_packs_by_value():
    x = torch.arange(24, dtype=torch.float32).view(4, 6)[:, ::2]
    assert not x.is_contiguous()
    back = unpack_bytes(pack_bytes({"x": x}), {"x": x})
    assert torch.equal(back["x"], x)


def test_host_staging_without_pinning_gathers_like_index_select():
    buf = torch.arange(5 * 4 * 2 * 3, dtype=torch.float32).view(5, 4, 2, 3)  # [slots, T, ...]
    at = torch.tensor([0, 7, 19, 3])
    staging = HostStaging(torch.device("cpu"), depth=2)
    rows = staging.rows("obs", buf, at)
    assert torch.equal(rows, buf.view(-1, 2, 3)[at])
    assert staging.to_device("obs", rows) is rows  # on the CPU nothing is copied
    flat = torch.arange(12).view(4, 3)
    assert torch.equal(staging.gather("x", flat, torch.tensor([3, 0])), flat[[3, 0]])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="page-locked memory needs CUDA")
def test_host_staging_on_cuda_takes_its_pinned_buffers_in_turn():
    staging = HostStaging(torch.device("cuda"), depth=2)
    buf = torch.randn(6, 5, 4)
    a = staging.rows("obs", buf, torch.tensor([1, 2, 3]))
    assert a.is_pinned() and torch.equal(a, buf.view(-1, 4)[[1, 2, 3]])
    a_dev = staging.to_device("obs", a)
    b = staging.rows("obs", buf, torch.tensor([4, 5]))
    assert b.data_ptr() != a.data_ptr() and torch.equal(b, buf.view(-1, 4)[[4, 5]])
    b_dev = staging.to_device("obs", b)
    c = staging.rows("obs", buf, torch.tensor([6]))  # the first buffer again, once its copy has finished
    assert c.data_ptr() == a.data_ptr()
    assert torch.equal(a_dev.cpu(), buf.view(-1, 4)[[1, 2, 3]]) and torch.equal(b_dev.cpu(), buf.view(-1, 4)[[4, 5]])
    host = to_host({k: v.cuda() for k, v in _outputs(9).items()})
    assert all(torch.equal(host[k], v) for k, v in _outputs(9).items())


def test_a_nested_batch_is_gathered_and_moved_per_leaf():
    from sfx.engine.staging import gather_tree, tree_to_device

    tree = {"obs": {"image": torch.arange(5 * 2 * 3).view(5, 2, 3), "vec": torch.randn(5, 2, 4)},
            "rewards": torch.randn(5, 2)}
    idx = torch.tensor([4, 1])
    staging = HostStaging(torch.device("cpu"), depth=2)
    out = tree_to_device(staging, gather_tree(staging, tree, idx))
    assert torch.equal(out["obs"]["image"], tree["obs"]["image"][idx])
    assert torch.equal(out["obs"]["vec"], tree["obs"]["vec"][idx]) and torch.equal(out["rewards"], tree["rewards"][idx])
    if torch.cuda.is_available():
        staging = HostStaging(torch.device("cuda"), depth=2)
        for _ in range(3):  # buffers reused in turn
            out = tree_to_device(staging, gather_tree(staging, tree, idx))
            assert out["rewards"].is_cuda and torch.equal(out["obs"]["image"].cpu(), tree["obs"]["image"][idx])
