"""Evaluation during training: the evaluator plays the newest weights every --eval_every_env_steps, never
blocks training (an evaluation due while one runs is skipped and counted), keeps a best checkpoint that
sfx.enjoy plays, and refuses an --eval_env with other spaces."""

from __future__ import annotations

import glob
import io

import numpy as np
import pytest
import torch
from PIL import Image, ImageSequence

from sfx.cfg import ConfigError
from sfx.registries import default_cfg, parse_args
from sfx.engine import run_training
from sfx.engine.buffers import WeightsBuffer
from sfx.engine.coordinator import probe_env
from sfx.engine.evaluation import EvaluationPart, check_eval_env
from sfx.engine.evaluator import Evaluator
from sfx.engine.protocol import EVAL_RESULT, EVALUATE
from sfx.engine.queues import LocalQueue, drain
from sfx.experiment import best_checkpoint_path, load_checkpoint
from sfx.models import create_actor_critic


def small_cfg(tmp_path, **overrides):
    base = dict(env="gym_CartPole-v1", experiment="ev", train_dir=str(tmp_path), num_workers=2, num_envs_per_worker=2,
                rollout=16, recurrence=8, batch_size=64, hidden_size=32, device="cpu", seed=1,
                train_for_env_steps=6000, experiment_summaries_interval=0.5, report_every_sec=1.0, save_every_sec=1000)
    base.update(overrides)
    return default_cfg(**base)


