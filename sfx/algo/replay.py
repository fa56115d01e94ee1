"""Replay mixed into V-trace batches: the buffer list, the batch composition, feature distances and the
sampling / insertion rules of queue, standard and custom (attentive / elite) buffers.

The rules are those of the V-trace replay platform whose ``--replay_parameters`` list sfx accepts as-is:
"PyTorch distributed RL platform" (modified IMPALA with elite experience replay),
https://github.com/parralplex/elite_buffer_vtrace (``utils/parameter_schema.py``, ``option_flags.py``,
``agent/learner.py``, ``rollout_storage/custom_replay/``). Attentive sampling follows Sun, Zhou and Li 2020,
"Attentive Experience Replay", AAAI 34, https://ojs.aaai.org/index.php/AAAI/article/view/6049; V-trace
(Espeholt et al. 2018, https://arxiv.org/abs/1802.01561) corrects every replayed trajectory for its age.
sfx reimplements the rules from the platform's behaviour; where the platform is ambiguous or fails
(noted "sfx:" below) sfx takes the reading closest to the issue's description.

One batch of ``B`` trajectories takes ``batch_composition(specs, B)[i]`` trajectories from buffer ``i``:

- ``queue``: the fresh on-policy stream, in arrival order (no replay; its capacity only bounds the
  platform's hand-over queue).
- ``standard``: a ring of ``capacity`` trajectories, sampled uniformly with replacement
  (``uniform_sample``).
- ``custom``: a ring like ``standard`` that also keeps, per stored trajectory, its behaviour-time feature
  vectors ``[T, F]`` (the core's outputs while acting) and a sample count (reset when stored, +1 each
  time it is sampled: ``count_samples``). With ``sample_strategy``, one sample of ``k`` trajectories is:

    1. ``lambda_t = annealed_lambda(lambda_batch_multiplier, alfa_annealing_factor, horizon, t)`` for
       the ``t``-th sample drawn from this buffer (``t = 1, 2, ...``);
    2. ``int(lambda_t * k)`` candidates drawn uniformly with replacement (``candidate_indices``);
       where ``lambda_t == 1`` the candidates are the sample (uniform; no features are recomputed);
    3. the candidates' features recomputed with the current weights ``[M, T, F]``;
    4. one distance per candidate: ``elite_sampling`` compares the recomputed features with the stored
       behaviour-time ones (``feature_distance``: how far the policy has moved on that trajectory);
       ``attentive_sampling`` compares them with the current feature of the last step of the most
       recently stored trajectory (``attentive_distance``: how close the trajectory is to where the
       agent is now);
    5. ``k`` picks by ``elite_sampling_strategy`` (``elite_sample``; ``attentive_sample`` is the same
       rule): strategy1 the lowest distances; strategy2 evenly spaced over the sorted candidates;
       strategy3 least-sampled first, then lowest distance; strategy4 the least-sampled of each chunk
       of the sorted candidates.

  With ``insert_strategy: elite_insertion``, a new trajectory goes to the ring's next slot until the
  buffer is full; after that it replaces, among ``elite_batch_size`` stored trajectories drawn without
  replacement (``insertion_candidates``), the most off-policy one: the one whose behaviour-time features
  are farthest from its own features recomputed with the current weights (``elite_insert``).

Distances (``[N, T, F]`` per-step features in, ``[N]`` out, smaller = closer): ``ln_norm`` the ``p``-norm of
the whole trajectory's difference, ``cos_dist`` one minus the cosine of the flattened trajectories,
``kl_div`` the per-step KL between the softmaxes of the features, summed over steps.
"""

from __future__ import annotations

import ast
import difflib
import json
import math
from dataclasses import dataclass
from typing import Any, NamedTuple, Sequence

import torch

from sfx.errors import ConfigError

