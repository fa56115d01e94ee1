"""A component for the runtime tests: it records what the one component loop calls, in order, and
reports it. Module-level so that its builder reaches a component process by reference."""

from __future__ import annotations

from pathlib import Path

from sfx.engine.component import Component

CRASH = "crash"


class EchoComponent(Component):
    def __init__(self, report_queue, name: str, marker_dir: str | None) -> None:
        self.report_queue = report_queue
        self.name = name
        self.calls: list = []
        self.marker_dir = marker_dir
        self.ticks = 0

    def start(self) -> None:
        self.calls.append("start")

    def process(self, msgs: list) -> None:
        self.calls.append(("process", [m[0] for m in msgs]))
        for kind, payload in msgs:
            if kind == CRASH:
                raise RuntimeError("asked to crash")
            self.report_queue.put(("echo", self.name, {"kind": kind, "payload": payload}))

    def tick(self) -> None:
        self.ticks += 1

    def finish(self) -> None:
        self.calls.append("finish")
        if self.marker_dir is not None:
            Path(self.marker_dir, f"{self.name}.finished").write_text(f"ticks {self.ticks}\n")


def build_echo(w, spec, device, incarnation=0):
    return EchoComponent(w.report_queue, spec.name, getattr(w.cfg, "echo_marker_dir", None))
