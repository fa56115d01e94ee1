"""``python -m sfx.runner.run --run=<module> --runner=processes|slurm|ngc [--dry_run] [--status] ...``

Loads the run module's ``RUN_DESCRIPTION``, expands it under ``--train_dir``, skips experiments that
already finished (their ``done`` file) and hands the rest to the chosen backend. Bad input prints
``error: <message>`` and exits with status 2.

Sample Factory 1.x's runner command lines run with only the module path changed: its flags are
sfx's flags of the same name (``--train_dir``, ``--run``, ``--runner``, ``--max_parallel``,
``--pause_between``, ``--num_gpus``, ``--experiments_per_gpu``, ``--experiment_suffix``,
``--slurm_gpus_per_job``, ``--slurm_cpus_per_gpu``, ``--slurm_partition``, ``--slurm_workdir``,
``--slurm_sbatch_template``, ``--ngc_job_template``), and ``--slurm_print_only`` /
``--ngc_print_only`` are ``--dry_run`` for that runner (:data:`PRINT_ONLY_FLAGS`).
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib
import importlib.util
import os
import sys
import traceback
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import NoReturn

from sfx_runner.backends import BACKENDS, get_backend
from sfx_runner.backends.base import parse_bool
from sfx_runner.errors import RunnerError
from sfx_runner.run_description import ExperimentSpec, RunDescription
from sfx_runner.state import experiment_finished
from sfx_runner.status import print_status

# the project's run modules, for `--run=quickstart` wherever the command is started from
REPO_RUNS_DIR = Path(__file__).resolve().parents[1] / "runs"
RUNS_PACKAGE = "runs"
# Sample Factory 1.x's "print what would be submitted, submit nothing" flags: --dry_run for their runner
PRINT_ONLY_FLAGS: dict[str, str] = {"slurm": "slurm_print_only", "ngc": "ngc_print_only"}


class _Parser(argparse.ArgumentParser):
    """Errors as :class:`RunnerError` so every bad input reads the same: ``error: <message>``, exit 2."""

    def error(self, message: str) -> NoReturn:
        raise RunnerError(f"{message} (--help lists the flags)")


def _add_bool(parser: argparse.ArgumentParser, flag: str, help_text: str) -> None:
    # both `--dry_run` and sfx.train's style `--dry_run=True` work
    parser.add_argument(flag, type=parse_bool, nargs="?", const=True, default=False, help=help_text)


def build_parser(runner: str | None = None) -> argparse.ArgumentParser:
    """The CLI's parser with every backend's flags. Backends other than ``runner`` that cannot be
    loaded are left out (their flags then are unknown), so one broken backend does not stop the others."""
    parser = _Parser(prog="python -m sfx.runner.run", allow_abbrev=False,
                     formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                     description="Launch (or show the status of) the experiments of a run description.")
    parser.add_argument("--run", required=True,
                        help="run module exposing RUN_DESCRIPTION: a dotted module (runs.quickstart), a name in "
                             "runs/ (quickstart) or a path to a .py file")
    parser.add_argument("--runner", default="processes", choices=list(BACKENDS), help="where the experiments run")
    parser.add_argument("--backend", dest="runner", choices=list(BACKENDS), default=argparse.SUPPRESS,
                        help="Sample Factory 2's name of --runner")
    parser.add_argument("--train_dir", default="./train_dir",
                        help="root folder; experiments go to <train_dir>/<run_name>/<experiment>/")
    parser.add_argument("--experiment_suffix", default=None, metavar="SUFFIX",
                        help="append '_SUFFIX' to the run's folder: <train_dir>/<run_name>_SUFFIX/, e.g. to keep a "
                             "relaunch apart; overrides the run description's experiment_suffix (none: its own)")
    _add_bool(parser, "--dry_run", "print what would be launched, launch nothing")
    _add_bool(parser, "--status", "print each experiment's state, env steps, reward and folder, then exit")
    _add_bool(parser, "--json", "with --status: a JSON list instead of the table")
    parser.add_argument("--only", action="append", default=None, metavar="GLOB",
                        help="only experiments whose name (or experiment base name) matches one of these "
                             "comma-separated shell patterns, e.g. --only='*see=1*'; may be repeated")
    for name in BACKENDS:
        try:
            backend = get_backend(name)
        except Exception:
            if name == runner:
                raise
            continue
        backend.add_args(parser)
    return parser


def available_run_modules() -> list[str]:
    """Run modules found in ./runs and in the project's runs/ folder, as ``runs.<name>``."""
    names: set[str] = set()
    for folder in {Path.cwd() / RUNS_PACKAGE, REPO_RUNS_DIR}:
        if folder.is_dir():
            names.update(f"{RUNS_PACKAGE}.{p.stem}" for p in folder.glob("*.py") if not p.stem.startswith("_"))
    return sorted(names)


