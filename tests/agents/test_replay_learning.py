"""Learning with replay (slow): CartPole-v1 reaches 400 with a 50% standard buffer and with the platform's elite
mix (custom buffer: elite sampling over 2 x N candidates, elite insertion), with test_learning.py's APPO settings.

Measured when written (async, 2 cores, seeds 0/1/2, env steps until the 100-episode average reached 400):
queue only 172K / 262K / 345K (9-17 s); standard 148K / 147K / 127K (12-14 s); elite 140K / 163K / 122K (28-39 s).
"""

import json

import pytest

from sfx.registries import default_cfg
from sfx.engine import run_training
from bench.replay import MIXES  # the mixes the bench compares, queue only aside
from tests.engine.test_learning import reached_stop_reward


@pytest.mark.slow
# elite replay's sampling rule is tested against a plain loop in tests/algo; its learning run takes ~2.5 min
@pytest.mark.parametrize("mix", [pytest.param("elite", marks=pytest.mark.extended), "standard"])
def test_cartpole_reaches_400_with_replay(tmp_path, mix):
    cfg = default_cfg(env="gym_CartPole-v1", experiment=f"replay_{mix}", train_dir=str(tmp_path), num_workers=2,
                      num_envs_per_worker=8, rollout=32, batch_size=512, use_rnn=False, learning_rate=3e-4,
                      device="cpu", seed=0, train_for_env_steps=600_000, train_for_seconds=170,
                      experiment_summaries_interval=2, stop_at_reward=400, replay_parameters=json.dumps(MIXES[mix]))
    result = run_training(cfg)
    stats = result["train_stats"][0]
    assert reached_stop_reward(result), (result["reward"], result["env_steps"])
    kind = "standard" if mix == "standard" else "custom"
    assert stats["replay/fresh_share"] == 0.5 and stats[f"replay/1_{kind}/fill"] > 0
