"""``python -m sfx.tune_throughput``: measure the planned points within the budget, print the report."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from sfx.errors import ConfigError
from sfx.tune_throughput.grid import Skipped, this_machine
from sfx.tune_throughput.points import PointResult, run_point
from sfx.tune_throughput.report import TuneReport, format_report
from sfx.tune_throughput.request import TRAIN_STARTUP_SEC, TuneRequest, parse_tune_args

EXIT_CODES = {"done": 0, "failed": 1, "interrupted": 130}


def tune(request: TuneRequest, progress: Callable[[str], None] = print, work_root: str | None = None) -> TuneReport:
    """Measure the planned points (sampler, then with ``train`` the best ``train_top`` of them trained) within
    ``max_minutes``; points that would start past it are skipped. Ctrl+C ends it with what was measured.
    The points' folders go to a new temporary folder (in ``work_root`` if given), kept only for the logs of
    points that did not finish."""
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    t0 = time.monotonic()
    deadline = t0 + request.max_minutes * 60
    work_dir = Path(tempfile.mkdtemp(prefix="sfx_tune_", dir=work_root))
    sampler: list[PointResult] = []
    trained: list[PointResult] = []
    skipped = list(request.skipped)
    interrupted = False
    try:
        n = len(request.points)
        for i, point in enumerate(request.points):
            reserve = request.train_top * (request.train_seconds + TRAIN_STARTUP_SEC) if request.train else 0.0
            if time.monotonic() + request.seconds + reserve > deadline:
                skipped += [Skipped(p, "the --max_minutes budget was spent") for p in request.points[i:]]
                break
            r = run_point(request, point, "sampler", work_dir, f"sampler_{i}")
            sampler.append(r)
            progress(f"[{i + 1}/{n}] {point.label()}: " + (f"{r.fps:,.0f} FPS" if r.status == "ok" else
                                                           f"{r.status}: {r.error}") + f" ({r.wall_sec:.0f} s)")
        if request.train:
            ok = sorted((r for r in sampler if r.status == "ok"), key=lambda r: -r.fps)[:request.train_top]
            for i, best in enumerate(ok):
                if time.monotonic() + request.train_seconds > deadline:
                    skipped += [Skipped(r.point, "training: the --max_minutes budget was spent") for r in ok[i:]]
                    break
                r = run_point(request, best.point, "train", work_dir, f"train_{i}")
                trained.append(r)
                progress(f"[train {i + 1}/{len(ok)}] {best.point.label()}: " +
                         (f"{r.fps:,.0f} FPS" if r.status == "ok" else f"{r.status}: {r.error}") +
                         f" ({r.wall_sec:.0f} s)")
    except KeyboardInterrupt:
        interrupted = True
    finally:
        failed = [r for r in sampler + trained if r.status != "ok"]
        if failed:
            progress(f"logs of the points that did not finish: {work_dir}")
            shutil.rmtree(work_dir / "train_dir", ignore_errors=True)
        else:
            shutil.rmtree(work_dir, ignore_errors=True)
    return TuneReport(request, this_machine(), sampler, trained, skipped, started, time.monotonic() - t0, interrupted)


def main(argv: list[str] | None = None) -> int:
    """The command line: parse, plan, measure, print (and write ``--out``)."""
    try:
        request = parse_tune_args(argv)
    except ConfigError as e:
        print(f"sfx: error: {e}", file=sys.stderr)
        return 2
    print(f"sfx.tune_throughput: {len(request.points)} points to measure"
          f"{f', {len(request.skipped)} skipped' if request.skipped else ''}", flush=True)
    report = tune(request, progress=lambda s: print(s, flush=True))
    print(format_report(report), flush=True)
    if request.out:
        Path(request.out).write_text(json.dumps(report.to_json(), indent=2))
        print(f"results: {request.out}")
    if report.interrupted:
        return EXIT_CODES["interrupted"]
    return EXIT_CODES["done"] if report.best is not None else EXIT_CODES["failed"]
