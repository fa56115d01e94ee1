"""The flag reference, generated from sfx's own parsers at build time (a MkDocs hook).

A page asks for a table with a marker comment on a line of its own::

    <!-- sfx-flags: trainer -->          the trainer's flags (sfx.train), by group, without any agent's
    <!-- sfx-flags: agents -->           every registered agent (--algo): its flags and its own defaults
    <!-- sfx-flags: agent APPO -->       one agent
    <!-- sfx-flags: families -->         every env family: its flags and the defaults it sets
    <!-- sfx-flags: family doom_ -->     one env family
    <!-- sfx-flags: enjoy -->            sfx.enjoy's own flags (evaluation); also export, runner, tb

Nothing is copied by hand, so the pages cannot go stale: ``mkdocs build`` (and ``mkdocs serve``) runs
:func:`on_page_markdown` on every page, which asks the parsers. ``python docs/gen_flags.py [MARKER]``
prints what a marker becomes (default: every table), e.g. to read it without building the site.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Any, Iterable

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^<!-- sfx-flags: (?P<what>[a-z]+)(?: (?P<name>\S+))? -->[ \t]*$", re.MULTILINE)

# One env name per built-in family: a family's flags and defaults are read from a parser built for it.
EXAMPLE_ENVS = {
    "gym_": "gym_CartPole-v1",
    "doom_": "doom_basic",
    "atari_": "atari_breakout",
    "dmlab_": "dmlab_30",
    "mujoco_": "mujoco_halfcheetah",
    "minigrid_": "minigrid_MemoryS7",
    "pettingzoo_": "pettingzoo_classic.tictactoe_v3",
    "football_": "football_academy_empty_goal_close",
    "multitask": "multitask",
}
# A composite env's parser is built with these flags (the envs it is made of).
EXAMPLE_ARGV = {"multitask": ["--multitask_envs=gym_CartPole-v1,gym_Acrobot-v1"]}


def _escape(text: str) -> str:
    """Help text as one Markdown table cell: no HTML, pipes or emphasis markers taken literally."""
    text = " ".join(str(text).split())
    for a, b in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ("|", "\\|"), ("*", "\\*")):
        text = text.replace(a, b)
    return text


def _code(value: Any) -> str:
    text = repr(value) if isinstance(value, str) and value == "" else str(value)
    text = text.replace("|", "\\|")
    return f"`{text}`" if "`" not in text else f"`` {text} ``"


def _default_text(action: argparse.Action) -> str:
    default = action.default
    if action.dest == "num_workers" and default == os.cpu_count() and "CPU cores" in (action.help or ""):
        return f"CPU cores ({_code(default)} where this page was built)"
    if default is argparse.SUPPRESS:
        return "not set"
    if default is None:
        return "`None`"
    return _code(default)


def _help_text(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The help as ``--help`` prints it (``%(default)s`` and ``%%`` expanded), without its default suffix."""
    text = action.help or ""
    params = {k: v for k, v in vars(action).items() if v is not argparse.SUPPRESS}
    params.update(prog=parser.prog)
    if params.get("choices") is not None:
        params["choices"] = ", ".join(map(str, params["choices"]))
    try:
        text = text % params
    except (KeyError, TypeError, ValueError):
        pass
    if action.choices:
        text = f"{text} (one of: {', '.join(map(str, action.choices))})"
    return _escape(text)


def _flag_actions(actions: Iterable[argparse.Action]) -> list[argparse.Action]:
    return [a for a in actions if a.option_strings and a.help != argparse.SUPPRESS
            and not isinstance(a, argparse._HelpAction)]


def flag_table(parser: argparse.ArgumentParser, actions: Iterable[argparse.Action],
               defaults: dict | None = None) -> str:
    """A Markdown table: flag (and its other spellings), default, help. ``defaults`` overrides shown defaults."""
    rows = ["| flag | default | meaning |", "| --- | --- | --- |"]
    for action in _flag_actions(actions):
        names = " ".join(f"`{s}`" for s in reversed(action.option_strings))
        default = _code(defaults[action.dest]) if defaults and action.dest in defaults else _default_text(action)
        rows.append(f"| {names} | {default} | {_help_text(parser, action)} |")
    return "\n".join(rows)


