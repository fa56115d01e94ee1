"""DESIGN.md's arrows: an arrow may only point down (entry points -> pbt -> engine -> agents ->
models / envs / experiment -> algo -> cfg -> errors), pbt plugs into the engine as an observer, the pure
maths imports neither processes nor models, and no module imports itself back through others.

Checked twice: statically, by reading every ``import`` in the source (inside functions too, so a lazy
import cannot hide an arrow that points up; imports under ``if TYPE_CHECKING:`` are for type checkers
only and are left out), and in fresh interpreters (what an import really loads)."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# a room's height: an import may only go to a lower room (or within its own)
ROOMS = {
    "sfx.train": 7, "sfx.enjoy": 7, "sfx.export": 7, "sfx.dummy_sampler": 7, "sfx.runner": 7, "sfx.tb": 7,
    "sfx.tune_throughput": 8,  # a tool over the entry points: it runs the dummy sampler and sfx.train
    "sfx.pbt": 6, "sfx.engine": 5, "sfx.registries": 5, "sfx.agents": 4,
    "sfx.models": 3, "sfx.envs": 3, "sfx.experiment": 3,
    "sfx.algo": 2, "sfx.cfg": 1, "sfx.errors": 0, "sfx": 8,
}
# arrows allowed to point up: none (the parser gets the agents and env families from its caller, sfx.registries)
EXCEPTIONS: set[tuple[str, str]] = set()


def _modules(package: str) -> dict[str, Path]:
    out = {}
    for path in (ROOT / package).rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = {**_modules("sfx"), **_modules("sfx_runner"), **_modules("sfx_tb")}


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of import nodes inside ``if TYPE_CHECKING:`` blocks."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return skip


def _resolve(name: str) -> str:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def static_imports(module: str) -> set[str]:
    """The project modules ``module`` imports anywhere in its source (functions included)."""
    path = MODULES[module]
    tree = ast.parse(path.read_text())
    skip = _type_checking_only(tree)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out |= {_resolve(a.name) for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            for a in node.names:
                full = f"{base}.{a.name}"
                out.add(full if full in MODULES else _resolve(base))
    return out - {"", module}


GRAPH = {m: static_imports(m) for m in MODULES}


def room(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "sfx" else parts[0]


def test_every_module_belongs_to_a_room():
    assert {room(m) for m in MODULES if m.startswith("sfx.")} <= set(ROOMS)


def test_static_imports_point_down():
    """Every import of every module, also inside functions, goes to a lower room (DESIGN.md)."""
    up = sorted((a, b) for a, outs in GRAPH.items() if a.startswith("sfx.") for b in outs
                if b.startswith("sfx.") and room(a) != room(b) and ROOMS[room(b)] >= ROOMS[room(a)]
                and (a, b) not in EXCEPTIONS)
    assert not up, f"imports pointing up (see DESIGN.md): {up}"
    # the exceptions are real (the list stays the truth)
    assert all(b in GRAPH[a] for a, b in EXCEPTIONS)


def test_the_runner_and_the_monitor_import_nothing_of_sfx():
    bad = sorted((a, b) for a, outs in GRAPH.items() if not a.startswith("sfx") or a.startswith("sfx_")
                 for b in outs if b == "sfx" or b.startswith("sfx."))
    assert not bad


def test_no_module_imports_itself_back():
    """No import cycles, lazy imports included (Tarjan's strongly connected components)."""
    index, low, stack, on, cycles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in GRAPH.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_the_static_reader_sees_lazy_imports():
    """The reader is not blind to function-level imports (the reason it exists)."""
    assert "sfx.engine.evaluator" in GRAPH["sfx.engine.wiring"]  # build_evaluator imports it inside
    assert "sfx.agents.kit.optimizers" in GRAPH["sfx.agents.base"]  # Agent.__init__ imports it inside

# module imported -> packages it must not load
FORBIDDEN = {
    "sfx.engine.coordinator": ["sfx.pbt", "sfx.train", "sfx.enjoy", "sfx.dummy_sampler"],  # and its runtime
    "sfx.dummy_sampler": ["sfx.pbt"],
    "sfx.algo": ["sfx.engine", "sfx.models", "sfx.envs", "sfx.cfg", "sfx.pbt", "sfx.agents"],
    "sfx.agents": ["sfx.engine", "sfx.pbt", "sfx.train"],
    "sfx.models": ["sfx.engine", "sfx.pbt", "sfx.train", "sfx.agents"],
    "sfx.envs": ["sfx.engine", "sfx.pbt", "sfx.models", "sfx.train"],
    "sfx.errors": ["sfx.cfg", "sfx.engine", "torch"],
}


def loaded_after_import(module: str) -> set[str]:
    code = f"import sys, {module}; print('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return set(out.stdout.split())


@pytest.mark.parametrize("module", sorted(FORBIDDEN))
def test_imports_point_down(module):
    loaded = loaded_after_import(module)
    bad = sorted(m for m in loaded for f in FORBIDDEN[module] if m == f or m.startswith(f + "."))
    assert not bad, f"importing {module} loads {bad}: an arrow pointing up (see DESIGN.md)"


def test_the_training_entry_point_registers_pbt():
    assert "sfx.pbt.observer" in loaded_after_import("sfx.train")
