"""The V-trace replay platform's ``--replay_parameters`` list: the buffers (:class:`BufferSpec`), their parsing with
one-line errors, and how many trajectories of a batch each gives (:func:`batch_composition`). The sampling and
insertion rules of the buffers are :mod:`sfx.algo.replay`'s.

The format is the platform's (https://github.com/parralplex/elite_buffer_vtrace, ``utils/parameter_schema.py``):
a JSON (or Python literal) list of ``{"type": "queue" | "standard" | "custom", "capacity": ..., "sample_ratio":
...}`` entries, a custom buffer with its distance, sampling and insertion settings.
"""

from __future__ import annotations

import ast
import difflib
import json
import math
from dataclasses import dataclass
from typing import Any, Sequence

from sfx.errors import ConfigError

__all__ = ["DIST_FUNCTIONS", "ELITE_SAMPLING_STRATEGIES", "INSERT_STRATEGIES", "REPLAY_TYPES", "SAMPLE_STRATEGIES",
           "BufferSpec", "batch_composition", "needs_features", "parse_replay_parameters"]

REPLAY_TYPES = ("queue", "standard", "custom")
DIST_FUNCTIONS = ("ln_norm", "cos_dist", "kl_div")
SAMPLE_STRATEGIES = ("elite_sampling", "attentive_sampling")
INSERT_STRATEGIES = ("elite_insertion",)
ELITE_SAMPLING_STRATEGIES = ("strategy1", "strategy2", "strategy3", "strategy4")

_COMMON_KEYS = ("type", "capacity", "sample_ratio")
_CUSTOM_KEYS = ("dist_function", "p", "insert_strategy", "sample_strategy", "lambda_batch_multiplier",
                "alfa_annealing_factor", "elite_sampling_strategy", "elite_batch_size")
_RATIO_TOLERANCE = 1e-6


# ----------------------------------------------------------------------------------------------------------
# The buffer list
# ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BufferSpec:
    """One entry of ``--replay_parameters``, validated, with the platform's defaults filled in.

    Attributes:
        type: ``queue`` (fresh on-policy stream), ``standard`` (uniform ring) or ``custom``.
        capacity: trajectories the buffer holds (``queue``: the platform's hand-over queue size; any value
            >= 1 is accepted, 1 being the usual one).
        sample_ratio: share of every batch taken from this buffer; the shares sum to 1.
        dist_function: ``custom`` only (required there): ``ln_norm``, ``cos_dist`` or ``kl_div``.
        p: ``ln_norm``'s norm order (platform default 2).
        insert_strategy: ``elite_insertion`` or None (ring: the oldest is overwritten).
        sample_strategy: ``elite_sampling``, ``attentive_sampling`` or None (uniform).
        lambda_batch_multiplier: candidates per pick at the start of training (platform default 1: none).
        alfa_annealing_factor: stretches lambda's linear annealing to 1 (platform default 1.0).
        elite_sampling_strategy: ``strategy1`` .. ``strategy4`` (platform default ``strategy3``).
        elite_batch_size: stored trajectories compared per elite insertion (platform default 20).
    """

    type: str
    capacity: int
    sample_ratio: float
    dist_function: str | None = None
    p: float = 2.0
    insert_strategy: str | None = None
    sample_strategy: str | None = None
    lambda_batch_multiplier: float = 1.0
    alfa_annealing_factor: float = 1.0
    elite_sampling_strategy: str = "strategy3"
    elite_batch_size: int = 20

    @property
    def is_replay(self) -> bool:
        """True for the buffers that replay stored trajectories (all but ``queue``)."""
        return self.type != "queue"

    @property
    def needs_features(self) -> bool:
        """True where the model's features are computed for this buffer (a custom buffer with a rule)."""
        return self.type == "custom" and (self.sample_strategy is not None or self.insert_strategy is not None)

    @property
    def stores_features(self) -> bool:
        """True where the behaviour-time features ``[T, F]`` are kept with each stored trajectory
        (elite sampling and elite insertion compare against them; attentive sampling does not)."""
        return self.type == "custom" and (self.sample_strategy == "elite_sampling"
                                          or self.insert_strategy == "elite_insertion")


