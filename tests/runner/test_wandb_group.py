"""A sweep's experiments that log to W&B share one W&B group: the run's name (``--wandb_group``).

Only command lines are built here (no training): each experiment whose command line turns W&B on
and names no group of its own gets ``--wandb_group=<run folder name>`` before the folder flags.
"""

import textwrap

import pytest

from sfx_runner import Experiment, ParamGrid, ParamList, RunDescription, RunnerError
from sfx_runner.cli import main

TRAIN = "python -m sfx.train --env=gym_CartPole-v1 --num_workers=1"


def argvs(run: RunDescription, tmp_path) -> list[list[str]]:
    return [spec.argv for spec in run.generate_experiments(tmp_path)]


def groups(argv: list[str]) -> list[str]:
    """Every ``--wandb_group`` value of ``argv`` (``--wandb_group=x`` or ``--wandb_group x``)."""
    return [a.split("=", 1)[1] if "=" in a else argv[i + 1] for i, a in enumerate(argv)
            if a == "--wandb_group" or a.startswith("--wandb_group=")]


def test_every_experiment_with_w_and_b_gets_the_run_name_as_group(tmp_path):
    run = RunDescription("lr_sweep", [
        Experiment("cartpole", f"{TRAIN} --with_wandb", ParamGrid([("seed", [1, 2]), ("learning_rate", [1e-4, 1e-3])])),
        Experiment("plain", TRAIN, ParamList([{"seed": 3}])),
    ])
    specs = run.generate_experiments(tmp_path)
    assert [groups(s.argv) for s in specs] == [["lr_sweep"]] * 4 + [[]]
    for spec in specs[:4]:
        # after the experiment's parameters, before the folder flags the runner appends
        assert spec.argv[-3:] == ["--wandb_group=lr_sweep", f"--train_dir={tmp_path / 'lr_sweep'}",
                                  f"--experiment={spec.name}"]
        assert "--wandb_group=lr_sweep" in spec.cmd
        assert "wandb_group" not in spec.params and "wan" not in spec.name, "names and params stay as they were"


@pytest.mark.parametrize("cmd_flags,params,expected", [
    ("--with_wandb", {}, True),
    ("--with_wandb=True", {}, True),
    ("--with_wandb=1", {}, True),
    ("--with_wandb yes", {}, True),
    ("--with_wandb --seed=1", {}, True),  # a bare flag followed by another flag
    ("--with_wandb=False", {}, False),
    ("--with_wandb false", {}, False),
    ("", {}, False),
    ("", {"with_wandb": True}, True),  # as a parameter of the grid
    ("", {"with_wandb": False}, False),
    ("--with_wandb --with_wandb=False", {}, False),  # the last setting wins, as in sfx's parser
])
def test_w_and_b_is_on_as_sfx_reads_the_flag(tmp_path, cmd_flags, params, expected):
    run = RunDescription("r", [Experiment("e", f"{TRAIN} {cmd_flags}", ParamList([params]))])
    [argv] = argvs(run, tmp_path)
    assert groups(argv) == (["r"] if expected else [])


def test_a_grid_over_with_wandb_groups_only_the_experiments_that_log(tmp_path):
    run = RunDescription("r", [Experiment("e", TRAIN, ParamGrid([("with_wandb", [True, False])]))])
    assert [groups(a) for a in argvs(run, tmp_path)] == [["r"], []]


@pytest.mark.parametrize("cmd_flags,params,expected", [
    ("--with_wandb --wandb_group=mine", {}, ["mine"]),
    ("--with_wandb --wandb_group mine", {}, ["mine"]),
    ("--with_wandb", {"wandb_group": "from_grid"}, ["from_grid"]),
])
def test_a_group_the_experiment_names_itself_is_kept(tmp_path, cmd_flags, params, expected):
    run = RunDescription("r", [Experiment("e", f"{TRAIN} {cmd_flags}", ParamList([params]))])
    [argv] = argvs(run, tmp_path)
    assert groups(argv) == expected


def test_wandb_group_argument_names_the_group_or_turns_it_off(tmp_path):
    exp = Experiment("e", f"{TRAIN} --with_wandb", ParamGrid([("seed", [1, 2])]))
    assert [groups(a) for a in argvs(RunDescription("r", [exp], wandb_group="paper fig 3"), tmp_path)] == \
        [["paper fig 3"]] * 2
    assert [groups(a) for a in argvs(RunDescription("r", [exp], wandb_group=False), tmp_path)] == [[], []]


def test_the_group_is_the_run_folder_with_its_suffix(tmp_path):
    run = RunDescription("r", [Experiment("e", f"{TRAIN} --with_wandb")], experiment_suffix="relaunch2")
    [argv] = argvs(run, tmp_path)
    assert groups(argv) == ["r_relaunch2"], "a relaunch kept apart in its folder is kept apart in W&B too"


def test_programs_with_other_folder_flags_get_nothing(tmp_path):
    run = RunDescription("r", [Experiment("e", "python train.py --with_wandb")], experiment_dirs_sf_format=False,
                         experiment_dir_arg_name="--out")
    [argv] = argvs(run, tmp_path)
    assert groups(argv) == []


@pytest.mark.parametrize("bad", ["", "  ", "a\nb", "x" * 129, 3, None])
def test_bad_wandb_group_names_the_problem(bad):
    with pytest.raises(RunnerError, match="wandb_group must be"):
        RunDescription("r", [Experiment("e", TRAIN)], wandb_group=bad)


def test_dry_run_shows_the_group(tmp_path, capsys):
    run_file = tmp_path / "wb_run.py"
    run_file.write_text(textwrap.dedent(f"""
        from sfx_runner import Experiment, ParamGrid, RunDescription
        RUN_DESCRIPTION = RunDescription("wb_sweep", [
            Experiment("cartpole", "{TRAIN} --with_wandb", ParamGrid([("seed", [1, 2])])),
        ])
    """))
    assert main([f"--run={run_file}", f"--train_dir={tmp_path / 'td'}", "--dry_run"]) == 0
    assert capsys.readouterr().out.count("--wandb_group=wb_sweep") == 2
