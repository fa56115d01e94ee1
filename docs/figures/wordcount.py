"""Words a reader reads on each documentation page: prose, headings, lists and tables, not the contents of
fenced code blocks (commands and output are scanned, not read) nor HTML comments, link targets or image paths.

    python docs/figures/wordcount.py            # every page, longest first
    python docs/figures/wordcount.py --max=2500 # exit 1 when a page outside docs/appendix/ is longer

The docs tests hold every page outside the appendix to ``WORD_LIMIT`` words.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1]
WORD_LIMIT = 2500
APPENDIX = "appendix"

_FENCE = re.compile(r"^([ \t]*)(```|~~~)[^\n]*\n.*?^\1\2[ \t]*$", re.DOTALL | re.MULTILINE)
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_LINK_TARGET = re.compile(r"\]\([^)]*\)")       # [text](target): the text is read, the target is not
_ATTRS = re.compile(r"\{[:#.][^}]*\}")           # attr_list: { width=100% }
_WORD = re.compile(r"[A-Za-z0-9]")               # a token with a letter or digit (not a table's | or ---)


def words(markdown: str) -> int:
    """The number of words a reader reads in ``markdown`` (see the module docstring)."""
    text = _FENCE.sub(" ", markdown)
    text = _COMMENT.sub(" ", text)
    text = _LINK_TARGET.sub("]", text)
    text = _ATTRS.sub(" ", text)
    return sum(1 for token in text.split() if _WORD.search(token))


def page_words(docs: Path = DOCS) -> dict[str, int]:
    """Words per page, keyed by the page's path under docs/."""
    return {str(p.relative_to(docs)): words(p.read_text(encoding="utf-8")) for p in sorted(docs.rglob("*.md"))}


def too_long(counts: dict[str, int], limit: int = WORD_LIMIT) -> dict[str, int]:
    """The pages outside the appendix over ``limit`` words."""
    return {page: n for page, n in counts.items() if n > limit and not page.startswith(APPENDIX + "/")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max", type=int, default=None, help="exit 1 when a non-appendix page has more words")
    args = parser.parse_args(argv)
    counts = page_words()
    for page, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        print(f"{n:6d}  {page}")
    over = too_long(counts, args.max) if args.max is not None else {}
    for page, n in over.items():
        print(f"{page}: {n} words, over {args.max} (move dated measurement logs to docs/{APPENDIX}/)",
              file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
