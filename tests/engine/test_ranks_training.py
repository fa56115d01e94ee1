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

from sfx.registries import default_cfg
from sfx.engine.coordinator import rank_cfg
from sfx.engine.ranks import RankInfo
from sfx.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def test_unsupported_combinations_are_refused_before_anything_starts(tmp_path):
    two = RankInfo(rank=1, world_size=2, local_rank=1, local_world_size=2, master_addr="localhost",
                   master_port=29500, launcher="torchrun")
    with pytest.raises(ConfigError, match=r"--num_policies=2 with 2 ranks is not supported yet"):
        rank_cfg(default_cfg(num_policies=2, train_dir=str(tmp_path)), two)
    with pytest.raises(ConfigError, match=r"--algo=R2D2 with 2 ranks is not supported: each rank would sample its "
                                          r"own prioritized replay"):
        rank_cfg(default_cfg(algo="R2D2", train_dir=str(tmp_path)), two)
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


@pytest.mark.extended  # in ./all_tests.sh only with SFX_EXTENDED=1 (pytest.ini says why)
@pytest.mark.slow
def test_sac_on_two_ranks_agrees_to_stop_with_equal_weights_and_one_checkpoint(tmp_path):
    """SAC's ranks: each its own replay, every gradient step the ranks' mean (tests/agents/test_sac_agent.py
    checks the steps and gradients); here the whole stack: both learners stop together with equal weights and
    rank 0's checkpoint holds what SAC learns beside the model."""
    import torch

    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "-m", "sfx.train",
           "--env=gym_Pendulum-v1", "--algo=SAC", "--experiment=sac", f"--train_dir={tmp_path}", "--num_workers=1",
           "--num_envs_per_worker=1", "--worker_num_splits=1", "--hidden_size=64", "--batch_size=64", "--device=cpu",
           "--seed=0", "--train_for_env_steps=2000", "--distributed_timeout_sec=60"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=200)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    exp = tmp_path / "sac"
    for log in (exp / "sf_log.txt", exp / "rank_1" / "sf_log.txt"):
        assert re.search(r"every rank's learner agreed to stop at [\d,]+ env steps \(all ranks\) with equal weights",
                         log.read_text()), log.read_text()[-2000:]
    ckpts = sorted((exp / "checkpoint_p0").glob("checkpoint_*.pth"))
    ckpt = torch.load(ckpts[-1], weights_only=False)
    assert {"target_critic", "log_alpha", "critic_optimizer"} <= set(ckpt) and ckpt["train_step"] > 0
    assert not (exp / "rank_1" / "checkpoint_p0").exists()


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
    assert "resumed at train step" in log and f"{last} env steps" in log
    assert _checkpoint_steps(ckpt_dir)[-1] >= last + 20_000


def _hand_ranks(tmp_path, experiment, per_rank_flags, common, port):
    """Two ranks started by hand with the env:// variables a launcher without an agent (srun) gives:
    rank 0's coordinator then serves the rendezvous itself."""
    procs = []
    for rank, extra in enumerate(per_rank_flags):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": "2",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        env.pop("TORCHELASTIC_USE_AGENT_STORE", None)
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "sfx.train", "--env=gym_CartPole-v1", f"--experiment={experiment}",
             f"--train_dir={tmp_path}", "--num_workers=1", "--num_envs_per_worker=8", "--device=cpu",
             "--hidden_size=64", "--use_rnn=False", *common, *extra],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True))
    return procs


def test_a_rank_started_with_other_flags_is_refused_by_name_before_any_worker_starts(tmp_path):
    """Rank 1 with another learning rate: both ranks say so in one line each (exit 2, a user error) at the
    rendezvous, before any worker process starts (no worker ever logs)."""
    procs = _hand_ranks(tmp_path, "flags", [["--learning_rate=0.001"], ["--learning_rate=0.002"]],
                        ["--train_for_env_steps=30000", "--distributed_timeout_sec=20"], 29000 + os.getpid() % 1000)
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [2, 2], outs  # both ranks end; neither hangs
    err0, err1 = outs[0][1], outs[1][1]
    assert ("sfx: error: rank 1 was started with other flags than rank 0: --learning_rate=0.002 (rank 0: 0.001): "
            "start every rank with the same command line") in err0
    assert "sfx: error: rank 1 was started with other flags than rank 0: --learning_rate=0.002 (rank 0: 0.001)" in err1
    for log_file in (tmp_path / "flags" / "sf_log.txt", tmp_path / "flags" / "rank_1" / "sf_log.txt"):
        text = log_file.read_text() if log_file.exists() else ""
        # nothing was wired (no shared memory allocated) and no component process ever logged
        assert "trajectory slots" not in text and "][rollout_worker_" not in text and "][learner_" not in text, \
            text[-2000:]
    assert not (tmp_path / "flags" / "cfg.json").exists()  # nothing saved into the experiment


