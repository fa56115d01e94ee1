"""Command line -> cfg: env family flags, resume from cfg.json, explicit-flag overrides, validation.

The parser chooses the agent (``--algo``) and the env family (``--env``) from a :class:`Catalog` its caller hands
it (the entry points hand :data:`sfx.registries.CATALOG`, the registries'), so this package imports neither
registry: the arrows point down (DESIGN.md)."""

from __future__ import annotations

import argparse
import copy
import difflib
import logging
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence

from sfx.cfg.arguments import add_default_args, add_eval_args
from sfx.cfg.cfg_json import load_cfg
from sfx.errors import ConfigError
from sfx.cfg.validation import check_same_algo, validate_cfg

log = logging.getLogger(__name__)

CFG_FILE = "cfg.json"
# Stored next to the flags in cfg; not flags themselves.
META_FIELDS = ("explicit_args", "command_line")
# Flags whose default is whatever the machine has (place_device): a saved value not given on the saved
# command line is not resumed.
MACHINE_DEFAULTS = ("device",)

# Flags that came with a default other than what sfx did before they existed. An experiment saved before such a
# flag resumes (and is evaluated) with what it was trained with, not the new default: flag name -> that value,
# registered by the flag's owner (an env family, an agent) with register_former_default.
FORMER_DEFAULTS: dict[str, Any] = {}


def register_former_default(flag: str, value: Any) -> None:
    """A saved cfg.json without ``flag`` (written before the flag existed) resumes with ``value``."""
    FORMER_DEFAULTS[flag] = value


@dataclass(frozen=True)
class Catalog:
    """What the parser chooses from, handed to it by the entry point.

    Attributes:
        find_agent: ``--algo`` name -> the registered agent (its ``name``, ``flag_group``, ``model_flag_group``,
            ``add_flags``, ``add_model_flags``, ``check_flags``, ``validate``, ``validate_model_flags``,
            ``batch_of_trajectories``); a
            ConfigError naming the registered ones otherwise.
        registered_agents: the registered ``--algo`` names.
        find_family: ``--env`` name -> its env family (``prefix``, ``add_params_fn``, ``defaults_for``,
            ``agent_defaults_for``, ``compose_fn``, ``validate_fn``); a ConfigError otherwise.
        registered_prefixes: the registered families' prefixes.
    """

    find_agent: Callable[[str], Any]
    registered_agents: Callable[[], list[str]]
    find_family: Callable[[str], Any]
    registered_prefixes: Callable[[], list[str]]


class ArgParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are :class:`ConfigError` (one line) instead of usage + exit."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(message)


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Each flag's help ends with its default and, where it is not the trainer's own, where it came from (the
    agent, the env family, the family for that agent): ``default_source`` on the flag's action."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = super()._get_help_string(action) or ""
        source = getattr(action, "default_source", None)  # an attribute build_parser adds to some actions only
        if source and text.endswith("(default: %(default)s)"):
            text = text[:-1] + f", from {source})"
        return text


def _new_parser(**kwargs: Any) -> ArgParser:
    return ArgParser(prog="python -m sfx.train", allow_abbrev=False, formatter_class=_HelpFormatter, **kwargs)


