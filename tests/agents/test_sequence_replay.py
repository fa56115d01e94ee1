"""R2D2's sequence replay (sfx/agents/sequence_replay.py): a sequence's burn-in prefix does not depend on how
the fresh trajectories were grouped into insertion batches."""

import gymnasium
import torch

from sfx.agents.kit.sequence_replay import PrioritizedSequences
from sfx.registries import default_cfg
from sfx.models.q_network import QNetwork
from tests.agents.stubs import ListedFresh
from tests.agents.test_r2d2 import _acted_trajectories


def _store(batches, burn_in=4):
    return PrioritizedSequences(ListedFresh(batches), 50, burn_in, 1, 1.0, lambda: 2, 0.9, 0.6, 0.9, 0.99, 3, 1e-3,
                                torch.device("cpu"), seed=0)


def _concatenated(trajs):
    """One insertion batch holding the given batches' trajectories, in their order (each actor's in order, as the
    engine's FIFO of finished slots hands them)."""
    def cat(values):
        if isinstance(values[0], dict):
            return {k: cat([v[k] for v in values]) for k in values[0]}
        return torch.cat(values, dim=0)

    return {k: cat([t[k] for t in trajs]) for k in trajs[0]}


def test_an_actor_s_consecutive_trajectories_in_one_insertion_batch_each_get_the_previous_one_s_tail():
    cfg = default_cfg(env="gym_CartPole-v1", algo="R2D2", device="cpu", hidden_size=8, use_rnn=True, rnn_type="gru")
    model = QNetwork(cfg, gymnasium.spaces.Box(-5, 5, (4,)), gymnasium.spaces.Discrete(2))
    trajs = _acted_trajectories(model, steps=24, T=8, actors=2)  # 3 consecutive trajectories of each of 2 actors
    apart = _store(trajs)
    for _ in trajs:
        apart.next_batch(0)
    together = _store([_concatenated(trajs)])
    together.next_batch(0)
    assert apart.size == together.size == 6
    assert together.data["has_prefix"][:6].tolist() == [False, False, True, True, True, True]
    for k, v in apart.data.items():
        if isinstance(v, dict):
            for key in v:
                assert torch.equal(together.data[k][key], v[key]), (k, key)
        else:
            assert torch.equal(together.data[k], v), k
    # the third trajectory of actor 1 (row 5) starts with the second one's last 4 steps and its state there
    assert torch.equal(together.data["obs"]["obs"][5, :4], trajs[1]["obs"]["obs"][1, 4:8])
    assert torch.equal(together.data["state0"][5], trajs[1]["rnn_states"][1, 4])
    # a batch larger than the ring: the trajectories that do not fit still hand their tail on
    ring = PrioritizedSequences(ListedFresh([_concatenated(trajs)]), 2, 4, 1, 1.0, lambda: 2, 0.9, 0.6, 0.9, 0.99, 3,
                                1e-3, torch.device("cpu"), seed=0)
    ring.next_batch(0)
    assert ring.size == 2 and ring.data["has_prefix"].tolist() == [True, True]
    assert torch.equal(ring.data["obs"]["obs"][:, :4], torch.stack([trajs[1]["obs"]["obs"][a, 4:8] for a in (0, 1)]))
