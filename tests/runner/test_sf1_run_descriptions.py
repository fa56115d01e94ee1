"""Sample Factory 1.x run descriptions load and expand with sfx_runner, only the import path changed.

The module texts below are SF1's as published (the v1.121 README's "Runner interface" example and
run descriptions from ``sample_factory/runner/runs/``). :func:`to_sfx` makes the two changes SF1
users make: the import (``sample_factory.runner.run_description`` -> ``sfx_runner``) and the module
path in their command lines. The runner command lines come from the README and runner/README.md.
"""

from __future__ import annotations

import shlex
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

from sfx_runner import Experiment, ParamGrid, ParamList, RunDescription, RunnerError
from sfx_runner.cli import load_run_description, main

SF1_IMPORT = "from sample_factory.runner.run_description import"
SF1_MODULES = ("sample_factory.algorithms.appo.train_appo", "sample_factory.run_algorithm")


def to_sfx(source: str) -> str:
    """SF1 module text -> sfx: the import and the trainer's module path, nothing else."""
    assert SF1_IMPORT in source
    out = source.replace(SF1_IMPORT, "from sfx_runner import")
    for module in SF1_MODULES:
        out = out.replace(f"python -m {module} ", "python -m sfx.train ")
    return textwrap.dedent(out)


# README "Runner interface" (also runner/README.md and runs/paper_doom_all_basic_envs.py, run name aside)
README_EXAMPLE = """
from sample_factory.runner.run_description import RunDescription, Experiment, ParamGrid

_params = ParamGrid([
    ('seed', [0, 1111, 2222, 3333, 4444, 5555, 6666, 7777, 8888, 9999]),
    ('env', ['doom_my_way_home', 'doom_deadly_corridor', 'doom_defend_the_center', 'doom_defend_the_line', 'doom_health_gathering', 'doom_health_gathering_supreme']),
])

_experiments = [
    Experiment(
        'basic_envs_fs4',
        'python -m sample_factory.algorithms.appo.train_appo --train_for_env_steps=500000000 --algo=APPO --env_frameskip=4 --use_rnn=True --num_workers=36 --num_envs_per_worker=8 --num_policies=1 --ppo_epochs=1 --rollout=32 --recurrence=32 --batch_size=2048 --wide_aspect_ratio=False',
        _params.generate_params(randomize=False),
    ),
]


RUN_DESCRIPTION = RunDescription('doom_basic_envs_appo', experiments=_experiments)
"""
README_ENVS = ["doom_my_way_home", "doom_deadly_corridor", "doom_defend_the_center", "doom_defend_the_line",
               "doom_health_gathering", "doom_health_gathering_supreme"]
BASIC_CMD = ("--train_for_env_steps=500000000 --algo=APPO --env_frameskip=4 --use_rnn=True --num_workers=36 "
             "--num_envs_per_worker=8 --num_policies=1 --ppo_epochs=1 --rollout=32 --recurrence=32 --batch_size=2048 "
             "--wide_aspect_ratio=False").split()

# runner/runs/paper_doom_battle2_appo.py
PAPER_BATTLE2 = """
from sample_factory.runner.run_description import Experiment, ParamGrid, RunDescription

_params = ParamGrid(
    [
        ("seed", [1111, 2222, 3333]),
    ]
)

_experiments = [
    Experiment(
        "battle2_fs4",
        "python -m sample_factory.algorithms.appo.train_appo --env=doom_battle2 --train_for_env_steps=3000000000 --algo=APPO --env_frameskip=4 --use_rnn=True --reward_scale=0.5 --num_workers=20 --num_envs_per_worker=20 --num_policies=1 --ppo_epochs=1 --rollout=32 --recurrence=32 --batch_size=2048 --wide_aspect_ratio=False",
        _params.generate_params(randomize=False),
    ),
]


RUN_DESCRIPTION = RunDescription(
    "doom_battle2_appo_v1.119.0_fs4", experiments=_experiments
)
"""

