"""sfx/algo/minibatches.py against plain loops: the epochs' shuffles of trajectories and of single transitions,
and the gathering of transitions into one-step trajectories."""

import pytest
import torch

from sfx.algo.minibatches import gather_transitions, trajectory_minibatches, transition_minibatches


def test_trajectory_minibatches_are_the_orders_the_learner_always_drew():
    # the loop APPO.minibatches ran before the rule moved here: the default step stays bit-identical
    n, per_mb, epochs = 10, 3, 4
    torch.manual_seed(5)
    expected = []
    for _ in range(epochs):
        perm = torch.randperm(n)
        for start in range(0, n, per_mb):
            expected.append(perm[start:start + per_mb])
    torch.manual_seed(5)
    got = trajectory_minibatches(n, per_mb, epochs)
    assert len(got) == len(expected) == epochs * 4
    assert all(torch.equal(a, b) for a, b in zip(got, expected))


@pytest.mark.parametrize("n,T,M,epochs", [(8, 64, 64, 3), (3, 5, 4, 2), (2, 3, 6, 1), (1, 1, 1, 2)])
def test_transition_minibatches_shuffle_single_steps_across_trajectories(n, T, M, epochs):
    torch.manual_seed(11)
    expected = []
    for _ in range(epochs):  # PPO's minibatch SGD as Baselines / SB3 run it: a permutation of the N*T steps
        perm = torch.randperm(n * T).tolist()
        for j in range(0, n * T, M):
            expected.append([(i // T, i % T) for i in perm[j:j + M]])
    torch.manual_seed(11)
    got = transition_minibatches(n, T, M, epochs)
    assert [list(zip(b.tolist(), t.tolist())) for b, t in got] == expected
    per_epoch = -(-n * T // M)
    assert len(got) == epochs * per_epoch
    for e in range(epochs):  # every step exactly once per epoch
        seen = sorted(pair for b, t in got[e * per_epoch:(e + 1) * per_epoch] for pair in zip(b.tolist(), t.tolist()))
        assert seen == [(b, t) for b in range(n) for t in range(T)]
    if n > 1 and T > 1 and M >= 4 and epochs > 1:
        # a minibatch mixes trajectories (not one trajectory's consecutive steps)
        assert any(len(set(b.tolist())) > 1 for b, _ in got)


def test_gather_transitions_makes_one_step_trajectories():
    g = torch.Generator().manual_seed(0)
    B, T = 3, 5
    data = {"obs": {"obs": torch.randn(B, T + 1, 2, generator=g), "img": torch.randn(B, T + 1, 1, 2, 2, generator=g)},
            "rnn_states": torch.randn(B, T + 1, 4, generator=g), "rewards": torch.randn(B, T, generator=g),
            "actions": torch.randn(B, T, 3, generator=g), "task": torch.tensor([2, 0, 1]),
            "memory": torch.randn(B, 0, 0), "replayed": torch.tensor([True, False, True])}
    traj, step = torch.tensor([2, 0, 2, 1]), torch.tensor([4, 0, 1, 3])
    out = gather_transitions(data, traj, step)
    assert out["obs"]["obs"].shape == (4, 2, 2) and out["obs"]["img"].shape == (4, 2, 1, 2, 2)
    assert out["rewards"].shape == (4, 1) and out["actions"].shape == (4, 1, 3) and out["task"].shape == (4,)
    assert out["memory"].shape == (4, 0, 0)
    for i, (b, t) in enumerate(zip(traj.tolist(), step.tolist())):
        for key in ("obs", "img"):
            assert torch.equal(out["obs"][key][i, 0], data["obs"][key][b, t])
            assert torch.equal(out["obs"][key][i, 1], data["obs"][key][b, t + 1])  # index T: the bootstrap obs
        assert torch.equal(out["rnn_states"][i], data["rnn_states"][b, t:t + 2])
        assert torch.equal(out["rewards"][i, 0], data["rewards"][b, t])
        assert torch.equal(out["actions"][i, 0], data["actions"][b, t])
        assert int(out["task"][i]) == int(data["task"][b]) and bool(out["replayed"][i]) == bool(data["replayed"][b])


@pytest.mark.parametrize("call", [lambda: transition_minibatches(4, 0, 2, 1), lambda: transition_minibatches(4, 2, 0, 1),
                                  lambda: trajectory_minibatches(4, 2, 0), lambda: trajectory_minibatches(4, 1.5, 1)])
def test_bad_sizes_are_refused_by_name(call):
    with pytest.raises(ValueError, match="must be an integer >= 1"):
        call()
