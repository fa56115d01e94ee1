"""The population manager and the cluster member without an engine: their queues are lists, their
learners answer by hand. Both resume, schedule and exploit through the same code; what each
records and sends is checked here."""

from __future__ import annotations

import json
import math
import random
import time

import pytest

from sfx.registries import default_cfg
from sfx.experiment import policy_cfg_path
from sfx.pbt import ClusterPopulationMember, PopulationManager


class Inbox(list):
    def put(self, message):
        self.append(message)


class Stats:
    def __init__(self, value: float):
        self.value = value

    def mean(self, key: str) -> float:
        return self.value if key == "reward" else math.nan


def manager(tmp_path, num_policies=3, seed=3, **flags):
    cfg = default_cfg("gym_CartPole-v1", with_pbt=True, num_policies=num_policies, train_dir=str(tmp_path),
                      experiment="pop", pbt_period_env_steps=1000, pbt_start_mutation=2000, **flags)
    summaries = []
    m = PopulationManager(cfg, [Inbox() for _ in range(num_policies)], [Inbox(), Inbox()], {"bonus": 0.5},
                          random.Random(seed), lambda *a: summaries.append(a))
    return m, summaries


def save_policy_cfg(cfg, p, params, shaping):
    path = policy_cfg_path(cfg, p)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"policy": p, "env_steps": 1, "params": params, "reward_shaping": shaping}))


def test_start_resumes_saved_values_and_diversifies_only_new_policies(tmp_path, caplog):
    m, _ = manager(tmp_path)
    save_policy_cfg(m.cfg, 1, {"learning_rate": 0.123}, {"bonus": 2.0})
    with caplog.at_level("INFO", logger="sfx.pbt.population"):
        m.start([0, 2500, 0])
    assert "PBT: policy 1 resumed with" in caplog.text
    assert m.params[1]["learning_rate"] == 0.123 and m.params[1]["shaping/bonus"] == 2.0
    assert m.params[0]["learning_rate"] == m.cfg.learning_rate  # the first keeps the flags
    assert [h["policy"] for h in m.history] == [2] and m.history[0]["kind"] == "initial"
    assert [msg[0] for msg in m.learner_control[2]] == ["pbt_update"] and not m.learner_control[1]
    # the first decision: not before --pbt_start_mutation, and at a period boundary
    assert m.next_step_at == [2000, 3000, 2000]
    assert all(json.loads(policy_cfg_path(m.cfg, p).read_text())["policy"] == p for p in range(3))
    assert m.rollout_control[0] == [("shaping", (0, {"bonus": 0.5})), ("shaping", (1, {"bonus": 2.0})),
                                    ("shaping", (2, m.shaping_of(2)))]


def test_exploit_copies_the_winner_mutated_and_records_every_change(tmp_path):
    m, summaries = manager(tmp_path, pbt_replace_reward_gap=0.0, pbt_replace_reward_gap_absolute=0.0)
    m.start([0, 0, 0])
    for q in m.learner_control:
        q.clear()
    m.update([Stats(0.0), Stats(5.0), Stats(9.0)], [2000, 1500, 1500])
    assert m.next_step_at[0] == 3000 and m.busy == {0, 2}
    (kind, payload), = m.learner_control[2]  # the winner writes the snapshot
    assert kind == "pbt_snapshot" and payload["path"].endswith("policy_02_for_00_1.pth")

    winner_params = dict(m.params[2])
    m.on_snapshot(2, payload)
    assert m.busy == {0}  # the winner is free again; the loser until it has loaded
    entry = m.history[-1]
    assert (entry["policy"], entry["kind"], entry["from"]) == (0, "exploit", 2)
    copied = [c for c in entry["changes"] if c["how"] == "copied from policy 2"]
    assert copied and all(c["new"] == winner_params[c["param"]] for c in copied)
    mutated = {c["param"]: c["new"] for c in entry["changes"] if not c["how"].startswith("copied")}
    assert m.params[0] == {**winner_params, **mutated}
    (kind, update), = m.learner_control[0]
    assert kind == "pbt_update" and update["load_path"] == payload["path"] and update["from_policy"] == 2
    assert json.loads(policy_cfg_path(m.cfg, 0).read_text())["env_steps"] == 2000
    assert (0, "pbt/copied_from_policy", 2.0, 2000) in summaries
    m.on_applied(0, update)
    assert not m.busy


def member(tmp_path, name, lr, seed=1):
    cfg = default_cfg("gym_CartPole-v1", with_pbt=True, train_dir=str(tmp_path / "td"), experiment=name,
                      learning_rate=lr, pbt_population_dir=str(tmp_path / "pop"), pbt_period_env_steps=1000,
                      pbt_start_mutation=1000, pbt_replace_reward_gap=0.0, pbt_replace_reward_gap_absolute=0.0)
    return ClusterPopulationMember(cfg, [Inbox()], [Inbox()], {"bonus": 0.5}, random.Random(seed),
                                   lambda *a: None)


def test_cluster_member_resumes_without_diversity_and_exploits_a_better_member(tmp_path, caplog):
    good = tmp_path / "pop" / "good"
    good.mkdir(parents=True)
    (good / "snapshot.pth").write_bytes(b"good weights")
    (good / "member.json").write_text(json.dumps({"member": "good", "objective": 9.0, "updated": time.time(),
                                                  "params": {"learning_rate": 1e-3, "shaping/bonus": 0.7}}))
    bad = member(tmp_path, "bad", 1e-7)
    save_policy_cfg(bad.cfg, 0, {"learning_rate": 2e-7}, {"bonus": 0.4})
    with caplog.at_level("INFO", logger="sfx.pbt.population"):
        bad.start([500])
    assert "PBT: member bad resumed with" in caplog.text and not bad.history
    assert bad.params[0]["learning_rate"] == 2e-7 and bad.next_step_at == [1000]

    bad.update([Stats(1.0)], [1200])
    (kind, payload), = bad.learner_control[0]
    assert kind == "pbt_snapshot" and payload["path"] == str(tmp_path / "pop" / "bad" / "snapshot.pth")
    bad.learner_control[0].clear()
    bad.on_snapshot(0, payload)
    published = json.loads((tmp_path / "pop" / "bad" / "member.json").read_text())
    assert published["objective"] == 1.0 and published["env_steps"] == 1200
    entry = bad.history[-1]
    assert (entry["kind"], entry["from"]) == ("exploit", "good")
    assert {c["param"] for c in entry["changes"] if c["how"] == "copied from member good"} == {
        "learning_rate", "shaping/bonus"}
    (kind, update), = bad.learner_control[0]
    assert kind == "pbt_update" and update["from_policy"] is None
    with open(update["load_path"], "rb") as f:
        assert f.read() == b"good weights"  # a copy of the winner's publication


@pytest.mark.parametrize("cls", [PopulationManager, ClusterPopulationMember])
def test_public_methods_the_coordinator_calls(cls):
    for name in ("start", "update", "on_snapshot", "on_applied", "write_summaries", "objective", "shaping_of"):
        assert callable(getattr(cls, name))
