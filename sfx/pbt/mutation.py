"""Population-based training's two decisions as pure functions (Jaderberg et al. 2017, "Population
Based Training of Neural Networks", section 3: *exploit* = copy a better member, *explore* =
perturb the copied hyperparameters).

* :func:`mutate` (explore): every parameter, with probability ``mutation_rate``, is multiplied or
  divided by a random factor in ``[perturb_min, perturb_max]`` (a discrete parameter moves one
  step), clipped to its bounds, or with a small probability reset to its default. Returns the new
  values and one record per change saying what happened.
* :func:`select_replacement` (exploit): a member ranked in the bottom ``replace_fraction`` copies
  a random member of the top fraction, only if the top one is better by both gaps.

Both take an explicit ``random.Random`` so that a fixed seed gives a fixed decision (tested).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

RESET_PROBABILITY = 0.05  # chance that a chosen parameter goes back to its default instead of moving


@dataclass(frozen=True)
class ParamSpec:
    """How one hyperparameter may change.

    Attributes:
        name: the cfg field (``learning_rate``) or ``shaping/<component>`` for a reward weight.
        default: what a reset goes back to.
        low, high: bounds the value is clipped to after a perturbation (``None``: unbounded).
        complement: perturb ``1 - value`` instead of the value (a discount close to 1: 0.99 ->
            0.99 +- a factor on 0.01, which keeps it below 1).
        choices: a discrete parameter (batch sizes): a mutation moves one step up or down the list.
    """

    name: str
    default: float
    low: float | None = None
    high: float | None = None
    complement: bool = False
    choices: tuple[float, ...] | None = None

    def clip(self, value: float) -> float:
        if self.low is not None:
            value = max(self.low, value)
        if self.high is not None:
            value = min(self.high, value)
        return value


def perturb(value: float, spec: ParamSpec, rng: random.Random, perturb_min: float, perturb_max: float
            ) -> tuple[float, str]:
    """One random move of ``value``: ``(new_value, how)`` where ``how`` reads like ``'x1.27'``,
    ``'/1.13'``, ``'1-x: x1.3'`` or ``'step up'``."""
    if spec.choices:
        choices = list(spec.choices)
        i = min(range(len(choices)), key=lambda k: abs(choices[k] - value))
        up = rng.random() < 0.5
        if (up and i == len(choices) - 1) or (not up and i == 0):
            up = not up  # at an end: the only way is the other one
        j = max(0, min(len(choices) - 1, i + (1 if up else -1)))
        return choices[j], "step up" if j > i else "step down"
    factor = rng.uniform(perturb_min, perturb_max)
    up = rng.random() < 0.5
    if spec.complement:
        rest = (1.0 - value) * factor if up else (1.0 - value) / factor
        return spec.clip(1.0 - rest), f"1-x: {'x' if up else '/'}{factor:.3f}"
    new = value * factor if up else value / factor
    return spec.clip(new), f"{'x' if up else '/'}{factor:.3f}"


def mutate(params: Mapping[str, float], specs: Sequence[ParamSpec], rng: random.Random, mutation_rate: float,
           perturb_min: float, perturb_max: float, reset_probability: float = RESET_PROBABILITY
           ) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Explore: ``(new_params, records)``.

    Args:
        params: current values by name (names without a spec are kept as they are).
        specs: what may change and how.
        mutation_rate: probability that each parameter changes at all.
        perturb_min, perturb_max: the random factor's range (``1 < perturb_min <= perturb_max``).
        reset_probability: for a parameter that changes, the chance of going back to its default.

    Returns:
        The new values (a new dict) and, per changed parameter,
        ``{'param', 'old', 'new', 'how'}`` with ``how`` a readable description.
    """
    new = dict(params)
    records = []
    for spec in specs:
        if spec.name not in new or rng.random() >= mutation_rate:
            continue
        old = new[spec.name]
        if rng.random() < reset_probability:
            value, how = spec.default, "reset to default"
        else:
            value, how = perturb(float(old), spec, rng, perturb_min, perturb_max)
        if isinstance(old, int) and not isinstance(old, bool):
            value = int(round(value))
        if value == old:
            continue
        new[spec.name] = value
        records.append({"param": spec.name, "old": old, "new": value, "how": how})
    return new, records


def select_replacement(policy: Any, objectives: Mapping[Any, float], replace_fraction: float,
                       reward_gap: float, reward_gap_absolute: float, rng: random.Random, noun: str = "policy"
                       ) -> tuple[Any, str]:
    """Exploit: which policy ``policy`` should copy, or ``None``; and why, in words.

    Policies are ranked by objective (higher is better; NaN = no finished episode yet, never
    ranked). With ``k = max(1, round(replace_fraction * n))``, a policy among the ``k`` worst copies
    a random one of the ``k`` best when the best's objective exceeds its own by more than
    ``reward_gap_absolute`` and by more than ``reward_gap`` times the best's magnitude. Policies
    are any hashable keys (ints in one run, member names across experiments, called ``noun``).
    """
    ranked = sorted((p for p, v in objectives.items() if not math.isnan(v)), key=lambda p: objectives[p])
    if policy not in ranked or len(ranked) < 2:
        return None, f"not ranked (no objective yet, or a single ranked {noun})"
    k = max(1, min(len(ranked) // 2, round(replace_fraction * len(ranked))))
    worst, best = ranked[:k], ranked[-k:]
    if policy not in worst:
        return None, f"rank {ranked.index(policy) + 1}/{len(ranked)} is not in the bottom {k}"
    winner = best[rng.randrange(len(best))]
    mine, theirs = objectives[policy], objectives[winner]
    gap = theirs - mine
    if gap <= reward_gap_absolute:
        return None, f"gap to {noun} {winner} is {gap:.4g} <= absolute threshold {reward_gap_absolute:g}"
    if gap <= reward_gap * abs(theirs):
        return None, f"gap to {noun} {winner} is {gap:.4g} <= {reward_gap:g} x |{theirs:.4g}|"
    return winner, f"objective {mine:.4g} vs {noun} {winner}'s {theirs:.4g} (bottom {k} of {len(ranked)})"


def batch_size_choices(batch_size: int, rollout: int, low_factor: int = 4, high_factor: int = 2) -> tuple[int, ...]:
    """Valid batch sizes for mutation: ``batch_size`` times powers of two from 1/low_factor to
    high_factor, each a multiple of ``rollout`` (a learner batch is whole trajectories)."""
    out = set()
    size = batch_size
    while size * low_factor >= batch_size and size >= rollout:
        if size % rollout == 0:
            out.add(size)
        size //= 2
    size = batch_size
    while size <= batch_size * high_factor:
        if size % rollout == 0:
            out.add(size)
        size *= 2
    return tuple(sorted(out))
