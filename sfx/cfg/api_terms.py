"""The parser's errors in the Python API's terms: ``sfx.train(num_workerz=2)`` is told about its keyword
``num_workerz``, not about a command-line flag ``--num_workerz=2`` it never wrote."""

from __future__ import annotations

import re

from sfx.cfg.parsing import UnknownFlagError
from sfx.errors import ConfigError

# a command line quoted as advice ("train first: python -m sfx.train --env=... --experiment=x") keeps its flags
_COMMAND = re.compile(r"python -m [\w.]+(?: --?[\w-]+(?:=[^\s;,)]*)?)*")
_FLAG = re.compile(r"(?<![\w-])--([A-Za-z]\w*)")


def in_python_terms(error: ConfigError, function: str, command: str) -> ConfigError:
    """``error`` worded for a caller of ``function`` (e.g. ``"sfx.train"``), whose keywords are the flags of
    ``command`` (e.g. ``"python -m sfx.train"``): an unknown flag becomes an unexpected keyword argument with
    the nearest keywords, and ``--name`` elsewhere becomes ``name`` (except inside a quoted command line)."""
    if isinstance(error, UnknownFlagError):
        name = error.argument.split("=", 1)[0].lstrip("-")
        close = [s.lstrip("-") for s in error.suggestions]
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        return ConfigError(f"{function}() got an unexpected keyword argument {name!r}{hint}; its keywords are "
                           f"the flags of {command} --help")
    text = str(error)
    parts, last = [], 0
    for quoted in _COMMAND.finditer(text):
        parts += [_FLAG.sub(r"\1", text[last:quoted.start()]), quoted.group()]
        last = quoted.end()
    parts.append(_FLAG.sub(r"\1", text[last:]))
    return ConfigError("".join(parts))
