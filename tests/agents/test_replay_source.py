"""Replay as a sample source (sfx/agents/replay.py): the batch mixed per --replay_parameters, replayed
samples exempt from the policy-lag mask with their age kept, counters counting fresh samples only, the
buffers bounded, custom buffers sampling and inserting by feature distance; the flags' checks."""

import json

import pytest
import torch

from sfx.agents import Batch
from sfx.agents.appo import APPO, replay_specs
from sfx.agents.kit.replay_mix import ReplayMix
from sfx.cfg import ConfigError
from sfx.registries import default_cfg
from sfx.engine import run_training

QUEUE_STANDARD = json.dumps([{"type": "queue", "capacity": 1, "sample_ratio": 0.5},
                             {"type": "standard", "capacity": 6, "sample_ratio": 0.5}])
ELITE = json.dumps([{"type": "queue", "capacity": 1, "sample_ratio": 0.5},
                    {"type": "custom", "capacity": 4, "sample_ratio": 0.5, "dist_function": "ln_norm",
                     "sample_strategy": "elite_sampling", "lambda_batch_multiplier": 2,
                     "insert_strategy": "elite_insertion", "elite_batch_size": 3}])


class FakeFresh:
    """Stands in for FreshTrajectories: each batch is ``per_iteration()`` new trajectories numbered in
    order (``rewards[:, 0]`` = the number), acted ``lag`` versions ago; the mix says how many through the
    same seam as the engine's (``take_per_iteration``)."""

    def __init__(self, T=4, lag=0, frameskip=1):
        self.T, self.lag, self.frameskip, self.count = T, lag, frameskip, 0
        self._per_iteration = lambda: 4

    def per_iteration(self):
        return self._per_iteration()

    def take_per_iteration(self, per_iteration):
        self._per_iteration = per_iteration

    def ready(self):
        return True

    def next_batch(self, version):
        n, T = self.per_iteration(), self.T
        ids = torch.arange(self.count, self.count + n, dtype=torch.float32)
        self.count += n
        data = {"obs": {"obs": ids.reshape(n, 1, 1).expand(n, T + 1, 1).clone()},
                "rewards": ids.reshape(n, 1).expand(n, T).clone(),
                "policy_versions": torch.full((n, T), version - self.lag, dtype=torch.int64),
                "active": torch.ones(n, T, dtype=torch.bool), "terminated": torch.zeros(n, T, dtype=torch.bool),
                "truncated": torch.zeros(n, T, dtype=torch.bool),
                "features": ids.reshape(n, 1, 1).expand(n, T, 2).clone()}
        age = torch.full((n, T), float(self.lag))
        return Batch(data=data, valids=age <= 1, fresh=torch.ones(n, dtype=torch.bool), age=age,
                     env_steps=n * T * self.frameskip, ids=torch.full((n,), -1))


def test_each_batch_mixes_fresh_and_replayed_and_counts_fresh_only():
    fresh = FakeFresh(lag=3)  # fresh samples past a --max_policy_lag of 1: masked; replayed ones are not
    specs = replay_specs(default_cfg(replay_parameters=QUEUE_STANDARD))
    mix = ReplayMix(fresh, specs, lambda: 8, torch.device("cpu"), seed=0)
    assert fresh.per_iteration() == 4  # the queue's half of 8
    first = mix.next_batch(10)
    assert first.num_trajectories == 4 and bool(first.fresh.all())  # nothing stored yet: fresh only
    seen = set()
    for version in range(11, 30):
        held = mix.rings[1].data["rewards"][:, 0].clone()  # before this batch's insert
        b = mix.next_batch(version)
        assert b.num_trajectories == 8 and int(b.fresh.sum()) == 4
        assert b.env_steps == 4 * 4  # the fresh ones only
        fresh_ids = b.data["rewards"][b.fresh, 0]
        replayed_ids = b.data["rewards"][~b.fresh, 0]
        # replayed: among the last 6 inserted before this batch (capacity 6), never this batch's own
        newest_before = float(fresh_ids.min()) - 1
        assert bool(((replayed_ids <= newest_before) & (replayed_ids > newest_before - 6)).all())
        assert not bool(b.valids[b.fresh].any()) and bool(b.valids[~b.fresh].all())
        assert torch.equal(b.age[~b.fresh], (version - b.data["policy_versions"][~b.fresh]).float())
        # ids: -1 for the fresh ones, a replayed one's row in its buffer (what it held there when drawn)
        assert bool((b.ids[b.fresh] == -1).all()) and torch.equal(held[b.ids[~b.fresh]], replayed_ids)
        assert b.stats["replay/fresh_share"] == 0.5 and b.stats["replay/1_standard/fill"] == 1.0
        seen |= {int(x) for x in replayed_ids}
    assert mix.rings[1].data["rewards"].shape[0] == 6  # the buffer holds its capacity, no more
    assert len(seen) > 20  # uniform over what was stored


