"""Self-play PBT on a real VizDoom duel (slow): two policies share the matches, each gets its own
frag statistics in TensorBoard, and reward-shaping weights are mutated per policy."""

import json

import pytest

from sfx.registries import default_cfg
from sfx.engine import run_training


@pytest.mark.slow
def test_doom_duel_self_play_with_pbt(tmp_path):
    cfg = default_cfg("doom_duel", experiment="duel", train_dir=str(tmp_path), num_workers=2, num_envs_per_worker=2,
                      worker_num_splits=2, res_w=64, res_h=48, rollout=16, recurrence=16, batch_size=256,
                      hidden_size=64, num_policies=2, with_pbt=True, pbt_period_env_steps=2000,
                      pbt_start_mutation=2000, pbt_mutation_rate=1.0, doom_timelimit_min=0.1,
                      doom_reward_shaping="kill=1,death=-0.5,damage=0.01", train_for_env_steps=20_000,
                      train_for_seconds=150, device="cpu", seed=3, experiment_summaries_interval=2,
                      set_workers_cpu_affinity=False)
    result = run_training(cfg)
    assert result["status"] == "done"
    exp = tmp_path / "duel"
    log_text = (exp / "sf_log.txt").read_text()
    assert "PBT initial: policy 1" in log_text and "shaping/" in log_text
    shaping = [json.loads((exp / f"policy_{p:02d}_cfg.json").read_text())["reward_shaping"] for p in range(2)]
    assert shaping[0].keys() == shaping[1].keys() == {"kill", "death", "damage"}
    assert shaping[0] != shaping[1]

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    for p in range(2):
        acc = EventAccumulator(str(exp / ".summary" / str(p)))
        acc.Reload()
        tags = set(acc.Tags()["scalars"])
        assert {"episode/frags", "episode/deaths", "episode/damage", "pbt/learning_rate",
                "pbt/shaping/kill"} <= tags, sorted(tags)
