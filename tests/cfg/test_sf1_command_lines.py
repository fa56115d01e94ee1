"""Sample Factory 1.x's published command lines parse with sfx, only the module path changed.

Each line below is copied from where Sample Factory 1.x published it (the v1.121 README, or a run
description in ``sample_factory/runner/runs/``; for run descriptions, the cmd followed by one of its
parameter sets). The test swaps the module path, appends this machine's scale (a few workers, a
temporary --train_dir) and parses it with :func:`sfx.cfg.parse_args`:

* no flag is refused, the appended flags win, and every value the line gives lands in cfg;
* lines for envs sfx does not ship (SF1's own doom maps) fail on the env name, not on a flag;
* lines with SF1 flags that still need a meaning in sfx (PENDING_FLAGS) are strict xfails, and the
  rest of such a line (those flags left out) must parse already.

DeepMind Lab is not installed here: dmlab_ lines parse against the stand-in of tests/envs/dmlab_standin.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import subprocess
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import pytest

from sfx.cfg import ConfigError
from sfx.registries import build_parser, default_cfg, parse_args
from sfx.cfg.sf1_compat import ALIAS_GROUP, NO_EFFECT_GROUP, AcceptOnly
from sfx.experiment.cfg_io import save_cfg

REPO = Path(__file__).resolve().parents[2]
DMLAB_STANDIN = str(REPO / "tests" / "envs" / "dmlab_standin")

# SF1 module -> sfx module: the only change a published line gets
MODULES = {
    "sample_factory.algorithms.appo.train_appo": "sfx.train",
    "sample_factory.run_algorithm": "sfx.train",
    "sample_factory.algorithms.appo.enjoy_appo": "sfx.enjoy",
    "sample_factory_examples.train_gym_env": "sfx.train",
}

# SF1 flags that change what a run does and that sfx does not implement yet (the lead's list):
# flag -> SF1's default and meaning
# (empty: --obs_subtract_mean, --actor_critic_share_weights, --adaptive_stddev have their meaning now)
PENDING_FLAGS: dict[str, str] = {}


@dataclass(frozen=True)
class Sf1Line:
    """One published command line: ``cmd`` as SF1 printed it, ``scale`` appended here."""

    source: str
    cmd: str
    scale: str = "--num_workers=2 --num_envs_per_worker=2"
    unknown_env: bool = False  # SF1's own maps, not shipped by sfx: the env name must be the error

    @property
    def id(self) -> str:
        env = next((a.split("=", 1)[1] for a in shlex.split(self.cmd) if a.startswith("--env=")), "")
        return f"{self.source.split(',')[0].replace(' ', '_')}-{env}-{zlib.crc32(self.cmd.encode()) % 10_000:04d}"

    def pending(self) -> list[str]:
        return [a for a in shlex.split(self.cmd) if a.split("=", 1)[0] in PENDING_FLAGS]


TRAIN = "python -m sample_factory.algorithms.appo.train_appo"
RUNS = "runner/runs/"
BASIC_ENVS_CMD = (f"{TRAIN} --train_for_env_steps=500000000 --algo=APPO --env_frameskip=4 --use_rnn=True "
                  "--num_workers=36 --num_envs_per_worker=8 --num_policies=1 --ppo_epochs=1 --rollout=32 "
                  "--recurrence=32 --batch_size=2048 --wide_aspect_ratio=False")
DMLAB30 = (f"{TRAIN} --env=dmlab_30 --train_for_seconds=3600000 --algo=APPO --gamma=0.99 --use_rnn=True "
           "--num_workers=90 --num_envs_per_worker=12 --ppo_epochs=1 --rollout=32 --recurrence=32 --batch_size=2048 "
           "--benchmark=False --ppo_epochs=1 --max_grad_norm=0.0 --dmlab_renderer=software "
           "--decorrelate_experience_max_seconds=120 --reset_timeout_seconds=300 --encoder_custom=dmlab_instructions "
           "--encoder_type=resnet --encoder_subtype=resnet_impala --encoder_extra_fc_layers=1 --hidden_size=256 "
           "--nonlinearity=relu --rnn_type=lstm --dmlab_extended_action_set=True --num_policies=4 "
           "--pbt_replace_reward_gap=0.05 --pbt_replace_reward_gap_absolute=5.0 --pbt_period_env_steps=10000000 "
           "--pbt_start_mutation=100000000 --with_pbt=True --experiment=dmlab_30_resnet_4pbt_w90_v12 "
           "--dmlab_one_task_per_worker=True --set_workers_cpu_affinity=True --max_policy_lag=35 "
           "--pbt_target_objective=dmlab_target_objective --dmlab30_dataset=~/datasets/brady_konkle_oliva2008 "
           "--dmlab_use_level_cache=True --dmlab_level_cache_path=/home/user/dmlab_cache")

LINES = [
    # README "Using Sample Factory"
    Sf1Line("README Using Sample Factory", f"{TRAIN} --env=doom_basic --algo=APPO --train_for_env_steps=3000000 "
            "--num_workers=20 --num_envs_per_worker=20 --experiment=doom_basic"),
    # README "Running experiments" / VizDoom
    Sf1Line("README VizDoom", f"{TRAIN} --env=doom_battle --train_for_env_steps=4000000000 --algo=APPO "
            "--env_frameskip=4 --use_rnn=True --ppo_epochs=1 --rollout=32 --recurrence=32 --batch_size=2048 "
            "--wide_aspect_ratio=False --num_workers=20 --num_envs_per_worker=20 --num_policies=1  "
            "--experiment=doom_battle_w20_v20", unknown_env=True),
    Sf1Line("README VizDoom", f"{TRAIN} --train_for_env_steps=500000000 --algo=APPO --env=doom_my_way_home "
            "--env_frameskip=4 --use_rnn=True --num_workers=36 --num_envs_per_worker=8 --num_policies=1 --ppo_epochs=1 "
            "--rollout=32 --recurrence=32 --batch_size=2048 --wide_aspect_ratio=False --experiment=doom_basic_envs"),
    Sf1Line("README VizDoom", f"{TRAIN} --env=doom_battle --train_for_env_steps=4000000000 --algo=APPO "
            "--env_frameskip=4 --use_rnn=True --num_workers=72 --num_envs_per_worker=8 --num_policies=1 --ppo_epochs=1 "
            "--rollout=32 --recurrence=32 --batch_size=2048 --wide_aspect_ratio=False --max_grad_norm=0.0 "
            "--experiment=doom_battle", unknown_env=True),
    Sf1Line("README VizDoom", f"{TRAIN} --env=doom_battle2 --train_for_env_steps=4000000000 --algo=APPO "
            "--env_frameskip=4 --use_rnn=True --num_workers=72 --num_envs_per_worker=8 --num_policies=1 --ppo_epochs=1 "
            "--rollout=32 --recurrence=32 --batch_size=2048 --wide_aspect_ratio=False --max_grad_norm=0.0 "
            "--experiment=doom_battle_2", unknown_env=True),
    Sf1Line("README VizDoom", f"{TRAIN} --env=doom_duel_bots --train_for_seconds=360000 --algo=APPO --gamma=0.995 "
            "--env_frameskip=2 --use_rnn=True --reward_scale=0.5 --num_workers=72 --num_envs_per_worker=32 "
            "--num_policies=8 --ppo_epochs=1 --rollout=32 --recurrence=32 --batch_size=2048 --benchmark=False "
            "--res_w=128 --res_h=72 --wide_aspect_ratio=False --pbt_replace_reward_gap=0.2 "
            "--pbt_replace_reward_gap_absolute=3.0 --pbt_period_env_steps=5000000 --save_milestones_sec=1800 "
            "--with_pbt=True --experiment=doom_duel_bots"),
    Sf1Line("README VizDoom", f"{TRAIN} --env=doom_deathmatch_bots --train_for_seconds=3600000 --algo=APPO "
            "--use_rnn=True --gamma=0.995 --env_frameskip=2 --rollout=32 --num_workers=80 --num_envs_per_worker=24 "
            "--num_policies=8 --ppo_epochs=1 --rollout=32 --recurrence=32 --batch_size=2048 --res_w=128 --res_h=72 "
            "--wide_aspect_ratio=False --with_pbt=True --pbt_period_env_steps=5000000 "
            "--experiment=doom_deathmatch_bots"),
    Sf1Line("README VizDoom", f"{TRAIN} --env=doom_duel --train_for_seconds=360000 --algo=APPO --gamma=0.995 "
            "--env_frameskip=2 --use_rnn=True --num_workers=72 --num_envs_per_worker=16 --num_policies=8 "
            "--ppo_epochs=1 --rollout=32 --recurrence=32 --batch_size=2048 --res_w=128 --res_h=72 "
            "--wide_aspect_ratio=False --benchmark=False --pbt_replace_reward_gap=0.5 "
            "--pbt_replace_reward_gap_absolute=0.35 --pbt_period_env_steps=5000000 --with_pbt=True "
            "--pbt_start_mutation=100000000 --experiment=doom_duel_full"),
    Sf1Line("README VizDoom", f"{TRAIN} --env=doom_deathmatch_full --train_for_seconds=360000 --algo=APPO "
            "--gamma=0.995 --env_frameskip=2 --use_rnn=True --num_workers=72 --num_envs_per_worker=16 "
            "--num_policies=8 --ppo_epochs=1 --rollout=32 --recurrence=32 --batch_size=2048 --res_w=128 --res_h=72 "
            "--wide_aspect_ratio=False --benchmark=False --pbt_replace_reward_gap=0.1 "
            "--pbt_replace_reward_gap_absolute=0.1 --pbt_period_env_steps=5000000 --with_pbt=True "
            "--pbt_start_mutation=100000000 --experiment=doom_deathmatch_full", unknown_env=True),
    # README "Reproducing benchmarking results"
    Sf1Line("README benchmarking", f"{TRAIN} --env=doom_benchmark --algo=APPO --env_frameskip=4 --use_rnn=True "
            "--num_workers=20 --num_envs_per_worker=32 --num_policies=1 --ppo_epochs=1 --rollout=32 --recurrence=32 "
            "--batch_size=4096 --experiment=doom_battle_appo_fps_20_32 --res_w=128 --res_h=72 "
            "--wide_aspect_ratio=False --policy_workers_per_policy=2 --worker_num_splits=2"),
    Sf1Line("README benchmarking", f"{TRAIN} --env=doom_benchmark --algo=APPO --env_frameskip=4 --use_rnn=True "
            "--num_workers=72 --num_envs_per_worker=24 --num_policies=1 --ppo_epochs=1 --rollout=32 --recurrence=32 "
            "--batch_size=8192 --wide_aspect_ratio=False --experiment=doom_battle_appo_w72_v24 "
            "--policy_workers_per_policy=2"),
    # README "DMLab"
    Sf1Line("README DMLab", DMLAB30, scale="--num_workers=2 --num_envs_per_worker=2 --dmlab30_dataset={tmp} "
            "--dmlab_level_cache_path={tmp}/dmlab_cache"),
    # README "Dummy sampler"
    Sf1Line("README Dummy sampler", "python -m sample_factory.run_algorithm --algo=DUMMY_SAMPLER --env=doom_benchmark "
            "--num_workers=20 --num_envs_per_worker=1 --experiment=dummy_sampler --sample_env_frames=5000000",
            scale="--num_workers=2 --sample_env_frames=2000"),
    # README "Runner interface" and runner/runs/paper_doom_all_basic_envs.py: the cmd with each env of its grid
    *[Sf1Line(f"README Runner interface, {RUNS}paper_doom_all_basic_envs.py",
              f"{BASIC_ENVS_CMD} --seed=1111 --env={env}")
      for env in ("doom_my_way_home", "doom_deadly_corridor", "doom_defend_the_center", "doom_defend_the_line",
                  "doom_health_gathering", "doom_health_gathering_supreme")],
    # run descriptions in sample_factory/runner/runs/ that target train_appo (cmd + one parameter set)
    Sf1Line(f"{RUNS}paper_doom_battle_appo.py", f"{TRAIN} --env=doom_battle --train_for_env_steps=4000000000 "
            "--algo=APPO --env_frameskip=4 --use_rnn=True --num_workers=72 --num_envs_per_worker=8 --num_policies=1 "
            "--ppo_epochs=1 --rollout=32 --recurrence=32 --batch_size=2048 --wide_aspect_ratio=False "
            "--max_grad_norm=0.0 --seed=1111", unknown_env=True),
    Sf1Line(f"{RUNS}paper_doom_battle2_appo.py", f"{TRAIN} --env=doom_battle2 --train_for_env_steps=3000000000 "
            "--algo=APPO --env_frameskip=4 --use_rnn=True --reward_scale=0.5 --num_workers=20 --num_envs_per_worker=20 "
            "--num_policies=1 --ppo_epochs=1 --rollout=32 --recurrence=32 --batch_size=2048 "
            "--wide_aspect_ratio=False --seed=1111", unknown_env=True),
    Sf1Line(f"{RUNS}paper_doom_battle_appo_pbt.py", f"{TRAIN} --env=doom_battle --train_for_env_steps=4000000000 "
            "--algo=APPO --env_frameskip=4 --use_rnn=True --ppo_epochs=1 --rollout=32 --recurrence=32 "
            "--batch_size=2048 --wide_aspect_ratio=False --num_workers=72 --num_envs_per_worker=32 --num_policies=8 "
            "--with_pbt=True", unknown_env=True),
    Sf1Line(f"{RUNS}paper_doom_bots_pbt.py", f"{TRAIN} --env=doom_deathmatch_bots --train_for_seconds=3600000 "
            "--algo=APPO --use_rnn=True --gamma=0.995 --env_frameskip=2 --rollout=32 --num_workers=80 "
            "--num_envs_per_worker=24 --num_policies=8 --ppo_epochs=1 --rollout=32 --recurrence=32 --batch_size=2048 "
            "--res_w=128 --res_h=72 --wide_aspect_ratio=False --with_pbt=True --pbt_period_env_steps=5000000 "
            "--seed=42"),
    Sf1Line(f"{RUNS}paper_doom_duel_bots_pbt.py", f"{TRAIN} --env=doom_duel_bots --train_for_seconds=360000 "
            "--algo=APPO --gamma=0.995 --env_frameskip=2 --use_rnn=True --reward_scale=0.5 --num_workers=72 "
            "--num_envs_per_worker=32 --num_policies=8 --ppo_epochs=1 --rollout=32 --recurrence=32 --batch_size=2048 "
            "--benchmark=False --res_w=128 --res_h=72 --wide_aspect_ratio=False --pbt_replace_reward_gap=0.2 "
            "--pbt_replace_reward_gap_absolute=3.0 --pbt_period_env_steps=5000000 --save_milestones_sec=1800 "
            "--with_pbt=True --ppo_epochs=1"),
    Sf1Line(f"{RUNS}paper_doom_duel_pbt.py", f"{TRAIN} --env=doom_duel --train_for_seconds=360000 --algo=APPO "
            "--gamma=0.995 --env_frameskip=2 --use_rnn=True --reward_scale=0.5 --num_workers=72 "
            "--num_envs_per_worker=16 --num_policies=8 --ppo_epochs=1 --rollout=32 --recurrence=32 --batch_size=2048 "
            "--res_w=128 --res_h=72 --wide_aspect_ratio=False --benchmark=False --pbt_replace_reward_gap=0.5 "
            "--pbt_replace_reward_gap_absolute=0.35 --pbt_period_env_steps=5000000 --with_pbt=True "
            "--pbt_start_mutation=100000000 --ppo_epochs=1"),
    Sf1Line(f"{RUNS}paper_doom_wall_time.py", f"{TRAIN} --train_for_env_steps=100000000 --algo=APPO "
            "--env_frameskip=4 --use_rnn=True --rnn_type=lstm --num_workers=72 --num_policies=1 --ppo_epochs=1 "
            "--rollout=32 --recurrence=32 --batch_size=2048 --wide_aspect_ratio=False --policy_workers_per_policy=3 "
            "--experiment_summaries_interval=5 --ppo_clip_value=10.0 --nonlinearity=relu --seed=1111 "
            "--env=doom_my_way_home_flat_actions --num_envs_per_worker=16", unknown_env=True),
    Sf1Line(f"{RUNS}doom_basic.py", f"{TRAIN} --env=doom_basic --train_for_env_steps=3000000 --algo=APPO "
            "--env_frameskip=4 --use_rnn=True --ppo_epochs=1 --rollout=32 --recurrence=32 --wide_aspect_ratio=False "
            "--num_workers=20 --num_envs_per_worker=20 --experiment=doom_basic"),
    Sf1Line(f"{RUNS}doom_battle_battle2_appo.py", f"{TRAIN} --train_for_env_steps=4000000000 --algo=APPO "
            "--env_frameskip=4 --use_rnn=True --num_workers=16 --num_envs_per_worker=20 --num_policies=1 "
            "--ppo_epochs=1 --rollout=32 --recurrence=32 --batch_size=2048 --wide_aspect_ratio=False "
            "--max_grad_norm=0.0 --env=doom_battle2 --seed=1234567", unknown_env=True),
    Sf1Line(f"{RUNS}doom_health_gathering.py", f"{TRAIN} --train_for_env_steps=40000000 --algo=APPO "
            "--env_frameskip=4 --use_rnn=True --num_workers=20 --num_envs_per_worker=12 --num_policies=1 "
            "--ppo_epochs=1 --rollout=32 --recurrence=32 --batch_size=2048 --wide_aspect_ratio=False "
            "--seed=1111 --env=doom_health_gathering_supreme"),
    Sf1Line(f"{RUNS}doom_health_gathering.py", f"{TRAIN} --train_for_env_steps=40000000 --algo=APPO "
            "--env_frameskip=4 --use_rnn=True --num_workers=20 --num_envs_per_worker=12 --num_policies=1 "
            "--ppo_epochs=1 --rollout=32 --recurrence=32 --batch_size=2048 --wide_aspect_ratio=False "
            "--obs_subtract_mean=128.0 --obs_scale=128.0 --seed=1111 --env=doom_health_gathering_supreme"),
    Sf1Line(f"{RUNS}mujoco_hopper.py", "python -m sample_factory.run_algorithm --env=mujoco_hopper "
            "--train_for_env_steps=7000000 --algo=APPO --num_workers=16 --num_envs_per_worker=4 --benchmark=False "
            "--with_pbt=False --gamma=0.995 --gae_lambda=1.0 --ppo_clip_value=10 --with_vtrace=False "
            "--learning_rate=0.0001 --max_grad_norm=100.0 --use_rnn=False --recurrence=1 "
            "--num_minibatches_to_accumulate=0 --device=gpu --actor_critic_share_weights=False "
            "--max_policy_lag=1000000 --adaptive_stddev=False --ppo_epochs=20 --ppo_clip_ratio=0.3 --batch_size=1024 "
            "--num_batches_per_iteration=10 --rollout=128 --nonlinearity=tanh --exploration_loss_coeff=0.0"),
]
# every line starts with an SF1 module whose sfx counterpart MODULES names
assert all(any(m in line.cmd for m in MODULES) for line in LINES)


def sfx_argv(cmd: str) -> tuple[str, list[str]]:
    """The sfx module and the arguments of an SF1 command line (the module path is the only change)."""
    words = shlex.split(cmd)
    assert words[:2] == ["python", "-m"] and words[2] in MODULES, cmd
    return MODULES[words[2]], words[3:]


@pytest.fixture
def here(tmp_path, monkeypatch):
    """A temporary working folder with DeepMind Lab's stand-in importable."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(DMLAB_STANDIN)
    monkeypatch.delitem(sys.modules, "deepmind_lab", raising=False)
    yield tmp_path
    sys.modules.pop("deepmind_lab", None)