def _did_you_mean(value: str, allowed: Sequence[str]) -> str:
    close = difflib.get_close_matches(value, list(allowed), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def parse_replay_parameters(value: str | Sequence[dict]) -> tuple[BufferSpec, ...]:
    """Parse and validate the platform's ``replay_parameters`` list.

    Args:
        value: the JSON text (the platform's own parser, ``ast.literal_eval``, also takes Python literals
            such as single-quoted keys, so those are accepted too) or the already-decoded list of dicts.

    Returns:
        One ``BufferSpec`` per entry, in the given order. String values are case-insensitive (as in the
        platform's schema) and stored lower-case.

    Raises:
        ConfigError: one line naming the entry (``replay_parameters[i]``) and what is allowed: text that is
            not a list of objects, an unknown or misspelt key (did-you-mean; custom-only keys on a queue or
            standard buffer), a missing ``type`` / ``capacity`` / ``sample_ratio`` (or ``dist_function`` on a
            custom buffer), an unknown type / dist_function / sample_strategy / insert_strategy /
            elite_sampling_strategy, a capacity or elite_batch_size that is not an integer >= 1, a ratio
            outside [0, 1], ``p`` or ``lambda_batch_multiplier`` below 1, ``alfa_annealing_factor`` <= 0,
            any non-finite number, more than one queue, or ratios not summing to 1 (within 1e-6).
    """
    where = "replay_parameters"
    entries: Any = value
    if isinstance(value, str):
        try:
            entries = json.loads(value)
        except ValueError:
            try:
                entries = ast.literal_eval(value)
            except (ValueError, SyntaxError):
                raise ConfigError(f"{where}: not valid JSON: {value!r}; expected a list of buffer objects such as "
                                  '[{"type": "queue", "capacity": 1, "sample_ratio": 1.0}]') from None
    if not isinstance(entries, (list, tuple)) or not entries:
        raise ConfigError(f"{where}: expected a non-empty list of buffer objects, got {entries!r}")

    specs = tuple(_parse_entry(f"{where}[{i}]", entry) for i, entry in enumerate(entries))

    queues = [i for i, s in enumerate(specs) if s.type == "queue"]
    if len(queues) > 1:
        raise ConfigError(f"{where}: {len(queues)} queue buffers (entries {queues}); at most one queue "
                          "(the fresh on-policy stream) is allowed")
    total = sum(s.sample_ratio for s in specs)
    if abs(total - 1.0) > _RATIO_TOLERANCE:
        shares = " + ".join(f"{s.sample_ratio:g}" for s in specs)
        raise ConfigError(f"{where}: sample_ratio values sum to {total:g} ({shares}); they must sum to 1")
    return specs


def _parse_entry(where: str, entry: Any) -> BufferSpec:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: expected an object with type, capacity and sample_ratio, got {entry!r}")

    if "type" not in entry:
        raise ConfigError(f"{where}: missing 'type'; allowed: {', '.join(REPLAY_TYPES)}")
    kind = _choice(where, "type", entry["type"], REPLAY_TYPES)
    where = f"{where} (type {kind!r})"

    allowed_keys = _COMMON_KEYS + (_CUSTOM_KEYS if kind == "custom" else ())
    for key in entry:
        if key in allowed_keys:
            continue
        if key in _CUSTOM_KEYS:
            raise ConfigError(f"{where}: key {key!r} is only allowed on a custom buffer; "
                              f"a {kind} buffer takes {', '.join(_COMMON_KEYS)}")
        hint = _did_you_mean(str(key), allowed_keys)
        raise ConfigError(f"{where}: unknown key {key!r}{hint} (allowed: {', '.join(allowed_keys)})")
    for key in _COMMON_KEYS[1:] + (("dist_function",) if kind == "custom" else ()):
        if key not in entry:
            raise ConfigError(f"{where}: missing {key!r}" + (f"; allowed: {', '.join(DIST_FUNCTIONS)}"
                                                             if key == "dist_function" else ""))

    fields: dict[str, Any] = {
        "type": kind,
        "capacity": _integer(where, "capacity", entry["capacity"], minimum=1),
        "sample_ratio": _number(where, "sample_ratio", entry["sample_ratio"], low=0.0, high=1.0),
    }
    if kind == "custom":
        fields["dist_function"] = _choice(where, "dist_function", entry["dist_function"], DIST_FUNCTIONS)
        for key, allowed in (("sample_strategy", SAMPLE_STRATEGIES), ("insert_strategy", INSERT_STRATEGIES),
                             ("elite_sampling_strategy", ELITE_SAMPLING_STRATEGIES)):
            if entry.get(key) is not None:
                fields[key] = _choice(where, key, entry[key], allowed)
        if "p" in entry:
            fields["p"] = _number(where, "p", entry["p"], low=1.0)
        if "lambda_batch_multiplier" in entry:
            fields["lambda_batch_multiplier"] = _number(where, "lambda_batch_multiplier",
                                                        entry["lambda_batch_multiplier"], low=1.0)
        if "alfa_annealing_factor" in entry:
            fields["alfa_annealing_factor"] = _number(where, "alfa_annealing_factor", entry["alfa_annealing_factor"],
                                                      low=0.0, low_open=True)
        if "elite_batch_size" in entry:
            fields["elite_batch_size"] = _integer(where, "elite_batch_size", entry["elite_batch_size"], minimum=1)
    return BufferSpec(**fields)


def _choice(where: str, key: str, value: Any, allowed: Sequence[str]) -> str:
    if not isinstance(value, str) or value.lower() not in allowed:
        hint = _did_you_mean(value.lower(), allowed) if isinstance(value, str) else ""
        raise ConfigError(f"{where}: unknown {key} {value!r}{hint} (allowed: {', '.join(allowed)})")
    return value.lower()


def _integer(where: str, key: str, value: Any, minimum: int) -> int:
    if not _is_number(value) or not math.isfinite(value) or value != int(value) or value < minimum:
        raise ConfigError(f"{where}: {key} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _number(where: str, key: str, value: Any, low: float, high: float | None = None, low_open: bool = False) -> float:
    bad = not _is_number(value) or not math.isfinite(value)
    bad = bad or (value <= low if low_open else value < low) or (high is not None and value > high)
    if bad:
        lower = f"> {low:g}" if low_open else f">= {low:g}"
        allowed = f"in [{low:g}, {high:g}]" if high is not None else lower
        raise ConfigError(f"{where}: {key} must be a finite number {allowed}, got {value!r}")
    return float(value)


def needs_features(specs: Sequence[BufferSpec]) -> bool:
    """True when some buffer's rules need the model's feature vectors (a custom buffer with a sample or
    insert strategy): the model must expose its core outputs per step, and the acting side must keep them
    with each trajectory where ``BufferSpec.stores_features``."""
    return any(s.needs_features for s in specs)


def batch_composition(specs: Sequence[BufferSpec], batch_trajectories: int, remainder: str = "error") -> list[int]:
    """Trajectories each buffer contributes to one batch: ``int(batch_trajectories * sample_ratio)``.

    The platform refuses a batch size for which some ``batch * sample_ratio`` is not a whole number (its
    learner raises at start), so every buffer's share is exact and the shares add up to the batch. sfx:
    a share within 1e-6 of a whole number counts as whole (the platform's float test would reject e.g.
    ``0.29 * 100``).

    Args:
        specs: the parsed buffer list (ratios summing to 1).
        batch_trajectories: trajectories per batch (``>= 0``).
        remainder: what to do where the floored shares do not add up to the batch. ``"error"`` (the
            platform's way): raise ``ConfigError`` naming the first fractional share. ``"to_queue"``: the
            missing trajectories go to the queue (fresh) buffer, or, without a queue, to the buffer with the
            largest ``sample_ratio`` (the first of equals).

    Returns:
        ``[len(specs)]`` non-negative ints summing to ``batch_trajectories``.
    """
    if batch_trajectories < 0:
        raise ValueError(f"batch_composition: batch_trajectories must be >= 0, got {batch_trajectories}")
    if remainder not in ("error", "to_queue"):
        raise ValueError(f"batch_composition: remainder must be 'error' or 'to_queue', got {remainder!r}")
    counts = []
    for i, spec in enumerate(specs):
        share = batch_trajectories * spec.sample_ratio
        whole = round(share)
        if abs(share - whole) <= _RATIO_TOLERANCE:
            counts.append(int(whole))
            continue
        if remainder == "error":
            raise ConfigError(f"replay_parameters[{i}] (type {spec.type!r}): sample_ratio {spec.sample_ratio:g} of a "
                              f"batch of {batch_trajectories} trajectories is {share:g}, not a whole number; "
                              "choose a batch size (in trajectories) that every sample_ratio divides evenly")
        counts.append(math.floor(share))
    missing = batch_trajectories - sum(counts)
    if missing:
        queues = [i for i, s in enumerate(specs) if s.type == "queue"]
        target = queues[0] if queues else max(range(len(specs)), key=lambda i: (specs[i].sample_ratio, -i))
        counts[target] += missing
    return counts
