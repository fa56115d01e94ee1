"""Unit tests of the engine's building blocks (no processes)."""

import numpy as np
import pytest
import torch

from sfx.agents import FieldSpec
from sfx.engine.buffers import WeightsBuffer, allocate_trajectory_buffers, num_trajectory_slots, tree_map
from sfx.engine.shared_arena import arena_region_of
from sfx.engine.queues import Empty, LocalQueue, drain, make_process_queue
from sfx.engine.stats import ThroughputMeter, format_duration


def test_local_queue_matches_faster_fifo_interface():
    for q in (LocalQueue(), make_process_queue()):
        with pytest.raises(Empty):
            q.get_many(block=False)
        q.put(1)
        q.put_many([2, 3])
        assert q.get_many(timeout=0.1, max_messages_to_get=2) == [1, 2]
        assert drain(q, timeout=0.1) == [3]
        assert drain(q) == []


def test_weights_buffer_round_trip_and_versions():
    src = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    dst = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    buf = WeightsBuffer.for_model(src)
    assert buf.read_into(dst, -1) == -1  # nothing published yet
    with torch.no_grad():
        src[1].running_mean.fill_(2.5)
    buf.publish(src, 7)
    assert buf.read_into(dst, -1) == 7
    for a, b in zip(src.state_dict().values(), dst.state_dict().values()):
        if a.is_floating_point():
            assert torch.equal(a, b)
    # same version: no copy
    with torch.no_grad():
        dst[0].weight.zero_()
    assert buf.read_into(dst, 7) == 7
    assert float(dst[0].weight.detach().abs().sum()) == 0.0


def test_weights_buffer_skips_a_write_in_progress():
    src, dst = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    buf = WeightsBuffer.for_model(src)
    buf.publish(src, 1)
    buf.meta[0] += 1  # a writer is in the middle of a publish
    assert buf.read_into(dst, 0) == 0
    assert not torch.equal(src.weight, dst.weight)


def test_trajectory_buffers_are_shared_and_shaped():
    spec = {"obs": ((72, 128, 3), np.dtype(np.uint8)), "measurements": ((7,), np.dtype(np.float32))}
    tb = allocate_trajectory_buffers(5, 8, spec, rnn_size=16, action_dim=2,
                                     agent_fields={"action_params": FieldSpec((7,))})
    assert tb.obs["obs"].shape == (5, 9, 72, 128, 3) and tb.obs["obs"].dtype == torch.uint8
    assert tb.obs["measurements"].shape == (5, 9, 7) and tb.obs["measurements"].dtype == torch.float32
    assert tb.rnn_states.shape == (5, 9, 16)
    assert tb.actions.shape == (5, 8, 2) and tb.fields["action_params"].shape == (5, 8, 7)
    leaves = []
    tree_map(leaves.append, tb.tensors())
    # 2 obs keys, 9 fixed fields, 1 agent field; all in one shared arena but the empty memory (nothing to share)
    assert len(leaves) == 12
    regions = [arena_region_of(t) for t in leaves if t.numel()]
    assert len(regions) == 11 and all(r is not None for r in regions) and len({id(r.chunk) for r in regions}) == 1
    assert tb.task.shape == (5,) and tb.task.dtype == torch.int64  # each trajectory's task
    assert tb.memory.shape == (5, 0, 0)  # no memory core: an empty memory per slot


def test_slot_pool_covers_agents_and_queued_batches():
    assert num_trajectory_slots(10, 4, 2.0, serial=False) == 2 * 10 + 8
    assert num_trajectory_slots(10, 4, 0.5, serial=False) == 2 * 10 + 4
    assert num_trajectory_slots(10, 4, 2.0, serial=True) == 3 * 10 + 8


def test_throughput_meter_windows():
    m = ThroughputMeter((10, 60))
    for i in range(61):
        m.add(100, now=1000.0 + i)
    assert m.rate(10, now=1060.0) == pytest.approx(100.0)
    assert m.rate(60, now=1060.0) == pytest.approx(100.0)
    # the first report counts steps made since the start, not since itself
    first = ThroughputMeter((10,))
    first.mark_start(now=0.0)
    first.add(500, now=1.0)
    first.add(500, now=1.001)
    assert first.rate(10, now=1.001) == pytest.approx(1000 / 1.001)
    assert format_duration(3725) == "01:02:05"
    assert format_duration(float("inf")) == "--:--:--"
