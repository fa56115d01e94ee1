"""Every module in runs/ expands with --dry_run, and its command lines are ones sfx.train accepts."""

import importlib
import sys
from pathlib import Path

import pytest

from sfx_runner.cli import import_run_module, load_run_description, main

REPO = Path(__file__).resolve().parents[2]
RUN_MODULES = sorted(p.stem for p in (REPO / "runs").glob("*.py") if not p.stem.startswith("_"))
# flags that arrive with sfx's PBT (issue 6); until sfx.train knows --with_pbt they are not checked
FUTURE_FLAG_PREFIXES = ("--with_pbt", "--pbt_")


def test_the_expected_run_modules_exist():
    assert {"quickstart", "doom_basic_envs", "atari", "dmlab30", "pbt_doom_duel", "benchmark"} <= set(RUN_MODULES)


@pytest.mark.parametrize("name", RUN_MODULES)
def test_dry_run_expands_every_experiment(name, tmp_path, capsys):
    specs = load_run_description(f"runs.{name}").generate_experiments(tmp_path)
    assert main([f"--run=runs.{name}", "--dry_run", f"--train_dir={tmp_path}"]) == 0
    out = capsys.readouterr().out
    for spec in specs:
        assert f"{spec.name}:\n" in out
    assert not any(tmp_path.iterdir()), "a dry run writes nothing"


@pytest.mark.parametrize("name", RUN_MODULES)
def test_commands_parse_with_the_trainer(name, tmp_path):
    from sfx.cfg import validate_cfg
    from sfx.registries import build_parser
    from sfx.envs.registry import find_family

    run = load_run_description(f"runs.{name}")
    specs = run.generate_experiments(tmp_path)
    names = [s.name for s in specs]
    assert len(set(names)) == len(names)
    for spec in specs:
        assert spec.argv[:3] == ["python", "-m", "sfx.train"], spec.cmd
        args = spec.argv[3:]
        env = next(a.split("=", 1)[1] for a in args if a.startswith("--env="))
        parser = build_parser(env, argv=args)  # --algo picks its agent's flags
        known_flags = {s for a in parser._actions for s in a.option_strings}
        cfg, unknown = parser.parse_known_args(args)
        if "--with_pbt" not in known_flags:
            unknown = [a for a in unknown if not a.startswith(FUTURE_FLAG_PREFIXES)]
        assert not unknown, f"{spec.name}: sfx.train does not know {unknown}"
        assert cfg.train_dir == str(spec.train_dir) and cfg.experiment == spec.name
        validate_cfg(cfg, check_paths=False)
        family = find_family(env)
        if family.validate_fn is not None and not env.startswith("dmlab_"):  # dmlab needs DeepMind Lab built
            family.validate_fn(cfg)


def test_quickstart_is_small():
    specs = load_run_description("runs.quickstart").generate_experiments("/nonexistent")
    assert len(specs) == 4
    assert sorted((s.params["seed"], s.params["learning_rate"]) for s in specs) == [
        (1, 3e-4), (1, 1e-3), (2, 3e-4), (2, 1e-3)]
    for spec in specs:
        assert "--env=gym_CartPole-v1" in spec.argv and "--num_workers=1" in spec.argv
        steps = int(next(a for a in spec.argv if a.startswith("--train_for_env_steps=")).split("=")[1])
        assert steps <= 500_000


def test_data_kept_in_run_modules_matches_sfx():
    from sfx.envs.atari import ATARI_57
    from sfx.envs.doom.scenarios import SCENARIOS

    assert tuple(import_run_module("runs.atari").GAMES) == tuple(ATARI_57)
    doom = import_run_module("runs.doom_basic_envs").SCENARIOS
    assert set(doom) == set(SCENARIOS) - {"benchmark"}, "every single-player scenario except the benchmark"
    for name, (scale, _) in doom.items():
        assert scale == SCENARIOS[name].reward_scale, name


def test_run_module_lookup_and_errors(tmp_path, capsys, monkeypatch):
    assert load_run_description("quickstart").run_name == "quickstart", "a bare name is looked up in runs/"
    assert load_run_description(str(REPO / "runs" / "quickstart.py")).run_name == "quickstart"
    # runs/ is not installed with the package: from another folder, with the repository off sys.path,
    # it is found next to sfx_runner
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if Path(p or ".").resolve() != REPO])
    for module in [m for m in sys.modules if m == "runs" or m.startswith("runs.")]:
        monkeypatch.delitem(sys.modules, module)
    with pytest.raises(ImportError):
        importlib.import_module("runs.benchmark")
    assert load_run_description("runs.benchmark").run_name == "benchmark"
    assert load_run_description("dmlab30").run_name == "dmlab30"

    bad = tmp_path / "bad.py"
    cases = [
        ("runs.nope", f"no such run module; available: {', '.join('runs.' + m for m in RUN_MODULES)}\n"),
        (str(tmp_path / "missing.py"), "no such run module"),
        ("bad.py", "has no RUN_DESCRIPTION"),
    ]
    bad.write_text("X = 1\n")
    for value, expected in cases:
        assert main([f"--run={value}", "--dry_run"]) == 2
        assert expected in capsys.readouterr().err
    bad.write_text("RUN_DESCRIPTION = 'x'\n")
    assert main(["--run=bad.py"]) == 2 and "not a sfx_runner.RunDescription" in capsys.readouterr().err
    bad.write_text("import no_such_module_sfx\n")
    assert main(["--run=bad.py"]) == 2
    assert "failed to import at" in capsys.readouterr().err
    bad.write_text("from sfx_runner import *\nRUN_DESCRIPTION = RunDescription('r', [Experiment('a b', 'x')])\n")
    assert main(["--run=bad.py"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "'a b'" in err and "Traceback" not in err