def scaled(line: Sf1Line, tmp: Path, drop: tuple[str, ...] = ()) -> tuple[list[str], list[str]]:
    """(the line's arguments without the flags in ``drop``, the appended ones)."""
    _, args = sfx_argv(line.cmd)
    args = [a for a in args if a.split("=", 1)[0] not in drop]
    appended = shlex.split(line.scale.format(tmp=tmp)) + [f"--train_dir={tmp / 'train_dir'}"]
    return args, appended


def expected_values(parser: argparse.ArgumentParser, argv: list[str]) -> dict[str, object]:
    """dest -> value for every plain ``--flag=value`` of ``argv`` (the last one wins, as in argparse);
    SF1 aliases are left out: they are checked by name below."""
    by_flag = {s: a for a in parser._actions for s in a.option_strings}
    out: dict[str, object] = {}
    for arg in argv:
        flag, _, text = arg.partition("=")
        action = by_flag[flag]
        if type(action) not in (argparse._StoreAction, AcceptOnly):
            continue
        out[action.dest] = action.type(text) if action.type else text
    return out


def check_parsed(line: Sf1Line, tmp: Path, drop: tuple[str, ...] = ()) -> argparse.Namespace:
    args, appended = scaled(line, tmp, drop)
    cfg = parse_args(args + appended, resume=False)
    parser = build_parser(cfg.env, argv=args + appended)  # --algo picks the agent flags
    given = expected_values(parser, args)
    wins = expected_values(parser, appended)
    for dest, value in {**given, **wins}.items():
        assert getattr(cfg, dest) == value, f"{dest}: {getattr(cfg, dest)!r} != {value!r}"
    assert set(given) | set(wins) <= set(cfg.explicit_args)
    return cfg