def build_parser(env: str | None, evaluation: bool = False, argv: Sequence[str] | None = None,
                 preset: dict | None = None, *, catalog: Catalog) -> ArgParser:
    """The full parser: trainer flags, the env family's flags and default overrides, evaluation flags.

    ``env=None`` gives the parser without any family (used for ``--help`` without ``--env``).
    A composite env (its family has a ``compose_fn``, e.g. ``--env=multitask``) is made of envs its own
    flags name; their families' flags and default overrides join the parser. Those flags are read from
    ``argv`` (the command line), else ``preset`` (a resumed cfg.json, default_cfg's overrides), else
    their defaults.
    """
    parser = _new_parser(description="Train (or, with sfx.enjoy, evaluate) an agent; the default algorithm is "
                                     "asynchronous APPO (--algo).")
    if evaluation:
        parser.prog = "python -m sfx.enjoy"
    add_default_args(parser)
    agent = catalog.find_agent(_requested_algo(argv, preset, catalog))
    before = dict(parser._defaults)
    _add_agent_flags(parser, agent)
    # the agent's own values of the trainer's shared flags (its set_defaults, e.g. SAC's batch of 256): the
    # algorithm's hyperparameters, which beat an env family's defaults (tuned for the default agent, APPO)
    agent_defaults = {k: v for k, v in parser._defaults.items() if k not in before or before[k] != v}
    if env is not None:
        _add_family_flags(parser, env, agent, agent_defaults, argv, preset, catalog)
    else:
        _label_defaults(parser, [(agent_defaults, f"--algo={agent.name}")])
    if evaluation:
        add_eval_args(parser)
    return parser


def _add_agent_flags(parser: argparse.ArgumentParser, agent: Any) -> None:
    """The agent's own flags and its model's, each in a group of its own."""
    agent.add_flags(parser.add_argument_group(agent.flag_group or f"{agent.name} (--algo={agent.name})"))
    agent.add_model_flags(parser.add_argument_group(f"{agent.model_flag_group} (--algo={agent.name})"))


def _add_family_flags(parser: argparse.ArgumentParser, env: str, agent: Any, agent_defaults: dict,
                      argv: Sequence[str] | None, preset: dict | None, catalog: Catalog) -> None:
    """The env family's flags and default overrides (a composite env's parts' too), then the agent's own defaults
    and the family's defaults for that agent, over them."""
    find_family = catalog.find_family
    family = find_family(env)
    if family.add_params_fn is not None:
        family.add_params_fn(parser)
    overrides = family.defaults_for(env)
    if family.compose_fn is not None:
        _check_overrides(parser, family.prefix, overrides, catalog)
        parser.set_defaults(**overrides)
        values = _known_values(parser, [f"--env={env}"] if argv is None else argv, preset)
        composition = family.compose_fn(values)
        added = {family.prefix}
        parts: dict = {}
        for name in composition.env_names:
            part = find_family(name)
            if part.prefix not in added and part.add_params_fn is not None:
                part.add_params_fn(parser)
            added.add(part.prefix)
            for key, value in part.defaults_for(name).items():
                parts.setdefault(key, value)  # the first listed env's default holds
        overrides = {**overrides, **parts, **composition.default_overrides}
    _check_overrides(parser, family.prefix, overrides, catalog)
    # the family's defaults for this agent (e.g. R2D2 settings that learn classic control) beat the agent's own
    for_agent = family.agent_defaults_for(env, agent.name)
    unknown = sorted(set(for_agent) - {a.dest for a in parser._actions})
    if unknown:
        raise ValueError(f"env family {family.prefix!r} sets --algo={agent.name} defaults of unknown flags: "
                         f"{unknown}")
    parser.set_defaults(**{**overrides, **agent_defaults, **for_agent})
    _label_defaults(parser, [(overrides, f"env family {family.prefix}"), (agent_defaults, f"--algo={agent.name}"),
                             (for_agent, f"env family {family.prefix} for --algo={agent.name}")])


def _label_defaults(parser: argparse.ArgumentParser, layers: list[tuple[dict, str]]) -> None:
    """Record, for --help, where each flag's default came from: the last of ``layers`` (defaults, source) that
    sets it (the order ``build_parser`` applies them in)."""
    actions = {a.dest: a for a in parser._actions}
    for defaults, source in layers:
        for dest in defaults:
            if dest in actions:
                actions[dest].default_source = source