def test_a_serial_run_evaluates_keeps_the_best_and_enjoy_plays_it(tmp_path, capsys):
    cfg = small_cfg(tmp_path, serial_mode=True, eval_every_env_steps=2000, eval_episodes=3, eval_num_envs=2,
                    save_best_metric="eval/reward", eval_video_every=2, eval_video_max_frames=40)
    result = run_training(cfg)
    evals = result["evaluations"]
    assert [e["env_steps"] // 2000 for e in evals] == list(range(1, len(evals) + 1)) and len(evals) >= 2
    assert all(e["episodes"] == 3 and e["reward"] > 0 and e["len"] == e["reward"] for e in evals)  # CartPole: 1/step
    versions = [e["policy_version"] for e in evals]
    assert versions == sorted(versions) and versions[-1] <= result["train_step"][0]
    assert result["evaluations_skipped"] == [0]  # serial: an evaluation finishes before the next is due
    best = load_checkpoint(best_checkpoint_path(cfg, 0))
    assert best["value"] == max(e["reward"] for e in evals) and best["metric"] == "eval/reward"
    assert sum(e["best"] for e in evals) >= 1

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(glob.glob(str(tmp_path / "ev" / ".summary" / "0" / "events.*"))[0])
    acc.Reload()
    assert [s.value for s in acc.Scalars("eval/reward")] == pytest.approx([e["reward"] for e in evals])
    assert {"eval/len", "eval/policy_version", "eval/episodes", "eval/sec"} <= set(acc.Tags()["scalars"])
    # every 2nd evaluation, the first included, recorded env 0's first episode: CartPole's 600x400 picture
    # shrunk to 256x171, at most 40 frames, an animated GIF in the Images tab
    videos = acc.Images("eval/video")
    assert [v.step for v in videos] == [e["env_steps"] for e in evals[::2]]
    assert [("video" in e) for e in evals] == [i % 2 == 0 for i in range(len(evals))]
    for v, e in zip(videos, evals[::2]):
        gif = Image.open(io.BytesIO(v.encoded_image_string))
        assert gif.format == "GIF" and gif.size == (256, 171) == (v.width, v.height)
        # Pillow merges identical consecutive frames into one longer frame: the play time is what is kept
        # (CartPole renders at 50 fps: 20 ms a frame)
        durations = [f.info["duration"] for f in ImageSequence.Iterator(gif)]
        assert sum(durations) == 20 * e["video"]["frames"] and 1 < e["video"]["frames"] <= 40
        frames = [np.asarray(f.convert("RGB")) for f in ImageSequence.Iterator(gif)]
        assert any(not np.array_equal(frames[0], f) for f in frames[1:])  # the pole moves

    from sfx import enjoy

    played = enjoy.enjoy(parse_args([f"--env={cfg.env}", "--experiment=ev", f"--train_dir={tmp_path}",
                                     "--no_render", "--max_num_episodes=1", "--load_checkpoint_kind=best"],
                                    evaluation=True))
    assert played["episodes"] == 1
    assert "playing the best checkpoint: eval/reward" in capsys.readouterr().out


class _Policy:
    def __init__(self, steps):
        self.env_steps = steps


class _Reporter:
    all_learners_ready = True

    def __init__(self):
        self.policies = [_Policy(0)]
        self.scalars = []

    def summary(self, policy, tag, value, step):
        self.scalars.append((policy, tag, value, step))


def test_an_evaluation_due_while_one_runs_is_skipped_and_counted():
    cfg = default_cfg(eval_every_env_steps=1000)
    q, reporter = LocalQueue(), _Reporter()
    part = EvaluationPart(cfg, q, reporter)
    part.check(0.0)
    assert drain(q) == []  # nothing due at 0
    reporter.policies[0].env_steps = 1200
    part.check(0.0)
    assert drain(q) == [(EVALUATE, {"policy": 0, "env_steps": 1200})]
    reporter.policies[0].env_steps = 2100  # due again, the first still runs
    part.check(0.0)
    reporter.policies[0].env_steps = 3050
    part.check(0.0)
    assert drain(q) == [] and part.skipped == [2]
    assert (0, "eval/skipped", 2, 3050) in reporter.scalars
    part.handle([(EVAL_RESULT, 0, {"env_steps": 1200, "policy_version": 3, "episodes": 2, "reward": 1.5, "len": 9.0,
                                   "tasks": {}, "sec": 0.1, "best": False})])
    assert not part.busy and (0, "eval/reward", 1.5, 1200) in reporter.scalars
    reporter.policies[0].env_steps = 4000
    part.check(0.0)
    assert drain(q) == [(EVALUATE, {"policy": 0, "env_steps": 4000})]


def test_a_resumed_run_evaluates_at_the_next_multiple_not_at_once():
    q, reporter = LocalQueue(), _Reporter()
    reporter.policies[0].env_steps = 5500
    part = EvaluationPart(default_cfg(eval_every_env_steps=1000), q, reporter)
    part.check(0.0)
    assert drain(q) == []
    reporter.policies[0].env_steps = 6001
    part.check(0.0)
    assert len(drain(q)) == 1


def _evaluator(tmp_path, **overrides):
    cfg = small_cfg(tmp_path, **overrides)
    info = probe_env(cfg)
    torch.manual_seed(0)
    model = create_actor_critic(cfg, info.observation_space, info.action_space)
    weights = WeightsBuffer.for_model(model)
    weights.publish(model, 7)
    reports = LocalQueue()
    ev = Evaluator(cfg, [weights], info, reports, torch.device("cpu"))
    ev.start()
    return ev, reports


def test_episodes_are_spread_over_the_envs_and_a_seeded_evaluation_repeats(tmp_path):
    a, reports = _evaluator(tmp_path, eval_episodes=5, eval_num_envs=2, eval_deterministic=True)
    b, _ = _evaluator(tmp_path, eval_episodes=5, eval_num_envs=2, eval_deterministic=True)
    ra, rb = a.evaluate(0, 100), b.evaluate(0, 100)
    assert ra["episodes"] == 5 and ra["policy_version"] == 7
    assert ra["reward"] == rb["reward"] and ra["len"] == rb["len"]
    assert drain(reports)[0][0] == EVAL_RESULT
    a.finish()
    b.finish()


def test_an_env_that_cannot_render_turns_videos_off_and_evaluation_goes_on(tmp_path, caplog):
    ev, _ = _evaluator(tmp_path, eval_episodes=2, eval_every_env_steps=1000, eval_video_every=1)

    def broken():
        raise RuntimeError("no display")

    ev.envs[0].render = broken
    result = ev.evaluate(0, 100)
    assert result["episodes"] == 2 and "video" not in result and ev.video_every == 0
    assert "cannot render rgb_array frames (RuntimeError: no display); evaluation videos are off" in caplog.text
    assert "video" not in ev.evaluate(0, 200)
    ev.finish()


def test_video_flags_are_checked():
    with pytest.raises(ConfigError, match=r"--eval_video_every=3 records evaluations: set --eval_every_env_steps"):
        default_cfg(eval_video_every=3)
    with pytest.raises(ConfigError, match=r"--eval_video_every=-1 must be >= 0"):
        default_cfg(eval_video_every=-1, eval_every_env_steps=1000)
    with pytest.raises(ConfigError, match=r"--eval_video_max_frames=0 must be >= 1"):
        default_cfg(eval_video_max_frames=0)


def test_an_eval_env_with_other_spaces_is_refused(tmp_path):
    cfg = small_cfg(tmp_path, eval_every_env_steps=1000, eval_env="gym_Acrobot-v1")
    with pytest.raises(ConfigError, match=r"--eval_env='gym_Acrobot-v1' has observation space .*--env=gym_CartPole-v1"):
        check_eval_env(cfg, probe_env(cfg))
    with pytest.raises(ConfigError, match="--save_best_metric=eval/reward needs evaluations"):
        default_cfg(save_best_metric="eval/reward")
