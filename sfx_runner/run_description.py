"""Run descriptions: what to run (:class:`Experiment`, :class:`RunDescription`) and its expansion into
one :class:`ExperimentSpec` per experiment, with its folder name and its full command line.

Naming: ``<index>_<experiment name>_<key>=<value>_...``, e.g. ``00_cartpole_see=1_lea=0.001``. The
index (zero-padded, over the whole run) keeps names unique; each key is shortened to the shortest
prefix of at least 3 characters that is not the start of another key of the same experiment, and
characters a folder name should not have are replaced by ``-``. The same description always expands
to the same names, which is what lets a relaunch find (and skip or resume) its experiments.

Command lines are lists from start to end (never re-split): the ``cmd`` string is split once with
:func:`shlex.split`, then ``--key=value`` per parameter, then ``--train_dir=<train_dir>/<run_name>``
and ``--experiment=<name>`` are appended. A value with spaces or quotes reaches the program exactly.
An ``--experiment`` that the cmd sets itself is dropped with a warning (Sample Factory 1.x's runner
appended its own after it, which won): each command line names its experiment exactly once.

Weights & Biases: an experiment whose command line turns W&B on (``--with_wandb``, in the cmd or as a
parameter) and names no ``--wandb_group`` gets ``--wandb_group=<run folder name>`` (before the folder
flags), so a sweep's runs form one W&B group; ``RunDescription(..., wandb_group=...)`` changes that.

Sample Factory 1.x run descriptions load with only their import changed (``from sfx_runner import
...``): see :class:`Experiment` and :class:`RunDescription` for what they accept and what differs.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from sfx_runner.errors import RunnerError
from sfx_runner.params import ParamGrid, ParamList, ParamValue

# names of runs and experiments become folder names: portable characters only, no leading dot or dash
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
_ENV_VAR_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_UNSAFE_RE = re.compile(r"[^A-Za-z0-9.+\-]+")
_SUFFIX_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,50}$")
MAX_NAME_CHARS = 150  # folder names stay far below the usual 255-byte limit, with room for ".json"
MAX_VALUE_CHARS = 32  # per value inside a name: a long path would make names unreadable
KEY_MIN_CHARS = 3

ParamGenerator = Union[ParamGrid, ParamList, Iterable[Mapping[str, Any]], None]

INTERPRETER_NAMES = ("python", "python3")

# sfx's boolean flags read these as True (sfx.cfg.arguments.TRUE_STRINGS; sfx_runner imports no sfx)
TRUE_STRINGS = ("true", "1", "yes", "y", "on")
WANDB_ON_FLAG = "--with_wandb"
WANDB_GROUP_FLAG = "--wandb_group"


def check_name(name: Any, what: str) -> str:
    """``name`` if it can be a folder name, else :class:`RunnerError`."""
    if not isinstance(name, str) or not _NAME_RE.match(name) or len(name) > 100:
        raise RunnerError(f"{what} {name!r} is not allowed: use 1-100 letters, digits, '_', '.', '-', starting "
                          f"with a letter or digit (it becomes a folder name)")
    return name


def format_value(value: ParamValue) -> str:
    """A parameter value as the command line carries it: ``True``/``False`` for bools (what sfx's flags
    parse), the shortest exact form for floats (``0.001``, ``3e-05``), other values as ``str``."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _name_value(value: ParamValue) -> str:
    text = _UNSAFE_RE.sub("-", format_value(value)).strip("-") or "-"
    return text[:MAX_VALUE_CHARS]


