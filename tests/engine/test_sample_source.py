"""The engine's fresh sample source (sfx/engine/sample_source.py): a batch takes the agent's number of
trajectories, or the number a wrapping source set through ``take_per_iteration``; the collection gate is told
at once; the slots taken go back to the free queue."""

import numpy as np
import torch

from sfx.engine.buffers import CollectionGate, allocate_trajectory_buffers
from sfx.engine.queues import LocalQueue, drain
from sfx.engine.sample_source import FreshTrajectories


def _source(per_iteration, gate=None):
    traj = allocate_trajectory_buffers(8, 3, {"obs": ((2,), np.float32)}, rnn_size=1, action_dim=1)
    traj.rewards[:] = torch.arange(8, dtype=torch.float32).unsqueeze(1)  # a slot's rewards: its number
    free = LocalQueue()
    return FreshTrajectories(traj, free, torch.device("cpu"), max_policy_lag=100, env_frameskip=1,
                             per_iteration=per_iteration, gate=gate, policy=0), free


def test_a_wrapping_source_sets_how_many_fresh_trajectories_a_batch_takes():
    gate = CollectionGate(num_policies=1, num_workers=1, batches_ahead=1)
    source, free = _source(lambda: 6, gate)
    assert source.per_iteration() == 6 and int(gate.learners[0, 1]) == 6
    share = {"n": 2}
    source.take_per_iteration(lambda: share["n"])  # e.g. a replay mix's queue share of a batch of 6
    assert source.per_iteration() == 2 and int(gate.learners[0, 1]) == 2  # the gate knows before any batch
    source.add([5, 1, 7])
    assert source.ready()
    batch = source.next_batch(policy_version=0)
    assert batch.data["rewards"][:, 0].tolist() == [5.0, 1.0] and batch.env_steps == 2 * 3
    assert sorted(drain(free)) == [1, 5]  # the taken slots are free again; slot 7 waits for the next batch
    share["n"] = 3  # asked anew for every batch (PBT may change --batch_size)
    assert not source.ready()
    source.add([0, 2])
    batch = source.next_batch(policy_version=0)
    assert batch.data["rewards"][:, 0].tolist() == [7.0, 0.0, 2.0] and int(gate.learners[0, 0]) == 5
