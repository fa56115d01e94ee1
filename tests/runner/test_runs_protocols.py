"""The benchmark run descriptions' flags mean what their protocols say: each generated command line parsed as
sfx.train parses it, and the envs (or the EnvPool configs) it makes checked against CleanRL's, Machado et al.'s and
the Procgen paper's settings."""

from __future__ import annotations

import pytest

from sfx.registries import parse_args
from sfx.engine.evaluator import eval_cfg
from sfx_runner.cli import load_run_description


def parsed(run: str, tmp_path) -> list:
    """(spec, cfg) of every experiment of ``runs.<run>``, each command line parsed as sfx.train parses it."""
    out = []
    for spec in load_run_description(f"runs.{run}").generate_experiments(tmp_path):
        assert spec.argv[:3] == ["python", "-m", "sfx.train"], spec.cmd
        out.append((spec, parse_args(spec.argv[3:])))
    return out


def test_cleanrl_protocol(tmp_path):
    from sfx.envs import make_env

    runs = parsed("atari_cleanrl", tmp_path)
    assert sorted((c.env, c.seed) for _, c in runs) == sorted(
        (f"atari_{g}", s) for g in ("pong", "breakout", "beam_rider") for s in (1, 2, 3))
    for spec, cfg in runs:
        assert spec.base_name == cfg.env.removeprefix("atari_")  # --only='<game>*' picks a game
        # 10M agent steps at frameskip 4 = 40M frames, which is what sfx's env steps count
        assert (cfg.train_for_env_steps, cfg.env_frameskip) == (40_000_000, 4)
        assert (cfg.atari_sticky_actions, cfg.atari_full_action_set, cfg.atari_episodic_life) == (False, False, True)
        assert (cfg.atari_noop_max, cfg.atari_fire_reset, cfg.atari_max_episode_frames) == (30, True, 108_000)
        assert cfg.reward_clip == 1.0 and cfg.reward_scale == 1.0 and cfg.env_backend == "python"
        # evaluated on whole games: the evaluator's envs alone drop episodic life
        assert cfg.eval_every_env_steps > 0 and eval_cfg(cfg).atari_episodic_life is False
    # the envs they make: no stickiness, Breakout's 4 actions, life loss ends training episodes, not evaluation's
    cfg = next(c for _, c in runs if c.env == "atari_breakout")
    train_env = make_env(cfg, {"worker_index": 0, "vector_index": 0, "env_id": 0})
    eval_env = make_env(eval_cfg(cfg), {"worker_index": 0, "vector_index": 0, "env_id": 0})
    try:
        ale = train_env.env.unwrapped.ale
        assert ale.getFloat("repeat_action_probability") == 0.0
        assert train_env.action_space.n == 4 and train_env.observation_space.shape == (4, 84, 84)
        assert train_env.episodic_life is True and eval_env.episodic_life is False
    finally:
        train_env.close()
        eval_env.close()


def test_machado_protocol(tmp_path):
    pytest.importorskip("envpool", reason="the envpool extra is not installed (pip install -e .[envpool])")
    from sfx.envs.atari import atari_options

    runs = parsed("atari_machado", tmp_path)
    assert sorted((c.env, c.seed) for _, c in runs) == sorted(
        (f"atari_{g}", s) for g in ("pong", "breakout", "beam_rider") for s in (1, 2, 3))
    for _, cfg in runs:
        assert (cfg.train_for_env_steps, cfg.env_frameskip, cfg.env_backend) == (200_000_000, 4, "envpool")
        assert (cfg.atari_sticky_actions, cfg.atari_sticky_action_prob) == (True, 0.25)
        assert (cfg.atari_full_action_set, cfg.atari_episodic_life) == (True, False)
        assert cfg.reward_clip == 1.0 and cfg.eval_every_env_steps > 0 and cfg.eval_env_flags is None
        # what EnvPool is asked for: Cleanba's IMPALA settings for this protocol
        task, options = atari_options(cfg)
        assert task.endswith("-v5")
        assert {k: options[k] for k in ("frame_skip", "repeat_action_probability", "full_action_space", "noop_max",
                                        "use_fire_reset", "max_episode_steps", "stack_num", "img_height",
                                        "gray_scale", "episodic_life")} == {
            "frame_skip": 4, "repeat_action_probability": 0.25, "full_action_space": True, "noop_max": 1,
            "use_fire_reset": True, "max_episode_steps": 27_000, "stack_num": 4, "img_height": 84,
            "gray_scale": True, "episodic_life": False}


def test_machado_flags_differ_from_the_atari_defaults_where_the_module_says():
    """The docstring says sfx's atari defaults give sticky actions 0.25 but the minimal action set and episodic life:
    if a default changes, this says which sentence to rewrite."""
    from sfx.registries import default_cfg

    cfg = default_cfg(env="atari_pong")
    assert (cfg.atari_sticky_actions, cfg.atari_sticky_action_prob) == (True, 0.25)
    assert (cfg.atari_full_action_set, cfg.atari_episodic_life) == (False, True)


def test_procgen_protocol(tmp_path):
    pytest.importorskip("envpool", reason="the envpool extra is not installed (pip install -e .[envpool])")
    try:
        import envpool.procgen  # noqa: F401
    except ImportError as e:  # no Qt 5 runtime
        pytest.skip(f"EnvPool's Procgen cannot load ({e}); run scripts/install_qt5.sh")
    from sfx.envs.procgen import procgen_options

    runs = parsed("procgen", tmp_path)
    games = ("starpilot", "bigfish", "bossfight")
    assert sorted((s.base_name, c.seed) for s, c in runs) == sorted(
        (f"{g}_{v}", s) for g in games for v in ("levels200", "full") for s in (1, 2, 3))
    for spec, cfg in runs:
        assert cfg.env in {f"procgen_{g}" for g in games}
        # no frame skip: 25M steps are 25M frames
        assert (cfg.train_for_env_steps, cfg.env_frameskip) == (25_000_000, 1)
        assert cfg.procgen_distribution_mode == "easy" and cfg.eval_every_env_steps > 0
        train = procgen_options(cfg)[1]
        test = procgen_options(eval_cfg(cfg))[1]
        if "levels200" in spec.name:
            assert train == {"num_levels": 200, "start_level": 0}
        else:
            assert train == {"num_levels": 0, "start_level": 0}
        # tested on the full distribution either way
        assert test["num_levels"] == 0