@pytest.mark.parametrize("line", [x for x in LINES if not x.unknown_env and not x.pending()], ids=lambda x: x.id)
def test_line_parses_and_its_values_land(line, here):
    check_parsed(line, here)


@pytest.mark.parametrize("line", [x for x in LINES if x.pending()], ids=lambda x: x.id)
def test_line_with_pending_flags_parses_without_them(line, here):
    """Everything else of the line is accepted already; the xfail below turns green with the flags."""
    check_parsed(line, here, drop=tuple(PENDING_FLAGS))


@pytest.mark.parametrize("line", [
    pytest.param(x, marks=pytest.mark.xfail(strict=True, raises=ConfigError, reason="awaiting " + " ".join(
        a.split("=", 1)[0] for a in x.pending()))) for x in LINES if x.pending()], ids=lambda x: x.id)
def test_line_with_pending_flags_parses_whole(line, here):
    check_parsed(line, here)


@pytest.mark.parametrize("line", [x for x in LINES if x.unknown_env], ids=lambda x: x.id)
def test_sf1_maps_fail_on_the_env_name_not_on_a_flag(line, here):
    args, appended = scaled(line, here)
    env = next(a.split("=", 1)[1] for a in args if a.startswith("--env="))
    _, unknown = build_parser(env).parse_known_args(args + appended)
    assert not unknown, f"flags refused: {unknown}"
    with pytest.raises(ConfigError) as e:
        parse_args(args + appended, resume=False)
    assert f"--env={env}" in str(e.value) and "argument" not in str(e.value), str(e.value)


