"""Multiplayer doom_ envs with real networked VizDoom matches: lockstep play, stats, restarts, cleanup, ports."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import gymnasium
import numpy as np
import psutil
import pytest

from sfx.cfg import ConfigError
from sfx.registries import default_cfg
from sfx.envs import make_env
from sfx.envs.doom.multiplayer import DoomMultiplayerEnv

# 0.1 game minutes = 210 tics = 53 agent steps at frameskip 4: many episode ends in few steps
SHORT = 0.1
STEPS_PER_EPISODE = 53


def match(name, env_id=0, **overrides):
    cfg = default_cfg(name, **{"seed": 1, "doom_timelimit_min": SHORT, **overrides})
    env = make_env(cfg, {"worker_index": 0, "vector_index": 0, "env_id": env_id})
    assert isinstance(env, DoomMultiplayerEnv)
    return env


def group_members(pgid):
    """Live processes of process group ``pgid`` (zombies excluded)."""
    members = []
    for p in psutil.process_iter(["status"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                members.append(p)
        except (ProcessLookupError, psutil.Error):
            pass
    return members


def wait_group_gone(pgid, timeout=5.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not group_members(pgid):
            return True
        time.sleep(0.05)
    return False


def engines_of(env):
    return [c for c in psutil.Process(env.match_pid).children(recursive=True) if c.name() == "vizdoom"]


def random_steps(env, steps, rng):
    """Step with random actions -> the infos of every episode end (agent 0's), and the last step's results."""
    ends = []
    for _ in range(steps):
        actions = [int(rng.integers(env.action_space.n)) for _ in range(env.num_agents)]
        obs, rew, term, trunc, infos = env.step(actions)
        assert len(obs) == len(rew) == len(term) == len(trunc) == len(infos) == env.num_agents
        assert all(isinstance(r, float) for r in rew) and not any(term)
        assert len(set(trunc)) == 1  # the match ends every agent's episode on the same step
        if trunc[0]:
            ends.append(infos)
    return ends, obs


def test_duel_plays_episodes_and_leaves_nothing_behind():
    env = match("doom_duel")
    assert env.num_agents == 2 and env.num_bots == 0
    assert env.observation_space == gymnasium.spaces.Box(0, 255, (3, 72, 128), np.uint8)
    assert isinstance(env.action_space, gymnasium.spaces.Discrete) and env.action_space.n == 54
    obs, infos = env.reset()
    assert len(obs) == 2 and all(o.shape == (3, 72, 128) and o.dtype == np.uint8 for o in obs)
    assert obs[0].max() > obs[0].min()  # a rendered frame
    assert len(engines_of(env)) == 2
    pgid, workdir = env.match_pid, env._state["workdir"]
    ends, obs = random_steps(env, 3 * STEPS_PER_EPISODE + 5, np.random.default_rng(0))
    assert len(ends) == 3
    for infos in ends:
        for info in infos:
            ep = info["episode"]
            assert ep["len"] == STEPS_PER_EPISODE and ep["match_restart"] == 0.0
            assert {"frags", "deaths", "hits", "hits_taken", "damage", "damage_taken", "place"} <= set(ep)
            assert ep["reward"] == ep["frags"]  # no shaping: the reward is the frag count's change
            assert info["final_obs"].shape == (3, 72, 128) and info["final_obs"].dtype == np.uint8
        places = sorted(info["episode"]["place"] for info in infos)
        assert places in ([1.0, 1.0], [1.0, 2.0])
    assert all(env.observation_space.contains(o) for o in obs)
    env.close()
    env.close()  # twice is fine
    assert wait_group_gone(pgid), f"left behind: {group_members(pgid)}"
    assert not os.path.exists(workdir)


def test_deathmatch_four_agents():
    env = match("doom_deathmatch")
    assert env.num_agents == 4 and env.action_space.n == 162  # 54 x weapon next/prev/none
    env.reset()
    pgid = env.match_pid
    ends, _ = random_steps(env, STEPS_PER_EPISODE + 2, np.random.default_rng(1))
    assert len(ends) == 1 and all(i["episode"]["len"] == STEPS_PER_EPISODE for i in ends[0])
    env.close()
    assert wait_group_gone(pgid)


def test_agents_with_bots_and_shaping():
    env = match("doom_deathmatch_bots", doom_num_agents=2, doom_num_bots=2, doom_bot_difficulty=100,
                doom_reward_shaping="death=-0.5,damage=0.01")
    assert (env.num_agents, env.num_bots) == (2, 2)
    with open(os.path.join(env._state["workdir"], "bots.cfg")) as f:
        assert "aiming      100" in f.read()
    env.reset()
    pgid = env.match_pid
    ends, _ = random_steps(env, 2 * STEPS_PER_EPISODE + 2, np.random.default_rng(2))
    assert len(ends) == 2
    deaths = 0.0
    for infos in ends:
        for info in infos:
            ep = info["episode"]
            deaths += ep["deaths"]
            assert ep["shaping_death"] == pytest.approx(-0.5 * ep["deaths"])
            assert ep["shaping_damage"] == pytest.approx(0.01 * ep["damage"])
            assert ep["reward"] == pytest.approx(ep["frags"] + ep["shaping_death"] + ep["shaping_damage"])
    env.close()
    assert wait_group_gone(pgid)


# the match process's own death is the same recovery path as an engine's: slow, to keep the default suite short
@pytest.mark.parametrize("victim", ["engine", "stalled_engine", pytest.param("match", marks=pytest.mark.slow)])
def test_a_dead_process_restarts_the_match_and_truncates_the_episode(victim, caplog):
    env = match("doom_duel", doom_match_timeout_sec=1.5)
    env.reset()
    rng = np.random.default_rng(3)
    random_steps(env, 10, rng)
    old_pgid, old_port = env.match_pid, env.port
    if victim == "engine":
        os.kill(engines_of(env)[-1].pid, signal.SIGKILL)  # a joiner's engine crashes
    elif victim == "stalled_engine":
        os.kill(engines_of(env)[-1].pid, signal.SIGSTOP)  # hangs: only the step timeout can notice
    else:
        os.kill(env.match_pid, signal.SIGKILL)  # the match process itself
    t = time.time()
    with caplog.at_level("WARNING", logger="sfx.envs.doom.multiplayer"):
        obs, rew, term, trunc, infos = env.step([0, 0])
    elapsed = time.time() - t
    assert elapsed < 1.5 + 15.0  # detection within the step timeout, plus a new match's start
    if victim == "stalled_engine":
        assert elapsed >= 1.5 and "no answer" in caplog.text
    assert trunc == [True, True] and term == [False, False] and rew == [0.0, 0.0]
    assert all(i["episode"]["match_restart"] == 1.0 and i["episode"]["len"] == 11 for i in infos)
    assert env.restarts == 1 and "restarting" in caplog.text
    assert env.match_pid != old_pgid and env.port != old_port
    assert wait_group_gone(old_pgid)
    assert all(o.shape == (3, 72, 128) for o in obs)
    ends, _ = random_steps(env, STEPS_PER_EPISODE + 1, rng)  # the new match plays full episodes
    assert len(ends) == 1 and ends[0][0]["episode"]["match_restart"] == 0.0
    pgid = env.match_pid
    env.close()
    assert wait_group_gone(pgid)


def test_parallel_matches_get_different_ports():
    a, b = match("doom_duel_bots", env_id=0), match("doom_duel_bots", env_id=1)
    try:
        assert a.port != b.port and 20000 <= a.port <= 32767 and 20000 <= b.port <= 32767
        a.reset(), b.reset()
        rng = np.random.default_rng(4)
        for _ in range(20):
            a.step([int(rng.integers(a.action_space.n))])
            b.step([int(rng.integers(b.action_space.n))])
    finally:
        a.close()
        b.close()


def test_match_dies_with_its_parent(tmp_path):
    # a rollout worker killed without close(): its match must notice and take its engines with it
    script = textwrap.dedent("""
        import sys, time
        from sfx.registries import default_cfg
        from sfx.envs import make_env
        if __name__ == "__main__":
            env = make_env(default_cfg("doom_duel_bots"))
            env.reset()
            print(env.match_pid, env._state["workdir"], flush=True)
            time.sleep(60)
    """)
    path = tmp_path / "worker.py"
    path.write_text(script)
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    worker = subprocess.Popen([sys.executable, str(path)], stdout=subprocess.PIPE, text=True, cwd=repo,
                              env={**os.environ, "PYTHONPATH": repo})
    try:
        pid, workdir = worker.stdout.readline().split()
        pgid = int(pid)
        assert os.path.isdir(workdir)
        assert group_members(pgid), "the match should be running"
        worker.kill()
        worker.wait(5)
        assert wait_group_gone(pgid, timeout=5.0), f"orphans: {group_members(pgid)}"
        assert not os.path.exists(workdir)
    finally:
        worker.kill()


@pytest.mark.parametrize("name, overrides, message", [
    ("doom_duel", {"doom_num_bots": 1}, "holds at most 2"),
    ("doom_duel", {"doom_num_agents": 1}, "needs at least 2"),
    ("doom_deathmatch_bots", {"doom_num_bots": 8}, "at most 8"),
    ("doom_deathmatch_bots", {"doom_bot_difficulty": 101}, "[0, 100]"),
    ("doom_duel", {"doom_timelimit_min": 0.0}, "must be > 0"),
    ("doom_duel", {"doom_match_timeout_sec": -1.0}, "must be > 0"),
    ("doom_dual", {}, "did you mean: doom_duel"),
])
def test_bad_multiplayer_flags_are_config_errors(name, overrides, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        default_cfg(name, **overrides)


def test_measurements_and_render_of_a_match():
    cfg = default_cfg("doom_duel", seed=1, doom_timelimit_min=SHORT, doom_measurements=True, res_w=64, res_h=48)
    env = make_env(cfg, {"worker_index": 0, "vector_index": 0, "env_id": 0}, render_mode="rgb_array")
    try:
        assert set(env.observation_space.spaces) == {"obs", "measurements"}
        obs, _ = env.reset()
        assert all(env.observation_space.contains(o) for o in obs)
        assert obs[0]["obs"].shape == (3, 48, 64)
        frame = env.render()
        assert frame.shape == (48, 64, 3) and frame.dtype == np.uint8
        assert np.array_equal(frame, obs[0]["obs"].transpose(1, 2, 0))
        rng = np.random.default_rng(3)
        for _ in range(10):
            obs, *_ = env.step([int(rng.integers(env.action_space.n)) for _ in range(2)])
        assert obs[1]["measurements"].dtype == np.float32
        assert np.array_equal(env.render(), obs[0]["obs"].transpose(1, 2, 0))
    finally:
        env.close()


def test_doom_render_reaches_every_player_of_a_match():
    """--doom_render travels in the match spec to each player's game (the same ``apply_render`` as the
    single-player envs, whose frames tests/envs/test_doom_family.py checks); nothing starts before reset."""
    cfg = default_cfg("doom_duel", seed=1, doom_render="hud=on,crosshair=on")
    env = make_env(cfg, {"worker_index": 0, "vector_index": 0, "env_id": 0})
    try:
        assert env.spec.render == (("hud", True), ("crosshair", True))
    finally:
        env.close()
