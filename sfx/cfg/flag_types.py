"""Flag value types shared by every flag group (the trainer's, env families', agents'): booleans written
the ways users write them, integers written as ``1e9``."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

TRUE_STRINGS = ("true", "1", "yes", "y", "on")
FALSE_STRINGS = ("false", "0", "no", "n", "off")


def str2bool(value: str | bool) -> bool:
    """Parse ``True/False/true/false/1/0`` (also yes/no, on/off) into a bool."""
    if isinstance(value, bool):
        return value
    low = str(value).strip().lower()
    if low in TRUE_STRINGS:
        return True
    if low in FALSE_STRINGS:
        return False
    raise argparse.ArgumentTypeError(f"expected a boolean (True/False/1/0), got {value!r}")


def int_like(value: str | int) -> int:
    """Parse an integer, also written as ``1e9`` or ``10_000_000`` (must be a whole number)."""
    if isinstance(value, int):
        return value
    text = str(value).strip()
    try:
        return int(text)
    except ValueError:
        pass
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer (e.g. 1000000 or 1e6), got {value!r}") from None
    if not x.is_integer():  # also rejects inf and nan
        raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}")
    return int(x)


def device_flag(value: str) -> str:
    """``--device``: ``gpu`` and ``cuda`` (any case) mean the same, ``cuda:N`` (one GPU by index) is kept as
    written for the parser to place (:func:`sfx.cfg.parsing.place_device`), ``cpu``; anything else is an
    argparse error naming what is allowed."""
    text = str(value).strip().lower()
    if text in ("gpu", "cuda"):
        return "gpu"
    if text == "cpu":
        return text
    index = text[len("cuda:"):] if text.startswith("cuda:") else ""
    if index.isdigit():
        return f"cuda:{int(index)}"
    raise argparse.ArgumentTypeError(f"{value!r} is not a device; allowed: gpu (or cuda), cuda:N (GPU N), cpu")


def add_bool_arg(group: argparse._ActionsContainer, name: str, default: bool, help_text: str) -> None:
    """A boolean flag: ``--name=False``, ``--name false``, ``--name 0``; a bare ``--name`` means True."""
    group.add_argument(f"--{name}", type=str2bool, nargs="?", const=True, default=default, metavar="BOOL",
                       help=help_text)


class AcceptOnly(argparse.Action):
    """Store the value if it is one of ``allowed`` (values at which the flag changes nothing in sfx);
    any other value is an argparse error (a :class:`~sfx.cfg.ConfigError` from sfx's parser) that
    names the flag and gives ``why``."""

    accepted = "only"  # how the error words the accepted values
    store = True  # keep the value in cfg

    def __init__(self, option_strings: Sequence[str], dest: str, allowed: tuple = (), why: str = "",
                 **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.allowed = allowed
        self.why = why

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        if values not in self.allowed:
            allowed = " or ".join(repr(v) for v in self.allowed)
            raise argparse.ArgumentError(self, f"{values!r} is not supported ({self.accepted} {allowed}): {self.why}")
        if self.store:
            setattr(namespace, self.dest, values)
