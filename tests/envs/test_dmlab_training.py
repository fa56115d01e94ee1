"""A short serial training run on dmlab_ levels of the deepmind_lab stand-in: the whole path from
the command line to episode stats in the experiment's results works."""

import sys
from pathlib import Path

import pytest

from sfx.registries import default_cfg
from sfx.engine import run_training

STANDIN = str(Path(__file__).resolve().parent / "dmlab_standin")


@pytest.fixture
def lab(monkeypatch):
    monkeypatch.syspath_prepend(STANDIN)
    monkeypatch.delitem(sys.modules, "deepmind_lab", raising=False)
    yield
    sys.modules.pop("deepmind_lab", None)


def test_serial_training_run_on_dmlab_30(lab, tmp_path):
    # dmlab_30 with levels assigned by env id: the 4 envs play the first 4 DMLab-30 levels, two of
    # which (rooms_*) build a map per episode and so go through the level cache
    cfg = default_cfg("dmlab_30", experiment="t", train_dir=str(tmp_path), serial_mode=True, device="cpu", seed=1,
                      num_workers=2, num_envs_per_worker=2, worker_num_splits=2, rollout=16, recurrence=8,
                      batch_size=64, encoder_type="conv", encoder_subtype="convnet_simple", hidden_size=32,
                      dmlab_res_w=64, dmlab_res_h=48, dmlab30_level_assignment="env",
                      dmlab_level_cache_dir=str(tmp_path / "level_cache"), train_for_env_steps=4000,
                      experiment_summaries_interval=0.5, report_every_sec=1.0, save_every_sec=1000)
    result = run_training(cfg)
    assert result["status"] == "done"
    assert result["env_steps"] >= 4000
    assert (tmp_path / "t" / "done").is_file()
    # stand-in episodes last 60-120 agent steps: several ended, and their stats were summarised
    events = list((tmp_path / "t" / ".summary" / "0").glob("events.out.tfevents.*"))
    assert events
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(events[0].parent))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"reward", "episode/dmlab_raw_score", "episode/dmlab_target_objective"} <= tags
    assert "episode/dmlab_human_normalized_score" in tags
    assert {f"episode/dmlab30/{lv}/hns" for lv in ("rooms_collect_good_objects_train", "rooms_watermaze")} <= tags
    assert any((tmp_path / "level_cache").iterdir())
