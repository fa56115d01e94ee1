"""PBT across experiments through a shared folder: publications, staleness, and two real trainings
in separate processes where the bad member copies the good one (slow)."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sfx.cfg import ConfigError
from sfx.registries import default_cfg
from sfx.pbt import read_members

REPO = Path(__file__).resolve().parents[2]


def test_read_members_skips_stale_and_unreadable(tmp_path):
    now = time.time()
    for name, age in (("fresh", 10), ("old", 5000)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "member.json").write_text(json.dumps({"objective": 1.0, "updated": now - age}))
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "member.json").write_text("{not json")
    assert set(read_members(tmp_path, stale_sec=3600, now=now)) == {"fresh"}
    assert set(read_members(tmp_path, stale_sec=10_000, now=now)) == {"fresh", "old"}


def test_population_dir_flags_are_checked(tmp_path):
    with pytest.raises(ConfigError, match="--num_policies=2 must be 1"):
        default_cfg("gym_CartPole-v1", with_pbt=True, num_policies=2, pbt_population_dir=str(tmp_path))
    with pytest.raises(ConfigError, match="--pbt_member_name='a/b'"):
        default_cfg("gym_CartPole-v1", with_pbt=True, pbt_population_dir=str(tmp_path), pbt_member_name="a/b")
    with pytest.raises(ConfigError, match="or --pbt_population_dir"):
        default_cfg("gym_CartPole-v1", with_pbt=True)
    cfg = default_cfg("gym_CartPole-v1", with_pbt=True, pbt_population_dir=str(tmp_path / "pop"))
    assert cfg.num_policies == 1 and cfg.pbt_member_name is None


def member_cmd(tmp_path, name, lr, steps):
    return [sys.executable, "-m", "sfx.train", "--env=gym_CartPole-v1", f"--train_dir={tmp_path / 'td'}",
            f"--experiment={name}", "--num_workers=1", "--num_envs_per_worker=8", "--use_rnn=False",
            "--hidden_size=64",  # the width it was calibrated with (the gym family's default is 512 now)
            "--batch_size=256", f"--learning_rate={lr}", "--seed=1", "--set_workers_cpu_affinity=False",
            "--with_pbt=True", f"--pbt_population_dir={tmp_path / 'pop'}", "--pbt_period_env_steps=10000",
            "--pbt_start_mutation=10000", f"--train_for_env_steps={steps}"]


@pytest.mark.extended  # in ./all_tests.sh only with SFX_EXTENDED=1 (pytest.ini says why)
@pytest.mark.slow
def test_two_experiments_form_a_population(tmp_path):
    procs = {name: subprocess.Popen(member_cmd(tmp_path, name, lr, 60_000), cwd=REPO, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True)
             for name, lr in (("good", 1e-3), ("bad", 1e-7))}
    out = {name: p.communicate(timeout=240)[0] for name, p in procs.items()}
    assert all(p.returncode == 0 for p in procs.values()), out
    assert "PBT exploit: member bad copies member good" in out["bad"], out["bad"][-3000:]
    for name in ("good", "bad"):
        doc = json.loads((tmp_path / "pop" / name / "member.json").read_text())
        assert doc["member"] == name and doc["env_steps"] >= 50_000 and (tmp_path / "pop" / name / "snapshot.pth").is_file()
    bad_params = json.loads((tmp_path / "td" / "bad" / "policy_00_cfg.json").read_text())["params"]
    assert bad_params["learning_rate"] > 1e-5  # it took the good member's rate (perhaps mutated since)

    # a requeued member comes back with its own PBT hyperparameters, not its flags
    again = subprocess.run(member_cmd(tmp_path, "bad", 1e-7, 70_000), cwd=REPO, capture_output=True, text=True,
                           timeout=240)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "PBT: member bad resumed with" in again.stderr
    assert f"learning_rate={bad_params['learning_rate']:.4g}" in again.stderr