def algo_name(name: str, names: Sequence[str]) -> str:
    """The registered agent's name that ``--algo=name`` means: the name itself, or the one it spells in
    another case (``appo`` -> ``APPO``). Else a ConfigError listing the registered ones, with the nearest
    (any case: ``ppo`` -> ``APPO``) as a "did you mean". ``names``: the registered ones."""
    names = sorted(names)
    if name in names:
        return name
    by_lower = {n.lower(): n for n in names}
    if str(name).lower() in by_lower:
        return by_lower[str(name).lower()]
    close = difflib.get_close_matches(str(name).lower(), list(by_lower), n=1, cutoff=0.5)
    hint = f"; did you mean --algo={by_lower[close[0]]}?" if close else ""
    raise ConfigError(f"--algo={name} is not a registered algorithm; allowed: {', '.join(names)}{hint}")


def _requested_algo(argv: Sequence[str] | None, preset: dict | None, catalog: Catalog) -> str:
    """``--algo`` of the command line, else of the saved cfg / preset, else the default agent."""
    pre = _new_parser(add_help=False)
    pre.add_argument("--algo", default=None)
    algo = pre.parse_known_args(list(argv or []))[0].algo
    return algo_name(algo or (preset or {}).get("algo") or "APPO", catalog.registered_agents())


def other_agents_flags(parser: argparse.ArgumentParser, catalog: Catalog) -> dict[str, list[str]]:
    """Flags of registered agents (their own and their models') that ``parser`` does not have -> the agents
    that declare them (an env family may set defaults for several algorithms: those of the others are left
    out; a command line that gives one is told whose flag it is)."""
    known = {a.dest for a in parser._actions}
    owners: dict[str, list[str]] = {}
    for name in catalog.registered_agents():
        probe = _new_parser(add_help=False)
        _add_agent_flags(probe, catalog.find_agent(name))
        for action in probe._actions:
            if action.dest not in known and action.dest != "help":
                owners.setdefault(action.dest, []).append(name)
    return owners


def _check_overrides(parser: argparse.ArgumentParser, prefix: str, overrides: dict, catalog: Catalog) -> None:
    """Raises on overrides of flags no parser part knows; drops (in place) those of other algorithms."""
    known = {a.dest for a in parser._actions}
    unknown = set(overrides) - known
    if unknown:
        others = set(other_agents_flags(parser, catalog))
        for name in unknown & others:
            del overrides[name]
        unknown -= others
    if unknown:
        raise ValueError(f"env family {prefix!r} overrides defaults of unknown flags: {sorted(unknown)}")


def _known_values(parser: argparse.ArgumentParser, argv: Sequence[str], preset: dict | None) -> argparse.Namespace:
    """The values of ``parser``'s flags before the full parse: ``argv``'s, else ``preset``'s, else defaults."""
    argv = [a for a in argv if a not in ("-h", "--help")]  # help is printed by the full parser
    values, _ = parser.parse_known_args(argv)
    given = explicit_flags(parser, argv)
    for key, value in (preset or {}).items():
        if key not in given and hasattr(values, key):
            setattr(values, key, value)
    return values


def _pre_parse(argv: list[str]) -> argparse.Namespace:
    pre = _new_parser(add_help=False)
    pre.add_argument("--env", default=None)
    pre.add_argument("--experiment", default="default_experiment")
    pre.add_argument("--train_dir", default="./train_dir")
    args, _ = pre.parse_known_args(argv)
    return args


def explicit_flags(parser: argparse.ArgumentParser, argv: list[str]) -> set[str]:
    """Names of the flags given on the command line (``--x=1`` and ``--x 1`` forms alike).

    Parses ``argv`` again with every default suppressed, so only given flags land in the namespace.
    Comparing values with the defaults would miss a flag given with its default value.
    """
    silent = copy.deepcopy(parser)
    silent._defaults = {}  # parser-level defaults (env family overrides) would look given
    for action in silent._actions:
        action.default = argparse.SUPPRESS
        action.required = False
    return set(vars(silent.parse_known_args(argv)[0]))


