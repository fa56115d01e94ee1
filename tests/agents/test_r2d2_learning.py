"""R2D2 learns (slow): CartPole-v1 with the README's command line (bench/r2d2.py's CARTPOLE_FLAGS) reaches a
100-episode training average of 400, its exploring actors included (R2D2's epsilon ladder: the average counts
the actors that explore most, whose episodes are short and many).

Measured when written (2 cores, loaded): seed 1 reached 400 at ~53K env steps (greedy evaluation 489 at 20K,
500 at 40K and 50K)."""

import pytest
import torch

from bench.r2d2 import CARTPOLE_BAR, CARTPOLE_FLAGS
from sfx.registries import parse_args
from sfx.engine import run_training
from tests.engine.test_learning import reached_stop_reward


@pytest.mark.slow
def test_cartpole_reaches_400_with_the_readme_command_line(tmp_path):
    cfg = parse_args([*CARTPOLE_FLAGS, f"--train_dir={tmp_path}", "--experiment=r2d2_cartpole", "--seed=0",
                      "--train_for_env_steps=250000", "--train_for_seconds=400", f"--stop_at_reward={CARTPOLE_BAR}",
                      "--eval_every_env_steps=20000", "--eval_episodes=5"], resume=False)
    result = run_training(cfg)
    stats = result["train_stats"][0]
    assert reached_stop_reward(result), (result["reward"], result["env_steps"])
    # epsilons are stored as float32: the ladder's largest is float32(0.4)
    assert stats["replay/fill"] > 0 and stats["burn_in_fraction"] > 0.9
    assert 0 < stats["epsilon/min"] <= torch.tensor(0.4).item()