def short_keys(keys: Iterable[str]) -> dict[str, str]:
    """Each key's shortest prefix (>= 3 characters, not ending in a separator) that does not begin any
    other key; a key that begins another key stays whole. The result is unique: ``learning_rate`` ->
    ``lea``, ``num_workers`` / ``num_envs_per_worker`` -> ``num_w`` / ``num_e``, ``seed`` / ``seed_offset``
    -> ``seed`` / ``seed_o``."""
    keys = list(dict.fromkeys(keys))
    short: dict[str, str] = {}
    for key in keys:
        others = [k for k in keys if k != key]
        abbr = key
        for n in range(KEY_MIN_CHARS, len(key) + 1):
            prefix = key[:n]
            if prefix[-1] in "_.-":
                continue
            if not any(o.startswith(prefix) for o in others):
                abbr = prefix
                break
        short[key] = abbr
    return short


def resolve_interpreter(argv: list[str]) -> list[str]:
    """``argv`` with a leading ``python`` / ``python3`` replaced by the interpreter running the runner
    (``sys.executable``), so that run modules written as ``python -m sfx.train ...`` use the same virtual
    environment as the runner. Any other program (an absolute path, ``python3.11``, a script) is kept."""
    if argv and argv[0] in INTERPRETER_NAMES and sys.executable:
        return [sys.executable, *argv[1:]]
    return list(argv)


@dataclass(frozen=True)
class ExperimentSpec:
    """One expanded experiment: everything a backend needs to run it.

    Attributes:
        index: position in the whole run, from 0.
        name: folder name, unique within the run (``00_cartpole_see=1_lea=0.001``).
        base_name: the :class:`Experiment`'s name.
        params: the parameters of this experiment, in order.
        argv: the full command, one list item per argument (run it as is; see :func:`resolve_interpreter`).
        cmd: ``shlex.join(argv)``, for logs and shell scripts.
        env_vars: extra environment variables for this experiment.
        train_dir: ``<train_dir>/<run_name>`` (absolute).
        exp_dir: ``train_dir / name``, the experiment folder.
    """

    index: int
    name: str
    base_name: str
    params: dict[str, ParamValue]
    argv: list[str]
    cmd: str
    env_vars: dict[str, str] = field(default_factory=dict)
    train_dir: Path = Path(".")
    exp_dir: Path = Path(".")


class Experiment:
    """A command and the parameter sets it runs with: one experiment per parameter set.

    Args:
        name: short name, part of every experiment folder name (letters, digits, ``_ . -``).
        cmd: the command, as in a shell: ``"python -m sfx.train --env=gym_CartPole-v1 --num_workers=1"``.
            The runner appends the experiment's folder flags (``--train_dir``, ``--experiment``): a cmd
            that sets ``--train_dir`` is refused; an ``--experiment`` in it (Sample Factory 1.x's
            ``runs/doom_basic.py`` has one) is dropped with a warning, and the runner's generated name
            is used, as with SF1, whose runner appended its own ``--experiment`` after it.
        param_generator: a :class:`ParamGrid`, a :class:`ParamList`, any iterable of dicts (a list, or
            Sample Factory 1.x's ``grid.generate_params(randomize=False)``: read once, here), or None
            (one experiment with the command as is).
        env_vars: environment variables for every experiment of this command.
    """

    def __init__(self, name: str, cmd: str, param_generator: ParamGenerator = None,
                 env_vars: Mapping[str, Any] | None = None) -> None:
        self.name = check_name(name, "experiment name")
        if not isinstance(cmd, str) or not cmd.strip():
            raise RunnerError(f"experiment {name!r}: cmd must be a non-empty command string, got {cmd!r}")
        try:
            self.base_argv = shlex.split(cmd)
        except ValueError as e:
            raise RunnerError(f"experiment {name!r}: cmd {cmd!r} cannot be split into arguments: {e}") from None
        self.cmd = cmd
        if param_generator is None:
            param_generator = ParamList([{}])
        elif isinstance(param_generator, Mapping):
            raise RunnerError(f"experiment {name!r}: param_generator is one dict {dict(param_generator)!r}; give a "
                              f"list of dicts ([{{...}}] for one experiment)")
        elif isinstance(param_generator, (str, bytes)) or not isinstance(param_generator, (ParamGrid, ParamList,
                                                                                            Iterable)):
            raise RunnerError(f"experiment {name!r}: param_generator must be a ParamGrid, a ParamList, an iterable of "
                              f"dicts (a list, or a grid's generate_params()) or None, got "
                              f"{type(param_generator).__name__}")
        elif not isinstance(param_generator, (ParamGrid, ParamList)):
            # a generator can be read only once: its dicts are kept, so every expansion sees them all
            try:
                param_generator = ParamList(param_generator)
            except RunnerError as e:
                raise RunnerError(f"experiment {name!r}: {e}") from None
        self.param_generator: ParamGrid | ParamList = param_generator
        self.env_vars: dict[str, str] = {}
        for key, value in (env_vars or {}).items():
            if not isinstance(key, str) or not _ENV_VAR_RE.match(key):
                raise RunnerError(f"experiment {name!r}: {key!r} is not an environment variable name "
                                  f"(letters, digits, '_', not starting with a digit)")
            if not isinstance(value, (str, int, float, bool)):
                raise RunnerError(f"experiment {name!r}: environment variable {key}={value!r} must be a str or a "
                                  f"number")
            self.env_vars[key] = format_value(value)

    def param_sets(self) -> list[dict[str, ParamValue]]:
        """The parameter dicts of this experiment's runs, in order."""
        return list(self.param_generator.generate_params())

    @property
    def base_name(self) -> str:
        """Sample Factory 1.x's name for :attr:`name`."""
        return self.name

    @property
    def params(self) -> list[dict[str, ParamValue]]:
        """Sample Factory 1.x's name for :meth:`param_sets`."""
        return self.param_sets()

    def __repr__(self) -> str:
        return f"Experiment({self.name!r}, {self.cmd!r}, {self.param_generator!r})"