# runner/runs/paper_doom_battle_appo_pbt.py: an empty grid = one experiment, the cmd as is
PAPER_BATTLE_PBT = """
from sample_factory.runner.run_description import Experiment, ParamGrid, RunDescription

_params = ParamGrid([])

_experiments = [
    Experiment(
        "battle_fs4",
        "python -m sample_factory.algorithms.appo.train_appo --env=doom_battle --train_for_env_steps=4000000000 --algo=APPO --env_frameskip=4 --use_rnn=True --ppo_epochs=1 --rollout=32 --recurrence=32 --batch_size=2048 --wide_aspect_ratio=False --num_workers=72 --num_envs_per_worker=32 --num_policies=8 --with_pbt=True",
        _params.generate_params(randomize=False),
    ),
]


RUN_DESCRIPTION = RunDescription(
    "paper_doom_battle_appo_pbt_v98_fs4", experiments=_experiments
)
"""

# runner/runs/paper_doom_duel_pbt.py: ppo_epochs set in the cmd and in the grid, to the same value
PAPER_DUEL_PBT = """
from sample_factory.runner.run_description import Experiment, ParamGrid, RunDescription

_params = ParamGrid(
    [
        ("ppo_epochs", [1]),
    ]
)

_experiment = Experiment(
    "bots_ssl2_fs2",
    "python -m sample_factory.algorithms.appo.train_appo --env=doom_duel --train_for_seconds=360000 --algo=APPO --gamma=0.995 --env_frameskip=2 --use_rnn=True --reward_scale=0.5 --num_workers=72 --num_envs_per_worker=16 --num_policies=8 --ppo_epochs=1 --rollout=32 --recurrence=32 --batch_size=2048 --res_w=128 --res_h=72 --wide_aspect_ratio=False --benchmark=False --pbt_replace_reward_gap=0.5 --pbt_replace_reward_gap_absolute=0.35 --pbt_period_env_steps=5000000 --with_pbt=True --pbt_start_mutation=100000000",
    _params.generate_params(randomize=False),
)

RUN_DESCRIPTION = RunDescription("paper_doom_duel_v100_fs2", experiments=[_experiment])
"""

# runner/runs/paper_doom_bots_pbt.py: environment variables as the 4th argument
PAPER_BOTS_PBT = """
from sample_factory.runner.run_description import Experiment, ParamGrid, RunDescription

_params = ParamGrid(
    [
        ("seed", [42]),
    ]
)

_experiments = [
    Experiment(
        "bots_128_fs2_narrow",
        "python -m sample_factory.algorithms.appo.train_appo --env=doom_deathmatch_bots --train_for_seconds=3600000 --algo=APPO --use_rnn=True --gamma=0.995 --env_frameskip=2 --rollout=32 --num_workers=80 --num_envs_per_worker=24 --num_policies=8 --ppo_epochs=1 --rollout=32 --recurrence=32 --batch_size=2048 --res_w=128 --res_h=72 --wide_aspect_ratio=False --with_pbt=True --pbt_period_env_steps=5000000",
        _params.generate_params(randomize=False),
        dict(DOOM_DEFAULT_UDP_PORT=35300),
    ),
]

RUN_DESCRIPTION = RunDescription("doom_bots_v100_pbt", experiments=_experiments)
"""

# runner/runs/doom_freedm.py: SF's early launch settings in the RunDescription (its cmd is pre-1.0:
# --macro_batch; the runner does not parse the cmd's flags)
DOOM_FREEDM = """
from sample_factory.runner.run_description import Experiment, ParamGrid, RunDescription

_params = ParamGrid(
    [
        ("ppo_epochs", [1]),
    ]
)

_experiment = Experiment(
    "bots_freedm_fs2",
    "python -m sample_factory.algorithms.appo.train_appo --env=doom_freedm --train_for_seconds=360000 --algo=APPO --gamma=0.995 --env_frameskip=2 --use_rnn=True --reward_scale=0.5 --num_workers=20 --num_envs_per_worker=4 --num_policies=1 --ppo_epochs=1 --rollout=32 --recurrence=32 --macro_batch=2048 --batch_size=2048 --benchmark=False --start_bot_difficulty=150",
    _params.generate_params(randomize=False),
)

RUN_DESCRIPTION = RunDescription(
    "doom_freedm_v64_fs2",
    experiments=[_experiment],
    pause_between_experiments=100,
    use_gpus=1,
    experiments_per_gpu=-1,
    max_parallel=1,
)
"""

