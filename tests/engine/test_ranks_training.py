"""One training on two ranks (torchrun, real gloo process group on the CPU): each rank a whole sfx stack,
the learners all-reducing gradients."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

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


def _ranks_cmd(tmp_path, steps):
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "-m", "sfx.train",
            "--env=gym_CartPole-v1", "--experiment=killed", f"--train_dir={tmp_path}", "--num_workers=1",
            "--num_envs_per_worker=8", "--batch_size=512", "--use_rnn=False", "--hidden_size=64", "--device=cpu",
            f"--train_for_env_steps={steps}", "--save_every_sec=3", "--report_every_sec=1",
            "--distributed_timeout_sec=20"]


def _checkpoint_steps(folder: Path) -> list[int]:
    return sorted(int(p.stem.rsplit("_", 1)[1]) for p in folder.glob("checkpoint_*.pth"))


@pytest.mark.slow
def test_kill_9_of_rank_1_ends_every_rank_and_the_same_command_resumes(tmp_path):
    from tests.engine.test_training import shm_segments

    before_shm = shm_segments()
    launcher = subprocess.Popen(_ranks_cmd(tmp_path, 10**9), cwd=REPO, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
    ckpt_dir = tmp_path / "killed" / "checkpoint_p0"
    deadline = time.time() + 120
    while time.time() < deadline and len(_checkpoint_steps(ckpt_dir)) < 2:
        time.sleep(0.5)
    assert len(_checkpoint_steps(ckpt_dir)) >= 2, "rank 0 wrote no periodic checkpoints"
    tree = psutil.Process(launcher.pid).children(recursive=True)
    rank1, = [p for p in psutil.Process(launcher.pid).children()
              if "sfx.train" in " ".join(p.cmdline()) and p.environ().get("RANK") == "1"]
    killed_at = time.time()
    os.kill(rank1.pid, signal.SIGKILL)
    out, _ = launcher.communicate(timeout=60)
    assert time.time() - killed_at < 45, "the other rank did not end in bounded time"
    assert launcher.returncode != 0, out[-2000:]
    _, alive = psutil.wait_procs(tree, timeout=15)
    assert not alive, f"processes left behind: {alive}"
    assert shm_segments() - before_shm == set()
    last = _checkpoint_steps(ckpt_dir)[-1]

    # the same command (a nearer target) resumes both ranks from rank 0's last checkpoint
    done = subprocess.run(_ranks_cmd(tmp_path, last + 20_000), cwd=REPO, capture_output=True, text=True, timeout=200)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    log = (tmp_path / "killed" / "sf_log.txt").read_text()
    assert f"resumed at train step" in log and f"{last} env steps" in log
    assert _checkpoint_steps(ckpt_dir)[-1] >= last + 20_000


@pytest.mark.slow
def test_a_rank_started_with_other_flags_is_refused_by_name(tmp_path):
    """Two ranks by hand (the env:// variables torchrun would set), rank 1 with another learning rate."""
    port = 29000 + os.getpid() % 1000
    procs = []
    for rank, lr in ((0, "0.001"), (1, "0.002")):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": "2",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "sfx.train", "--env=gym_CartPole-v1", "--experiment=flags", f"--train_dir={tmp_path}",
             "--num_workers=1", "--num_envs_per_worker=8", "--train_for_env_steps=30000", "--device=cpu",
             "--hidden_size=64", "--use_rnn=False", f"--learning_rate={lr}", "--distributed_timeout_sec=20"],
            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    codes = [p.wait(timeout=120) for p in procs]
    assert codes == [1, 1]  # both ranks end; neither hangs
    text = (tmp_path / "flags" / "rank_1" / "sf_log.txt").read_text()
    assert "rank 1 was started with other flags than rank 0: --learning_rate=0.002 (rank 0: 0.001)" in text