def _same_value(argv: list[str], given: str, key: str, sets: list[dict[str, ParamValue]]) -> bool:
    """Whether the cmd argument ``given`` (``--x=v``, or ``--x`` followed by ``v``) sets the value that every
    parameter set gives ``key``."""
    if "=" in given:
        value: str | None = given.split("=", 1)[1]
    else:
        i = argv.index(given)
        value = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("-") else None
    return value is not None and all(key in p and format_value(p[key]) == value for p in sets)


def _sets_flag(argv: list[str], flag: str) -> str | None:
    """The argument of ``argv`` that sets ``flag`` (``--x`` or ``--x=...``), if any."""
    for arg in argv:
        if arg == flag or arg.startswith(flag + "="):
            return arg
    return None


def _bool_flag_on(argv: list[str], flag: str) -> bool:
    """Whether ``argv`` turns the boolean flag on, as sfx's parser reads it: ``--x``, ``--x=True``, ``--x True``
    (the last setting wins; absent: off)."""
    on = False
    for i, arg in enumerate(argv):
        if arg == flag:
            value = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("-") else "true"
            on = value.strip().lower() in TRUE_STRINGS
        elif arg.startswith(flag + "="):
            on = arg.split("=", 1)[1].strip().lower() in TRUE_STRINGS
    return on


def _drop_flag(argv: list[str], flag: str) -> tuple[list[str], list[str]]:
    """``argv`` without every setting of ``flag`` (``--x=v``, or ``--x`` and the value after it), and
    the dropped settings as they were written (``["--x=v"]``, ``["--x v"]``)."""
    kept: list[str] = []
    dropped: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith(flag + "="):
            dropped.append(arg)
        elif arg == flag:
            if i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                dropped.append(shlex.join(argv[i:i + 2]))
                i += 1
            else:
                dropped.append(arg)
        else:
            kept.append(arg)
        i += 1
    return kept, dropped


