"""Names ``--rnn_type`` accepts: the built-in cores plus those added by ``sfx.models.register_core``.

Torch-free on purpose: the parser and ``validate_cfg`` check ``--rnn_type`` against these names
without importing ``sfx.models`` (``sfx_runner`` parses command lines on login nodes without torch).
The factories themselves live in ``sfx.models.cores``; this module only knows their names.
"""

from __future__ import annotations

from sfx.errors import ConfigError

BUILTIN_CORES = ("gru", "lstm", "trxl")

_custom_names: list[str] = []


def add_core_name(name: str) -> None:
    """Record a custom core name (called by ``sfx.models.register_core``)."""
    if name not in BUILTIN_CORES and name not in _custom_names:
        _custom_names.append(name)


def remove_core_name(name: str) -> None:
    """Forget a custom core name (called by ``sfx.models.unregister_core``)."""
    if name in _custom_names:
        _custom_names.remove(name)


def core_names() -> tuple[str, ...]:
    """Every name ``--rnn_type`` accepts now: built-ins first, then custom ones in registration order."""
    return BUILTIN_CORES + tuple(_custom_names)


def check_rnn_type(value: object) -> None:
    """Raise :class:`ConfigError` naming ``value`` and the allowed names unless it is a known core."""
    if value not in core_names():
        allowed = ", ".join(repr(n) for n in core_names())
        raise ConfigError(f"--rnn_type={value!r} is not a known core; allowed: {allowed} "
                          f"(custom cores come from sfx.models.register_core)")