def test_dmlab30_line_sets_the_sfx_flags(here):
    line = next(x for x in LINES if x.source == "README DMLab")
    cfg = check_parsed(line, here, drop=tuple(PENDING_FLAGS))
    assert cfg.dmlab30_level_assignment == "worker"  # --dmlab_one_task_per_worker=True
    assert cfg.dmlab_use_instructions is True  # --encoder_custom=dmlab_instructions
    assert (cfg.encoder_type, cfg.encoder_subtype, cfg.hidden_size) == ("resnet", "resnet_impala", 256)
    assert cfg.dmlab_dataset_path == str(here)  # appended --dmlab30_dataset wins over the line's
    assert cfg.dmlab_level_cache_dir == f"{here}/dmlab_cache"
    assert (cfg.benchmark, cfg.encoder_extra_fc_layers, cfg.with_pbt, cfg.num_policies) == (False, 1, True, 4)
    sf1_names = {"encoder_custom", "dmlab_one_task_per_worker", "dmlab30_dataset", "dmlab_use_level_cache",
                 "dmlab_level_cache_path"}
    assert not sf1_names & set(vars(cfg)), "aliases leave only the sfx names in cfg"
    assert {"dmlab30_level_assignment", "dmlab_dataset_path", "dmlab_level_cache_dir",
            "dmlab_use_instructions"} <= set(cfg.explicit_args)


