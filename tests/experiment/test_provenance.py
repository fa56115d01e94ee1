"""Runs that say what they were (issue 38): cfg.json's provenance and chosen seed, random states in
checkpoints."""

import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

import sfx

SMALL = ["--num_workers=1", "--num_envs_per_worker=2", "--worker_num_splits=1", "--rollout=16", "--recurrence=8",
         "--batch_size=32", "--hidden_size=16", "--device=cpu", "--serial_mode=True", "--train_for_env_steps=300"]


def test_cfg_json_records_the_code_the_packages_and_a_chosen_seed(tmp_path):
    argv = ["--env=gym_CartPole-v1", f"--train_dir={tmp_path}", "--experiment=p", *SMALL]
    r = subprocess.run([sys.executable, "-m", "sfx.train", *argv], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    saved = json.loads((tmp_path / "p" / "cfg.json").read_text())
    seed = saved["seed"]
    assert isinstance(seed, int) and seed >= 0  # no --seed: one was chosen and written back
    prov = saved["provenance"]
    head = subprocess.run(["git", "-C", str(Path(sfx.__file__).parent), "rev-parse", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    assert prov["git"]["commit"] == head and isinstance(prov["git"]["dirty"], bool)
    assert prov["packages"]["torch"] == torch.__version__.split("+")[0] or prov["packages"]["torch"] == torch.__version__
    assert {"gymnasium", "numpy", "sfx"} <= set(prov["packages"]) and "cuda" in prov
    # the same command resumes with the recorded seed (a flag, not provenance, comes back)
    r = subprocess.run([sys.executable, "-m", "sfx.train", *argv, "--train_for_env_steps=600"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads((tmp_path / "p" / "cfg.json").read_text())["seed"] == seed


def test_checkpoints_carry_the_random_states_and_restoring_continues_the_stream(tmp_path):
    from sfx.registries import default_cfg
    from sfx.experiment import load_latest_checkpoint, save_checkpoint
    from sfx.experiment.provenance import restore_rng_state

    cfg = default_cfg(train_dir=str(tmp_path), experiment="r")
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    save_checkpoint(cfg, 0, {"model": {}, "train_step": 1, "env_steps": 10})
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    random.seed(9), np.random.seed(9), torch.manual_seed(9)  # the stream moves on elsewhere
    restore_rng_state(load_latest_checkpoint(cfg, 0)["rng"])
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected
    restore_rng_state(None)  # a checkpoint from before: nothing to restore
