"""Replay mixed into V-trace batches: feature distances and the sampling / insertion rules of queue, standard and
custom (attentive / elite) buffers (the buffer list and the batch composition: :mod:`sfx.algo.replay_parameters`).

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

import math
from typing import NamedTuple

import torch

from sfx.algo.replay_parameters import DIST_FUNCTIONS, ELITE_SAMPLING_STRATEGIES

__all__ = [
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