@pytest.mark.parametrize("flags,expected", [
    (["--dmlab_use_level_cache=False", "--dmlab_level_cache_path={tmp}/c"], ""),
    (["--dmlab_level_cache_path={tmp}/c", "--dmlab_use_level_cache=False"], ""),
    (["--dmlab_level_cache_path={tmp}/c", "--dmlab_use_level_cache=True"], "{tmp}/c"),
    (["--dmlab_use_level_cache"], "{tmp}/.dmlab_cache"),
    (["--dmlab_one_task_per_worker=False"], None),
])
def test_dmlab_level_cache_flags_combine_as_in_sf1(here, flags, expected):
    argv = ["--env=dmlab_30", "--num_workers=30", f"--train_dir={here}"] + [f.format(tmp=here) for f in flags]
    cfg = parse_args(argv, resume=False)
    if expected is None:
        assert cfg.dmlab30_level_assignment == "env" and cfg.dmlab_level_cache_dir is None
    else:
        assert cfg.dmlab_level_cache_dir == expected.format(tmp=here)


@pytest.mark.parametrize("argv,expected", [
    (["--benchmark=True"], "argument --benchmark: True is not supported (only False)"),
    (["--benchmark"], "--train_for_env_steps=2000000"),
    (["--encoder_extra_fc_layers=2"], "argument --encoder_extra_fc_layers: 2 is not supported (only 1)"),
    (["--dmlab30_dataset=/x"], "--dmlab30_dataset: is Sample Factory 1.x's name of --dmlab_dataset_path, a flag "
                               "of dmlab_ envs only; --env=doom_basic has no such flag"),
    (["--encoder_custom=dmlab_instructions"], "only for dmlab_ envs"),
])
def test_sf1_values_sfx_cannot_honour_are_one_line_errors(tmp_path, argv, expected):
    with pytest.raises(ConfigError) as e:
        parse_args(["--env=doom_basic", f"--train_dir={tmp_path}"] + argv, resume=False)
    assert expected in str(e.value) and "\n" not in str(e.value)


