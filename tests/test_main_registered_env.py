"""Issue 38: an env registered in ``__main__`` (a notebook cell, ``python -c``, a script's main block) trains in
worker processes (asynchronous mode): the registration travels by value to the forkserver's children
(sfx.envs.transport)."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

ENV_CODE = """
import gymnasium as gym
import sfx
from sfx.envs import register_env

class Corridor(gym.Env):  # defined in __main__: the workers never import it
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,))
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        self.t = 0
        return self.observation_space.low * 0, {}

    def step(self, action):
        self.t += 1
        return self.observation_space.low * 0, float(action), False, self.t >= 20, {}
"""
TRAIN = ("result = sfx.train(env='main_corridor', experiment='nb', train_dir={train_dir!r}, num_workers=1, "
         "num_envs_per_worker=2, worker_num_splits=1, rollout=16, recurrence=8, batch_size=32, hidden_size=16, "
         "device='cpu', train_for_env_steps=400, seed=1)\n"
         "assert result.status == 'done' and result.env_steps >= 400, result\n"
         "print('trained', result.env_steps)\n")


def _run(args, tmp_path):
    proc = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "trained" in proc.stdout
    assert "Traceback" not in proc.stderr and "resumes" not in proc.stderr
    return proc


def test_env_registered_in_python_c_trains_in_worker_processes(tmp_path):
    code = ENV_CODE + "register_env('main_corridor', lambda name, cfg, env_config, render_mode=None: Corridor())\n" \
        + TRAIN.format(train_dir=str(tmp_path / "td"))
    _run([sys.executable, "-c", code], tmp_path)
    assert (tmp_path / "td" / "nb" / "done").exists()


def test_env_registered_in_a_scripts_main_block_trains_in_worker_processes(tmp_path):
    script = tmp_path / "train_my_env.py"
    main = textwrap.indent("def make(name, cfg, env_config, render_mode=None):\n    return Corridor()\n\n"
                           "register_env('main_corridor', make)\n" + TRAIN.format(train_dir=str(tmp_path / "td")), "    ")
    script.write_text(ENV_CODE + "\nif __name__ == '__main__':\n" + main)
    _run([sys.executable, str(script)], tmp_path)


def test_a_family_that_cannot_travel_is_one_line(tmp_path):
    from sfx.envs import register_env, unregister_env_family
    from sfx.envs.transport import family_for_workers
    from sfx.errors import ConfigError
    import pickle
    import threading

    lock = threading.Lock()  # a lock cannot be pickled, by value or otherwise
    register_env("main_locked", lambda name, cfg, env_config, render_mode=None: lock)
    try:
        family = family_for_workers("main_locked")
        assert family.prefix == "main_locked" and family.exact
        with pytest.raises(ConfigError, match=r"^env 'main_locked' cannot travel to worker processes .*serial_mode"):
            pickle.dumps(family)
    finally:
        unregister_env_family("main_locked")


def test_a_family_that_cannot_travel_stops_the_command_with_one_line(tmp_path):
    code = textwrap.dedent(f"""
        import threading
        import gymnasium as gym
        from sfx.envs import register_env
        from sfx.train import main
        lock = threading.Lock()

        def make(name, cfg, env_config, render_mode=None):
            assert lock is not None  # the function holds a lock: nothing pickles it
            return gym.make("CartPole-v1")

        register_env("main_locked", make)
        raise SystemExit(main(["--env=main_locked", "--experiment=lk", "--train_dir={tmp_path}", "--num_workers=1",
                               "--num_envs_per_worker=2", "--worker_num_splits=1", "--device=cpu",
                               "--train_for_env_steps=300"]))
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=240)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("sfx: error:")]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert errors == ["sfx: error: env 'main_locked' cannot travel to worker processes (TypeError: cannot pickle "
                      "'_thread.lock' object); register it at the top level of an importable module (and name that "
                      "module in SFX_EXTRA_ENV_MODULES), or train with --serial_mode=True"]
