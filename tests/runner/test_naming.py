"""Experiment names, folders and command lines: deterministic, readable, unique, exact."""

import shlex
import sys
from pathlib import Path

import pytest

from sfx_runner import Experiment, ParamGrid, ParamList, RunDescription, RunnerError, resolve_interpreter
from sfx_runner.run_description import format_value, short_keys

CMD = "python -m sfx.train --env=gym_CartPole-v1 --num_workers=1"


def test_names_folders_and_argv(tmp_path):
    run = RunDescription("sweep", [
        Experiment("cartpole", CMD, ParamGrid([("seed", [1, 2]), ("learning_rate", [0.001, 3e-05])])),
        Experiment("acrobot", "python -m sfx.train --env=gym_Acrobot-v1", [{"seed": 1}]),
    ])
    specs = run.generate_experiments(tmp_path)
    assert [s.name for s in specs] == [
        "00_cartpole_see=1_lea=0.001", "01_cartpole_see=1_lea=3e-05",
        "02_cartpole_see=2_lea=0.001", "03_cartpole_see=2_lea=3e-05", "04_acrobot_see=1"]
    assert [s.index for s in specs] == [0, 1, 2, 3, 4]
    assert [s.base_name for s in specs] == ["cartpole"] * 4 + ["acrobot"]
    s = specs[1]
    assert s.params == {"seed": 1, "learning_rate": 3e-05}
    assert s.train_dir == tmp_path / "sweep" and s.exp_dir == tmp_path / "sweep" / s.name
    assert s.argv == ["python", "-m", "sfx.train", "--env=gym_CartPole-v1", "--num_workers=1", "--seed=1",
                      "--learning_rate=3e-05", f"--train_dir={tmp_path / 'sweep'}", f"--experiment={s.name}"]
    assert shlex.split(s.cmd) == s.argv
    assert s.env_vars == {}
    # the same description expands to the same names: what lets a relaunch find its experiments
    assert [x.name for x in run.generate_experiments(tmp_path)] == [x.name for x in specs]


def test_relative_train_dir_becomes_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = RunDescription("r", [Experiment("e", CMD)]).generate_experiments("td")[0]
    assert spec.train_dir == tmp_path / "td" / "r" and spec.train_dir.is_absolute()
    assert spec.name == "00_e" and spec.argv[-2:] == [f"--train_dir={tmp_path / 'td' / 'r'}", "--experiment=00_e"]


def test_index_width_grows_with_the_run(tmp_path):
    specs = RunDescription("big", [Experiment("e", CMD, ParamGrid([("seed", list(range(120)))]))]) \
        .generate_experiments(tmp_path)
    assert specs[0].name == "000_e_see=0" and specs[-1].name == "119_e_see=119"


def test_odd_values_survive_exactly_in_argv_and_names_stay_safe(tmp_path):
    odd = 'a b "c" $d \'e\' /f=g'
    run = RunDescription("odd", [Experiment("e", CMD + " --msg='it is \"quoted\"'", ParamList([{"note": odd}]))])
    spec = run.generate_experiments(tmp_path)[0]
    assert f"--note={odd}" in spec.argv and "--msg=it is \"quoted\"" in spec.argv
    assert shlex.split(spec.cmd) == spec.argv, "cmd is a faithful shell rendering of argv"
    assert spec.name == "00_e_not=a-b-c-d-e-f-g"
    assert all(c.isalnum() or c in "_.=+-" for c in spec.name)


def test_long_values_are_cut_in_names_but_not_in_argv(tmp_path):
    value = "x" * 500
    spec = RunDescription("r", [Experiment("e", CMD, [{"path": value, "other": value}])]).generate_experiments(tmp_path)[0]
    assert len(spec.name) <= 150 and f"--path={value}" in spec.argv


def test_short_keys_are_unique_prefixes():
    assert short_keys(["seed", "learning_rate"]) == {"seed": "see", "learning_rate": "lea"}
    assert short_keys(["num_workers", "num_envs_per_worker"]) == {"num_workers": "num_w", "num_envs_per_worker": "num_e"}
    assert short_keys(["seed", "seed_offset"]) == {"seed": "seed", "seed_offset": "seed_o"}
    assert short_keys(["lr", "env"]) == {"lr": "lr", "env": "env"}
    keys = ["learning_rate", "learner_cores", "lea", "leak", "learning_rate_decay"]
    short = short_keys(keys)
    assert len(set(short.values())) == len(keys), short


def test_values_are_formatted_for_sfx_flags():
    assert [format_value(v) for v in (True, False, 3, 0.001, 1e-4, 3e-05, 1e10, "x y")] == \
        ["True", "False", "3", "0.001", "0.0001", "3e-05", "10000000000.0", "x y"]


