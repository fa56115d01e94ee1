"""The doom family's modules import one another one way only (no cycle, not even through imports
inside functions): the scenario tables (``scenarios.py``, single-player and multiplayer) are at the
bottom, the multiplayer env above them, the package's ``__init__`` on top. Needs no vizdoom."""

from __future__ import annotations

import ast
from pathlib import Path

import sfx.envs.doom

DOOM_DIR = Path(sfx.envs.doom.__file__).parent
PACKAGE = "sfx.envs.doom"


def doom_imports(path: Path) -> set[str]:
    """The ``sfx.envs.doom`` modules one file imports, anywhere in it (the package itself as ``__init__``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            if name == PACKAGE:
                found.add("__init__")
            elif name.startswith(PACKAGE + ".") and (DOOM_DIR / f"{name[len(PACKAGE) + 1:]}.py").exists():
                found.add(name[len(PACKAGE) + 1:])
    return found


def test_doom_modules_import_one_way():
    graph = {p.stem: doom_imports(p) - {p.stem} for p in DOOM_DIR.glob("*.py")}
    assert "multiplayer" in graph["__init__"] and "scenarios" in graph["multiplayer"]
    assert graph["scenarios"] == set(), "the scenario tables import no other doom module"

    def cycle_from(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return path[path.index(node):] + [node]
        for nxt in sorted(graph.get(node, ())):
            found = cycle_from(nxt, path + [node])
            if found:
                return found
        return None

    for module in graph:
        cycle = cycle_from(module, [])
        assert cycle is None, f"import cycle among the doom modules: {' -> '.join(cycle)}"


def test_multiplayer_names_still_import_from_the_multiplayer_module():
    from sfx.envs.doom import multiplayer, scenarios

    for name in ("MAX_PLAYERS", "MULTIPLAYER_SCENARIOS", "MultiplayerScenario", "multiplayer_scenario_of"):
        assert getattr(multiplayer, name) is getattr(scenarios, name)
    assert scenarios.multiplayer_scenario_of("doom_duel") is scenarios.MULTIPLAYER_SCENARIOS["duel"]
    assert scenarios.multiplayer_scenario_of("doom_basic") is None