def test_elite_sampling_prefers_trajectories_whose_features_moved_least():
    """Stored features = the trajectory's number; the 'current' features move old trajectories far (the
    distance grows with age): elite sampling (strategy1) keeps picking the newest candidates."""
    fresh = FakeFresh()
    specs = replay_specs(default_cfg(replay_parameters=ELITE.replace('"elite_insertion", ', 'null, ')
                                     .replace('"insert_strategy": null, ', '')))
    specs = tuple(s if s.type == "queue" else type(s)(**{**s.__dict__, "elite_sampling_strategy": "strategy1",
                                                         "lambda_batch_multiplier": 4.0}) for s in specs)
    now = {"step": 0}

    def features(data):  # the current weights' view: trajectories older than the newest moved away
        ids = data["rewards"][:, :1].unsqueeze(-1).expand(-1, data["rewards"].shape[1], 2)
        return ids + (now["step"] - ids) * 10.0

    mix = ReplayMix(fresh, specs, lambda: 8, torch.device("cpu"), features=features, seed=0)
    mix.next_batch(0)
    picked_newest = 0
    for v in range(1, 20):
        now["step"] = fresh.count
        newest = float(mix.rings[1].data["rewards"][:mix.rings[1].size, 0].max())  # before this batch's insert
        b = mix.next_batch(v)
        replayed = b.data["rewards"][~b.fresh, 0]
        picked_newest += int((replayed == newest).sum())
        assert 1.0 < b.stats["replay/1_custom/lambda"] <= 4.0
    # 19 batches x 4 picks: uniform picking takes the newest of 4 about 19 times (sd ~3.8); elite: 66 here
    assert picked_newest > 45


def test_elite_insertion_replaces_the_most_off_policy_stored_trajectory():
    fresh = FakeFresh()
    specs = replay_specs(default_cfg(replay_parameters=ELITE))

    def features(data):  # trajectory 1 moved far; the others did not
        f = data["features"].clone()
        f[data["rewards"][:, 0] == 1] += 100.0
        return f

    mix = ReplayMix(fresh, specs, lambda: 2, torch.device("cpu"), features=features, seed=0)
    assert fresh.per_iteration() == 1  # the queue's half of 2
    for v in range(4):  # fills the 4 rows by the ring: trajectories 0..3
        mix.next_batch(v)
    ring = mix.rings[1]
    assert sorted(ring.data["rewards"][:, 0].tolist()) == [0, 1, 2, 3]
    for v in range(4, 12):
        mix.next_batch(v)
    kept = ring.data["rewards"][:, 0].tolist()
    assert 1 not in kept  # the far-moved trajectory is the first one replaced (when it is among the candidates)


@pytest.mark.parametrize("value, message", [
    ('[{"type": "queue", "capacity": 1, "sample_ratio": 0.5}]', "sum"),
    ('[{"type": "stnadard", "capacity": 5, "sample_ratio": 1.0}]', "standard"),
    ('[{"type": "standard", "capacity": 0, "sample_ratio": 1.0}]', "capacity"),
    ('not json', "replay_parameters"),
])
def test_bad_replay_parameters_are_one_clear_line(value, message):
    with pytest.raises(ConfigError, match=message) as e:
        default_cfg(replay_parameters=value)
    assert "\n" not in str(e.value)