def test_not_sf_format_and_plain_names(tmp_path):
    run = RunDescription("r", [Experiment("e", "my_prog --x=1", ParamGrid([("seed", [1, 2])]))],
                         experiment_dirs_sf_format=False, experiment_dir_arg_name="--out", param_prefix="-",
                         customize_experiment_name=False)
    specs = run.generate_experiments(tmp_path)
    assert [s.name for s in specs] == ["00_e", "01_e"]
    assert specs[1].argv == ["my_prog", "--x=1", "-seed=2", f"--out={tmp_path / 'r' / '01_e'}"]


def test_env_vars_are_strings(tmp_path):
    spec = RunDescription("r", [Experiment("e", CMD, env_vars={"OMP_NUM_THREADS": 1, "X": "a b"})]) \
        .generate_experiments(tmp_path)[0]
    assert spec.env_vars == {"OMP_NUM_THREADS": "1", "X": "a b"}


@pytest.mark.parametrize("make,expected", [
    (lambda: Experiment("bad name", CMD), "'bad name'"),
    (lambda: Experiment("../up", CMD), "'../up'"),
    (lambda: Experiment("e", ""), "non-empty"),
    (lambda: Experiment("e", "python -c 'unclosed"), "cannot be split"),
    (lambda: Experiment("e", CMD, param_generator=5), "param_generator"),
    (lambda: Experiment("e", CMD, env_vars={"1X": "a"}), "'1X'"),
    (lambda: RunDescription("r/x", [Experiment("e", CMD)]), "'r/x'"),
    (lambda: RunDescription("r", []), "non-empty"),
    (lambda: RunDescription("r", ["python x.py"]), "not an Experiment"),
])
def test_bad_descriptions_fail_at_once(make, expected):
    with pytest.raises(RunnerError) as e:
        make()
    assert expected in str(e.value)


@pytest.mark.parametrize("experiment,expected", [
    (Experiment("e", CMD + " --train_dir /tmp"), "'--train_dir'"),
    (Experiment("e", CMD, [{"experiment": "x"}]), "parameter 'experiment'"),
    (Experiment("e", CMD + " --seed=0", ParamGrid([("seed", [1])])), "'--seed=0'"),
    (Experiment("e", CMD, ParamList([])), "no parameter sets"),
])
def test_bad_expansions_fail_at_once(tmp_path, experiment, expected):
    with pytest.raises(RunnerError) as e:
        RunDescription("r", [experiment]).generate_experiments(tmp_path)
    assert expected in str(e.value)


@pytest.mark.parametrize("cmd,dropped", [
    (CMD + " --experiment=x", "'--experiment=x'"),
    ("python -m sfx.train --experiment x --env=gym_CartPole-v1 --num_workers=1", "'--experiment x'"),
])
def test_cmd_naming_its_experiment_loses_that_argument(tmp_path, cmd, dropped):
    # Sample Factory 1.x's behaviour (its runner appended its own --experiment after the cmd's, which won):
    # the cmd's is dropped with one warning, so the command line names the experiment exactly once
    run = RunDescription("r", [Experiment("e", cmd, ParamGrid([("seed", [1, 2])]))])
    with pytest.warns(UserWarning, match=f"experiment 'e' sets {dropped}; dropped") as record:
        specs = run.generate_experiments(tmp_path)
    assert len(record) == 1, "one warning per experiment, not per parameter set"
    for spec in specs:
        assert [a for a in spec.argv if a.startswith("--experiment")] == [f"--experiment={spec.name}"]
        assert spec.argv[3:] == ["--env=gym_CartPole-v1", "--num_workers=1", f"--seed={spec.params['seed']}",
                                 f"--train_dir={tmp_path / 'r'}", f"--experiment={spec.name}"]
    assert "x" not in specs[0].argv


def test_resolve_interpreter_only_replaces_a_bare_python():
    assert resolve_interpreter(["python", "-m", "x"]) == [sys.executable, "-m", "x"]
    assert resolve_interpreter(["python3", "a.py"]) == [sys.executable, "a.py"]
    assert resolve_interpreter(["/usr/bin/python3", "a.py"]) == ["/usr/bin/python3", "a.py"]
    assert resolve_interpreter(["python3.11", "a.py"]) == ["python3.11", "a.py"]
    assert resolve_interpreter(["bash", "-c", "python x"]) == ["bash", "-c", "python x"]
    argv = ["python", "x"]
    resolve_interpreter(argv)
    assert argv == ["python", "x"], "the spec's argv is not modified"
    assert Path(sys.executable).exists()


def test_readme_sweep_example_expands_as_the_readme_says(tmp_path):
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## Sweeps: sfx.runner", 1)[1].split("\n## ", 1)[0]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict = {}
    exec(code, namespace)
    specs = namespace["RUN_DESCRIPTION"].generate_experiments(tmp_path)
    assert len(specs) == 4 and specs[1].name == "01_cartpole_see=1_lea=0.001"
    assert "train_dir/quickstart/01_cartpole_see=1_lea=0.001" in section
