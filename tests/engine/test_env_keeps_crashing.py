"""A run whose envs keep crashing stops with exit code 1 and one line naming the env, the exception and
what to do (issue 38: with ViZDoom 1.2.4, which lacks ``DoomGame.is_episode_timeout_reached``, every doom
episode crashed at its end and the run reported reward nan and exited 0). An env that crashes now and
then is still recreated and the run goes on (tests/faults/test_env_and_nan_faults.py)."""

import subprocess
import sys
import textwrap

import pytest

# ViZDoom 1.2.4's API: DoomGame has no is_episode_timeout_reached. A sitecustomize module takes it away in
# every process of the run (the coordinator and the spawned workers alike).
OLD_VIZDOOM = textwrap.dedent("""
    import vizdoom
    del vizdoom.DoomGame.is_episode_timeout_reached
""")


def _train(tmp_path, argv, sitecustomize=None, timeout=300):
    env = None
    if sitecustomize is not None:
        import os

        site = tmp_path / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(sitecustomize)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "sfx.train", f"--train_dir={tmp_path}", "--experiment=crash",
                           "--device=cpu", *argv], capture_output=True, text=True, timeout=timeout, env=env)


def _error_lines(stderr):
    return [line for line in stderr.splitlines() if "keeps crashing" in line]


@pytest.mark.parametrize("serial_mode", [False, True])
def test_doom_with_the_old_vizdoom_api_stops_with_one_line_and_exit_code_1(tmp_path, serial_mode):
    pytest.importorskip("vizdoom")
    r = _train(tmp_path, [f"--serial_mode={serial_mode}", "--env=doom_basic", "--num_workers=2", "--num_envs_per_worker=2", "--worker_num_splits=1",
                          "--batch_size=64", "--rollout=16", "--recurrence=16", "--train_for_env_steps=10000000",
                          "--train_for_seconds=240", "--decorrelate_experience_max_seconds=0"],
               sitecustomize=OLD_VIZDOOM)
    assert r.returncode == 1, r.stderr[-3000:]
    lines = _error_lines(r.stderr)
    assert len(lines) == 1, r.stderr[-3000:]
    line = lines[0]
    assert "env doom_basic keeps crashing" in line
    assert "AttributeError" in line and "is_episode_timeout_reached" in line
    assert "pip install -e .[doom]" in line


def test_the_last_crash_in_the_log_is_the_exception_named(tmp_path):
    from sfx.engine.supervision import last_env_exception

    log = tmp_path / "sf_log.txt"
    log.write_text(
        "[t][rollout_worker_0] ERROR: rollout worker 0: env 1 crashed (1 env errors so far); recreating it, its "
        "episode is dropped:\nTraceback (most recent call last):\n  File \"x.py\", line 1, in step\n"
        "    raise KeyError(1)\nKeyError: 1\n"
        "[t][rollout_worker_1] ERROR: rollout worker 1: env 0 crashed (1 env errors so far); recreating it, its "
        "episode is dropped:\nTraceback (most recent call last):\n  File \"x.py\", line 2, in step\n"
        "    game.is_episode_timeout_reached()\nAttributeError: no attribute 'is_episode_timeout_reached'\n"
        "[t][coordinator] fps 100\n")
    assert last_env_exception(log) == "AttributeError: no attribute 'is_episode_timeout_reached'"
    assert last_env_exception(tmp_path / "absent.txt") is None


def test_crashes_now_and_then_do_not_stop_a_run():
    from sfx.engine.supervision import ENV_CRASHES_TO_STOP, EnvCrashes

    crashes = EnvCrashes()
    for _ in range(3 * ENV_CRASHES_TO_STOP):
        crashes.handle({"env_steps": 100, "env_errors": 1, "episodes": [{}, {}]})
    assert not crashes.keep_crashing()
    always = EnvCrashes()
    for _ in range(ENV_CRASHES_TO_STOP - 1):
        always.handle({"env_steps": 100, "env_errors": 1, "episodes": []})
    assert not always.keep_crashing()  # a few first crashes are not yet "keeps crashing"
    always.handle({"env_steps": 100, "env_errors": 1, "episodes": [{}]})
    assert always.keep_crashing()