def _import_error(name: str, e: BaseException) -> RunnerError:
    # the last frame inside the run module points at the user's mistake better than a full traceback
    frames = [f for f in traceback.extract_tb(e.__traceback__) if "sfx_runner" not in f.filename]
    where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    if isinstance(e, SyntaxError):
        where = f" at {e.filename}:{e.lineno}"
    return RunnerError(f"run module {name} failed to import{where}: {type(e).__name__}: {e}")


def _exec_file(path: Path, module_name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise RunnerError(f"--run={path}: not a Python file that can be imported")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except RunnerError as e:
        raise RunnerError(f"{path}: {e}") from None
    except Exception as e:
        raise _import_error(str(path), e) from None
    return module


def _not_found(value: str) -> RunnerError:
    available = available_run_modules()
    listing = ", ".join(available) if available else "none found"
    return RunnerError(f"--run={value}: no such run module; available: {listing}")


def import_run_module(value: str) -> ModuleType:
    """The module named by ``--run``: a path to a .py file, a dotted module, or a name in runs/."""
    if value.endswith(".py") or os.sep in value:
        path = Path(value).expanduser()
        if not path.is_file():
            raise _not_found(value)
        return _exec_file(path, f"_sfx_run_{path.stem}")
    # a bare name is looked up in runs/ first: a same-named installed package must not win
    candidates = [value] if "." in value else [f"{RUNS_PACKAGE}.{value}", value]
    if value.startswith(RUNS_PACKAGE + ".") or "." not in value:
        stem = value.split(".", 1)[1] if value.startswith(RUNS_PACKAGE + ".") else value
    else:
        stem = None
    for name in candidates:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as e:
            # only "this very module does not exist" means try the next candidate; a missing import
            # inside the run module is the module's error
            if e.name is not None and (name == e.name or name.startswith(e.name + ".")):
                continue
            raise _import_error(name, e) from None
        except RunnerError as e:
            raise RunnerError(f"{name}: {e}") from None
        except Exception as e:
            raise _import_error(name, e) from None
    if stem is not None and (REPO_RUNS_DIR / f"{stem}.py").is_file():
        # runs/ is not installed with the package: found next to it when started from another folder
        return _exec_file(REPO_RUNS_DIR / f"{stem}.py", f"{RUNS_PACKAGE}.{stem}")
    raise _not_found(value)


def load_run_description(value: str) -> RunDescription:
    """``RUN_DESCRIPTION`` of the run module named by ``value`` (see :func:`import_run_module`).

    Raises:
        RunnerError: no such module (the message lists the available ones), an error while importing
            it, no ``RUN_DESCRIPTION`` or one that is not a :class:`RunDescription`.
    """
    module = import_run_module(value)
    description = getattr(module, "RUN_DESCRIPTION", None)
    if description is None:
        raise RunnerError(f"--run={value}: {module.__name__} has no RUN_DESCRIPTION (a sfx_runner.RunDescription)")
    if not isinstance(description, RunDescription):
        raise RunnerError(f"--run={value}: RUN_DESCRIPTION is a {type(description).__name__}, "
                          f"not a sfx_runner.RunDescription")
    return description


def select(specs: list[ExperimentSpec], patterns: list[str] | None) -> list[ExperimentSpec]:
    """The experiments whose name or base name matches one of the (comma-separated) glob patterns."""
    if not patterns:
        return specs
    globs = [g.strip() for p in patterns for g in p.split(",") if g.strip()]
    chosen = [s for s in specs if any(fnmatch.fnmatchcase(s.name, g) or fnmatch.fnmatchcase(s.base_name, g)
                                      for g in globs)]
    if not chosen:
        names = ", ".join(s.name for s in specs[:10]) + (", ..." if len(specs) > 10 else "")
        raise RunnerError(f"--only={','.join(globs)} matches no experiment; names are: {names}")
    return chosen


def _say(message: str) -> None:
    print(f"[runner] {message}", flush=True)


def print_only(args: argparse.Namespace) -> bool:
    """Whether the chosen runner's print-only flag (Sample Factory 1.x's ``--slurm_print_only`` /
    ``--ngc_print_only``) asks for a dry run.

    Raises:
        RunnerError: another runner's print-only flag is on: it would not stop this runner from launching.
    """
    for runner, dest in PRINT_ONLY_FLAGS.items():
        if runner != args.runner and getattr(args, dest, False):
            raise RunnerError(f"--{dest}=True goes with --runner={runner}, not --runner={args.runner}; "
                              f"use --dry_run to print what --runner={args.runner} would launch")
    dest = PRINT_ONLY_FLAGS.get(args.runner)
    return bool(dest and getattr(args, dest, False))


def apply_experiment_suffix(run: RunDescription, suffix: str | None) -> None:
    """Set ``run.experiment_suffix`` from ``--experiment_suffix`` (None: the flag was not given, the
    run description's own suffix stays; ``""`` removes it)."""
    if suffix is None:
        return
    try:
        run.experiment_suffix = suffix
    except RunnerError:
        raise RunnerError(f"--experiment_suffix={suffix!r} is not allowed: use up to 50 letters, digits, '_', '.', "
                          f"'-' (it becomes part of the run's folder name)") from None


def _run(argv: list[str]) -> int:
    # the chosen backend first: its flags must load even if another backend's module is broken
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)  # --run is not short for --runner
    pre.add_argument("--runner", "--backend", dest="runner", default="processes")
    runner = pre.parse_known_args(argv)[0].runner
    args = build_parser(runner).parse_args(argv)
    if args.json and not args.status:
        raise RunnerError("--json only goes with --status")
    dry_run = args.dry_run or print_only(args)

    run = load_run_description(args.run)
    apply_experiment_suffix(run, args.experiment_suffix)
    specs = select(run.generate_experiments(args.train_dir), args.only)
    if args.status:
        print_status(specs, as_json=args.json)
        return 0

    backend = get_backend(args.runner)(args)
    todo = [s for s in specs if not experiment_finished(s)]
    _say(f"run {run.run_name}: {len(specs)} experiment(s) in {run.run_dir(args.train_dir)}, runner {args.runner}")
    todo_names = {s.name for s in todo}
    for spec in specs:
        if spec.name not in todo_names:
            _say(f"skipped (finished): {spec.name}")
    if not todo:
        _say("every experiment has finished; nothing to launch (to train one further, raise its "
             "--train_for_env_steps and delete its done file)")
        return 0
    if dry_run:
        backend.dry_run(todo, run)
        return 0
    return backend.launch(todo, run)