__all__ = [
    "REPLAY_TYPES",
    "DIST_FUNCTIONS",
    "SAMPLE_STRATEGIES",
    "INSERT_STRATEGIES",
    "ELITE_SAMPLING_STRATEGIES",
    "BufferSpec",
    "parse_replay_parameters",
    "needs_features",
    "batch_composition",
    "ln_norm_distance",
    "cos_distance",
    "kl_div_distance",
    "feature_distance",
    "attentive_distance",
    "uniform_sample",
    "count_samples",
    "annealed_lambda",
    "candidate_count",
    "candidate_indices",
    "ReplaySample",
    "elite_sample",
    "attentive_sample",
    "insertion_candidates",
    "ring_index",
    "EliteInsertion",
    "elite_insert",
]

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


# ----------------------------------------------------------------------------------------------------------
# Distances between feature vectors
# ----------------------------------------------------------------------------------------------------------


def _check_pair(fn: str, a: torch.Tensor, b: torch.Tensor) -> None:
    if a.dim() < 2 or a.shape != b.shape:
        raise ValueError(f"{fn}: expected two [N, ...] tensors of one shape, got {tuple(a.shape)} and {tuple(b.shape)}")


def ln_norm_distance(a: torch.Tensor, b: torch.Tensor, p: float = 2) -> torch.Tensor:
    """``p``-norm of each trajectory's whole difference (the platform's ``torch.dist`` per trajectory).

        d_n = ( sum_{t, f} |a[n, t, f] - b[n, t, f]|^p )^(1/p)

    so the per-step distances combine as ``(sum_t ||a_t - b_t||_p^p)^(1/p)``, not as a mean.

    Args:
        a, b: ``[N, T, F]`` (any ``[N, ...]``) features of the same ``N`` trajectories.
        p: norm order, >= 1.

    Returns:
        ``[N]`` distances, >= 0.
    """
    _check_pair("ln_norm_distance", a, b)
    return torch.linalg.vector_norm((a - b).flatten(1), ord=p, dim=1)


