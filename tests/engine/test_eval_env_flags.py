"""--eval_env_flags: the evaluator's envs get env flags of their own (Procgen's test levels, whole Atari games),
parsed with the eval env's family's flags, refused in one line at start when bad; a real serial Procgen run's
evaluator plays the full level distribution while its rollout workers play the one training level."""

from __future__ import annotations

import numpy as np
import pytest

from sfx.cfg import ConfigError
from sfx.registries import default_cfg
from sfx.engine.evaluation import check_eval_env, eval_env_overrides
from sfx.engine.evaluator import eval_cfg, eval_env_config


def test_flags_are_parsed_with_the_families_own_parser():
    cfg = default_cfg(env="atari_breakout", eval_every_env_steps=1000,
                      eval_env_flags="--atari_episodic_life=False --atari_noop_max 5")
    assert eval_env_overrides(cfg) == {"atari_episodic_life": False, "atari_noop_max": 5}
    ecfg = eval_cfg(cfg)
    assert (ecfg.atari_episodic_life, ecfg.atari_noop_max, ecfg.env) == (False, 5, "atari_breakout")
    # the run's own cfg is untouched: the flags are the evaluator's only
    assert (cfg.atari_episodic_life, cfg.atari_noop_max) == (True, 30)
    for none in (None, "", "  "):
        cfg.eval_env_flags = none
        assert eval_env_overrides(cfg) == {} and eval_cfg(cfg).atari_episodic_life is True


@pytest.mark.parametrize("flags, message", [
    ("--atari_episodic_lif=False", r"^--eval_env_flags='--atari_episodic_lif=False': '--atari_episodic_lif=False' is "
                                   r"not a flag of the atari_ family \(--env=atari_breakout\); allowed: .*--atari_noop_max"),
    # a trainer flag would change what the policy's actions mean: only the family's env flags are allowed
    ("--env_frameskip=2", r"'--env_frameskip=2' is not a flag of the atari_ family"),
    ("--atari_noop_max=many", r"^--eval_env_flags='--atari_noop_max=many': argument --atari_noop_max: invalid int"),
    ("'--atari_noop_max=1", r"does not split into arguments \(No closing quotation\)"),
    ("episodic", r"'episodic' is not a flag of the atari_ family"),
])
def test_a_bad_flag_is_one_line(flags, message):
    cfg = default_cfg(env="atari_breakout", eval_every_env_steps=1000, eval_env_flags=flags)
    with pytest.raises(ConfigError, match=message) as e:
        eval_env_overrides(cfg)
    assert "\n" not in str(e.value)


def test_a_family_without_env_flags_is_refused():
    cfg = default_cfg(env="gym_CartPole-v1", eval_every_env_steps=1000, eval_env_flags="--gym_max_episode_steps=50")
    assert eval_env_overrides(cfg) == {"gym_max_episode_steps": 50}
    cfg.eval_env_flags = "--atari_episodic_life=False"
    with pytest.raises(ConfigError, match=r"not a flag of the gym_ family \(--env=gym_CartPole-v1\); allowed: "
                                          r"--gym_max_episode_steps$"):
        eval_env_overrides(cfg)


def test_atari_evaluation_plays_whole_games_only_with_the_flag():
    """The evaluator's cfg is the run's: without --eval_env_flags its Atari envs end an episode at every lost life
    (each life would be counted as one evaluation episode); with --atari_episodic_life=False they play whole games."""
    from sfx.envs import make_env

    for flags, episodic in ((None, True), ("--atari_episodic_life=False", False)):
        cfg = default_cfg(env="atari_breakout", eval_every_env_steps=1000, eval_env_flags=flags)
        env = make_env(eval_cfg(cfg), eval_env_config(cfg, 0))
        try:
            assert env.episodic_life is episodic
        finally:
            env.close()


def test_values_the_family_refuses_are_refused_at_start(tmp_path):
    from sfx.engine.coordinator import probe_env

    cfg = default_cfg(env="atari_breakout", eval_every_env_steps=1000, eval_env_flags="--atari_sticky_action_prob=1.5",
                      train_dir=str(tmp_path), experiment="bad")
    with pytest.raises(ConfigError, match=r"^--eval_env_flags='--atari_sticky_action_prob=1.5': "
                                          r"--atari_sticky_action_prob=1.5 must be in \[0, 1\)$"):
        check_eval_env(cfg, probe_env(cfg))
    cfg.eval_env_flags = "--atari_full_action_set=True"  # 18 actions where the policy has Breakout's 4
    with pytest.raises(ConfigError, match=r"^--eval_env_flags='--atari_full_action_set=True' has observation space "
                                          r".*action space Discrete\(18\).*--env=atari_breakout has .*Discrete\(4\)"):
        check_eval_env(cfg, probe_env(cfg))
    cfg.eval_env_flags = "--atari_episodic_life=False"
    check_eval_env(cfg, probe_env(cfg))


