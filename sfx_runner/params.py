"""Parameter generators: a cartesian grid (:class:`ParamGrid`) or an explicit list (:class:`ParamList`).

Each yields ordered dicts ``{flag name: value}``; the runner turns them into ``--flag=value``
arguments. Values are ``str``, ``int``, ``float`` or ``bool``: what a command line can carry.
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Union

from sfx_runner.errors import RunnerError

ParamValue = Union[str, int, float, bool]

# a key becomes "--key=value": no "=", spaces or quotes, which would change how the command splits
_KEY_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")


def check_key(key: Any, where: str) -> str:
    """``key`` if it can be a flag name, else :class:`RunnerError`."""
    if not isinstance(key, str) or not _KEY_RE.match(key):
        raise RunnerError(f"{where}: parameter name {key!r} is not allowed: use letters, digits, '_', '.', '-' "
                          f"(it becomes --name=value)")
    return key


def check_value(key: str, value: Any, where: str) -> ParamValue:
    """``value`` if a command line can carry it, else :class:`RunnerError`.

    NumPy scalars (what Sample Factory 1.x's shuffled grids produced) become the Python value they hold.
    """
    if isinstance(value, (str, int, float, bool)):
        return value
    if type(value).__module__ == "numpy" and hasattr(value, "item"):
        item = value.item()
        if isinstance(item, (str, int, float, bool)):
            return item
    raise RunnerError(f"{where}: value {value!r} of parameter {key!r} is a {type(value).__name__}; "
                      f"allowed: str, int, float, bool")


class ParamGrid:
    """The cartesian product of a few parameters' values; the FIRST key varies slowest.

    ``ParamGrid([("seed", [1, 2]), ("learning_rate", [1e-4, 1e-3])])`` yields
    ``{seed: 1, lr: 1e-4}, {seed: 1, lr: 1e-3}, {seed: 2, lr: 1e-4}, {seed: 2, lr: 1e-3}``.
    With ``shuffle=True`` the combinations come in a random order that depends only on ``seed``
    (so a relaunch expands to the same experiment names).
    """

    def __init__(self, grid: Iterable[tuple[str, Iterable[Any]]] | Mapping[str, Iterable[Any]],
                 shuffle: bool = False, seed: int = 0) -> None:
        items = list(grid.items()) if isinstance(grid, Mapping) else list(grid)
        self.grid: list[tuple[str, list[ParamValue]]] = []
        seen: set[str] = set()
        for item in items:
            if not isinstance(item, (tuple, list)) or len(item) != 2:
                raise RunnerError(f"ParamGrid: entry {item!r} is not a (name, [values]) pair")
            key, values = item
            check_key(key, "ParamGrid")
            if key in seen:
                raise RunnerError(f"ParamGrid: parameter {key!r} appears twice")
            seen.add(key)
            if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
                raise RunnerError(f"ParamGrid: values of {key!r} must be a list, got {values!r}")
            values = [check_value(key, v, "ParamGrid") for v in values]
            if not values:
                raise RunnerError(f"ParamGrid: parameter {key!r} has no values (an empty list gives no experiment)")
            self.grid.append((key, values))
        self.shuffle = bool(shuffle)
        self.seed = seed

    @property
    def keys(self) -> list[str]:
        return [k for k, _ in self.grid]

    def generate_params(self, randomize: bool | None = None) -> Iterator[dict[str, ParamValue]]:
        """Every combination as an ordered dict; ``randomize`` (default: the grid's ``shuffle``)
        gives them in the grid's seeded random order.

        Sample Factory 1.x's ``generate_params(randomize=True)`` shuffled with NumPy's unseeded
        global generator; here the order depends only on ``seed``, so a relaunch expands to the same
        experiment names. Its default was ``randomize=True``; here the default is the grid's
        ``shuffle`` (False unless asked), which is what SF1's run descriptions wrote out
        (``randomize=False``) nearly everywhere.
        """
        keys = self.keys
        combos = list(itertools.product(*(values for _, values in self.grid)))
        if self.shuffle if randomize is None else randomize:
            random.Random(self.seed).shuffle(combos)
        for combo in combos:
            yield dict(zip(keys, combo))

    def __iter__(self) -> Iterator[dict[str, ParamValue]]:
        return self.generate_params()

    def __len__(self) -> int:
        n = 1
        for _, values in self.grid:
            n *= len(values)
        return n

    def __repr__(self) -> str:
        return f"ParamGrid({self.grid!r}, shuffle={self.shuffle}, seed={self.seed})"


class ParamList:
    """An explicit list of parameter dicts, run in the given order (each dict may set other keys).

    With ``shuffle=True`` they come in a random order that depends only on ``seed``, like
    :class:`ParamGrid`'s.
    """

    def __init__(self, params: Iterable[Mapping[str, Any]], shuffle: bool = False, seed: int = 0) -> None:
        if isinstance(params, (str, bytes, Mapping)) or not isinstance(params, Iterable):
            raise RunnerError(f"ParamList: expected a list of dicts of parameters, got {params!r}")
        self.params: list[dict[str, ParamValue]] = []
        for i, entry in enumerate(params):
            if not isinstance(entry, Mapping):
                raise RunnerError(f"ParamList: entry {i} is {entry!r}, not a dict of parameters")
            self.params.append({check_key(k, f"ParamList entry {i}"): check_value(k, v, f"ParamList entry {i}")
                                for k, v in entry.items()})
        self.shuffle = bool(shuffle)
        self.seed = seed

    def generate_params(self, randomize: bool | None = None) -> Iterator[dict[str, ParamValue]]:
        """The dicts in order; ``randomize`` (default: the list's ``shuffle``) gives them in the
        list's seeded random order (Sample Factory 1.x's unseeded shuffle, made repeatable; see
        :meth:`ParamGrid.generate_params`)."""
        order = list(self.params)
        if self.shuffle if randomize is None else randomize:
            random.Random(self.seed).shuffle(order)
        for p in order:
            yield dict(p)

    def __iter__(self) -> Iterator[dict[str, ParamValue]]:
        return self.generate_params()

    def __len__(self) -> int:
        return len(self.params)

    def __repr__(self) -> str:
        return f"ParamList({self.params!r}, shuffle={self.shuffle}, seed={self.seed})"