def test_a_share_that_is_not_whole_and_cloning_without_replay_are_refused():
    odd = json.dumps([{"type": "queue", "capacity": 1, "sample_ratio": 0.3},
                      {"type": "standard", "capacity": 9, "sample_ratio": 0.7}])
    with pytest.raises(ConfigError, match="not a whole number"):
        default_cfg(replay_parameters=odd, batch_size=1024, rollout=32)  # 32 trajectories x 0.3
    with pytest.raises(ConfigError, match="--clear_policy_coeff / --clear_value_coeff clone on replayed samples"):
        default_cfg(clear_policy_coeff=0.1)


def test_replay_that_does_not_fit_in_memory_stops_before_anything_starts(tmp_path):
    huge = json.dumps([{"type": "queue", "capacity": 1, "sample_ratio": 0.5},
                       {"type": "standard", "capacity": 10 ** 9, "sample_ratio": 0.5}])
    cfg = default_cfg(env="gym_CartPole-v1", experiment="huge", train_dir=str(tmp_path), replay_parameters=huge,
                      num_workers=1, num_envs_per_worker=2, device="cpu")
    with pytest.raises(ConfigError, match=r"replay buffers \(1 policies\) need [\d,]+ MiB of memory"):
        run_training(cfg)
    assert not (tmp_path / "huge" / "cfg.json").exists()
    assert APPO.host_memory_bytes(cfg, 100) == 10 ** 9 * 100


def test_a_serial_run_with_standard_replay_and_clear_reports_replay_statistics(tmp_path):
    cfg = default_cfg(env="gym_CartPole-v1", experiment="rp", train_dir=str(tmp_path), serial_mode=True, seed=1,
                      num_workers=1, num_envs_per_worker=4, rollout=16, recurrence=8, batch_size=128, hidden_size=32,
                      device="cpu", train_for_env_steps=6000, replay_parameters=QUEUE_STANDARD.replace("6", "40"),
                      clear_policy_coeff=0.01, clear_value_coeff=0.005)
    result = run_training(cfg)
    stats = result["train_stats"][0]
    assert result["status"] == "done" and result["env_steps"] >= 6000
    assert stats["replay/fresh_share"] == 0.5 and stats["replay/1_standard/samples"] == 4
    assert stats["replay/1_standard/age_mean"] > 0 and "loss/clear_policy_cloning" in stats
    assert "loss/clear_value_cloning" in stats


def test_a_custom_buffer_on_a_model_whose_features_are_not_hidden_size_wide_stops_before_anything_starts(tmp_path):
    from sfx.models.cores import RnnCore, register_core, unregister_core

    register_core("wide_gru", lambda cfg, input_size: RnnCore(input_size, 2 * cfg.hidden_size, "gru"))
    try:
        cfg = default_cfg(env="gym_CartPole-v1", experiment="wide", train_dir=str(tmp_path), replay_parameters=ELITE,
                          use_rnn=True, rnn_type="wide_gru", hidden_size=16, recurrence=8, num_workers=1, num_envs_per_worker=2,
                          rollout=8, batch_size=32, device="cpu")
        with pytest.raises(ConfigError, match=r"16 wide \(--hidden_size\); this model's are 32") as e:
            run_training(cfg)
        assert "\n" not in str(e.value)
        assert not (tmp_path / "wide" / "cfg.json").exists()
        # standard buffers compare no features: the same model trains with them
        APPO.check_model(default_cfg(replay_parameters=QUEUE_STANDARD, use_rnn=True, rnn_type="wide_gru",
                                     hidden_size=16, recurrence=8, rollout=8, batch_size=32),
                         torch.nn.Module())
    finally:
        unregister_core("wide_gru")


def test_the_status_line_shows_the_fresh_share_and_each_buffer_s_fill_and_age():
    from sfx.engine.stats import PolicyStats, status_line

    stats = PolicyStats(100)
    stats.add_train({"replay/fresh_share": 0.5, "replay/1_standard/fill": 0.375, "replay/1_standard/age_mean": 4.25,
                     "replay/1_standard/samples": 8.0, "replay/2_custom/fill": 0.1})
    line = status_line([stats], [1.0] * 3, 1.0, 10, 100, 1.0, 1e9)
    assert "replay fresh 50%, 1_standard fill 38% age 4.2, 2_custom fill 10% |" in line
    assert "replay" not in status_line([PolicyStats(100)], [1.0] * 3, 1.0, 10, 100, 1.0, 1e9)