class UnknownFlagError(ConfigError):
    """A command line names a flag no part of the parser knows: ``argument`` (as written) and the nearest
    known flags, for the Python API to say it in keyword terms (:mod:`sfx.cfg.api_terms`)."""

    def __init__(self, argument: str, suggestions: list[str]) -> None:
        hint = f" (did you mean {', '.join(suggestions)}?)" if suggestions else ""
        super().__init__(f"unrecognized argument {argument!r}{hint}; --help lists every flag")
        self.argument = argument
        self.suggestions = suggestions


def _check_unknown(parser: argparse.ArgumentParser, extras: list[str], algo: str, catalog: Catalog) -> None:
    """An unknown flag: a ConfigError naming the agent whose flag it is (a flag this agent would ignore is refused
    by name, with no list kept by hand), else the nearest known flags."""
    if not extras:
        return
    first = extras[0]
    name = first.split("=", 1)[0][2:] if first.startswith("--") else ""
    owners = other_agents_flags(parser, catalog).get(name) if name else None
    if owners:
        value = extras[1] if "=" not in first and len(extras) > 1 and not extras[1].startswith("-") else None
        _refuse_other_agents_flag(first if value is None else f"{first}={value}", algo, owners)
    flags = [s for a in parser._actions for s in a.option_strings]
    raise UnknownFlagError(first, difflib.get_close_matches(first.split("=", 1)[0], flags, n=3, cutoff=0.6))


def _refuse_other_agents_flag(given: str, algo: str, owners: list[str]) -> NoReturn:
    """``given``: ``--name=value`` as written."""
    whose = " / ".join(f"--algo={o}" for o in owners)
    raise ConfigError(f"{given} is not read by --algo={algo} (it would be ignored): a flag of {whose}; remove it")