# runner/runs/doom_basic.py: the cmd names its experiment; SF1's runner appended its own --experiment after it
DOOM_BASIC = """
from sample_factory.runner.run_description import Experiment, ParamGrid, RunDescription

_params = ParamGrid([])

_experiment = Experiment(
    "basic",
    "python -m sample_factory.algorithms.appo.train_appo --env=doom_basic --train_for_env_steps=3000000 --algo=APPO --env_frameskip=4 --use_rnn=True --ppo_epochs=1 --rollout=32 --recurrence=32 --wide_aspect_ratio=False --num_workers=20 --num_envs_per_worker=20 --experiment=doom_basic",
    _params.generate_params(randomize=False),
)

RUN_DESCRIPTION = RunDescription("doom_basic", experiments=[_experiment])
"""

# runner/runs/mujoco_hopper.py: a 20-parameter grid of one value each, bools as strings
MUJOCO_HOPPER = """
from sample_factory.runner.run_description import Experiment, ParamGrid, RunDescription

_params = ParamGrid(
    [
        ("gamma", [0.995]),
        ("gae_lambda", [1.0]),
        ("ppo_clip_value", [10]),
        ("with_vtrace", ["False"]),
        ("learning_rate", [0.0001]),
        ("max_grad_norm", [100.0]),
        ("use_rnn", ["False"]),
        ("recurrence", [1]),
        ("num_minibatches_to_accumulate", [0]),
        ("device", ["gpu"]),
        ("actor_critic_share_weights", ["False"]),
        ("max_policy_lag", [1000000]),
        ("adaptive_stddev", ["False"]),
        ("ppo_epochs", [20]),
        ("ppo_clip_ratio", [0.3]),
        ("batch_size", [1024]),
        ("num_batches_per_iteration", [10]),
        ("rollout", [128]),
        ("nonlinearity", ["tanh"]),
        ("exploration_loss_coeff", [0.0]),
    ]
)

_experiment = Experiment(
    "mujoco_hopper",
    "python -m sample_factory.run_algorithm --env=mujoco_hopper --train_for_env_steps=7000000 --algo=APPO --num_workers=16 --num_envs_per_worker=4 --benchmark=False --with_pbt=False",
    _params.generate_params(randomize=False),
)

RUN_DESCRIPTION = RunDescription("mujoco_hopper_v94", experiments=[_experiment])
"""


def write_module(folder: Path, dotted: str, source: str) -> Path:
    """``source`` (converted with :func:`to_sfx`) as the importable module ``dotted`` under ``folder``."""
    *packages, stem = dotted.split(".")
    where = folder
    for package in packages:
        where = where / package
        where.mkdir(exist_ok=True)
        (where / "__init__.py").touch()
    path = where / f"{stem}.py"
    path.write_text(to_sfx(source))
    return path


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A user's project folder on sys.path, also the working folder; its modules are forgotten after."""
    before = set(sys.modules)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    for name in set(sys.modules) - before:
        if str(tmp_path) in str(getattr(sys.modules[name], "__file__", "") or ""):
            del sys.modules[name]


