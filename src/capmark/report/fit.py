"""Console tables that fit the terminal as one piece: at a narrow width the optional columns give way (a line under
the table names them) instead of the table being cut into parts or its cells squeezed into slivers."""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass, field

from rich import box as boxes
from rich.console import Console, ConsoleOptions, Group, JustifyMethod, RenderableType, RenderResult
from rich.markup import escape
from rich.table import Table
from rich.text import Text

# A wrapping column (a label, a sentence, a statement) is never made narrower than this: below it a phrase breaks
# into one or two words a line, which no one reads; an optional column is dropped instead.
FLEX_MIN_WIDTH = 22
# The width tables are laid out for when the console's is not known (a pipe, a file): a common terminal.
DEFAULT_WIDTH = 80
_MEASURE_WIDTH = 10_000  # wide enough that measuring never wraps anything


@dataclass
class Col:
    """One column. rank 0 is essential (always shown); optional columns are kept in rising rank while they fit,
    and columns that share a `group` name come and go together under that name in the note."""

    header: str
    justify: JustifyMethod = "right"
    rank: int = 0
    group: str | None = None
    wrap: bool = False  # a text column that may wrap onto several lines (at least FLEX_MIN_WIDTH wide)
    name: str | None = None  # how the note names it (default: the header on one line)
    sep: str | None = None  # a wrapping column of items ("CPU 46%, disk vda 32%") breaks between items, not in one

    @property
    def label(self) -> str:
        return self.group or self.name or " ".join(self.header.split())


@dataclass
class FittedTable:
    """A table's title, columns, text rows and notes; printed, it lays itself out for the width it is given."""

    title: str
    columns: list[Col]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # lines under the table (captions, footnotes)
    title_style: str = "italic"

    def add_row(self, *cells: str) -> None:
        self.rows.append(list(cells))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        """Printed, it fits the width it is given there (the console's, less any indentation)."""
        yield self.render(options.max_width)

    def render(self, width: int | None) -> RenderableType:
        width = width or DEFAULT_WIDTH
        shown = choose_columns(self, width)
        hidden = list(dict.fromkeys(c.label for i, c in enumerate(self.columns) if i not in shown))
        parts: list[RenderableType] = [Text(self.title, style=self.title_style)] if self.title else []
        parts.append(self.table(shown, wrap_widths(self, shown, width)))
        parts += [Text(n, style="dim") for n in self.notes]
        if hidden:
            parts.append(Text(f"wider terminal shows: {', '.join(hidden)}", style="dim"))
        return Group(*parts)

    def table(self, shown: list[int], widths: dict[int, int] | None = None) -> Table:
        """The rich table of the shown columns, the wrapping ones at the given widths (else their natural one)."""
        widths = widths or {}
        table = Table(box=boxes.SIMPLE_HEAD, header_style="bold", padding=(0, 1), collapse_padding=True,
                      show_edge=False, pad_edge=False, expand=False)
        for i in shown:
            c = self.columns[i]
            table.add_column(escape(c.header), justify=c.justify, no_wrap=not c.wrap,
                             overflow="fold" if c.wrap else "ellipsis", width=widths.get(i))
        for row in self.rows:
            table.add_row(*(escape(_pack(row[i], self.columns[i].sep, widths.get(i))) for i in shown))
        return table


def _least_widths(spec: FittedTable, shown: list[int]) -> dict[int, int]:
    return {i: min(FLEX_MIN_WIDTH, _natural(spec, i)) for i in shown if spec.columns[i].wrap}


def wrap_widths(spec: FittedTable, shown: list[int], width: int) -> dict[int, int]:
    """Widths for the wrapping columns where the table is wider than `width`: the other columns keep theirs and
    the wrapping ones share what is left in proportion to what they lack (rich would shrink every column)."""
    if _width(spec.table(shown)) <= width:
        return {}
    least = _least_widths(spec, shown)
    if not least:
        return {}
    spare = max(0, width - _width(spec.table(shown, least)))
    lacking = {i: _natural(spec, i) - w for i, w in least.items()}
    total = sum(lacking.values()) or 1
    return {i: w + spare * lacking[i] // total for i, w in least.items()}


def _pack(cell: str, sep: str | None, width: int | None) -> str:
    """A list of items on as few lines of the width as they fit, each item whole where it fits a line."""
    if not sep or width is None or Text(cell).cell_len <= width:
        return cell
    lines: list[str] = []
    for item in cell.split(sep):
        if lines and Text(lines[-1] + sep + item).cell_len <= width:
            lines[-1] += sep + item
        else:
            lines.append(item)
    return (sep.rstrip() + "\n").join(lines)


def _natural(spec: FittedTable, i: int) -> int:
    """A column's widest cell or header line."""
    cells = [spec.columns[i].header, *(row[i] for row in spec.rows)]
    return max(Text(line).cell_len for cell in cells for line in (cell.split("\n") or [""]))


_measurer = Console(width=_MEASURE_WIDTH, file=io.StringIO(), emoji=False)


def _width(table: Table) -> int:
    return _measurer.measure(table).maximum


def choose_columns(spec: FittedTable, width: int) -> list[int]:
    """The essential columns, then the optional ones in rising rank (a group as one) while the table fits with
    its wrapping columns at their least width."""
    shown = [i for i, c in enumerate(spec.columns) if c.rank == 0]
    optional: dict[str, list[int]] = {}
    for i, c in sorted(enumerate(spec.columns), key=lambda ic: (ic[1].rank, ic[0])):
        if c.rank > 0:
            optional.setdefault(c.group or f"#{i}", []).append(i)
    for members in optional.values():
        trial = sorted(shown + members)
        if _width(spec.table(trial, _least_widths(spec, trial))) <= width:
            shown = trial
    return shown


def sayer(console: Console) -> Callable[..., None]:
    """print() for the notes under a table: plain text (no markup), its leading spaces an indentation that the
    wrapped continuation lines keep, so a note stays readable as one block at any width."""
    def say(text: str, **_: object) -> None:
        indent = len(text) - len(text.lstrip(" "))
        for line in Text(text[indent:]).wrap(console, max(FLEX_MIN_WIDTH, console.width - indent)):
            line.rstrip()
            console.print(Text(" " * indent) + line, highlight=False)

    return say