def cos_distance(a: torch.Tensor, b: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """One minus the cosine similarity of each trajectory's flattened features.

        cos_n = <a_n, b_n> / (max(||a_n||, eps) * max(||b_n||, eps)),   d_n = 1 - cos_n    (in [0, 2])

    with ``a_n`` the ``T * F`` values of trajectory ``n``. sfx: the platform ranks by the cosine similarity
    itself (``torch.nn.CosineSimilarity``) with the same "lowest first" rules as for its distances, which
    would prefer the least similar trajectories under ``cos_dist`` and the most similar under ``ln_norm``;
    ``1 - cos`` keeps "smaller = closer" for every ``dist_function``, as the issue describes elite sampling.

    Args:
        a, b: ``[N, T, F]`` (any ``[N, ...]``) features.
        eps: floor on each norm (a zero vector has cosine 0 with everything, so distance 1).

    Returns:
        ``[N]`` distances.
    """
    _check_pair("cos_distance", a, b)
    a, b = a.flatten(1), b.flatten(1)
    norms = torch.linalg.vector_norm(a, dim=1).clamp_min(eps) * torch.linalg.vector_norm(b, dim=1).clamp_min(eps)
    return 1.0 - (a * b).sum(dim=1) / norms


def kl_div_distance(behaviour_logits: torch.Tensor, current_logits: torch.Tensor) -> torch.Tensor:
    """Per-step KL divergence between the softmaxes of the features, summed over steps.

        d_n = sum_t KL( softmax(current[n, t]) || softmax(behaviour[n, t]) )
            = sum_t sum_f q_f (log q_f - log p_f),   q = softmax(current[n, t]),  p = softmax(behaviour[n, t])

    The platform reads the features as categorical logits over their last dimension and takes KL(target ||
    behaviour) (the newly computed distribution first).

    Args:
        behaviour_logits: ``[N, T, F]`` (any ``[N, ..., F]``) features stored at acting time (or the
            attentive reference).
        current_logits: same shape, recomputed with the current weights.

    Returns:
        ``[N]`` distances, >= 0.
    """
    _check_pair("kl_div_distance", behaviour_logits, current_logits)
    log_p = torch.log_softmax(behaviour_logits, dim=-1)
    log_q = torch.log_softmax(current_logits, dim=-1)
    per_step = (log_q.exp() * (log_q - log_p)).sum(dim=-1)
    return per_step.flatten(1).sum(dim=1)


def feature_distance(dist_function: str, behaviour: torch.Tensor, current: torch.Tensor, p: float = 2) -> torch.Tensor:
    """Elite distance of each trajectory: its stored behaviour-time features against the same trajectory's
    features recomputed with the current weights.

    Args:
        dist_function: ``ln_norm``, ``cos_dist`` or ``kl_div``.
        behaviour: ``[N, T, F]`` stored features.
        current: ``[N, T, F]`` recomputed features.
        p: ``ln_norm``'s order.

    Returns:
        ``[N]`` distances (smaller = the policy moved less on that trajectory).
    """
    if dist_function == "ln_norm":
        return ln_norm_distance(behaviour, current, p)
    if dist_function == "cos_dist":
        return cos_distance(behaviour, current)
    if dist_function == "kl_div":
        return kl_div_distance(behaviour, current)
    raise ValueError(f"feature_distance: unknown dist_function {dist_function!r}; allowed: {', '.join(DIST_FUNCTIONS)}")


def attentive_distance(dist_function: str, current: torch.Tensor, reference: torch.Tensor,
                       p: float = 2) -> torch.Tensor:
    """Attentive distance of each candidate to where the agent is now.

    The platform's reference is the feature of the last step of the most recently stored trajectory,
    recomputed with the current weights; every step of a candidate (also recomputed) is compared with it:

        d_n = feature_distance(dist_function, behaviour=R, current=current[n]),   R[t] = reference  for all t

    sfx: the platform broadcasts the reference to ``[T, T, F]``, which multiplies ``ln_norm`` by ``T^(1/p)``
    and ``kl_div`` by ``T`` (the same for every candidate, so no pick changes) and fails for ``cos_dist``
    (flattened lengths differ); here the reference is repeated once per step, ``[T, F]``.

    Args:
        dist_function: ``ln_norm``, ``cos_dist`` or ``kl_div``.
        current: ``[N, T, F]`` candidates' recomputed features.
        reference: ``[F]`` the current feature of the newest stored trajectory's last step.
        p: ``ln_norm``'s order.

    Returns:
        ``[N]`` distances (smaller = more similar to the agent's current state).
    """
    if reference.shape != current.shape[-1:]:
        raise ValueError(f"attentive_distance: reference has shape {tuple(reference.shape)}, expected "
                         f"{tuple(current.shape[-1:])} (one step's features)")
    return feature_distance(dist_function, reference.expand_as(current), current, p)


# ----------------------------------------------------------------------------------------------------------
# Sampling
# ----------------------------------------------------------------------------------------------------------


def uniform_sample(n_stored: int, k: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """``k`` indices drawn uniformly with replacement from ``[0, n_stored)`` (standard buffers; custom
    buffers without a sample strategy; the candidate set of attentive and elite sampling).

    Returns:
        ``[k]`` int64 indices; ``k > n_stored`` repeats indices.

    Raises:
        ValueError: ``k > 0`` from an empty buffer (the store must not be ``ready`` before it holds one).
    """
    if k < 0:
        raise ValueError(f"uniform_sample: k must be >= 0, got {k}")
    if n_stored <= 0 and k > 0:
        raise ValueError(f"uniform_sample: cannot draw {k} trajectories from an empty buffer")
    return torch.randint(0, max(n_stored, 1), (k,), generator=generator, dtype=torch.int64)


def count_samples(sample_counts: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """New sample counts after ``indices`` were sampled: ``counts[i] + (times i occurs in indices)``.

    The platform sets a slot's count to 1 when a trajectory is stored there and adds 1 per draw; the rules
    only compare counts, so a store that starts at 0 picks the same.

    Args:
        sample_counts: ``[n]`` int counts of the stored trajectories.
        indices: ``[k]`` sampled indices (repeats count twice).

    Returns:
        ``[n]`` updated counts (a new tensor).
    """
    return sample_counts + torch.bincount(indices.long(), minlength=sample_counts.shape[0]).to(sample_counts.dtype)


def annealed_lambda(lambda_batch_multiplier: float, alfa_annealing_factor: float, horizon: int, step: int) -> float:
    """Candidate multiplier for the ``step``-th sample of a custom buffer (``step = 1`` for the first).

        lambda_step = max(1, L - step * (L - 1) / (horizon * alfa))

    a linear decay from ``L = lambda_batch_multiplier`` to 1 over ``alfa * horizon`` samples (AER's bias
    annealing). The platform lowers lambda by ``(L - 1) / (horizon * alfa)`` before every sample, so its
    first sample already uses ``step = 1``; ``horizon`` is its ``lr_scheduler_steps`` (the learner
    iterations of its learning-rate decay, default 10000).

    Args:
        lambda_batch_multiplier: ``L >= 1``.
        alfa_annealing_factor: ``alfa > 0``.
        horizon: ``> 0`` iterations.
        step: ``>= 0``.
    """
    if horizon <= 0 or alfa_annealing_factor <= 0 or lambda_batch_multiplier < 1:
        raise ValueError(f"annealed_lambda: needs horizon > 0, alfa > 0, lambda >= 1; got {horizon}, "
                         f"{alfa_annealing_factor}, {lambda_batch_multiplier}")
    lam = lambda_batch_multiplier - step * (lambda_batch_multiplier - 1) / (horizon * alfa_annealing_factor)
    return max(1.0, float(lam))


def candidate_count(k: int, lambda_: float) -> int:
    """Size of the candidate set for ``k`` picks: ``int(lambda_ * k)`` (>= ``k`` since ``lambda_ >= 1``)."""
    return int(lambda_ * k)


def candidate_indices(n_stored: int, k: int, lambda_: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """The candidate set of attentive / elite sampling: ``int(lambda_ * k)`` indices uniform with replacement.

    Where ``lambda_ == 1`` the platform returns these candidates as the sample itself (uniform sampling, no
    features recomputed); the store should do the same, then ``count_samples``.

    Returns:
        ``[M]`` int64 stored indices, ``M = candidate_count(k, lambda_)``, possibly repeated.
    """
    return uniform_sample(n_stored, candidate_count(k, lambda_), generator)


class ReplaySample(NamedTuple):
    """What one attentive / elite sample picked, and what the store must write back.

    Attributes:
        indices: ``[k]`` int64 stored indices to put in the batch, in pick order (may repeat); on the device of
            ``sample_counts``.
        distances: ``[k]`` the picked candidates' distances (for the ``replay/distance_*`` statistics).
        sample_counts: ``[n_stored]`` the store's counts after this sample (``count_samples``).
    """

    indices: torch.Tensor
    distances: torch.Tensor
    sample_counts: torch.Tensor


def _pick_order(strategy: str, distance: list[float], count: list[int], multiplicity: list[int], k: int) -> list[int]:
    """Positions (into the distinct candidates, in first-appearance order) one pass of ``strategy`` picks."""
    ranked = sorted(range(len(distance)), key=lambda u: distance[u])  # stable: ties keep first appearance
    n = len(ranked)
    chunk = max(1, n // k)  # sfx: the platform divides by n // k, which is 0 with fewer distinct candidates than k
    if strategy == "strategy1":
        return [u for u in ranked for _ in range(multiplicity[u])]
    if strategy == "strategy2":
        return ranked[::chunk]
    if strategy == "strategy3":
        return sorted(ranked, key=lambda u: count[u])  # stable: by count, then by distance rank
    if strategy == "strategy4":
        picks = []
        for start in range(0, n - chunk + 1, chunk):
            members = ranked[start:start + chunk]
            picks.append(min(members, key=lambda u: count[u]))  # the first of equal counts: the closest
        return picks
    raise ValueError(f"elite_sample: unknown strategy {strategy!r}; allowed: {', '.join(ELITE_SAMPLING_STRATEGIES)}")


def _nan_to_inf(distances: torch.Tensor) -> list[float]:
    """Distances as floats, NaN (features gone non-finite) read as the largest distance."""
    return [math.inf if math.isnan(d) else d for d in distances.detach().double().tolist()]


def elite_sample(
    candidates: torch.Tensor,
    distances: torch.Tensor,
    sample_counts: torch.Tensor,
    k: int,
    strategy: str = "strategy3",
) -> ReplaySample:
    """Pick ``k`` of the candidate trajectories by distance (and sample count).

    The candidates (``candidate_indices``; repeats allowed) are first merged into distinct stored indices in
    order of first appearance, each with the distance of its first occurrence, its stored sample count and
    its multiplicity; the distinct ones are ranked by distance, ascending (ties: first appearance first).
    With ``U`` distinct candidates and ``c = max(1, U // k)``:

    - ``strategy1``: walk the ranking, taking each index as often as it was drawn, until ``k``: the lowest
      distances.
    - ``strategy2``: ranks ``0, c, 2c, ...``: evenly spaced over the ranking.
    - ``strategy3`` (platform default): ordered by sample count, ascending, then by rank: the least-sampled
      first, the closest among equals.
    - ``strategy4``: consecutive chunks of ``c`` ranks (``[0, c)``, ``[c, 2c)``, ...; a tail shorter than
      ``c`` is dropped); from each, its least-sampled member (the closest of equals).

    Each strategy stops at ``k`` picks. sfx: where one pass yields fewer than ``k`` (fewer than ``k``
    distinct candidates; the platform then loops forever in strategy3 and divides by zero in 2 and 4), the
    pass is repeated from its start until ``k``.

    Args:
        candidates: ``[M]`` stored indices drawn for this sample.
        distances: ``[M]`` each candidate's distance (``feature_distance`` for elite sampling,
            ``attentive_distance`` for attentive sampling); equal for repeats of one index. NaN ranks as the
            largest distance.
        sample_counts: ``[n_stored]`` the store's sample counts (reset when a slot is overwritten; only their
            order matters, so starting at 0 or at the platform's 1 picks the same).
        k: picks (``>= 0``).
        strategy: ``strategy1`` .. ``strategy4``.

    Returns:
        ``ReplaySample``: ``[k]`` indices and distances, and the ``[n_stored]`` counts after the pick.
    """
    if candidates.dim() != 1 or distances.shape != candidates.shape:
        raise ValueError(f"elite_sample: candidates and distances must be [M], got {tuple(candidates.shape)} and "
                         f"{tuple(distances.shape)}")
    if k < 0:
        raise ValueError(f"elite_sample: k must be >= 0, got {k}")
    if k > 0 and candidates.numel() == 0:
        raise ValueError(f"elite_sample: cannot pick {k} trajectories from no candidates")
    if strategy not in ELITE_SAMPLING_STRATEGIES:
        raise ValueError(f"elite_sample: unknown strategy {strategy!r}; "
                         f"allowed: {', '.join(ELITE_SAMPLING_STRATEGIES)}")

    cand = candidates.tolist()
    dist = _nan_to_inf(distances)
    first: dict[int, int] = {}  # stored index -> position of its first occurrence (insertion-ordered)
    multiplicity: dict[int, int] = {}
    for pos, index in enumerate(cand):
        first.setdefault(index, pos)
        multiplicity[index] = multiplicity.get(index, 0) + 1
    distinct = list(first)
    distinct_dist = [dist[first[i]] for i in distinct]
    distinct_count = sample_counts[torch.tensor(distinct, dtype=torch.int64, device=sample_counts.device)].tolist()

    picks: list[int] = []
    if k > 0:
        one_pass = _pick_order(strategy, distinct_dist, distinct_count, [multiplicity[i] for i in distinct], k)
        while len(picks) < k:
            picks.extend(one_pass[: k - len(picks)])

    indices = torch.tensor([distinct[u] for u in picks], dtype=torch.int64, device=sample_counts.device)
    positions = torch.tensor([first[distinct[u]] for u in picks], dtype=torch.int64, device=distances.device)
    picked_distances = distances.detach()[positions]
    return ReplaySample(indices, picked_distances, count_samples(sample_counts, indices))


def attentive_sample(
    candidates: torch.Tensor,
    distances: torch.Tensor,
    sample_counts: torch.Tensor,
    k: int,
    strategy: str = "strategy3",
) -> ReplaySample:
    """Attentive sampling (Sun et al. 2020): the candidates closest to the agent's current state.

    The platform's attentive sampling differs from elite sampling only in its distances
    (``attentive_distance``: each candidate's current features against the current feature of the newest
    stored trajectory's last step, instead of against its own behaviour-time features); the picks follow the
    same ``elite_sampling_strategy`` (``elite_sample``), so ``strategy1`` is AER's "the k most similar of
    lambda * k uniform candidates". Picks are deterministic given the candidates: no distance weighting.

    Args and returns: as ``elite_sample``.
    """
    return elite_sample(candidates, distances, sample_counts, k, strategy)


# ----------------------------------------------------------------------------------------------------------
# Insertion
# ----------------------------------------------------------------------------------------------------------


def ring_index(n_inserted: int, capacity: int) -> int:
    """Slot of the next trajectory in a ring buffer that has taken ``n_inserted`` before: the oldest.

    Standard buffers and custom buffers without elite insertion always insert this way; an elite-insertion
    buffer until it is full (``n_inserted < capacity``).
    """
    if capacity < 1 or n_inserted < 0:
        raise ValueError(f"ring_index: needs capacity >= 1 and n_inserted >= 0, got {capacity}, {n_inserted}")
    return n_inserted % capacity


def insertion_candidates(capacity: int, elite_batch_size: int,
                         generator: torch.Generator | None = None) -> torch.Tensor:
    """Stored trajectories one elite insertion compares: ``min(elite_batch_size, capacity)`` distinct slots,
    uniform without replacement over the full buffer (sfx: the platform fails for
    ``elite_batch_size > capacity``; here all slots are compared).

    Returns:
        ``[min(elite_batch_size, capacity)]`` int64 distinct slots, in draw order.
    """
    if capacity < 1 or elite_batch_size < 1:
        raise ValueError(f"insertion_candidates: needs capacity and elite_batch_size >= 1, got {capacity}, "
                         f"{elite_batch_size}")
    return torch.randperm(capacity, generator=generator)[: min(elite_batch_size, capacity)]


class EliteInsertion(NamedTuple):
    """The slot a new trajectory overwrites under elite insertion.

    Attributes:
        index: the stored slot to overwrite (its sample count restarts, its features are the new ones).
        distance: that slot's distance (the largest of the candidates).
    """

    index: int
    distance: float


def elite_insert(candidates: torch.Tensor, distances: torch.Tensor) -> EliteInsertion:
    """Elite insertion into a full custom buffer: replace the candidate that is most off-policy.

        index = candidates[argmax_j distances[j]]     (ties: the earliest candidate)

    with ``distances = feature_distance(dist_function, stored_features[candidates], recomputed_features)``
    over ``insertion_candidates``. The platform computes these once per arriving trajectory with the
    learner's latest weights. sfx: elite insertion starts once the buffer is full (``n_inserted >=
    capacity``); the platform still writes its ``capacity + 1``-th trajectory to the ring (slot 0) first.

    Args:
        candidates: ``[E]`` stored slots (``insertion_candidates``).
        distances: ``[E]`` their distances (NaN counts as the largest: broken features go first).
    """
    if candidates.dim() != 1 or candidates.numel() == 0 or distances.shape != candidates.shape:
        raise ValueError(f"elite_insert: candidates and distances must be one non-empty [E] shape, got "
                         f"{tuple(candidates.shape)} and {tuple(distances.shape)}")
    dist = _nan_to_inf(distances)
    best = max(range(len(dist)), key=lambda j: (dist[j], -j))
    return EliteInsertion(int(candidates[best]), float(dist[best]))