def test_readme_runner_line_expands_the_readme_example(project, capsys):
    # README "Runner interface": the script saved as myproject/train_10_seeds.py, run with the README's line
    write_module(project, "myproject.train_10_seeds", README_EXAMPLE)
    line = ("python -m sample_factory.runner.run --run=myproject.train_10_seeds --runner=processes --max_parallel=12 "
            "--pause_between=10 --experiments_per_gpu=3 --num_gpus=4").split()
    assert line[2] == "sample_factory.runner.run"  # -> sfx.runner.run, whose main() this is
    assert main(line[3:] + ["--dry_run", f"--train_dir={project / 'td'}"]) == 0
    out = capsys.readouterr().out
    assert "60 experiment(s)" in out and "at most 12 at once" in out and "GPUs 0,1,2,3 x 3 per GPU" in out

    run = load_run_description("myproject.train_10_seeds")
    specs = run.generate_experiments(project / "td")
    assert len(specs) == 60
    seeds = [0, 1111, 2222, 3333, 4444, 5555, 6666, 7777, 8888, 9999]
    expected = [(seed, env) for seed in seeds for env in README_ENVS]  # SF1's order: the first key slowest
    assert [(s.params["seed"], s.params["env"]) for s in specs] == expected
    first = specs[0]
    assert first.name == "00_basic_envs_fs4_see=0_env=doom-my-way-home"
    assert first.argv[1:3] == ["-m", "sfx.train"]
    assert first.argv[3:] == BASIC_CMD + ["--seed=0", "--env=doom_my_way_home",
                                          f"--train_dir={project / 'td' / 'doom_basic_envs_appo'}",
                                          f"--experiment={first.name}"]
    assert f"{first.name}:\n" in out
    assert not (project / "td").exists(), "a dry run writes nothing"


def test_runner_readme_processes_line(project, capsys):
    # runner/README.md "CLI Examples", local multiprocessing, with SF1's paper_doom_battle2_appo run module
    write_module(project, "paper_doom_battle2_appo", PAPER_BATTLE2)
    argv = ("--run=paper_doom_battle2_appo --runner=processes --max_parallel=4 --pause_between=10 "
            "--experiments_per_gpu=1 --num_gpus=4").split()
    assert main(argv + ["--dry_run", f"--train_dir={project / 'td'}"]) == 0
    out = capsys.readouterr().out
    assert "run doom_battle2_appo_v1.119.0_fs4: 3 experiment(s)" in out
    for i, seed in enumerate([1111, 2222, 3333]):
        assert f"0{i}_battle2_fs4_see={seed}:\n" in out
    assert "--env=doom_battle2" in out and "--seed=3333" in out


def test_runner_readme_slurm_line(project, capsys):
    # runner/README.md "CLI Examples", Slurm (its megaverse module replaced by the README example, its sbatch
    # template in SF1's form: a shell script; --dry_run appended: nothing is submitted here)
    write_module(project, "myproject.train_10_seeds", README_EXAMPLE)
    (project / "megaverse_rl" / "slurm").mkdir(parents=True)
    (project / "megaverse_rl" / "slurm" / "sbatch_template.sh").write_text("#!/bin/bash\necho setup\n")
    argv = ("--run=myproject.train_10_seeds --runner=slurm --slurm_workdir=./megaverse_single_agent "
            "--experiment_suffix=slurm --pause_between=1 --slurm_gpus_per_job=1 --slurm_cpus_per_gpu=12 "
            "--slurm_sbatch_template=./megaverse_rl/slurm/sbatch_template.sh --slurm_print_only=False").split()
    train_dir = f"--train_dir={project / 'td'}"
    assert main(argv + ["--dry_run", train_dir]) == 0
    out = capsys.readouterr().out
    run_dir = project / "td" / "doom_basic_envs_appo_slurm"  # --experiment_suffix=slurm
    assert f"60 experiment(s) in {run_dir}," in out and f"--train_dir={run_dir} " in out
    assert "cpus-per-task=12 gpus-per-node=1" in out and "setup (template): echo setup\n" in out
    assert f"submitit folder: {project / 'megaverse_single_agent'}\n" in out

    # SF1's own way, --slurm_print_only=True: the same listing, nothing submitted (no Slurm here: a real
    # submission would fail on sinfo), nothing written
    print_only = [a.replace("--slurm_print_only=False", "--slurm_print_only=True") for a in argv]
    assert main(print_only + [train_dir]) == 0
    assert capsys.readouterr().out == out
    assert not (project / "megaverse_single_agent").exists() and not (project / "td").exists()

    # another runner's print-only flag would not stop this runner: refused
    assert main(["--run=myproject.train_10_seeds", "--runner=processes", "--slurm_print_only", train_dir]) == 2
    assert "--slurm_print_only=True goes with --runner=slurm" in capsys.readouterr().err
    assert main(argv[:4] + ["--experiment_suffix=a/b", "--dry_run", train_dir]) == 2
    assert "--experiment_suffix='a/b' is not allowed" in capsys.readouterr().err