def test_encoder_custom_maps_to_sfx_encoders(tmp_path):
    base = ["--env=doom_basic", f"--train_dir={tmp_path}"]
    assert parse_args(base + ["--encoder_custom=vizdoom"], resume=False).encoder_type == "conv"
    assert parse_args(base + ["--encoder_custom=mlp"], resume=False).encoder_type == "mlp"


def test_help_shows_the_sf1_groups(tmp_path, capsys):
    # README "Configuration": the --help line, for SF1's doom_battle (sfx lists every flag all the same)
    _, args = sfx_argv("python -m sample_factory.algorithms.appo.train_appo --algo=APPO --env=doom_battle "
                       "--experiment=your_experiment --help")
    with pytest.raises(SystemExit) as e:
        parse_args(args + [f"--train_dir={tmp_path}"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert f"{NO_EFFECT_GROUP}:" in out and f"{ALIAS_GROUP}:" in out and "--benchmark" in out


def test_readme_enjoy_line_after_the_train_line(tmp_path):
    # README "Using Sample Factory": train, then evaluate the same experiment
    _, train = sfx_argv(LINES[0].cmd)
    cfg = parse_args(train + [f"--train_dir={tmp_path}", "--num_workers=2"], resume=False)
    (tmp_path / "doom_basic").mkdir()
    save_cfg(cfg)
    module, enjoy = sfx_argv("python -m sample_factory.algorithms.appo.enjoy_appo --env=doom_basic --algo=APPO "
                             "--experiment=doom_basic")
    assert module == "sfx.enjoy"
    ev = parse_args(enjoy + [f"--train_dir={tmp_path}"], evaluation=True)
    assert (ev.env, ev.algo, ev.experiment, ev.num_envs_per_worker) == ("doom_basic", "APPO", "doom_basic", 20)


def test_readme_enjoy_line_for_an_sf1_map_names_the_env(tmp_path):
    # README VizDoom: evaluating SF1's doom_battle (an experiment folder as SF1 would have left it)
    (tmp_path / "doom_battle_w20_v20").mkdir()
    (tmp_path / "doom_battle_w20_v20" / "cfg.json").write_text('{"env": "doom_battle", "algo": "APPO"}')
    _, enjoy = sfx_argv("python -m sample_factory.algorithms.appo.enjoy_appo --env=doom_battle --algo=APPO "
                        "--experiment=doom_battle_w20_v20")
    with pytest.raises(ConfigError) as e:
        parse_args(enjoy + [f"--train_dir={tmp_path}"], evaluation=True)
    assert str(e.value).startswith("--env=doom_battle: unknown doom scenario"), str(e.value)


# --- --worker_num_splits that nobody asked for gives way to fewer envs per worker ---

def test_splits_not_given_fit_one_env_per_worker(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="sfx.cfg.validation"):
        cfg = parse_args(["--env=doom_benchmark", "--num_envs_per_worker=1", f"--train_dir={tmp_path}"],
                         resume=False)
    assert (cfg.num_envs_per_worker, cfg.worker_num_splits) == (1, 1)
    lines = [r.getMessage() for r in caplog.records if "worker_num_splits" in r.getMessage()]
    assert len(lines) == 1 and "--worker_num_splits=1" in lines[0]
    assert default_cfg(num_envs_per_worker=1).worker_num_splits == 1, "for training as well"


def test_splits_given_stay_and_fail_clearly(tmp_path):
    with pytest.raises(ConfigError) as e:
        parse_args(["--env=doom_benchmark", "--num_envs_per_worker=1", "--worker_num_splits=2",
                    f"--train_dir={tmp_path}"], resume=False)
    assert str(e.value) == "--num_envs_per_worker=1 must be a multiple of --worker_num_splits=2"
    with pytest.raises(ConfigError, match="--num_envs_per_worker=3 must be a multiple of --worker_num_splits=2"):
        parse_args(["--env=doom_benchmark", "--num_envs_per_worker=3", f"--train_dir={tmp_path}"], resume=False)


@pytest.mark.slow  # 9 s on an idle 2-core machine, 28 s beside a training run
def test_dummy_sampler_line_runs(tmp_path):
    # README "Dummy sampler", cut to 2 workers and 2000 frames
    line = next(x for x in LINES if x.source == "README Dummy sampler")
    module, args = sfx_argv(line.cmd)
    argv = args + [f"--train_dir={tmp_path}", "--num_workers=2", "--num_envs_per_worker=1", "--sample_env_frames=2000"]
    start = time.time()
    proc = subprocess.run([sys.executable, "-m", module, *argv], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)})
    took = time.time() - start
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "dummy sampler done: doom_benchmark, 2 workers x 1 envs" in out
    assert "using --worker_num_splits=1" in out
    assert (tmp_path / "dummy_sampler" / "sf_log.txt").is_file()
    assert took < 60, f"{took:.0f} s"


