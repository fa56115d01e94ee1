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


def flags_table() -> str:
    from sfx.cfg import build_parser

    parser = build_parser(None, evaluation=False)
    rows = ["| flag | default | meaning |", "| --- | --- | --- |"]
    for action in parser._actions:
        if not action.option_strings or action.default == argparse.SUPPRESS:
            continue
        flag = action.option_strings[-1]
        default = action.default
        if action.choices:
            meaning = f"{action.help} (one of: {', '.join(map(str, action.choices))})"
        else:
            meaning = action.help or ""
        rows.append(f"| `{flag}` | `{default}` | {meaning.replace('|', '/')} |")
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
