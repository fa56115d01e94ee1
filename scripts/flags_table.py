"""Print the README's flags table (every flag of ``python -m sfx.train``, its default and help).

    python scripts/flags_table.py            # print the table
    python scripts/flags_table.py --write    # replace the table between the README's FLAGS markers
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
BEGIN, END = "<!-- FLAGS -->", "<!-- /FLAGS -->"


def _rows(actions: list, suffix: str = "") -> list[str]:
    rows = []
    for action in actions:
        if not action.option_strings or action.default == argparse.SUPPRESS:
            continue
        flag = action.option_strings[-1]
        default = action.default
        if action.choices:
            meaning = f"{action.help} (one of: {', '.join(map(str, action.choices))})"
        else:
            meaning = action.help or ""
        rows.append(f"| `{flag}` | `{default}` | {(meaning + suffix).replace('|', '/')} |")
    return rows


def flags_table() -> str:
    """The default parser's flags (APPO's among them), then the other built-in agents' own flags."""
    from sfx.agents import DEFAULT_AGENT, find_agent, registered_agents
    from sfx.cfg import build_parser

    parser = build_parser(None, evaluation=False)
    rows = ["| flag | default | meaning |", "| --- | --- | --- |", *_rows(parser._actions)]
    for name in registered_agents():
        if name != DEFAULT_AGENT:
            probe = argparse.ArgumentParser(add_help=False)
            find_agent(name).add_flags(probe)
            rows += _rows(probe._actions, f" (--algo={name})")
    return "\n".join(rows)


def readme_with_table(text: str) -> str:
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{flags_table()}\n{END}{tail}"


if __name__ == "__main__":
    if "--write" in sys.argv[1:]:
        README.write_text(readme_with_table(README.read_text()))
    else:
        print(flags_table())
