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
    ("vocabulary: stage records", frozenset({"results"})),
    ("config and pure models", frozenset({"config", "model"})),  # user input's domains; queueing maths
    ("engines", frozenset({"engines"})),
    ("workloads", frozenset({"workloads"})),
    ("collect", frozenset({"collect"})),
    ("driver", frozenset({"driver"})),
    ("measure", frozenset({"measure"})),
    ("store", frozenset({"store"})),
    ("suite", frozenset({"suite"})),
    ("runner", frozenset({"runner"})),
    ("plan and diagnose", frozenset({"plan", "diagnose"})),
    ("analysis", frozenset({"analysis"})),
    ("report", frozenset({"report"})),
    ("api", frozenset({"api"})),
    ("cli", frozenset({"cli"})),
    ("entry point", frozenset({"launch"})),  # installs the signal handlers, then loads the command line
    ("python -m capmark", frozenset({"__main__"})),  # the same entry point
]
NOT_YET_WRITTEN: frozenset[str] = frozenset()  # a unit placed before it exists, so that it lands in its layer

VOCABULARY = LAYERS[0][1] | LAYERS[1][1]
# The units the top of the flow may import besides its own (every other unit may import all lower layers).
REACH: dict[str, frozenset[str]] = {
    # renders analysis documents and stage records; model only to draw a fitted curve from its formula
    "report": VOCABULARY | {"model", "analysis"},
    # measures through the runner, reads the store, answers every question after it through analysis
    # and `capmark solve`, which solves the user's own queueing models with the model library directly
    "api": VOCABULARY | {"config", "engines", "workloads", "store", "suite", "runner", "analysis", "report", "model"},
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
    ("report/plots.py", "measure"),
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
    assert not broken, "imports against the layer order (see LAYERS in tests/test_layers.py):\n" + "\n".join(broken)


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
