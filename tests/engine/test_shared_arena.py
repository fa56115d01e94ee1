"""The run's shared-memory arena: a child process receives a handful of descriptors whatever the number of
policies (Linux passes at most 253 in the one message the forkserver sends, SCM_MAX_FD), views of the arena
are shared for real across processes, queues in it work, and a start that cannot fit fails with one line."""

from __future__ import annotations

import ctypes
import multiprocessing
import os

import pytest
import torch

from sfx.agents import find_agent
from sfx.registries import default_cfg
from sfx.engine.runtime import ProcessRuntime
from sfx.engine.shared_arena import (SCM_MAX_FD, SharedArena, arena_region_of, check_descriptors,
                                     descriptors_passed)
from sfx.engine.wiring import probe_env, wire
from sfx.errors import ConfigError


def _wiring(tmp_path, num_policies: int, **flags):
    cfg = default_cfg(env="gym_CartPole-v1", device="cpu", num_workers=2, num_envs_per_worker=2,
                      num_policies=num_policies, train_dir=str(tmp_path), experiment=f"p{num_policies}", **flags)
    info = probe_env(cfg)
    model = find_agent(cfg.algo).make_model(cfg, info.observation_space, info.action_space)
    return wire(cfg, info, model, serial=False)


def _descriptors_per_role(w) -> dict[str, int]:
    runtime = ProcessRuntime(w)
    return {spec.role: descriptors_passed(runtime.child_args(spec)) for spec in w.components}


def test_a_child_receives_a_handful_of_descriptors_whatever_the_number_of_policies(tmp_path):
    counts = {n: _descriptors_per_role(_wiring(tmp_path, n)) for n in (1, 8, 32)}
    for n, per_role in counts.items():
        assert set(per_role) == {"learner", "policy_worker", "rollout_worker"}
        assert max(per_role.values()) <= 2, (n, per_role)  # the arena's chunk (and one more at most)
    assert counts[1] == counts[8] == counts[32]


def test_the_bound_holds_with_a_gate_spares_and_several_policy_workers(tmp_path):
    w = _wiring(tmp_path, 16, batches_ahead=2, policy_workers_per_policy=2, max_component_restarts=100,
                eval_every_env_steps=1000)
    assert w.gate is not None and w.eval_queue is not None
    per_role = _descriptors_per_role(w)
    assert "evaluator" in per_role and max(per_role.values()) <= 2, per_role


def _child_writes(t, view, q, cell, plain):
    t[1, 2] = 7.0
    view[0] = 5  # a view of another tensor of the same chunk
    cell.value = 11
    q.put(("from child", plain.sum().item()))
    plain[0] = 3.0  # a shared tensor outside any arena travels as torch makes it


def test_arena_views_queues_and_cells_are_shared_with_a_forkserver_child():
    arena = SharedArena()
    t = arena.tensor((3, 4))
    owners = arena.tensor(6, torch.int32, fill=-1)
    q, cell = arena.queue(64 * 1024), arena.value(ctypes.c_int, 1)
    plain = torch.ones(4).share_memory_()
    assert owners.tolist() == [-1] * 6
    ctx = multiprocessing.get_context("forkserver")
    p = ctx.Process(target=_child_writes, args=(t, owners[2:], q, cell, plain))
    p.start()
    p.join(timeout=60)
    assert p.exitcode == 0
    assert t[1, 2].item() == 7.0 and owners.tolist() == [-1, -1, 5, -1, -1, -1]
    assert cell.value == 11 and q.get(timeout=5) == ("from child", 4.0) and plain[0].item() == 3.0


def test_tensors_of_one_chunk_travel_on_one_descriptor_and_others_as_torch_sends_them():
    arena = SharedArena(capacity_bytes=64 * 2**20)
    tensors = [arena.tensor((10, 3), dtype) for dtype in (torch.float32, torch.bool, torch.int64, torch.uint8)]
    queues = [arena.queue(1 << 20) for _ in range(50)]
    assert len(arena.chunks) == 1 and descriptors_passed((tensors, [t[1:] for t in tensors], queues)) == 1
    separate = [torch.zeros(2).share_memory_() for _ in range(5)]
    assert descriptors_passed(separate) == 5
    assert all(arena_region_of(t) is not None for t in tensors) and arena_region_of(separate[0]) is None
    assert arena.tensor((0, 5)).shape == (0, 5)  # nothing to share: an ordinary empty tensor


def test_an_arena_grows_by_chunks_each_at_least_twice_the_last():
    arena = SharedArena(capacity_bytes=1)  # the first chunk is the minimum: the rest must grow geometrically
    for _ in range(40):
        arena.tensor(4 * 2**20, torch.uint8)  # 160 MiB in all
    sizes = [c.size for c in arena.chunks]
    assert len(sizes) <= 5 and all(b >= 2 * a for a, b in zip(sizes, sizes[1:])), sizes


def test_tensor_memory_is_reserved_and_queue_rings_stay_sparse():
    arena = SharedArena(capacity_bytes=256 * 2**20)
    arena.tensor(8 * 2**20, torch.uint8)
    for _ in range(8):
        arena.queue(16 * 2**20)  # 128 MiB of rings, never written
    reserved = os.fstat(arena.chunks[0].fd).st_blocks * 512
    assert len(arena.chunks) == 1 and 8 * 2**20 <= reserved < 24 * 2**20


def test_a_start_that_cannot_fit_fails_with_one_line_naming_the_limit(tmp_path):
    check_descriptors("rollout_worker_0", SCM_MAX_FD - 3)  # at the limit: fine
    with pytest.raises(ConfigError) as e:
        check_descriptors("rollout_worker_0", 400)
    msg = str(e.value)
    assert "\n" not in msg and "rollout_worker_0" in msg and "400" in msg and "SCM_MAX_FD" in msg
    assert "--num_policies" in msg
    # what the check counts is what multiprocessing sends: 300 separately shared tensors are 300 descriptors
    w = _wiring(tmp_path, 1)
    runtime = ProcessRuntime(w)
    runtime.w = w.__class__(**{**w.__dict__, "make_vector_fn": [torch.zeros(1).share_memory_() for _ in range(300)]})
    with pytest.raises(ConfigError, match="would receive 30[0-9] shared-memory"):
        runtime.check_start()
