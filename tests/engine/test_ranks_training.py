"""One training on two ranks (torchrun, real gloo process group on the CPU): each rank a whole sfx stack,
the learners all-reducing gradients."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from sfx.cfg import default_cfg
from sfx.engine.coordinator import rank_cfg
from sfx.engine.ranks import RankInfo
from sfx.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def test_unsupported_combinations_are_refused_before_anything_starts(tmp_path):
    two = RankInfo(rank=1, world_size=2, local_rank=1, local_world_size=2, master_addr="localhost",
                   master_port=29500, launcher="torchrun")
    with pytest.raises(ConfigError, match=r"--num_policies=2 with 2 ranks is not supported yet"):
        rank_cfg(default_cfg(num_policies=2, train_dir=str(tmp_path)), two)
    cfg = rank_cfg(default_cfg(seed=5, train_dir=str(tmp_path), experiment="x"), two)
    assert (cfg.train_dir, cfg.experiment) == (str(tmp_path / "x"), "rank_1") and cfg.seed == 5 + 1_000_003


@pytest.mark.slow
def test_two_ranks_learn_cartpole_with_one_checkpoint_and_equal_weights(tmp_path):
    """The single-rank learning test's bar (400) and settings, the workers split over two ranks."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "-m", "sfx.train",
           "--env=gym_CartPole-v1", "--experiment=ranks", f"--train_dir={tmp_path}", "--num_workers=1",
           "--num_envs_per_worker=8", "--batch_size=512", "--use_rnn=False", "--learning_rate=3e-4",
           "--device=cpu", "--seed=0", "--train_for_env_steps=600000", "--train_for_seconds=170",
           "--stop_at_reward=400", "--distributed_timeout_sec=60"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=280)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    exp = tmp_path / "ranks"
    logs = [(exp / "sf_log.txt").read_text(), (exp / "rank_1" / "sf_log.txt").read_text()]
    assert "reached --stop_at_reward=400" in "".join(logs), out[-3000:]
    for text in logs:
        agreed = re.findall(r"every rank's learner agreed to stop at ([\d,]+) env steps \(all ranks\) with equal "
                            r"weights", text)
        assert agreed, text[-2000:]
    # the env steps are every rank's: both ranks stopped at the same total, which the checkpoint holds
    steps = {int(re.findall(r"agreed to stop at ([\d,]+)", t)[-1].replace(",", "")) for t in logs}
    assert len(steps) == 1
    ckpts = sorted((exp / "checkpoint_p0").glob("checkpoint_*.pth"))
    assert ckpts and ckpts[-1].name.endswith(f"_{steps.pop()}.pth")
    assert not (exp / "rank_1" / "checkpoint_p0").exists()  # rank 0 alone writes checkpoints