def defaults_table(parser: argparse.ArgumentParser, defaults: dict, source: str,
                   base: argparse.ArgumentParser | None = None) -> str:
    """A Markdown table of flag defaults someone (an agent, an env family) sets over ``base``'s (the trainer's)."""
    actions = {a.dest: a for a in (base or _trainer_parser())._actions}
    actions.update({a.dest: a for a in parser._actions if a.dest not in actions})
    rows = ["| flag | default here | sfx's default |", "| --- | --- | --- |"]
    for dest in sorted(defaults):
        action = actions.get(dest)
        flag = action.option_strings[-1] if action is not None and action.option_strings else f"--{dest}"
        base = _default_text(action) if action is not None else "-"
        rows.append(f"| `{flag}` | {_code(defaults[dest])} | {base} |")
    if len(rows) == 2:
        return f"{source} sets no defaults of other flags."
    return "\n".join(rows)


def _groups(parser: argparse.ArgumentParser) -> list[tuple[str, list[argparse.Action]]]:
    return [(g.title or "", list(g._group_actions)) for g in parser._action_groups if _flag_actions(g._group_actions)]


def _trainer_parser() -> argparse.ArgumentParser:
    """sfx.train's parser with no agent and no env family: the trainer's own flags and defaults."""
    from sfx.cfg.arguments import add_default_args
    from sfx.cfg.parsing import _new_parser

    parser = _new_parser()
    add_default_args(parser)
    return parser


def _agent_parts(name: str) -> tuple[argparse.ArgumentParser, list[argparse.Action], dict]:
    """The parser for ``--algo=name``, the agent's own flags, and its defaults of the trainer's shared flags."""
    from sfx.agents import find_agent
    from sfx.registries import build_parser

    find_agent(name)  # a ConfigError naming the registered agents for a wrong name
    parser = build_parser(None, argv=[f"--algo={name}"])
    trainer = {a.dest for a in _trainer_parser()._actions}
    own = [a for a in parser._actions if a.dest not in trainer]
    base = _trainer_parser()
    shared = {a.dest: parser.get_default(a.dest) for a in parser._actions if a.dest in trainer}
    changed = {k: v for k, v in shared.items() if base.get_default(k) != v}
    return parser, own, changed


def _grouped_tables(parser: argparse.ArgumentParser, level: int) -> str:
    """One heading and flag table per argument group of ``parser``."""
    h = "#" * level
    out = []
    for title, actions in _groups(parser):
        out += [f"{h} {title}", "", flag_table(parser, actions), ""]
    return "\n".join(out)


def trainer_section(level: int = 3) -> str:
    return _grouped_tables(_trainer_parser(), level)


def agent_section(name: str, level: int = 3) -> str:
    from sfx.agents import find_agent

    agent = find_agent(name)
    parser, own, changed = _agent_parts(name)
    h = "#" * level
    title = agent.flag_group or f"{name} (--algo={name})"
    out = [f"{h} `--algo={name}`", "", f"Flags of the group *{_escape(title)}* (`python -m sfx.train --algo={name} "
           "--env=... --help`):", ""]
    out += [flag_table(parser, own) if _flag_actions(own) else f"`--algo={name}` adds no flags of its own.", ""]
    out += [f"Defaults `--algo={name}` sets for the trainer's shared flags (an agent's own values beat an env "
            "family's):", "", defaults_table(parser, changed, f"`--algo={name}`"), ""]
    return "\n".join(out)


def agents_section(level: int = 3) -> str:
    from sfx.agents import registered_agents

    return "\n".join(agent_section(name, level) for name in registered_agents())


def family_names() -> list[str]:
    from sfx.envs.registry import registered_prefixes

    return registered_prefixes()


def _family_parser(prefix: str) -> tuple[argparse.ArgumentParser, str]:
    from sfx.registries import build_parser

    env = EXAMPLE_ENVS.get(prefix, prefix + "example" if prefix.endswith("_") else prefix)
    argv = [f"--env={env}", *EXAMPLE_ARGV.get(prefix, [])]
    return build_parser(env, argv=argv), env


def family_section(prefix: str, level: int = 3) -> str:
    """One env family: its own flags and the defaults it sets (for its example env; per-env ones listed)."""
    from sfx.envs.registry import find_family

    h = "#" * level
    try:
        parser, env = _family_parser(prefix)
    except Exception as e:  # noqa: BLE001 - a family whose optional packages are missing: said on the page
        return (f"{h} `{prefix}`\n\n!!! warning \"Not generated\"\n    The `{prefix}` family could not be "
                f"loaded where this page was built: {_escape(e)}\n")
    from sfx.registries import build_parser

    family = find_family(env)
    base = build_parser(None)  # the trainer's flags and the default agent's, at their own defaults
    own_dests: set[str] = set()
    if family.add_params_fn is not None:
        probe = argparse.ArgumentParser(add_help=False)
        family.add_params_fn(probe)
        own_dests = {a.dest for a in probe._actions}
    own = [a for a in parser._actions if a.dest in own_dests]
    base_defaults = {a.dest: a.default for a in base._actions}
    changed = {a.dest: parser.get_default(a.dest) for a in parser._actions
               if a.dest in base_defaults and parser.get_default(a.dest) != base_defaults[a.dest]}
    example = " ".join([f"--env={env}", *EXAMPLE_ARGV.get(prefix, [])])
    out = [f"{h} `{prefix}`", "", f"Read from `python -m sfx.train {example} --help`.", ""]
    out += [flag_table(parser, own) if _flag_actions(own) else f"The `{prefix}` family adds no flags.", ""]
    out += [f"Defaults the family sets for `{example}` (the command line wins; cfg.json keeps them):", "",
            defaults_table(parser, changed, f"`{prefix}`", base), ""]
    if callable(family.default_overrides):
        out += _per_env_defaults(prefix, family, level + 1)
    return "\n".join(out)


