"""The replay-store base (sfx/agents/replay_store.py): ring order, the update-to-data credit in trained samples,
minibatch iteration, the memory check naming the agent's own flags."""

import pytest
import torch

from sfx.agents.base import Batch
from sfx.agents.kit.checks import check_replay_memory
from sfx.agents.kit.replay_store import ReplayRing, ReplayStore
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


def _through_a_checkpoint(state, tmp_path):
    torch.save(state, tmp_path / "ckpt.pth")
    return torch.load(tmp_path / "ckpt.pth", weights_only=False)


def test_r2d2_s_replay_resumes_with_the_same_contents_priorities_and_draws(tmp_path):
    import gymnasium

    from sfx.agents.r2d2 import R2D2
    from sfx.models.q_network import QNetwork
    from tests.agents.test_r2d2 import _acted_trajectories, _cfg

    cfg = _cfg(tmp_path, hidden_size=8, rollout=8, recurrence=8, burn_in=4, batch_size=16, replay_buffer_size=400,
               learning_starts=16, save_replay_buffer=True)
    model = QNetwork(cfg, gymnasium.spaces.Box(-5, 5, (4,)), gymnasium.spaces.Discrete(2))
    trajs = _acted_trajectories(model, steps=32, T=8, actors=2)
    saved = R2D2(cfg, model, torch.device("cpu"))
    store = saved.sample_source(ListedFresh(trajs))
    for _ in trajs:
        store.next_batch(3)
    store.update_priorities(torch.tensor([1, 4]), torch.tensor([5.0, 0.25]))
    state = _through_a_checkpoint(saved.learning_state(), tmp_path)
    resumed = R2D2(cfg, QNetwork(cfg, model.obs_space, model.action_space), torch.device("cpu"))
    again = resumed.sample_source(ListedFresh([]))
    resumed.load_learning_state(state)
    assert (again.size, again.next, again.credit, again.inserted) == (store.size, store.next, store.credit, 8)
    for k, v in store.data.items():
        for key, t in (v.items() if isinstance(v, dict) else [(None, v)]):
            assert torch.equal(t, again.data[k][key] if key else again.data[k]), (k, key)
    assert torch.equal(again.sampler.get(torch.arange(8)), store.sampler.get(torch.arange(8)))
    assert torch.equal(again.sample(4, 3)[0]["ids"], store.sample(4, 3)[0]["ids"])  # the same stream on
    # without the flag nothing is kept; a saved replay of another size is refused at start, by name
    assert "replay" not in R2D2(_cfg(tmp_path), model, torch.device("cpu")).learning_state()
    smaller = _cfg(tmp_path, hidden_size=8, rollout=8, recurrence=8, burn_in=4, batch_size=16, replay_buffer_size=200,
                   learning_starts=16, save_replay_buffer=True)
    with pytest.raises(ConfigError, match=r"^the checkpoint in here holds a replay of 50 sequences, the current flags "
                                          r"make 25: keep --replay_buffer_size"):
        R2D2.check_checkpoint(smaller, model, {"model": model.state_dict(), **state}, "here")


def test_sac_s_replay_resumes_with_the_same_transitions_and_final_observations(tmp_path):
    import gymnasium

    from sfx.agents.sac import SAC
    from sfx.models.sac_model import SACModel
    from tests.agents.test_sac_agent import _cfg, _trajectories

    cfg = _cfg(tmp_path, rollout=8, replay_buffer_size=40, learning_starts=0, save_replay_buffer=True)
    spaces = (gymnasium.spaces.Box(-1.0, 1.0, (3,)), gymnasium.spaces.Box(-1.0, 1.0, (2,)))
    batches = [_trajectories(2, 8, start=10_000 * i) for i in range(3)]
    for b in batches:
        b["truncated"][0, 3] = True
    saved = SAC(cfg, SACModel(cfg, *spaces), torch.device("cpu"))
    store = saved.sample_source(ListedFresh(batches))
    for _ in batches:
        store.next_batch(2)
    store.due(cfg.batch_size)
    state = _through_a_checkpoint(saved.learning_state(), tmp_path)
    resumed = SAC(cfg, SACModel(cfg, *spaces), torch.device("cpu"))
    again = resumed.sample_source(ListedFresh([]))
    resumed.load_learning_state(state)
    for name in ("size", "next", "credit", "capacity", *type(store).state_fields):
        assert getattr(again, name) == getattr(store, name), name
    a, b = store.sample(64, 2)[0], again.sample(64, 2)[0]
    for key in ("obs", "next_obs"):
        assert torch.equal(a[key]["obs"], b[key]["obs"]), key
    assert torch.equal(a["rewards"], b["rewards"]) and torch.equal(a["discounts"], b["discounts"])


@pytest.mark.parametrize("algo, env, default", [("R2D2", "atari_breakout", 800), ("SAC", "gym_Pendulum-v1", 100)])
def test_learning_starts_has_one_name_for_every_agent_and_the_old_spelling_sets_it(tmp_path, algo, env, default):
    import json

    from sfx.registries import build_parser, parse_args

    base = [f"--algo={algo}", f"--env={env}", f"--train_dir={tmp_path}"]
    cfg = parse_args(base + ["--experiment=new"])
    assert cfg.learning_starts == default and not hasattr(cfg, "replay_buffer_min_size")
    cfg = parse_args(base + ["--experiment=old", "--replay_buffer_min_size=1600"])
    # one name in cfg (and so in cfg.json): the old spelling is gone once it has set the flag
    assert cfg.learning_starts == 1600 and not hasattr(cfg, "replay_buffer_min_size")
    assert "learning_starts" in cfg.explicit_args and "replay_buffer_min_size" not in cfg.explicit_args
    with pytest.raises(ConfigError, match=r"^--learning_starts=160 and --replay_buffer_min_size=1600 both given: "
                                          r"--replay_buffer_min_size is the old spelling of --learning_starts; "
                                          r"give one$"):
        parse_args(base + ["--experiment=both", "--learning_starts=160", "--replay_buffer_min_size=1600"])
    # an experiment saved under the old name resumes with its value, unless the command line gives the new one
    (tmp_path / "saved").mkdir()
    (tmp_path / "saved" / "cfg.json").write_text(json.dumps({"algo": algo, "env": env, "replay_buffer_min_size": 48}))
    assert parse_args(base + ["--experiment=saved"]).learning_starts == 48
    assert parse_args(base + ["--experiment=saved", "--learning_starts=96"]).learning_starts == 96
    # --help names the unit and marks the old spelling as such
    help_text = " ".join(build_parser(env, argv=[f"--algo={algo}"]).format_help().split())
    assert "--learning_starts LEARNING_STARTS unit: samples (agent steps) stored in the replay" in help_text
    assert "--replay_buffer_min_size LEARNING_STARTS the old spelling of --learning_starts" in help_text
