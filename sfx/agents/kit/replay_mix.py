"""Experience replay as a sample source: each iteration's batch mixed from several buffers, in the V-trace
replay platform's ``--replay_parameters`` format (``sfx.algo.replay_parameters.parse_replay_parameters``).

A ``queue`` entry is the fresh on-policy stream; a ``standard`` buffer keeps the last ``capacity``
trajectories (a ring) and is sampled uniformly; a ``custom`` buffer samples by the distance between the
features a trajectory was acted with and the same trajectory's features under the current weights
(attentive or elite sampling, ``sfx.algo.replay``), and may insert by elite insertion. Every iteration:
the fresh trajectories (the queue's share, or the whole batch's worth when there is no queue) are taken
from the engine's :class:`~sfx.engine.sample_source.FreshTrajectories`, copied into every replay buffer,
and each buffer adds its share of replayed ones (``Batch.fresh`` False; their ``age`` in learner steps
kept). Replayed samples are exempt from ``--max_policy_lag`` (V-trace corrects them). The buffers live in
the learner process's memory (:class:`~sfx.agents.kit.replay_store.ReplayRing` each, the mix a
:class:`~sfx.agents.kit.replay_store.ReplayStore`), bounded by their capacities (checked at start against free RAM by
:meth:`~sfx.agents.base.Agent.host_memory_bytes`); they are not checkpointed: a resumed run refills them.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from sfx.agents.base import Batch, tree_map
from sfx.agents.kit.replay_store import ReplayRing, ReplayStore
from sfx.algo import replay as rules
from sfx.algo.replay_parameters import batch_composition

# custom buffers anneal their candidate multiplier to 1 over this many samples (the platform's
# lr_scheduler_steps default, in learner iterations: sfx's --lr_schedule counts env steps) times alfa_annealing_factor
LAMBDA_HORIZON = 10_000


class TrajectoryRing(ReplayRing):
    """``capacity`` trajectories as one tensor per field (``[capacity, ...]``), allocated on first insert
    with the shapes of the first batch; insertion order is a ring unless the caller gives the rows."""

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.sample_counts = torch.zeros(self.capacity, dtype=torch.long)

    def insert(self, data: dict[str, Any], rows: torch.Tensor | None = None) -> torch.Tensor:
        """Copy the ``n`` trajectories of ``data`` (a tree of ``[n, ...]``) into ``rows`` (default: the ring's
        next ones); returns the rows written. At most ``capacity`` are kept (the last ones)."""
        if self.data is None:
            self.data = tree_map(self.zeros_like_rows, data)
        if rows is None:
            first, rows = self.claim(int(next(iter(_leaves(data))).shape[0]))
            if first:
                data = tree_map(lambda v: v[first:], data)
        else:
            self.size = max(self.size, int(rows.max()) + 1) if len(rows) else self.size
        rows_cpu = rows.cpu()
        _copy_rows(self.data, data, rows_cpu)
        self.sample_counts[rows_cpu] = 0
        return rows_cpu

    def peek(self, rows: torch.Tensor, device: torch.device) -> dict[str, Any]:
        """The stored trajectories at ``rows`` (copies on ``device``)."""
        return tree_map(lambda v: v[rows].to(device), self.data)


def _leaves(tree: Any):
    if isinstance(tree, dict):
        for v in tree.values():
            yield from _leaves(v)
    else:
        yield tree


def _copy_rows(dst: dict, src: dict, rows: torch.Tensor) -> None:
    for k, v in src.items():
        if isinstance(v, dict):
            _copy_rows(dst[k], v, rows)
        else:
            dst[k][rows] = v.detach().to(dst[k].device, dst[k].dtype)


def _cat(trees: Sequence[dict]) -> dict:
    first = trees[0]
    return {k: (_cat([t[k] for t in trees]) if isinstance(v, dict) else torch.cat([t[k] for t in trees]))
            for k, v in first.items()}


class ReplayMix(ReplayStore):
    """The sample source of ``--replay_parameters`` (see the module docstring).

    Args:
        fresh: the engine's fresh source (``add`` / ``ready`` / ``next_batch``, and ``take_per_iteration``: told
            how many fresh trajectories a batch takes).
        specs: the parsed buffers (``parse_replay_parameters``).
        per_iteration: () -> trajectories per batch (the agent's ``trajectories_per_iteration``).
        device: the learner's device.
        features: ``data -> [n, T, F]`` the current weights' features of stored trajectories (custom buffers).
        seed: the sampling rules' random stream.
    """

    def __init__(self, fresh: Any, specs: Sequence[Any], per_iteration: Callable[[], int], device: torch.device,
                 features: Callable[[dict], torch.Tensor] | None = None, seed: int | None = None) -> None:
        # no ring of its own (each buffer is one) and no credit: every batch takes each buffer's share
        super().__init__(fresh, 0, 0.0, device, seed)
        self.specs = tuple(specs)
        self.per_iteration = per_iteration
        self.features = features
        self.queue = next((i for i, s in enumerate(self.specs) if s.type == "queue"), None)
        self.rings = {i: TrajectoryRing(s.capacity) for i, s in enumerate(self.specs) if s.type != "queue"}
        # a stored trajectory's id (Batch.ids): its row counted over the buffers in their order
        self.id_offsets, offset = {}, 0
        for i, ring in self.rings.items():
            self.id_offsets[i] = offset
            offset += ring.capacity
        self.samples = {i: 0 for i in self.rings}  # samples drawn per custom buffer (lambda annealing)
        self.last_row = {i: -1 for i in self.rings}  # the newest trajectory's row (attentive sampling's reference)
        fresh.take_per_iteration(self._fresh_per_iteration)

    def _composition(self) -> list[int]:
        # the batch size was checked at start (every share whole); PBT may change it since: the remainder
        # then goes to the fresh stream
        return batch_composition(self.specs, self.per_iteration(), remainder="to_queue")

    def _fresh_per_iteration(self) -> int:
        """Fresh trajectories per batch: the queue's share; without a queue, a whole batch's worth (they go
        into the buffers only)."""
        if self.queue is None:
            return self.per_iteration()
        return max(1, self._composition()[self.queue])

    def insert(self, fresh: Batch) -> Batch:
        """The fresh trajectories into every buffer; the batch handed on: the queue's fresh share and each
        buffer's replayed share (sampled before this batch's insert)."""
        policy_version = self.version
        counts = self._composition()
        parts, valids, ages, fresh_flags, ids, stats = [], [], [], [], [], {}
        if self.queue is not None:
            parts.append(fresh.data)
            valids.append(fresh.valids)
            ages.append(fresh.age)
            fresh_flags.append(fresh.fresh)
            ids.append(fresh.ids)
        for i, ring in self.rings.items():
            want = counts[i]
            if want > 0 and ring.size > 0:
                rows = self._sample(i, ring, want, stats)
                data = ring.peek(rows, self.device)
                age = (policy_version - data["policy_versions"]).float()
                parts.append(data)
                valids.append(data["active"].clone())  # replayed samples: exempt from --max_policy_lag
                ages.append(age)
                fresh_flags.append(torch.zeros(len(rows), dtype=torch.bool, device=self.device))
                ids.append((rows + self.id_offsets[i]).to(self.device))
                stats[f"replay/{i}_{self.specs[i].type}/samples"] = float(len(rows))
                stats[f"replay/{i}_{self.specs[i].type}/age_mean"] = float(age.mean())
                stats[f"replay/{i}_{self.specs[i].type}/age_max"] = float(age.max())
            self._insert(i, ring, fresh.data)
            stats[f"replay/{i}_{self.specs[i].type}/fill"] = ring.size / ring.capacity
        if not parts:  # no queue and the buffers were empty: this first batch trains on the fresh ones
            parts, valids, ages, fresh_flags, ids = [fresh.data], [fresh.valids], [fresh.age], [fresh.fresh], [fresh.ids]
        n = sum(len(f) for f in fresh_flags)
        trained_fresh = int(sum(int(f.sum()) for f in fresh_flags))
        stats["replay/fresh_share"] = trained_fresh / max(1, n)
        return Batch(data=_cat(parts), valids=torch.cat(valids), fresh=torch.cat(fresh_flags), age=torch.cat(ages),
                     env_steps=fresh.env_steps, ids=torch.cat([i.to(self.device, torch.long) for i in ids]), stats=stats)

    # ------------------------------------------------------------------------------------------ per buffer

    def _sample(self, i: int, ring: TrajectoryRing, k: int, stats: dict[str, float]) -> torch.Tensor:
        """``k`` stored rows of buffer ``i``: uniform (standard; custom without a sample strategy, or while its
        candidate multiplier is 1), else attentive / elite sampling over ``lambda x k`` candidates whose
        features are recomputed with the current weights."""
        spec = self.specs[i]
        if spec.type == "standard" or not spec.sample_strategy:
            rows = rules.uniform_sample(ring.size, k, self.generator)
            ring.sample_counts = rules.count_samples(ring.sample_counts, rows)
            return rows
        self.samples[i] += 1
        lam = rules.annealed_lambda(spec.lambda_batch_multiplier, spec.alfa_annealing_factor, LAMBDA_HORIZON,
                                    self.samples[i])
        candidates = rules.candidate_indices(ring.size, k, lam, self.generator)
        stats[f"replay/{i}_custom/lambda"] = lam
        if lam == 1.0:
            ring.sample_counts = rules.count_samples(ring.sample_counts, candidates)
            return candidates
        current = self.features(ring.peek(candidates, self.device)).float().cpu()
        if spec.sample_strategy == "attentive_sampling":
            newest = ring.peek(torch.tensor([self.last_row[i]]), self.device)
            reference = self.features(newest).float().cpu()[0, -1]
            distances = rules.attentive_distance(spec.dist_function, current, reference, spec.p)
            picked = rules.attentive_sample(candidates, distances, ring.sample_counts, k, spec.elite_sampling_strategy)
        else:
            behaviour = ring.data["features"][candidates].float()
            distances = rules.feature_distance(spec.dist_function, behaviour, current, spec.p)
            picked = rules.elite_sample(candidates, distances, ring.sample_counts, k, spec.elite_sampling_strategy)
        ring.sample_counts = picked.sample_counts
        finite = picked.distances[torch.isfinite(picked.distances)]
        if finite.numel():
            stats[f"replay/{i}_custom/distance_mean"] = float(finite.mean())
            stats[f"replay/{i}_custom/distance_max"] = float(finite.max())
        stats[f"replay/{i}_custom/candidates_distance_mean"] = float(distances[torch.isfinite(distances)].mean()) \
            if bool(torch.isfinite(distances).any()) else float("nan")
        return picked.indices

    def _insert(self, i: int, ring: TrajectoryRing, data: dict) -> None:
        """The fresh trajectories into buffer ``i``: the ring's next rows, or, once an elite-insertion buffer
        is full, each in place of the most off-policy of ``elite_batch_size`` random stored ones."""
        spec = self.specs[i]
        n = int(data["rewards"].shape[0])
        if spec.insert_strategy != "elite_insertion" or ring.size < ring.capacity:
            rows = ring.insert(data)
        else:
            rows = []
            for j in range(n):
                candidates = rules.insertion_candidates(ring.capacity, spec.elite_batch_size, self.generator)
                current = self.features(ring.peek(candidates, self.device)).float().cpu()
                behaviour = ring.data["features"][candidates].float()
                distances = rules.feature_distance(spec.dist_function, behaviour, current, spec.p)
                row = rules.elite_insert(candidates, distances).index
                ring.insert(tree_map(lambda v, j=j: v[j:j + 1], data), torch.tensor([row]))
                rows.append(row)
            rows = torch.tensor(rows)
        self.last_row[i] = int(rows[-1])