def test_experiment_suffix_flag_wins_over_the_run_description(project, capsys):
    write_module(project, "myproject.train_10_seeds", README_EXAMPLE.replace(
        "RunDescription('doom_basic_envs_appo', experiments=_experiments)",
        "RunDescription('doom_basic_envs_appo', experiments=_experiments, experiment_suffix='v2')"))
    base = ["--run=myproject.train_10_seeds", "--only=00_*", "--dry_run", f"--train_dir={project}"]
    for extra, folder in [([], "doom_basic_envs_appo_v2"),  # the run description's own suffix
                          (["--experiment_suffix=slurm"], "doom_basic_envs_appo_slurm"),  # the flag wins
                          (["--experiment_suffix="], "doom_basic_envs_appo")]:  # an empty flag removes it
        assert main(base + extra) == 0
        assert f"--train_dir={project / folder} " in capsys.readouterr().out


# run_scripts/ngc_job_16g_1gpu.template of SF1's NGC line, in SF1's template form ({{ name }}, {{ experiment_cmd }})
SF1_NGC_TEMPLATE = """\
ngc batch run --instance dgx1v.16g.1.norm --name "{{ name }}" --image "nvcr.io/myorg/sf:latest" \\
    --result /results --workspace ws:/workspace:RW --commandline "cd /workspace/sf && {{ experiment_cmd }}"
"""


def test_runner_readme_ngc_line(project, capsys):
    # runner/README.md "CLI Examples", NGC (--dry_run appended)
    write_module(project, "myproject.train_10_seeds", README_EXAMPLE)
    (project / "run_scripts").mkdir()
    (project / "run_scripts" / "ngc_job_16g_1gpu.template").write_text(SF1_NGC_TEMPLATE)
    argv = ("--run=myproject.train_10_seeds --runner=ngc --ngc_job_template=run_scripts/ngc_job_16g_1gpu.template "
            "--ngc_print_only=False --train_dir=/workspace/train_dir").split()
    assert main(argv + ["--dry_run"]) == 0
    out = capsys.readouterr().out
    assert "60 jobs (nothing submitted)" in out
    name = "00_basic_envs_fs4_see=0_env=doom-my-way-home"
    cmd = shlex.join(["python", "-m", "sfx.train", *BASIC_CMD, "--seed=0", "--env=doom_my_way_home",
                      "--train_dir=/workspace/train_dir/doom_basic_envs_appo", f"--experiment={name}"])
    assert (f"  {name}: ngc batch run --instance dgx1v.16g.1.norm --name doom_basic_envs_appo.{name} "
            f"--image nvcr.io/myorg/sf:latest --result /results --workspace ws:/workspace:RW "
            f"--commandline {shlex.quote('cd /workspace/sf && ' + cmd)}\n") in out

    # SF1's own way, --ngc_print_only=True: the same listing, nothing submitted (no ngc program here)
    print_only = [a.replace("--ngc_print_only=False", "--ngc_print_only=True") for a in argv]
    assert main(print_only) == 0
    assert capsys.readouterr().out == out


