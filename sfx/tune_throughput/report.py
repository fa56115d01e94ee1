"""A tuner run's report: each point's results, what was skipped, the winner as one ``sfx.train`` line, the table."""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass

from sfx.tune_throughput.grid import GridPoint, Skipped
from sfx.tune_throughput.points import PointResult
from sfx.tune_throughput.request import TuneRequest


@dataclass
class TuneReport:
    """A tuner run: each point's sampler (and training) result, what was skipped, the winner."""

    request: TuneRequest
    machine: dict
    sampler: list[PointResult]
    train: list[PointResult]
    skipped: list[Skipped]
    started: str
    elapsed_sec: float
    interrupted: bool = False

    @property
    def best(self) -> PointResult | None:
        """The fastest training with --train (else, when no training ran, the fastest sampler point)."""
        for results in (self.train, self.sampler):
            ok = [r for r in results if r.status == "ok"]
            if ok:
                return max(ok, key=lambda r: r.fps)
        return None

    def command(self) -> str | None:
        """The fastest point as one ``python -m sfx.train`` line: the passthrough flags and the point's."""
        best = self.best
        if best is None:
            return None
        return " ".join(["python", "-m", "sfx.train",
                         *(shlex.quote(a) for a in best_argv(self.request.passthrough, best.point))])

    def to_json(self) -> dict:
        def point(p: GridPoint) -> dict:
            return dataclasses.asdict(p)

        def result(r: PointResult) -> dict:
            return {**point(r.point), "mode": r.mode, "status": r.status, "fps": r.fps,
                    "wall_sec": round(r.wall_sec, 2), "error": r.error}

        best = self.best
        return {"env": self.request.env, "started": self.started, "elapsed_sec": round(self.elapsed_sec, 1),
                "machine": self.machine, "seconds": self.request.seconds, "train": self.request.train,
                "train_seconds": self.request.train_seconds if self.request.train else None,
                "passthrough": self.request.passthrough, "interrupted": self.interrupted,
                "sampler": [result(r) for r in self.sampler], "training": [result(r) for r in self.train],
                "skipped": [{**point(s.point), "reason": s.reason} for s in self.skipped],
                "notes": self.request.notes,
                "best": None if best is None else {**point(best.point), "mode": best.mode, "fps": best.fps,
                                                   "command": self.command()}}


def best_argv(passthrough: list[str], point: GridPoint) -> list[str]:
    """``sfx.train``'s argv for ``point``: the passthrough flags, then the point's (placed last, so they are
    the ones that count)."""
    return [*passthrough, *point.flags()]


def format_report(report: TuneReport) -> str:
    """The table of points (grid order), what was skipped, and the fastest command line."""
    req = report.request
    by_point = {r.point: r for r in report.sampler}
    trained = {r.point: r for r in report.train}
    ok = [r.fps for r in report.sampler if r.status == "ok"]
    best_sampler = max(ok) if ok else None
    with_backend = any(p.env_backend is not None for p in by_point)
    head = ["workers", "envs/worker", "splits"] + (["backend"] if with_backend else []) + \
        ["sampler FPS", "vs best"] + (["train FPS"] if req.train else []) + ["note"]
    rows = []
    order = sorted(by_point, key=lambda p: (p.num_workers, p.num_envs_per_worker, p.worker_num_splits,
                                            str(p.env_backend)))
    best = report.best
    for p in order:
        r = by_point[p]
        row = [str(p.num_workers), str(p.num_envs_per_worker), str(p.worker_num_splits)]
        row += [str(p.env_backend)] if with_backend else []
        row += [f"{r.fps:,.0f}", f"{r.fps / best_sampler:.2f}"] if r.status == "ok" else ["-", "-"]
        if req.train:
            t = trained.get(p)
            row.append("-" if t is None else f"{t.fps:,.0f}" if t.status == "ok" else t.status)
        notes = []
        if r.status != "ok":
            notes.append(f"{r.status}: {r.error}")
        t = trained.get(p)
        if t is not None and t.status != "ok":
            notes.append(f"training {t.status}: {t.error}")
        if best is not None and best.point == p:
            notes.insert(0, "fastest")
        row.append("; ".join(notes))
        rows.append(row)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i < len(cells) - 1 else c for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    cores, mem = report.machine["cores"], report.machine["available_mb"]
    out = [f"sfx.tune_throughput: {req.env}, {len(report.sampler)} points x {req.seconds:g} s of sampling"
           + (f", the best {req.train_top} trained for {req.train_seconds:g} s" if req.train else "")
           + f" on {cores} cores ({mem / 1024:.1f} GiB free), {report.started}, {report.elapsed_sec / 60:.1f} min",
           "", line(head), line(["-" * w for w in widths]), *(line(r) for r in rows)]
    if report.skipped or req.notes:
        out += ["", f"skipped ({len(report.skipped)} points, as workers x envs x splits):"]
        out += [f"  {note}" for note in req.notes]
        by_reason: dict[str, list[str]] = {}
        for s in report.skipped:
            by_reason.setdefault(s.reason, []).append(s.point.short())
        out += [f"  {reason}: {', '.join(points)}" for reason, points in by_reason.items()]
    if report.interrupted:
        out += ["", "interrupted: the table has what was measured"]
    command = report.command()
    out.append("")
    if command is None or best is None:
        out.append("no point finished: see the notes above")
    else:
        if best.mode == "train":
            kind = "training"
        elif req.train:
            kind = "dummy sampler; no training finished"
        else:
            kind = "dummy sampler"
        out += [f"fastest ({kind}, {best.fps:,.0f} FPS):", command]
    return "\n".join(out)