# Sample Factory 1.x trains its VizDoom populations with 8 policies: those lines must start and train, not only
# parse (a child process once received more shared-memory descriptors than Linux passes at start, see
# sfx/engine/shared_arena.py, and every run with 8 policies crashed before its first step)
EIGHT_POLICY_LINES = [x for x in LINES if "--num_policies=8" in x.cmd and not x.unknown_env and not x.pending()]
RUN_BUDGET_ENV_STEPS = 4096


def test_six_published_lines_train_eight_policies():
    assert len(EIGHT_POLICY_LINES) == 6  # 3 in the README, 3 run descriptions


@pytest.mark.slow  # ~15 s each on an idle 2-core machine
# the first line in every run, the other five (the same start-up path) with SFX_EXTENDED=1
@pytest.mark.parametrize("line", [pytest.param(x, marks=() if i == 0 else pytest.mark.extended)
                                  for i, x in enumerate(EIGHT_POLICY_LINES)], ids=lambda x: x.id)
def test_eight_policy_line_trains_to_its_budget(line, tmp_path):
    module, args = sfx_argv(line.cmd)
    # this machine's scale; a batch of 4 trajectories, so that a policy's first episodes train it within the budget
    argv = args + ["--num_workers=2", "--num_envs_per_worker=2", "--batch_size=128",
                   f"--train_for_env_steps={RUN_BUDGET_ENV_STEPS}", f"--train_dir={tmp_path}", "--experiment=line"]
    proc = subprocess.run([sys.executable, "-m", module, *argv], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    exp = tmp_path / "line"
    status = json.loads((exp / "status.json").read_text())
    assert status["status"] == "done" and status["env_steps"] >= RUN_BUDGET_ENV_STEPS
    assert (exp / "done").is_file()
    assert sum(name.startswith("learner_") for name in status["components"]) == 8
    # every policy saved a checkpoint; some trained (a policy meets the envs only when an episode starts with it)
    steps = [max(int(p.name.split("_")[1]) for p in (exp / f"checkpoint_p{i}").glob("checkpoint_*.pth"))
             for i in range(8)]
    assert max(steps) >= 1, steps


@pytest.mark.extended  # in ./all_tests.sh only with SFX_EXTENDED=1 (pytest.ini says why)
@pytest.mark.slow  # ~20 s on an idle 2-core machine
def test_sixteen_policies_on_cartpole_start_and_all_train(tmp_path):
    argv = ["--env=gym_CartPole-v1", "--num_policies=16", "--num_workers=2", "--num_envs_per_worker=4",
            "--batch_size=256", "--train_for_env_steps=16384", f"--train_dir={tmp_path}", "--experiment=p16",
            "--device=cpu"]
    proc = subprocess.run([sys.executable, "-m", "sfx.train", *argv], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    exp = tmp_path / "p16"
    assert json.loads((exp / "status.json").read_text())["env_steps"] >= 16384
    steps = [max(int(p.name.split("_")[1]) for p in (exp / f"checkpoint_p{i}").glob("checkpoint_*.pth"))
             for i in range(16)]
    assert min(steps) >= 1, steps  # CartPole's short episodes reach every policy
