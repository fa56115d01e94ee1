"""A seeded fault injector for real sweeps (``python -m bench.faults``; docs/reliability.md).

It sits outside sfx's runtime: it launches ``python -m sfx.runner.run`` on local processes, finds the sweep's
processes from the files the sweep writes and the process tree (:mod:`bench.faults.targets`), does the faults
of a schedule drawn from a seed (:mod:`bench.faults.schedule`, :mod:`bench.faults.inject`), then checks the
invariants per experiment and writes the report (:mod:`bench.faults.invariants`).
"""
