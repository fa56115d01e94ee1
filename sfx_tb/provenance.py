"""What each selected experiment was: the ``provenance`` sfx.train writes into cfg.json (git commit and
uncommitted changes of sfx's checkout, package versions, CUDA) and its seed, as a table."""

from __future__ import annotations

import os
from collections.abc import Iterable

from sfx_tb.experiments import ExperimentDir, select_experiments

# packages shown when an experiment records them (env packages only where installed)
SHOWN_PACKAGES = ("torch", "gymnasium", "numpy", "vizdoom", "ale-py", "mujoco", "minigrid", "pettingzoo")


def provenance_rows(experiments: Iterable[ExperimentDir]) -> list[dict]:
    """One dict per experiment: ``experiment``, ``seed``, ``commit`` (12 characters, ``+dirty`` when tracked
    files had changed), ``cuda`` and the versions of :data:`SHOWN_PACKAGES` it recorded; ``-`` for what an
    experiment does not record (one trained before sfx recorded provenance)."""
    rows = []
    for exp in experiments:
        prov = (exp.cfg or {}).get("provenance") or {}
        git = prov.get("git") or {}
        commit = "-"
        if git.get("commit"):
            commit = str(git["commit"])[:12] + ("+dirty" if git.get("dirty") else "")
        packages = prov.get("packages") or {}
        row = {"experiment": exp.name, "seed": "-" if exp.seed is None else str(exp.seed), "commit": commit,
               "cuda": str(prov.get("cuda") or "-")}
        for name in SHOWN_PACKAGES:
            row[name] = str(packages.get(name, "-"))
        rows.append(row)
    return rows


def provenance_markdown(rows: list[dict]) -> str:
    """The rows as a Markdown table; package columns that no experiment recorded are left out."""
    if not rows:
        return ""
    keys = [k for k in rows[0] if k in ("experiment", "seed", "commit") or any(r[k] != "-" for r in rows)]
    lines = ["| " + " | ".join(keys) + " |", "| " + " | ".join("---" for _ in keys) + " |"]
    lines += ["| " + " | ".join(r[k].replace("|", "\\|") for k in keys) + " |" for r in rows]
    return "\n".join(lines)


def provenance_table(patterns: str | Iterable[str], dir: str | os.PathLike = "train_dir") -> str:  # noqa: A002
    """The provenance of the experiments matching ``patterns`` under ``dir``, as Markdown."""
    experiments, _ = select_experiments(patterns, dir, on_missing="error")
    return provenance_markdown(provenance_rows(experiments))
