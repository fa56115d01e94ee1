"""Bad input on the real command line: one clear error line, exit status 2, no worker started."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("args,expected", [
    (["--env=gym_CartPol-v1"], "CartPole-v1"),
    (["--env=nosuch_env"], "--env=nosuch_env"),
    (["--env=gym_CartPole-v1", "--rnn_type=lsmt"], "'lsmt'"),
    (["--env=gym_CartPole-v1", "--num_workers=-2"], "--num_workers=-2"),
    (["--env=gym_CartPole-v1", "--batch_size=100"], "--batch_size=100 must be a multiple of --rollout=32"),
    (["--env=gym_CartPole-v1", "--rollout=30", "--batch_size=960"], "--rollout=30 must be a multiple of --recurrence=32"),
    (["--env=gym_CartPole-v1", "--bogus_flag=1"], "--bogus_flag"),
    (["--env=gym_CartPole-v1", "--train_dir=/proc/no/such/dir"], "/proc/no/such/dir"),
    (["--env=bench_image_128x72", "--encoder_type=convnet"], "'convnet'"),
])
def test_bad_command_line_is_one_line_and_exit_2(tmp_path, args, expected):
    argv = [sys.executable, "-m", "sfx.train", "--experiment=bad"]
    if not any(a.startswith("--train_dir") for a in args):
        argv.append(f"--train_dir={tmp_path}")
    env = {**os.environ, "SFX_EXTRA_ENV_MODULES": "bench.image_env", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(argv + args, cwd=REPO, capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("sfx: error: ")]
    assert len(errors) == 1 and expected in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "bad" / "checkpoint_p0").exists()
    assert not (tmp_path / "bad" / "cfg.json").exists(), "a rejected cfg must not be saved for resume"


def test_corrupted_cfg_json_is_one_line(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "cfg.json").write_text("{not json")
    proc = subprocess.run([sys.executable, "-m", "sfx.train", "--env=gym_CartPole-v1", "--experiment=x",
                           f"--train_dir={tmp_path}"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "cfg.json" in proc.stderr


def _train(tmp_path, *extra):
    return subprocess.run([sys.executable, "-m", "sfx.train", "--env=gym_CartPole-v1", "--experiment=ck",
                           f"--train_dir={tmp_path}", "--serial_mode", "--num_workers=1", "--rollout=16",
                           "--recurrence=8", "--batch_size=32", "--hidden_size=16", "--device=cpu",
                           "--save_every_sec=0.2", *extra],
                          cwd=REPO, capture_output=True, text=True, timeout=120)


def test_checkpoints_corrupted_or_not_fitting(tmp_path):
    first = _train(tmp_path, "--train_for_env_steps=3000")
    assert first.returncode == 0, first.stderr
    ckpts = sorted((tmp_path / "ck" / "checkpoint_p0").glob("checkpoint_*.pth"))
    assert len(ckpts) >= 2

    # a corrupted newest checkpoint: a warning, then the previous one is resumed
    ckpts[-1].write_bytes(b"garbage")
    resumed = _train(tmp_path, "--train_for_env_steps=4000")
    assert resumed.returncode == 0, resumed.stderr
    assert f"checkpoint {ckpts[-1]} cannot be loaded" in resumed.stderr
    assert "resumed at train step" in (tmp_path / "ck" / "sf_log.txt").read_text()

    # a checkpoint of another architecture: one line before any worker starts
    wrong = _train(tmp_path, "--train_for_env_steps=5000", "--hidden_size=32")
    assert wrong.returncode == 2
    error_lines = [l for l in wrong.stderr.splitlines() if l.startswith("sfx: error:")]
    assert len(error_lines) == 1 and "does not fit the model" in error_lines[0], wrong.stderr

    # every checkpoint corrupted: one clear line
    for path in (tmp_path / "ck" / "checkpoint_p0").glob("checkpoint_*.pth"):
        path.write_bytes(b"garbage")
    broken = _train(tmp_path, "--train_for_env_steps=6000")
    assert broken.returncode == 2
    assert "are unreadable" in broken.stderr.splitlines()[-1]