def test_empty_grid_is_one_experiment_with_the_cmd_as_is(project):
    write_module(project, "paper_doom_battle_appo_pbt", PAPER_BATTLE_PBT)
    specs = load_run_description("paper_doom_battle_appo_pbt").generate_experiments(project)
    assert [s.name for s in specs] == ["00_battle_fs4"]
    assert specs[0].params == {}
    assert specs[0].argv[3:-2][-3:] == ["--num_envs_per_worker=32", "--num_policies=8", "--with_pbt=True"]


def test_same_value_in_cmd_and_grid_expands(project):
    write_module(project, "paper_doom_duel_pbt", PAPER_DUEL_PBT)
    (spec,) = load_run_description("paper_doom_duel_pbt").generate_experiments(project)
    assert spec.name == "00_bots_ssl2_fs2_ppo=1"
    assert spec.argv.count("--ppo_epochs=1") == 2 and "--benchmark=False" in spec.argv


def test_different_values_in_cmd_and_grid_still_fail():
    run = RunDescription("r", [Experiment("e", "python -m sfx.train --ppo_epochs=1",
                                          ParamGrid([("ppo_epochs", [1, 2])]).generate_params(randomize=False))])
    with pytest.raises(RunnerError, match="sets 'ppo_epochs' both in its cmd"):
        run.generate_experiments("/nonexistent")


def test_env_vars_as_the_fourth_argument(project):
    write_module(project, "paper_doom_bots_pbt", PAPER_BOTS_PBT)
    (spec,) = load_run_description("paper_doom_bots_pbt").generate_experiments(project)
    assert spec.name == "00_bots_128_fs2_narrow_see=42"
    assert spec.env_vars == {"DOOM_DEFAULT_UDP_PORT": "35300"}


def test_early_launch_settings_load_with_a_warning(project):
    write_module(project, "doom_freedm", DOOM_FREEDM)
    with pytest.warns(UserWarning, match=r"not applied.*--pause_between=100 --num_gpus=1 --experiments_per_gpu=-1 "
                                         r"--max_parallel=1"):
        run = load_run_description("doom_freedm")
    assert run.launch_hints == {"pause_between": 100, "num_gpus": 1, "experiments_per_gpu": -1, "max_parallel": 1}
    (spec,) = run.generate_experiments(project)
    assert spec.name == "00_bots_freedm_fs2_ppo=1"


def test_cmd_naming_its_experiment_expands_as_in_sf1(project):
    # SF1's runner appended its own --experiment after the cmd's, which won: sfx drops the cmd's, with a warning
    write_module(project, "doom_basic_run", DOOM_BASIC)
    run = load_run_description("doom_basic_run")
    with pytest.warns(UserWarning, match=r"experiment 'basic' sets '--experiment=doom_basic'; dropped") as record:
        (spec,) = run.generate_experiments(project)
    assert len(record) == 1
    assert spec.name == "00_basic"
    assert spec.argv[-1] == f"--experiment={spec.name}"
    assert [a for a in spec.argv if a.startswith("--experiment")] == ["--experiment=00_basic"]
    assert spec.argv[-3:-1] == ["--num_envs_per_worker=20", f"--train_dir={project / 'doom_basic'}"]


def test_big_grid_of_strings(project):
    write_module(project, "mujoco_hopper", MUJOCO_HOPPER)
    (spec,) = load_run_description("mujoco_hopper").generate_experiments(project)
    assert spec.argv[1:3] == ["-m", "sfx.train"]
    assert "--with_vtrace=False" in spec.argv and "--learning_rate=0.0001" in spec.argv
    assert "--exploration_loss_coeff=0.0" in spec.argv and "--ppo_clip_value=10" in spec.argv
    assert spec.name.startswith("00_mujoco_hopper_gam=0.995_gae=1.0_")
    assert len(spec.name) <= 150