# ------------------------------------------------------------------ Procgen: a real run's evaluator plays other levels

def _procgen():
    envpool = pytest.importorskip("envpool", reason="the envpool extra is not installed (pip install -e .[envpool])")
    try:
        import envpool.procgen
    except ImportError as e:  # no Qt 5 runtime
        pytest.skip(f"EnvPool's Procgen cannot load ({e}); run scripts/install_qt5.sh")
    return envpool


class _RecordedPool:
    """A real EnvPool pool that also keeps the level seeds it reports (``info['level_seed']`` of every reset and
    step), so the test reads which levels each pool played."""

    def __init__(self, pool, kwargs, log):
        self.pool = pool
        self.record = {"env_seed": list(kwargs["env_seed"]), "num_levels": kwargs["num_levels"],
                       "start_level": kwargs["start_level"], "levels": []}
        log.append(self.record)

    def _keep(self, info):
        self.record["levels"].extend(np.asarray(info["level_seed"]).tolist())

    def reset(self, *args):
        obs, info = self.pool.reset(*args)
        self._keep(info)
        return obs, info

    def recv(self):
        out = self.pool.recv()
        self._keep(out[-1])
        return out

    def __getattr__(self, name):
        return getattr(self.pool, name)


def test_a_procgen_evaluation_plays_the_test_distribution(tmp_path, monkeypatch):
    envpool = _procgen()
    from sfx.engine import run_training
    from sfx.engine.evaluator import EVAL_SEED_STRIDE
    from sfx.envs.registry import env_seed

    pools: list[dict] = []
    make = envpool.make_gymnasium

    def recorded(task_id, **kwargs):
        return _RecordedPool(make(task_id, **kwargs), kwargs, pools)

    monkeypatch.setattr(envpool, "make_gymnasium", recorded)
    train_level = 7
    cfg = default_cfg(env="procgen_starpilot", experiment="pg", train_dir=str(tmp_path), serial_mode=True,
                      device="cpu", seed=3, num_workers=1, num_envs_per_worker=2, worker_num_splits=1, rollout=16,
                      recurrence=16, batch_size=32, num_batches_per_iteration=1, ppo_epochs=1, train_for_env_steps=96,
                      procgen_num_levels=1, procgen_start_level=train_level,
                      eval_every_env_steps=32, eval_episodes=3, eval_num_envs=1,
                      eval_env_flags="--procgen_num_levels=0")
    result = run_training(cfg)
    assert result["status"] == "done"
    evals = result["evaluations"]
    assert len(evals) >= 1 and all(e["episodes"] == 3 for e in evals)

    # the pools made at start (the probe env, and the eval env check_eval_env makes) play nothing: the probe has
    # the run's levels, the check the evaluator's
    startup = [p for p in pools if not p["levels"]]
    assert sorted(p["num_levels"] for p in startup) == [0, 1]
    # the evaluator's pools are the ones seeded with its env's seeds (a new pool each evaluation, seed + stride * k)
    base = env_seed(cfg, eval_env_config(cfg, 0))
    eval_seeds = {base + EVAL_SEED_STRIDE * k for k in range(len(evals) + 1)}
    played_pools = [p for p in pools if p["levels"]]
    evaluator = [p for p in played_pools if set(p["env_seed"]) <= eval_seeds]
    workers = [p for p in played_pools if not set(p["env_seed"]) & eval_seeds]
    assert len(evaluator) == len(evals) and workers and len(evaluator) + len(workers) == len(played_pools)
    # the rollout workers play the one training level, as the run's flags say
    assert all(p["num_levels"] == 1 for p in workers)
    assert {level for p in workers for level in p["levels"]} == {train_level}
    # the evaluator's envs were made with the full distribution and played other levels, one per episode
    assert all(p["num_levels"] == 0 for p in evaluator)
    played = [level for p in evaluator for level in p["levels"]]
    assert len(set(played)) >= 3 and train_level not in played


def test_procgen_test_levels_out_of_range_are_refused_at_start(tmp_path):
    _procgen()
    from sfx.engine import run_training

    cfg = default_cfg(env="procgen_starpilot", experiment="pg_bad", train_dir=str(tmp_path), serial_mode=True,
                      device="cpu", num_workers=1, num_envs_per_worker=2, train_for_env_steps=64,
                      procgen_num_levels=200, eval_every_env_steps=32, eval_env_flags="--procgen_start_level=-1")
    with pytest.raises(ConfigError, match=r"^--eval_env_flags='--procgen_start_level=-1': --procgen_start_level=-1 "
                                          r"must be an integer >= 0$"):
        run_training(cfg)