_SFX_RUNNER_DIR = str(Path(__file__).resolve().parent)


def format_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                   line: str | None = None) -> str:
    """A warning as one line, like the CLI's errors: ``warning: <message>``, with where it was raised
    when that is the user's code (a run module), not sfx_runner's."""
    where = "" if str(Path(filename).resolve()).startswith(_SFX_RUNNER_DIR) else f" ({filename}:{lineno})"
    return f"warning: {message}{where}\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m sfx.runner.run``; returns the exit status (2 on bad input)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    previous_format = warnings.formatwarning
    warnings.formatwarning = format_warning
    try:
        return _main(argv)
    finally:
        warnings.formatwarning = previous_format


def _main(argv: list[str]) -> int:
    try:
        return _run(argv)
    except RunnerError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:  # Ctrl+C where no backend handles it (loading the run, a dry run)
        print("interrupted", file=sys.stderr)
        return 130
    except SystemExit as e:  # --help
        return e.code if isinstance(e.code, int) else 0
    except BrokenPipeError:
        # the output went to a pipe that closed early (`... --dry_run | head`): quiet, like other tools;
        # stdout is pointed at /dev/null so that the interpreter's final flush does not fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


__all__ = ["PRINT_ONLY_FLAGS", "apply_experiment_suffix", "available_run_modules", "build_parser", "format_warning",
           "import_run_module", "load_run_description", "main", "print_only", "select"]