def test_sf1_keyword_arguments_for_other_programs(tmp_path):
    # RunDescription's 1.x keywords (runner/README.md): e.g. a Hydra program with its own folder argument
    run = RunDescription("hydra_sweep", [Experiment("lr", "python train.py", ParamGrid([("lr", [0.1, 0.2])]))],
                         experiment_dirs_sf_format=False, experiment_arg_name="experiment",
                         experiment_dir_arg_name="hydra.run.dir", customize_experiment_name=False, param_prefix="")
    specs = run.generate_experiments(tmp_path)
    assert [s.name for s in specs] == ["00_lr", "01_lr"]
    assert specs[1].argv == ["python", "train.py", "lr=0.2", f"hydra.run.dir={tmp_path / 'hydra_sweep' / '01_lr'}"]


def test_experiment_suffix_keeps_a_relaunch_apart(tmp_path):
    run = RunDescription("r", [Experiment("e", "python -m sfx.train --env=gym_CartPole-v1")])
    assert run.run_dir(tmp_path) == tmp_path / "r"
    run.experiment_suffix = "slurm"  # what SF1's runner did with its --experiment_suffix flag
    (spec,) = run.generate_experiments(tmp_path)
    assert spec.train_dir == tmp_path / "r_slurm" and f"--train_dir={tmp_path / 'r_slurm'}" in spec.argv
    assert RunDescription("r", [Experiment("e", "python x")], experiment_suffix="v2").run_folder_name == "r_v2"
    with pytest.raises(RunnerError, match="experiment_suffix 'a/b' is not allowed"):
        run.experiment_suffix = "a/b"


@pytest.mark.parametrize("make", [
    lambda: ParamGrid([("seed", list(range(5))), ("lr", [1, 2])]),
    lambda: ParamList([{"seed": i} for i in range(8)]),
])
def test_randomize_is_a_seeded_permutation(make):
    ordered = list(make().generate_params(randomize=False))
    shuffled = list(make().generate_params(randomize=True))
    assert shuffled != ordered and sorted(map(str, shuffled)) == sorted(map(str, ordered))
    assert list(make().generate_params(randomize=True)) == shuffled, "the same order every time"
    assert list(make().generate_params()) == ordered, "no randomize: the given order"


def test_generator_is_read_once_and_kept():
    generated = ParamGrid([("seed", [1, 2])]).generate_params(randomize=False)
    exp = Experiment("e", "python -m sfx.train --env=gym_CartPole-v1", generated)
    run = RunDescription("r", [exp])
    assert [s.name for s in run.generate_experiments("/x")] == [s.name for s in run.generate_experiments("/x")]
    assert exp.base_name == "e" and exp.params == [{"seed": 1}, {"seed": 2}]


def test_numpy_values_become_python_values():
    # SF1's randomize=True grids were NumPy permutations: their values were NumPy scalars
    exp = Experiment("e", "python x", ({"seed": np.int64(3), "lr": np.float32(0.5), "env": np.str_("a")}
                                       for _ in range(1)))
    (params,) = exp.param_sets()
    assert params == {"seed": 3, "lr": 0.5, "env": "a"} and type(params["seed"]) is int


@pytest.mark.parametrize("generator,expected", [
    ({"seed": 1}, "one dict"),
    ("seed", "iterable of dicts"),
    (iter([{"seed": 1}, 5]), "entry 1 is 5"),
])
def test_bad_param_generators_name_the_problem(generator, expected):
    with pytest.raises(RunnerError, match=expected) as e:
        Experiment("e", "python x", generator)
    assert "experiment 'e'" in str(e.value)


def test_sf1_modules_load_without_warnings_but_the_launch_settings(project):
    for name, source in [("a1", README_EXAMPLE), ("a2", PAPER_BATTLE_PBT), ("a3", PAPER_DUEL_PBT),
                         ("a4", PAPER_BOTS_PBT), ("a5", MUJOCO_HOPPER)]:
        write_module(project, name, source)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            load_run_description(name)
