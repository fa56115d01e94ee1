"""What a training shows: with several ranks, FPS of this rank and of all ranks together (from the
learners' env step count, which is every rank's), the ETA from the latter, status.json's fps the training's."""

import json
import logging
import time

from sfx.cfg import default_cfg
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

