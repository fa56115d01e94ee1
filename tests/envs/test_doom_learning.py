"""Learning test (slow): APPO learns doom_basic with the real VizDoom engine on 2 CPU cores in about a minute.

A random policy scores about -150 per episode on basic (mostly -4 per step until the 300-tic
timeout, -5 per missed shot); one that turns to the monster and shoots it scores +50 to +95.
"""

import time

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from sfx.cfg import default_cfg
from sfx.engine import run_training
from sfx.experiment import summary_dir

# small frames (rendered 160x120, resized) keep the CPU learner and inference fast enough to see
# a few hundred thousand frames in the time; the rest is sized for 2 cores
HYPERPARAMETERS = dict(res_w=64, res_h=36, num_workers=2, num_envs_per_worker=8, rollout=32, batch_size=256,
                       use_rnn=False, hidden_size=128, learning_rate=1e-3, exploration_loss_coeff=0.01,
                       reward_scale=0.01)
# well above any random policy; reached after ~230k env steps (about 50 s of training on 2 cores)
STOP_AT_REWARD = 50.0


def reward_curve(cfg) -> list[tuple[int, float]]:
    acc = EventAccumulator(str(summary_dir(cfg, 0)))
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars("reward")]


@pytest.mark.slow
def test_doom_basic_learns(tmp_path):
    cfg = default_cfg("doom_basic", experiment="doom_basic", train_dir=str(tmp_path), device="cpu", seed=0,
                      serial_mode=False, train_for_env_steps=2_000_000, train_for_seconds=160,
                      experiment_summaries_interval=5, stop_at_reward=STOP_AT_REWARD, **HYPERPARAMETERS)
    start = time.time()
    result = run_training(cfg)
    elapsed = time.time() - start
    curve = reward_curve(cfg)
    print(f"doom_basic: {result['env_steps']} env steps in {elapsed:.0f} s ({result['samples_per_sec']:.0f} "
          f"samples/s); mean episode reward by env steps:")
    print(", ".join(f"{step}: {value:.0f}" for step, value in curve))
    assert result["status"] == "done"
    # stopped by --stop_at_reward (the average of the last 100 episodes), not by the time limit
    assert elapsed < 150 and result["reward"][0] >= STOP_AT_REWARD, (result, curve)
    assert len(curve) >= 3, curve
    # the curve starts where a random policy scores
    assert curve[0][1] < -50, curve
