"""A script that calls sfx.train(...) at its top level, without the `if __name__ == "__main__":` guard: every
worker process imports the main module again while it starts, so without a check each would start (and with
restart_behavior="overwrite" delete) the training again. The worker refuses with one line instead, the run
fails once, and the experiment the script started is the one left."""

import json
import subprocess
import sys
import textwrap

import pytest


@pytest.mark.slow  # a training whose workers fail while starting, restarted until the run gives up: ~20 s
def test_top_level_training_in_an_unguarded_script_fails_once_with_the_guard_named(tmp_path):
    script = tmp_path / "unguarded.py"
    script.write_text(textwrap.dedent(f"""
        import sfx
        result = sfx.train(env="gym_CartPole-v1", experiment="unguarded", train_dir={str(tmp_path / "td")!r},
                           num_workers=1, num_envs_per_worker=2, train_for_env_steps=2000,
                           restart_behavior="overwrite", device="cpu")
        print("TRAINED", result.env_steps)
    """))
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "TRAINED" not in out, out
    assert 'put the call under `if __name__ == "__main__":`' in out, out
    assert "sfx.train.TrainingFailed" in out
    # one experiment, the script's own: no worker deleted or restarted it
    folders = [p.name for p in (tmp_path / "td").iterdir()]
    assert folders == ["unguarded"], folders
    assert json.loads((tmp_path / "td" / "unguarded" / "cfg.json").read_text())["experiment"] == "unguarded"
