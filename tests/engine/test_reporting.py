"""What a training shows: with several ranks, FPS of this rank and of all ranks together (from the
learners' env step count, which is every rank's), the ETA from the latter, status.json's fps the training's."""

import json
import logging
import time

import pytest

from sfx.registries import default_cfg
from sfx.engine.protocol import LEARNER_READY, ROLLOUT, TRAIN
from sfx.engine.reporting import TrainingReporter


def _feed(reporter, t0):
    reporter.started(t0)
    reporter.handle([(LEARNER_READY, 0, {"env_steps": 1000, "train_step": 0})])  # resumed at 1000
    for i in range(1, 11):  # 10 s: this rank collects 100 steps/s; the learners count 400 steps/s (all ranks)
        now = t0 + i
        reporter.fps.add(100, now)
        reporter.samples.add(100, now)
        if reporter.all_ranks_fps is not None:
            reporter.all_ranks_fps.add(400, now)
    return t0 + 10


def test_two_ranks_show_this_rank_and_all_ranks_and_the_eta_uses_all(tmp_path, caplog):
    cfg = default_cfg(train_dir=str(tmp_path), experiment="r", train_for_env_steps=5000, report_every_sec=0.001,
                      env_frameskip=1)
    reporter = TrainingReporter(cfg, lambda: {}, world_size=2)
    reporter.started(100.0)
    reporter.handle([(LEARNER_READY, 0, {"env_steps": 1000, "train_step": 0})])
    # the learner reports every rank's env steps: +800 in the first report, +800 in the second
    reporter.handle([(TRAIN, 0, {"env_steps": 1800, "train_step": 1, "samples": 400})])
    reporter.handle([(ROLLOUT, 0, {"env_steps": 400, "episodes": []})])
    reporter.handle([(TRAIN, 0, {"env_steps": 2600, "train_step": 2, "samples": 400})])
    reporter.handle([(ROLLOUT, 0, {"env_steps": 400, "episodes": []})])
    assert reporter.all_ranks_fps.total == 1600 and reporter.fps.total == 800  # the resumed 1000 not counted
    assert reporter.env_steps() == 2600
    reporter.close()


def test_status_line_and_status_json_with_ranks(tmp_path, caplog):
    cfg = default_cfg(train_dir=str(tmp_path), experiment="r", train_for_env_steps=5000, report_every_sec=0.001,
                      env_frameskip=1)
    reporter = TrainingReporter(cfg, lambda: {}, world_size=2)
    now = _feed(reporter, time.time())
    with caplog.at_level(logging.INFO, logger="sfx.engine.reporting"):
        reporter.check(now)
    line = caplog.records[-1].getMessage()
    assert "FPS (10s/60s/300s) this rank 100/100/100, all 2 ranks 400/400/400" in line, line
    assert "ETA 00:00:09" in line or "ETA 00:00:10" in line  # (5000 - 1000) steps at every rank's 400/s, not this rank's 100/s
    status = json.loads((tmp_path / "r" / "status.json").read_text())
    assert round(status["fps"]) == 400 and round(status["fps_this_rank"]) == 100 and status["world_size"] == 2
    reporter.close()


def test_one_rank_shows_what_it_always_did(tmp_path, caplog):
    cfg = default_cfg(train_dir=str(tmp_path), experiment="r", train_for_env_steps=5000, report_every_sec=0.001,
                      env_frameskip=1)
    reporter = TrainingReporter(cfg, lambda: {})
    now = _feed(reporter, time.time())
    with caplog.at_level(logging.INFO, logger="sfx.engine.reporting"):
        reporter.check(now)
    line = caplog.records[-1].getMessage()
    assert "FPS (10s/60s/300s) 100/100/100 |" in line and "ranks" not in line
    status = json.loads((tmp_path / "r" / "status.json").read_text())
    assert round(status["fps"]) == 100 and "fps_this_rank" not in status
    reporter.close()



def test_first_status_line_has_no_made_up_eta_or_reward(tmp_path, caplog):
    """A CartPole-like start: the envs take 4.5 s to start, the first report carries 50 steps and the first
    status line comes at 5 s. A pace from those (11 steps/s, start-up included) made an ETA of 12 hours and a
    reward of nan; the line says ``ETA --`` and ``reward --`` until a pace is measured and an episode ends."""
    cfg = default_cfg(train_dir=str(tmp_path), experiment="r", train_for_env_steps=500_000, report_every_sec=0.001,
                      env_frameskip=1)
    reporter = TrainingReporter(cfg, lambda: {})
    t0 = time.time()
    reporter.started(t0)  # (the meters are anchored at the clock's now, as in a run)
    reporter.handle([(LEARNER_READY, 0, {"env_steps": 0, "train_step": 0})])
    reporter.fps.add(50, t0 + 4.5)
    with caplog.at_level(logging.INFO, logger="sfx.engine.reporting"):
        reporter.check(t0 + 5)
    first = caplog.records[-1].getMessage()
    assert "ETA --" in first and "reward -- len -- lag --" in first and "nan" not in first, first

    # ten seconds at 1,000 steps/s with learner steps and episodes: the ETA from that pace, not from the start-up
    for i in range(1, 11):
        now = t0 + 4.5 + i
        reporter.fps.add(1000, now)  # a rollout report's steps at its (simulated) arrival time
        reporter.policies[0].add_episode({"policy": 0, "reward": 20.0, "len": 20})
        reporter.handle([(TRAIN, 0, {"env_steps": 50 + 1000 * i, "train_step": i, "samples": 1000,
                                     "policy_lag_avg": 1.0, "policy_lag_max": 3.0})])
    with caplog.at_level(logging.INFO, logger="sfx.engine.reporting"):
        reporter.check(t0 + 14.5)
    line = caplog.records[-1].getMessage()
    assert "reward 20.00 len 20 lag 1.0/3" in line, line
    # (500,000 - 10,050) steps at 1,000 steps/s: 490 s
    assert "ETA 00:08:09" in line or "ETA 00:08:10" in line, line
    reporter.close()


def test_measured_rate_starts_at_the_first_count_and_waits_for_enough_time():
    from sfx.engine.stats import ThroughputMeter

    m = ThroughputMeter((10, 60))
    m.mark_start(now=0.0)
    assert m.measured_rate(60, 5, now=3.0) is None  # nothing counted
    m.add(0, now=2.0)
    m.add(40, now=4.0)  # made over an unknown time: the base, not a step of the pace
    assert m.measured_rate(60, 5, now=4.0) is None
    for t in range(5, 10):
        m.add(100, now=float(t))
    assert m.measured_rate(60, 5, now=9.0) == pytest.approx(100.0)
    assert m.rate(60, now=9.0) == pytest.approx(540 / 9.0)  # the windows still include the start-up
    for t in range(10, 80):
        m.add(200, now=float(t))
    assert m.measured_rate(10, 5, now=79.0) == pytest.approx(200.0)  # the window slides past the base