def _per_env_defaults(prefix: str, family: Any, level: int) -> list[str]:
    """A family whose defaults depend on the env name: each known env's own values."""
    names: list[str] = []
    if prefix == "doom_":
        from sfx.envs.doom.scenarios import MULTIPLAYER_SCENARIOS, SCENARIOS

        names = [prefix + n for n in (*SCENARIOS, *MULTIPLAYER_SCENARIOS)]
    if not names:
        return []
    common = family.defaults_for(EXAMPLE_ENVS.get(prefix, names[0]))
    per_env = {n: family.defaults_for(n) for n in names}
    keys = sorted({k for d in per_env.values() for k in d if any(d.get(k) != e.get(k) for e in per_env.values())}
                  | {k for d in per_env.values() for k in d if k not in common})
    if not keys:
        return []
    rows = [f"{'#' * level} Defaults that differ between `{prefix}` envs", "",
            "| env | " + " | ".join(f"`--{k}`" for k in keys) + " |", "| --- |" + " --- |" * len(keys)]
    for name, d in per_env.items():
        rows.append(f"| `{name}` | " + " | ".join(_code(d[k]) if k in d else "-" for k in keys) + " |")
    return rows + [""]


def families_section(level: int = 3) -> str:
    return "\n".join(family_section(prefix, level) for prefix in family_names())


def enjoy_section(level: int = 2) -> str:
    from sfx.cfg import add_eval_args
    from sfx.cfg.parsing import _new_parser

    parser = _new_parser()
    add_eval_args(parser)
    return flag_table(parser, parser._actions)


def export_section(level: int = 2) -> str:
    from sfx.export import export_parser

    parser = export_parser()
    return flag_table(parser, parser._actions)


def runner_section(level: int = 3) -> str:
    from sfx_runner.cli import build_parser

    return _grouped_tables(build_parser(), level)


def tb_section(level: int = 3) -> str:
    from sfx_tb.cli import build_parser

    out = []
    for mode in ("serve", "plot", "table"):
        parser = build_parser(mode)
        command = "python -m sfx.tb" + ("" if mode == "serve" else f" {mode}")
        out += [f"{'#' * level} `{command}`", "", flag_table(parser, parser._actions), ""]
    return "\n".join(out)


SECTIONS = {"trainer": trainer_section, "agents": agents_section, "agent": agent_section,
            "families": families_section, "family": family_section, "enjoy": enjoy_section,
            "export": export_section, "runner": runner_section, "tb": tb_section}


def expand(markdown: str) -> str:
    """``markdown`` with every ``<!-- sfx-flags: ... -->`` marker replaced by its generated tables."""
    def replace(match: re.Match) -> str:
        what, name = match.group("what"), match.group("name")
        if what not in SECTIONS:
            raise ValueError(f"unknown sfx-flags marker {what!r}; known: {', '.join(SECTIONS)}")
        if what in ("agent", "family"):
            if not name:
                raise ValueError(f"the sfx-flags marker {what!r} needs a name")
            return SECTIONS[what](name)
        return SECTIONS[what]()

    return MARKER.sub(replace, markdown)


def _ensure_importable() -> None:
    if str(ROOT) not in sys.path:  # sfx from this checkout, also when mkdocs runs from elsewhere
        sys.path.insert(0, str(ROOT))


# --- the MkDocs hook -----------------------------------------------------------------------------------

def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if "<!-- sfx-flags:" not in markdown:
        return markdown
    _ensure_importable()
    return expand(markdown)


if __name__ == "__main__":
    _ensure_importable()
    markers = sys.argv[1:] or ["trainer", "agents", "families", "enjoy", "export", "runner", "tb"]
    print(expand("\n".join(f"<!-- sfx-flags: {m} -->" for m in markers)))
