"""bench/sb3_tb.py: Stable-Baselines3 reports as experiment folders that sfx.tb reads."""

from __future__ import annotations

import json

import pytest

from bench import sb3_tb
from sfx_tb.scalars import load_scalars


def report(seeds=(0, 1)) -> dict:
    # the shape bench/sb3_baseline.py writes (its run_seed rows), with curves of our own
    return {"algo": "ppo", "env": "HalfCheetah-v5", "window": 100, "hyperparams_entry": "HalfCheetah-v4",
            "hyperparams_effective": {"n_steps": 512, "batch_size": 64}, "n_envs": 1,
            "versions": {"stable_baselines3": "2.x"},
            "seeds": [{"seed": s, "final": 10.0 * s, "curve": [[1000, -5.0 + s], [2000, 3.5 + s], [2512, 7.25 + s]],
                       "curve_seconds": [1.5, 3.0, 4.25]} for s in seeds]}


def test_each_seed_becomes_an_experiment_that_sfx_tb_groups_and_reads_exactly(tmp_path):
    path = tmp_path / "sb3_ppo_HalfCheetah-v5.json"
    path.write_text(json.dumps(report()))
    folders = sb3_tb.convert(path, tmp_path / "train_dir", start_time=1_000_000.0)
    assert [f.name for f in folders] == ["sb3_ppo_halfcheetah-v5_see=0", "sb3_ppo_halfcheetah-v5_see=1"]
    cfg = json.loads((folders[1] / "cfg.json").read_text())
    assert cfg["seed"] == 1 and cfg["framework"] == "stable-baselines3" and cfg["env"] == "HalfCheetah-v5"

    assert json.loads((folders[1] / sb3_tb.SOURCE_FILE).read_text())["report"] == str(path.resolve())
    # a seed run on its own (another report) joins the same group
    other = tmp_path / "seed2.json"
    other.write_text(json.dumps(report(seeds=(2,))))
    sb3_tb.convert(other, tmp_path / "train_dir", start_time=1_000_000.0)

    df = load_scalars("sb3_ppo*", tmp_path / "train_dir", metrics="reward")
    assert set(df["group"]) == {"sb3_ppo_halfcheetah-v5"}  # the seeds form one group, as sfx's runs do
    assert sorted(set(df["seed"])) == [0, 1, 2]
    for seed in (0, 1):
        rows = df[df["seed"] == seed].sort_values("step")
        assert rows["step"].tolist() == [1000, 2000, 2512]
        assert rows["value"].tolist() == [-5.0 + seed, 3.5 + seed, 7.25 + seed]  # float32-exact values
        assert rows["wall_time"].tolist() == pytest.approx([1_000_001.5, 1_000_003.0, 1_000_004.25])


def test_bad_input_and_existing_folders_are_refused_with_the_reason(tmp_path, capsys):
    path = tmp_path / "r.json"
    assert sb3_tb.main([str(path), f"--dir={tmp_path}"]) == 2
    assert "no such file" in capsys.readouterr().err
    path.write_text(json.dumps({"algo": "ppo"}))
    assert sb3_tb.main([str(path), f"--dir={tmp_path}"]) == 2
    assert "missing env, seeds" in capsys.readouterr().err
    path.write_text(json.dumps(report(seeds=(3,))))
    assert sb3_tb.main([str(path), f"--dir={tmp_path}", "--name=zoo"]) == 0
    assert sb3_tb.main([str(path), f"--dir={tmp_path}", "--name=zoo"]) == 2
    assert "zoo_see=3 exists (--overwrite replaces it)" in capsys.readouterr().err
    assert sb3_tb.main([str(path), f"--dir={tmp_path}", "--name=zoo", "--overwrite"]) == 0
    assert sb3_tb.main([str(path), f"--dir={tmp_path}", "--name=a/b"]) == 2