class RunDescription:
    """A named sweep: its experiments land in ``<train_dir>/<run_name>/<experiment name>/``.

    Args:
        run_name: folder of the run under the train dir.
        experiments: the :class:`Experiment` objects, expanded in order.
        experiment_dirs_sf_format: True (sfx / Sample Factory programs): append
            ``--train_dir=<train_dir>/<run_name> --experiment=<name>``. False (programs that take one
            output folder): append only ``<experiment_dir_arg_name>=<train_dir>/<run_name>/<name>``.
        experiment_arg_name: the flag that names the experiment (``--experiment``).
        experiment_dir_arg_name: the flag for the folder (``--train_dir``).
        param_prefix: put before each parameter name (``--`` gives ``--seed=1``).
        customize_experiment_name: True: names carry the parameters (``00_cartpole_see=1``); False: only
            the index and the experiment name (``00_cartpole``).
        experiment_suffix: appended to the run's folder: ``<train_dir>/<run_name>_<suffix>/`` (Sample
            Factory 1.x's runner set it from its ``--experiment_suffix`` flag to keep a relaunch apart).
            An attribute too, read when the run is expanded.
        wandb_group: the W&B group of experiments whose command line turns W&B on (``--with_wandb``) and
            names no ``--wandb_group`` itself: True (default) = the run's folder name (``run_name``, with
            ``_<experiment_suffix>`` if any), a string = that group, False = add nothing. Only with
            ``experiment_dirs_sf_format`` (sfx's flags).
        pause_between_experiments, use_gpus, experiments_per_gpu, max_parallel: launch settings that
            Sample Factory's early run descriptions carried. Accepted so those files load; they are not
            applied (a warning says so): the runner's flags ``--pause_between``, ``--num_gpus``,
            ``--experiments_per_gpu``, ``--max_parallel`` decide. They are kept in :attr:`launch_hints`.

    Differences from Sample Factory 1.x, whose keyword arguments are all accepted: names carry an
    index also with ``customize_experiment_name=False`` (SF1 then used the bare experiment name for
    every parameter set), parameters are written ``key=value`` in names, and the folder flags are
    ``--train_dir=<train_dir>/<run_name> --experiment=<name>`` rather than SF1's ``--experiments_root``.
    """

    def __init__(self, run_name: str, experiments: list[Experiment], experiment_dirs_sf_format: bool = True,
                 experiment_arg_name: str = "--experiment", experiment_dir_arg_name: str = "--train_dir",
                 param_prefix: str = "--", customize_experiment_name: bool = True, experiment_suffix: str = "",
                 *, wandb_group: bool | str = True, pause_between_experiments: float | None = None,
                 use_gpus: int | None = None, experiments_per_gpu: int | None = None,
                 max_parallel: int | None = None) -> None:
        self.run_name = check_name(run_name, "run name")
        experiments = list(experiments) if isinstance(experiments, (list, tuple)) else experiments
        if not isinstance(experiments, list) or not experiments:
            raise RunnerError(f"run {run_name!r}: experiments must be a non-empty list of Experiment, got "
                              f"{experiments!r}")
        for e in experiments:
            if not isinstance(e, Experiment):
                raise RunnerError(f"run {run_name!r}: {e!r} is not an Experiment")
        self.experiments = experiments
        self.experiment_dirs_sf_format = bool(experiment_dirs_sf_format)
        for what, flag in (("experiment_arg_name", experiment_arg_name),
                           ("experiment_dir_arg_name", experiment_dir_arg_name)):
            if not isinstance(flag, str) or not flag or "=" in flag or flag != flag.strip():
                raise RunnerError(f"run {run_name!r}: {what}={flag!r} must be a flag such as --experiment")
        self.experiment_arg_name = experiment_arg_name
        self.experiment_dir_arg_name = experiment_dir_arg_name
        if not isinstance(param_prefix, str):
            raise RunnerError(f"run {run_name!r}: param_prefix must be a string such as '--', got {param_prefix!r}")
        self.param_prefix = param_prefix
        self.customize_experiment_name = bool(customize_experiment_name)
        self.experiment_suffix = experiment_suffix
        if not isinstance(wandb_group, bool) and not (isinstance(wandb_group, str) and wandb_group.strip()
                                                       and wandb_group.isprintable() and len(wandb_group) <= 128):
            raise RunnerError(f"run {run_name!r}: wandb_group must be True (the run's name), False (none) or a group "
                              f"name (1-128 printable characters), got {wandb_group!r}")
        self.wandb_group = wandb_group
        given = {"pause_between": pause_between_experiments, "num_gpus": use_gpus,
                 "experiments_per_gpu": experiments_per_gpu, "max_parallel": max_parallel}
        self.launch_hints: dict[str, Any] = {flag: v for flag, v in given.items() if v is not None}
        if self.launch_hints:
            flags = " ".join(f"--{flag}={v}" for flag, v in self.launch_hints.items())
            warnings.warn(f"run {run_name!r}: launch settings in a run description (Sample Factory's early form) are "
                          f"not applied; pass them to the runner: python -m sfx.runner.run ... {flags}",
                          UserWarning, stacklevel=2)

    @property
    def experiment_suffix(self) -> str:
        """Appended to the run's folder name (``<run_name>_<suffix>``); empty: none."""
        return self._experiment_suffix

    @experiment_suffix.setter
    def experiment_suffix(self, suffix: str) -> None:
        if suffix is None:
            suffix = ""
        if not isinstance(suffix, str) or (suffix and not _SUFFIX_RE.match(suffix)):
            raise RunnerError(f"run {self.run_name!r}: experiment_suffix {suffix!r} is not allowed: use letters, "
                              f"digits, '_', '.', '-' (it becomes part of a folder name)")
        self._experiment_suffix = suffix

    @property
    def run_folder_name(self) -> str:
        """``run_name``, or ``<run_name>_<experiment_suffix>`` with a suffix."""
        return f"{self.run_name}_{self.experiment_suffix}" if self.experiment_suffix else self.run_name

    def run_dir(self, train_dir: str | os.PathLike) -> Path:
        """``<train_dir>/<run_name>`` (with ``_<experiment_suffix>`` if any), absolute (commands and logs
        stay right whatever the working folder)."""
        return Path(os.path.abspath(os.path.expanduser(os.fspath(train_dir)))) / self.run_folder_name

    def wandb_group_for(self, argv: list[str]) -> str | None:
        """The ``--wandb_group`` the runner adds to ``argv`` (a command with its parameters): the run's group
        when ``argv`` turns W&B on and names no group itself, else None (see ``wandb_group``)."""
        if self.wandb_group is False or not self.experiment_dirs_sf_format:
            return None
        if not _bool_flag_on(argv, WANDB_ON_FLAG) or _sets_flag(argv, WANDB_GROUP_FLAG) is not None:
            return None
        return self.run_folder_name if self.wandb_group is True else self.wandb_group

    def _appended_flags(self) -> list[str]:
        if self.experiment_dirs_sf_format:
            return [self.experiment_dir_arg_name, self.experiment_arg_name]
        return [self.experiment_dir_arg_name]

    def generate_experiments(self, train_dir: str | os.PathLike) -> list[ExperimentSpec]:
        """Every experiment of the run, in order, with its name, command and folder under ``train_dir``.

        A cmd that sets the experiment's name (``--experiment=x``) loses that argument, with one
        :class:`UserWarning` per experiment naming it: the runner's generated name is used (what
        Sample Factory 1.x's runner did by appending its own ``--experiment`` after the cmd's).

        Raises:
            RunnerError: an experiment without parameter sets, a parameter named like a folder flag the
                runner appends (``experiment``, ``train_dir``: every experiment of a sweep would write
                into one folder), a cmd that sets ``--train_dir``, a parameter set twice (in the cmd and
                the grid) with different values.
        """
        run_dir = self.run_dir(train_dir)
        expanded: list[tuple[Experiment, list[dict[str, ParamValue]]]] = []
        for exp in self.experiments:
            sets = exp.param_sets()
            if not sets:
                raise RunnerError(f"run {self.run_name!r}: experiment {exp.name!r} has no parameter sets "
                                  f"(an empty ParamList or list?)")
            expanded.append((exp, sets))
        total = sum(len(sets) for _, sets in expanded)
        width = max(2, len(str(total - 1)))

        specs: list[ExperimentSpec] = []
        index = 0
        for exp, sets in expanded:
            base_argv = self._check_cmd(exp, sets)
            short = short_keys(k for params in sets for k in params)
            for params in sets:
                name = f"{index:0{width}d}_{exp.name}"
                if self.customize_experiment_name and params:
                    name += "_" + "_".join(f"{short[k]}={_name_value(v)}" for k, v in params.items())
                name = name[:MAX_NAME_CHARS].rstrip("_-")
                exp_dir = run_dir / name
                argv = list(base_argv)
                argv += [f"{self.param_prefix}{k}={format_value(v)}" for k, v in params.items()]
                group = self.wandb_group_for(argv)
                if group is not None:
                    argv.append(f"{WANDB_GROUP_FLAG}={group}")
                if self.experiment_dirs_sf_format:
                    argv += [f"{self.experiment_dir_arg_name}={run_dir}", f"{self.experiment_arg_name}={name}"]
                else:
                    argv += [f"{self.experiment_dir_arg_name}={exp_dir}"]
                specs.append(ExperimentSpec(index=index, name=name, base_name=exp.name, params=dict(params),
                                            argv=argv, cmd=shlex.join(argv), env_vars=dict(exp.env_vars),
                                            train_dir=run_dir, exp_dir=exp_dir))
                index += 1

        names = [s.name for s in specs]
        if len(set(names)) != len(names):  # cannot happen with the index prefix; a guard for future changes
            raise RunnerError(f"run {self.run_name!r}: experiment names are not unique: {names}")
        return specs

    def _check_cmd(self, exp: Experiment, sets: list[dict[str, ParamValue]]) -> list[str]:
        """The cmd's arguments to build on (its own ``--experiment`` dropped, with a warning), or
        :class:`RunnerError` for a cmd or parameters that conflict with what the runner appends."""
        base_argv = list(exp.base_argv)
        for flag in self._appended_flags():
            if flag == self.experiment_arg_name:
                base_argv, dropped = _drop_flag(base_argv, flag)
                if dropped:
                    warnings.warn(f"run {self.run_name!r}: the cmd of experiment {exp.name!r} sets "
                                  f"{' '.join(repr(d) for d in dropped)}; dropped: the runner names each experiment "
                                  f"itself ({flag}=<index>_{exp.name}..., as Sample Factory 1.x's runner did)",
                                  UserWarning, stacklevel=3)
                continue
            given = _sets_flag(exp.base_argv, flag)
            if given is not None:
                raise RunnerError(f"run {self.run_name!r}: the cmd of experiment {exp.name!r} sets {given!r}; "
                                  f"the runner appends {flag} itself (remove it from the cmd)")
        keys = dict.fromkeys(k for params in sets for k in params)
        for key in keys:
            flag = f"{self.param_prefix}{key}"
            if flag in self._appended_flags():
                raise RunnerError(f"run {self.run_name!r}: experiment {exp.name!r} has a parameter {key!r}; "
                                  f"the runner sets {flag} itself")
            if self.param_prefix:
                given = _sets_flag(exp.base_argv, flag)
                # the same value twice (Sample Factory 1.x's paper runs: --ppo_epochs=1 in the cmd and a grid
                # of ppo_epochs [1]) is a harmless repetition; two different values would leave the reader
                # guessing which one runs
                if given is not None and not _same_value(exp.base_argv, given, key, sets):
                    raise RunnerError(f"run {self.run_name!r}: experiment {exp.name!r} sets {key!r} both in its "
                                      f"cmd ({given!r}) and in its parameters; keep one")
        return base_argv

    def __repr__(self) -> str:
        return f"RunDescription({self.run_name!r}, {len(self.experiments)} experiments)"
