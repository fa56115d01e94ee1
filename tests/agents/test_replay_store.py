"""The replay-store base (sfx/agents/replay_store.py): ring order, the update-to-data credit in trained samples,
minibatch iteration, the memory check naming the agent's own flags."""

import pytest
import torch

from sfx.agents.base import Batch
from sfx.agents.replay_store import ReplayRing, ReplayStore, check_replay_memory
from sfx.errors import ConfigError
from tests.agents.stubs import ListedFresh


def test_the_ring_writes_in_order_overwrites_the_oldest_and_keeps_the_last_of_an_oversized_insert():
    ring = ReplayRing(5)
    got = []
    for n in (2, 2, 2):
        first, rows = ring.claim(n)
        got.append((first, rows.tolist()))
    assert got == [(0, [0, 1]), (0, [2, 3]), (0, [4, 0])] and ring.size == 5 and ring.next == 1
    first, rows = ring.claim(7)  # more than it holds: the last 5 go to the next 5 rows
    assert first == 2 and rows.tolist() == [1, 2, 3, 4, 0] and ring.next == 1
    assert ring.zeros_like_rows(torch.ones(3, 4, 2, dtype=torch.int8), steps=6).shape == (5, 6, 2)


class CountingStore(ReplayStore):
    """A store that inserts nothing and draws minibatches numbered in order."""

    def insert(self, batch):
        self.earn(int(batch.data["active"].sum()))
        return batch

    def sample(self, k):
        self.drawn = getattr(self, "drawn", 0) + 1
        return {"n": k, "i": self.drawn}, torch.ones(k, dtype=torch.bool)


def _fresh(n, T):
    data = {"active": torch.ones(n, T, dtype=torch.bool)}
    return Batch(data=data, valids=data["active"], fresh=torch.ones(n, dtype=torch.bool), age=torch.zeros(n, T),
                 env_steps=n * T, ids=torch.full((n,), -1))


def test_the_credit_is_trained_samples_per_fresh_sample_spent_in_whole_minibatches():
    store = CountingStore(ListedFresh([]), 4, replay_ratio=1.5, device=torch.device("cpu"), seed=0)
    store.fresh.next_batch = lambda version: _fresh(2, 5)  # 10 fresh samples -> 15 owed
    dues = []
    for version in range(4):
        store.next_batch(version)
        dues.append(store.due(4))
    # 15, 30, 45, 60 owed in total: 3, 7, 11, 15 minibatches of 4 so far
    assert dues == [3, 4, 4, 4] and store.credit == 0.0 and store.version == 3
    store.refund(2, 4)  # ranks agreed on 2 fewer: owed next time
    assert store.credit == 8.0 and store.due(4) == 2
    store.earn(3.0)
    store.forfeit()
    assert store.due(1) == 0
    mbs = list(store.minibatches(3, lambda: 6))
    assert [mb["i"] for mb, _ in mbs] == [1, 2, 3] and all(mb["n"] == 6 for mb, _ in mbs)


def test_a_store_s_draws_repeat_with_its_seed():
    a, b, c = (CountingStore(ListedFresh([]), 1, 1.0, torch.device("cpu"), seed=s) for s in (7, 7, 8))
    draws = [torch.randint(0, 1000, (5,), generator=s.generator).tolist() for s in (a, b, c)]
    assert draws[0] == draws[1] != draws[2]


def test_the_memory_error_names_the_agent_s_own_flags():
    with pytest.raises(ConfigError, match=r"^--replay_buffer_size=9 sequences need [\d,]+ MiB of memory per policy "
                                          r"\(--num_policies=2\).*; lower --replay_buffer_size ") as e:
        check_replay_memory(10 ** 18, 2, "--replay_buffer_size=9 sequences")
    assert "replay_parameters" not in str(e.value) and "\n" not in str(e.value)