def parse_args(argv: Sequence[str] | None = None, evaluation: bool = False, resume: bool = True,
               prog: str | None = None, *, catalog: Catalog) -> argparse.Namespace:
    """Parse the command line into the cfg of a training (or, with ``evaluation=True``, of sfx.enjoy).

    An existing ``train_dir/experiment/cfg.json`` is resumed: its values replace the defaults and
    every flag given on the command line replaces them in turn. With ``evaluation=True``, ``--env`` may
    be left out: the saved cfg's is played. Flags newer than the saved cfg get
    their defaults. ``cfg.explicit_args`` is the sorted list of flags given on the command line,
    ``cfg.command_line`` the command line itself. ``resume=False`` reads no saved cfg (the dummy
    sampler: its settings are the command line's alone); ``prog`` names the command in ``--help``; ``catalog``:
    the agents and env families to choose from (:data:`sfx.registries.CATALOG`).

    Raises:
        ConfigError: on anything wrong with the command line, the env name, the experiment folder.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    pre = _pre_parse(argv)
    wants_help = any(a in ("-h", "--help") for a in argv)
    if pre.env is None and evaluation and not wants_help:
        # a trained policy is played in the env it was trained in: the experiment's cfg.json names it
        cfg_file = Path(pre.train_dir).expanduser() / pre.experiment / CFG_FILE
        if not cfg_file.is_file():
            raise ConfigError(f"no experiment at {cfg_file.parent} (no {CFG_FILE}): check --train_dir and "
                              f"--experiment, or train first (python -m sfx.train --env=... "
                              f"--experiment={pre.experiment})")
        saved_env = load_cfg(cfg_file).get("env")
        if saved_env is None:
            raise ConfigError(f"{cfg_file} names no env: pass --env")
        argv = [f"--env={saved_env}", *argv]
        pre.env = saved_env
    if pre.env is None:
        if wants_help:
            parser = build_parser(None, evaluation, argv, catalog=catalog)  # --algo's flags, not the default's
            parser.prog = prog or parser.prog
            parser.parse_args(["--help"])  # prints help and exits
        raise ConfigError(f"--env is required, e.g. --env=gym_CartPole-v1 (env families: "
                          f"{', '.join(catalog.registered_prefixes())})")

    cfg_file = Path(pre.train_dir).expanduser() / pre.experiment / CFG_FILE
    saved = load_cfg(cfg_file) if resume and cfg_file.is_file() else None
    parser = build_parser(pre.env, evaluation, argv, saved, catalog=catalog)
    parser.prog = prog or parser.prog
    cfg, extras = parser.parse_known_args(argv)
    cfg.algo = algo_name(cfg.algo, catalog.registered_agents())  # as registered, whatever the case it was typed in (cfg.json keeps that)
    _check_unknown(parser, extras, cfg.algo, catalog)
    explicit = explicit_flags(parser, argv)

    if saved is not None:
        _resume(cfg, saved, explicit, cfg_file, evaluation)
    elif evaluation:
        raise ConfigError(f"no experiment at {cfg_file.parent} (no {CFG_FILE}): train first, "
                          f"e.g. python -m sfx.train --env={pre.env} --experiment={pre.experiment} "
                          f"--train_dir={pre.train_dir}")

    cfg.explicit_args = sorted(explicit)
    cfg.command_line = " ".join(shlex.quote(a) for a in argv)
    place_device(cfg, "device" in explicit or "device" in ((saved or {}).get("explicit_args") or ()))
    agent = catalog.find_agent(cfg.algo)
    check_same_algo(cfg, explicit)  # a resume with another --algo is named before any saved flag is judged
    agent.check_flags(cfg, explicit)  # a flag the agent would ignore: refused by name, before the shared checks
    validate_cfg(cfg, evaluation=evaluation, check_paths=not evaluation or cfg.save_video,
                 batch_of_trajectories=agent.batch_of_trajectories, explicit=explicit)
    agent.validate(cfg)
    agent.validate_model_flags(cfg)
    _validate_family(cfg, catalog)
    return cfg


def _resume(cfg: argparse.Namespace, saved: dict, explicit: set[str], cfg_file: Path, evaluation: bool) -> None:
    """Saved values over defaults, explicit flags over saved values (in place). A training that names another
    env than the saved one is a ConfigError (an evaluation may play another env: a warning)."""
    train_dir, experiment = cfg.train_dir, cfg.experiment
    current = vars(cfg)
    dropped = sorted(k for k in saved if k not in current and k not in META_FIELDS)
    if dropped:
        log.debug("%s: ignoring saved values of flags that no longer exist: %s", cfg_file, dropped)
    saved_env = saved.get("env")
    if saved_env is not None and saved_env != cfg.env:
        if not evaluation:
            # the checkpoints hold a model for the saved env's spaces: say so now, not as a size mismatch later
            raise ConfigError(f"--env={cfg.env} cannot resume experiment {cfg_file.parent}, trained on "
                              f"--env={saved_env}: leave --env out (or give the saved one) to resume it, or start a "
                              f"new experiment with another --experiment (or --restart_behavior=restart, which "
                              f"keeps the old folder as {experiment}_old_<time>)")
        # playing a policy in another env (a variant with the same spaces) is an evaluation's choice
        log.warning("--env=%s differs from env %s saved in %s: using %s", cfg.env, saved_env, cfg_file, cfg.env)
    # a device the saved run did not ask for was its machine's (place_device): this machine picks its own,
    # so an experiment started on a laptop resumes on the GPU of a workstation
    chosen = set(saved.get("explicit_args") or ())
    for key, value in saved.items():
        if key in current and key not in explicit and (key not in MACHINE_DEFAULTS or key in chosen):
            current[key] = value
    older = {k: v for k, v in FORMER_DEFAULTS.items() if k in current and k not in saved and k not in explicit}
    for key, value in older.items():
        current[key] = value
    if older:
        log.info("%s was saved before %s existed: resuming with what it trained with (%s)", cfg_file,
                 ", ".join(f"--{k}" for k in older), ", ".join(f"--{k}={v}" for k, v in older.items()))
    # the folder was found where this command line points (it may have moved since it was saved)
    cfg.train_dir, cfg.experiment = train_dir, experiment


def place_device(cfg: argparse.Namespace, asked: bool, environ: dict | None = None) -> None:
    """``--device`` as the engine reads it, ``gpu`` or ``cpu`` (in place).

    ``asked``: the command line (or the saved one of a resumed run) gave ``--device``. Left out, it is what this machine has: ``gpu`` where CUDA is available, else ``cpu``, without the
    fallback warning the engine gives an explicit ``--device=gpu`` that finds no CUDA. ``cuda:N`` becomes
    ``gpu`` with ``CUDA_VISIBLE_DEVICES`` (of ``environ``, default ``os.environ``) narrowed to GPU N, so
    this process and the workers it starts (which inherit it) see that GPU alone, as ``cuda``; N counts
    the GPUs an existing ``CUDA_VISIBLE_DEVICES`` lists. Raises ConfigError when N is not one of them, or
    when CUDA already started in this process (it reads the variable once)."""
    import os

    import torch

    if not asked and cfg.device == "gpu" and not torch.cuda.is_available():
        cfg.device = "cpu"  # nobody asked for a GPU: the CPU is simply this machine, not a fallback to warn of
        return
    if not str(cfg.device).startswith("cuda:"):
        return
    env = os.environ if environ is None else environ
    index = int(cfg.device.split(":", 1)[1])
    visible = [d.strip() for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if "CUDA_VISIBLE_DEVICES" in env and index >= len(visible):
        raise ConfigError(f"--device={cfg.device}: CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']} shows "
                          f"{len(visible)} GPU(s); allowed: cuda:0 to cuda:{max(len(visible) - 1, 0)}, gpu, cpu")
    chosen = visible[index] if visible else str(index)
    if torch.cuda.is_initialized() and env.get("CUDA_VISIBLE_DEVICES") != chosen:
        raise ConfigError(f"--device={cfg.device} picks a GPU before CUDA starts, but CUDA already started in this "
                          f"process: set CUDA_VISIBLE_DEVICES={chosen} before starting Python, and --device=gpu")
    env["CUDA_VISIBLE_DEVICES"] = chosen
    log.info("--device=%s: CUDA_VISIBLE_DEVICES=%s for this process and its workers", cfg.device, chosen)
    cfg.device = "gpu"


def _validate_family(cfg: argparse.Namespace, catalog: Catalog) -> None:
    family = catalog.find_family(cfg.env)
    if family.validate_fn is not None:
        family.validate_fn(cfg)


def default_cfg(env: str = "gym_CartPole-v1", evaluation: bool = False, *, catalog: Catalog,
                **overrides: Any) -> argparse.Namespace:
    """The default cfg of ``env`` with ``overrides`` (for tests and notebooks: :func:`sfx.registries.default_cfg`
    hands the registries' catalog).

    Never reads or writes an experiment folder. Unknown override names are a ConfigError (typos); another agent's
    flag is refused naming that agent.
    """
    parser = build_parser(env, evaluation, preset=overrides, catalog=catalog)
    cfg = parser.parse_args([f"--env={env}"])
    unknown = sorted(set(overrides) - set(vars(cfg)))
    owners = other_agents_flags(parser, catalog)
    for name in unknown:
        if name in owners:
            _refuse_other_agents_flag(f"--{name}={overrides[name]}", cfg.algo, owners[name])
    if unknown:
        raise ConfigError(f"default_cfg got unknown fields {unknown}; they are not flags of --env={env}")
    for key, value in overrides.items():
        setattr(cfg, key, str(value) if key == "train_dir" else value)
    cfg.explicit_args = sorted({"env", *overrides})
    cfg.command_line = ""
    agent = catalog.find_agent(cfg.algo)
    agent.check_flags(cfg, overrides)
    validate_cfg(cfg, evaluation=evaluation, check_paths=False, batch_of_trajectories=agent.batch_of_trajectories,
                 explicit=cfg.explicit_args)
    agent.validate(cfg)
    agent.validate_model_flags(cfg)
    _validate_family(cfg, catalog)
    return cfg
