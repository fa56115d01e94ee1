"""Where the time goes: every component's time, measured by the runtime loop, reported to the coordinator.

In each component's process (:mod:`sfx.engine.runtime`) the loop measures, without the component's help:

- ``wait/<what>``: blocked reading its inbox, named by what the component says it waits for
  (``Component.waiting_for``: a rollout worker's ``actions`` or ``gate``, a learner's ``trajectories``);
- ``busy/<kind>``: handling messages, by the message kind that arrived (``busy/act``, ``busy/traj``, ...);
- ``busy/tick``: periodic work between reads;
- the depth of its inbox when it reads.

Inside ``busy`` a component marks the parts only it can see with ``with section("forward"):`` (a module-level
call: the loop sets which meter is current, so no object is threaded through). Parts nest in ``busy``:
a rollout worker's ``env_step`` is part of its ``busy/act``. Counters (``count(name, n)``) and latencies
(``latency(name, sec)``: a log-binned histogram, percentiles on the coordinator) go with them.

Every ``--report_every_sec`` (as the status line) the meter sends ``(PERF, component, payload)`` (:mod:`sfx.engine.protocol`); the
coordinator's :class:`PerfTable` keeps the last window and the whole run per component and turns them into
TensorBoard scalars under ``perf/``, a short part of the status line, and the table printed when a run ends.
On CUDA, :class:`GpuMonitor` adds the GPU's utilisation and memory from NVML (``nvidia-ml-py``).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import math
import threading
import time
from typing import Any, Iterator

import numpy as np

log = logging.getLogger(__name__)

# latency histogram: log-spaced bins from 10 us to ~100 s, 10 per decade
LATENCY_MIN_SEC = 1e-5
LATENCY_BINS_PER_DECADE = 10
LATENCY_NUM_BINS = 70


def _latency_bin(sec: float) -> int:
    if sec <= LATENCY_MIN_SEC:
        return 0
    return min(LATENCY_NUM_BINS - 1, int(math.log10(sec / LATENCY_MIN_SEC) * LATENCY_BINS_PER_DECADE))


def latency_bin_upper_sec(i: int) -> float:
    """The upper edge of histogram bin ``i`` (a percentile is read as its bin's upper edge: at most 26% high)."""
    return LATENCY_MIN_SEC * 10 ** ((i + 1) / LATENCY_BINS_PER_DECADE)


def percentile_sec(hist: np.ndarray, q: float) -> float:
    """The ``q`` quantile (0-1) of a latency histogram, or nan when it is empty."""
    n = int(hist.sum())
    if n == 0:
        return float("nan")
    return latency_bin_upper_sec(int(np.searchsorted(np.cumsum(hist), q * n, side="left")))


class PerfMeter:
    """One component's clock (see the module docstring). Cheap: a section costs two ``perf_counter`` calls."""

    def __init__(self, name: str, report_sec: float = 5.0) -> None:
        self.name = name
        self.report_sec = report_sec
        self.sec: dict[str, float] = collections.defaultdict(float)
        self.counts: dict[str, int] = collections.defaultdict(int)
        self.hists: dict[str, np.ndarray] = {}
        self.depth_sum = 0
        self.depth_reads = 0
        self.window_start = time.perf_counter()

    def add(self, name: str, sec: float) -> None:
        self.sec[name] += sec

    @contextlib.contextmanager
    def section(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.sec[name] += time.perf_counter() - t0

    def count(self, name: str, n: int = 1) -> None:
        self.counts[name] += n

    def latency(self, name: str, sec: float) -> None:
        hist = self.hists.get(name)
        if hist is None:
            hist = self.hists[name] = np.zeros(LATENCY_NUM_BINS, dtype=np.int64)
        hist[_latency_bin(sec)] += 1

    def inbox_depth(self, depth: int) -> None:
        self.depth_sum += depth
        self.depth_reads += 1

    def due(self, now: float | None = None) -> bool:
        return (time.perf_counter() if now is None else now) - self.window_start >= self.report_sec

    def take(self) -> dict:
        """The window since the last take (``wall`` seconds, ``sec`` per part, ``counts``, ``hists``,
        ``inbox_depth``), and a new window."""
        now = time.perf_counter()
        payload = {"wall": now - self.window_start, "sec": dict(self.sec), "counts": dict(self.counts),
                   "hists": {k: v.copy() for k, v in self.hists.items()},
                   "inbox_depth": self.depth_sum / self.depth_reads if self.depth_reads else 0.0}
        self.sec.clear()
        self.counts.clear()
        for h in self.hists.values():
            h[:] = 0
        self.depth_sum = self.depth_reads = 0
        self.window_start = now
        return payload


class _NullMeter(PerfMeter):
    """The meter outside any runtime loop (a component built by a test): records nothing."""

    def add(self, name: str, sec: float) -> None:
        pass

    @contextlib.contextmanager
    def section(self, name: str) -> Iterator[None]:
        yield

    def count(self, name: str, n: int = 1) -> None:
        pass

    def latency(self, name: str, sec: float) -> None:
        pass


_NULL = _NullMeter("none")
_local = threading.local()  # per thread: a learner's inference thread has a meter of its own


def use(meter: PerfMeter | None) -> None:
    """Make ``meter`` this thread's current one (the runtime loop does, before handing a component control)."""
    _local.meter = meter if meter is not None else _NULL


def current() -> PerfMeter:
    return getattr(_local, "meter", _NULL)


def section(name: str):
    """``with section("forward"):`` times a part of the current component's work."""
    return current().section(name)


def count(name: str, n: int = 1) -> None:
    current().count(name, n)


def latency(name: str, sec: float) -> None:
    current().latency(name, sec)


def message_kind(msgs: list) -> str:
    """The kind of a batch of messages (their first element when it is a string), for ``busy/<kind>``."""
    first = msgs[0]
    kind = first[0] if isinstance(first, tuple) and first and isinstance(first[0], str) else "msg"
    return kind


# --------------------------------------------------------------------------- the coordinator's side

def component_role(name: str) -> str:
    """``rollout_worker_3`` -> ``rollout_worker``."""
    head, _, tail = name.rpartition("_")
    return head if tail.isdigit() and head else name


class _Totals:
    def __init__(self) -> None:
        self.wall = 0.0
        self.sec: dict[str, float] = collections.defaultdict(float)
        self.counts: dict[str, int] = collections.defaultdict(int)
        self.hists: dict[str, np.ndarray] = {}
        self.depth = 0.0
        self.windows = 0
        self.components: set[str] = set()

    def add(self, component: str, p: dict) -> None:
        self.components.add(component)
        self.wall += p["wall"]
        for k, v in p["sec"].items():
            self.sec[k] += v
        for k, v in p["counts"].items():
            self.counts[k] += v
        for k, v in p["hists"].items():
            if k in self.hists:
                self.hists[k] = self.hists[k] + v
            else:
                self.hists[k] = np.array(v)
        self.depth += p["inbox_depth"]
        self.windows += 1


class PerfTable:
    """The coordinator's view of every component's time: per role (all rollout workers together, ...), the
    last window (``last``) and the whole run (``total``)."""

    def __init__(self) -> None:
        self.total: dict[str, _Totals] = {}
        self.last: dict[str, _Totals] = {}
        self._window: dict[str, _Totals] = {}

    def add(self, component: str, payload: dict) -> None:
        role = component_role(component)
        for table in (self.total, self._window):
            table.setdefault(role, _Totals()).add(component, payload)

    def roll(self) -> None:
        """Close the current window (the coordinator calls this once per status line)."""
        if self._window:
            self.last, self._window = self._window, {}

    @staticmethod
    def _shares(t: _Totals) -> dict[str, float]:
        return {k: v / t.wall for k, v in t.sec.items()} if t.wall > 0 else {}

    def scalars(self) -> dict[str, float]:
        """TensorBoard's ``perf/<role>/<part>`` (share of the components' wall time, 0-1), ``perf/<role>/busy``,
        counters per second of one component's time (``*_per_sec``), latency percentiles in ms, inbox depths."""
        out: dict[str, float] = {}
        for role, t in self.last.items():
            shares = self._shares(t)
            for k, v in shares.items():
                out[f"perf/{role}/{k}"] = v
            out[f"perf/{role}/busy"] = sum(v for k, v in shares.items() if k.startswith("busy/"))
            for k, n in t.counts.items():  # per second of one component's time
                out[f"perf/{role}/{k}_per_sec"] = n / t.wall if t.wall > 0 else 0.0
            for k, h in t.hists.items():
                for q in (0.5, 0.9, 0.99):
                    out[f"perf/{role}/{k}_p{int(q * 100)}_ms"] = 1000 * percentile_sec(h, q)
            out[f"perf/{role}/inbox_depth"] = t.depth / t.windows if t.windows else 0.0
        return out

    def status_text(self) -> str:
        """A short part of the status line: each role's busy share (and its largest part), e.g.
        ``busy rollout 93% (env_step 71%), inference 38%, learner 64%``; empty before the first window."""
        names = {"rollout_worker": "rollout", "policy_worker": "inference", "inference": "inference",
                 "learner": "learner"}
        parts = []
        for role in ("rollout_worker", "policy_worker", "inference", "learner"):
            t = self.last.get(role)
            if t is None or t.wall <= 0:
                continue
            shares = self._shares(t)
            busy = sum(v for k, v in shares.items() if k.startswith("busy/"))
            inner = {k: v for k, v in shares.items() if "/" not in k}
            top = max(inner, key=inner.get) if inner else None
            parts.append(f"{names[role]} {busy:.0%}" + (f" ({top} {inner[top]:.0%})" if top else ""))
        return "busy " + ", ".join(parts) if parts else ""

    def table(self) -> str:
        """The whole run, per role: each measured part's share of the wall time and its total seconds (summed
        over the role's components), counters per second, latency percentiles; for the end of a run."""
        lines = []
        for role, t in sorted(self.total.items()):
            if t.wall <= 0:
                continue
            n = len(t.components)
            lines.append(f"{role}: {n} component{'s' if n > 1 else ''}, {t.wall:,.0f} s of their time in all")
            shares = self._shares(t)
            loop = sorted((k for k in shares if "/" in k), key=lambda k: -shares[k])
            inner = sorted((k for k in shares if "/" not in k), key=lambda k: -shares[k])
            for k in loop:
                lines.append(f"  {k:<28} {shares[k]:6.1%} {t.sec[k]:10.1f} s")
            for k in inner:
                lines.append(f"    of which {k:<19} {shares[k]:6.1%} {t.sec[k]:10.1f} s")
            for k, n in sorted(t.counts.items()):
                lines.append(f"  {k:<28} {n:>10,} ({n / t.wall:,.1f}/s of component time)")
            for k, h in sorted(t.hists.items()):
                pct = ", ".join(f"p{int(q * 100)} {1000 * percentile_sec(h, q):.2f} ms" for q in (0.5, 0.9, 0.99))
                lines.append(f"  {k:<28} {pct}")
        return "\n".join(lines)

    def summary(self) -> dict[str, dict[str, float]]:
        """The whole run per role: part -> share of wall time (for results and benches)."""
        out = {}
        for role, t in self.total.items():
            shares = self._shares(t)
            shares["busy"] = sum(v for k, v in shares.items() if k.startswith("busy/"))
            out[role] = shares
        return out


class GpuMonitor:
    """The GPU's utilisation (%) and memory in use (MiB) from NVML, sampled by the coordinator; None where
    NVML (the ``nvidia-ml-py`` package and a driver) is not there: :meth:`create` says so once."""

    def __init__(self, handle: Any, nvml: Any) -> None:
        self.handle, self.nvml = handle, nvml
        self.util: list[float] = []
        self.mem_mb: list[float] = []

    @classmethod
    def create(cls, index: int = 0) -> "GpuMonitor | None":
        try:
            import pynvml

            pynvml.nvmlInit()
            return cls(pynvml.nvmlDeviceGetHandleByIndex(index), pynvml)
        except Exception as e:  # noqa: BLE001 - no package, no driver, no device: the run goes on without it
            log.info("GPU utilisation is not reported: NVML is not available (%s)", e)
            return None

    def sample(self) -> None:
        try:
            rates = self.nvml.nvmlDeviceGetUtilizationRates(self.handle)
            mem = self.nvml.nvmlDeviceGetMemoryInfo(self.handle)
        except Exception:  # noqa: BLE001 - a failed read is a missing sample, not a failed run
            return
        self.util.append(float(rates.gpu))
        self.mem_mb.append(float(mem.used) / 2**20)

    def take(self) -> dict[str, float]:
        """``perf/gpu/util`` (mean % over the samples since the last take) and ``perf/gpu/memory_mb``."""
        if not self.util:
            return {}
        out = {"perf/gpu/util": float(np.mean(self.util)), "perf/gpu/memory_mb": float(self.mem_mb[-1])}
        self.util.clear()
        self.mem_mb.clear()
        return out