def test_an_unreachable_rendezvous_is_one_clear_line(tmp_path):
    """Rank 1 of 2 whose rank 0 never comes: a ConfigError naming the address, after the timeout."""
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    proc = subprocess.run([sys.executable, "-m", "sfx.train", "--env=gym_CartPole-v1", "--experiment=alone",
                           f"--train_dir={tmp_path}", "--device=cpu", "--distributed_timeout_sec=3"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    line, = [ln for ln in proc.stderr.splitlines() if ln.startswith("sfx: error:")]
    assert f"rank 1 could not reach the rendezvous at 127.0.0.1:{port} within 3 s (--distributed_timeout_sec)" in line


@pytest.mark.slow
def test_without_an_agent_kill_9_of_rank_1_ends_rank_0_with_the_resume_me_code(tmp_path):
    """srun-like ranks (no torchrun agent to end the others): rank 0's learner finds its peer gone in a
    collective, the run stops with rank 0's checkpoint kept and exit code 75 ("start me again"); nothing of
    rank 0 is left behind."""
    from tests.engine.test_training import shm_segments

    before_shm = shm_segments()
    procs = _hand_ranks(tmp_path, "lost", [[], []], ["--train_for_env_steps=1000000000", "--save_every_sec=2",
                                                      "--distributed_timeout_sec=20"], 28000 + os.getpid() % 1000)
    try:
        ckpt_dir = tmp_path / "lost" / "checkpoint_p0"
        deadline = time.time() + 120
        while time.time() < deadline and not _checkpoint_steps(ckpt_dir):
            time.sleep(0.5)
        assert _checkpoint_steps(ckpt_dir), "rank 0 wrote no checkpoint"
        tree = psutil.Process(procs[0].pid).children(recursive=True)
        os.killpg(procs[1].pid, signal.SIGKILL)  # rank 1 and its workers, as a lost node would
        killed_at = time.time()
        procs[0].communicate(timeout=90)
        assert time.time() - killed_at < 45, "rank 0 did not end in bounded time"
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
    assert procs[0].returncode == 75
    log = (tmp_path / "lost" / "sf_log.txt").read_text()
    assert "another rank died, hung or was killed" in log and "start the training again" in log, log[-3000:]
    _, alive = psutil.wait_procs(tree, timeout=15)
    assert not alive, f"processes left behind: {alive}"
    assert shm_segments() - before_shm == set()
    steps = _checkpoint_steps(ckpt_dir)
    assert steps, "rank 0's checkpoints are gone"
    status = (tmp_path / "lost" / "status.json").read_text()
    assert '"rank_lost"' in status


def test_ctrl_c_on_one_rank_ends_every_rank_interrupted_and_none_calls_the_training_done(tmp_path):
    """SIGINT to rank 1 alone (as when Slurm's warning signal reaches task 1 before task 0): the ranks stop at
    one agreed iteration and every rank ends "interrupted" (exit code 130). Rank 0, whose own rules never
    fired, used to end "done" and mark the unfinished training finished (a requeued job then did nothing)."""
    import json

    procs = _hand_ranks(tmp_path, "ctrlc", [[], []], ["--train_for_env_steps=1000000000", "--report_every_sec=1",
                                                       "--distributed_timeout_sec=20"], 27000 + os.getpid() % 1000)
    exp = tmp_path / "ctrlc"
    try:
        deadline = time.time() + 90
        while time.time() < deadline:
            try:
                if json.loads((exp / "status.json").read_text())["env_steps"] >= 5000:
                    break
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.2)
        os.killpg(procs[1].pid, signal.SIGINT)  # rank 1 and its workers, as a terminal's Ctrl+C would
        outs = [p.communicate(timeout=90) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
    logs = [(exp / "sf_log.txt").read_text(), (exp / "rank_1" / "sf_log.txt").read_text()]
    assert [p.returncode for p in procs] == [130, 130], (outs, logs[0][-3000:])
    assert "SIGINT received: stopping" in logs[1] and "SIGINT received" not in logs[0]
    agreed = re.search(r"every rank's learner agreed to stop at ([\d,]+) env steps \(all ranks\) with equal weights, "
                       r"as another rank's stop wanted \(interrupted\)", logs[0])
    assert agreed, logs[0][-3000:]
    steps = int(agreed.group(1).replace(",", ""))
    assert not (exp / "done").exists()
    status = json.loads((exp / "status.json").read_text())
    assert (status["status"], status["stop_reason"]) == ("interrupted", "another_rank")
    rank1 = json.loads((exp / "rank_1" / "status.json").read_text())
    assert (rank1["status"], rank1["stop_reason"]) == ("interrupted", "signal")
    assert _checkpoint_steps(exp / "checkpoint_p0")[-1] == steps > 0  # rank 0's final checkpoint: the agreed step
