"""Console tables that fit the terminal as one piece: at a narrow width the optional columns give way (a line under
the table names them) instead of the table being cut into parts or its cells squeezed into slivers."""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass, field

from rich import box as boxes
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.markup import escape
from rich.padding import Padding
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
    justify: str = "right"
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
    """A table's title, columns, text rows and notes; render() lays it out for a width."""

    title: str
    columns: list[Col]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # lines under the table (captions, footnotes)
    boxed: bool = False  # rich's heavy-headed box (the run's main tables), else a light rule under the header
    title_style: str = "italic"

    def add_row(self, *cells: str) -> None:
        self.rows.append(list(cells))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        """Printed, it fits the width it is given there (the console's, less any indentation)."""
        yield self.render(options.max_width)

    def render(self, width: int | None) -> RenderableType:
        width = width or DEFAULT_WIDTH
        shown = choose_columns(self, width)
        table = self._table(shown, width)
        hidden = list(dict.fromkeys(c.label for i, c in enumerate(self.columns) if i not in shown))
        parts: list[RenderableType] = [Text(self.title, style=self.title_style)] if self.title else []
        parts.append(table)
        parts += [Text(n, style="dim") for n in self.notes]
        if hidden:
            parts.append(Text(f"wider terminal shows: {', '.join(hidden)}", style="dim"))
        return Group(*parts)

    def _table(self, shown: list[int], width: int | None, flex_width: dict[int, int] | None = None) -> Table:
        table = Table(box=boxes.HEAVY_HEAD if self.boxed else boxes.SIMPLE_HEAD, header_style="bold",
                      padding=(0, 1), collapse_padding=not self.boxed, show_edge=self.boxed, pad_edge=self.boxed,
                      expand=False)
        for i in shown:
            c = self.columns[i]
            fixed = (flex_width or {}).get(i)
            table.add_column(escape(c.header), justify=c.justify, no_wrap=not c.wrap,
                             overflow="fold" if c.wrap else "ellipsis", width=fixed)
        for row in self.rows:
            table.add_row(*(escape(_pack(row[i], self.columns[i].sep, (flex_width or {}).get(i))) for i in shown))
        if width is None or flex_width is not None:
            return table
        flex = [i for i in shown if self.columns[i].wrap]
        natural = _width(table)
        if natural <= width or not flex:
            return table
        # the fixed columns keep their width; the wrapping ones share what is left (rich would shrink every column)
        at_min = {i: min(FLEX_MIN_WIDTH, _natural(self, i)) for i in flex}
        spare = width - _width(self._table(shown, None, at_min))
        wanted = {i: _natural(self, i) - at_min[i] for i in flex}
        total = sum(wanted.values()) or 1
        given = {i: at_min[i] + max(0, spare) * wanted[i] // total for i in flex}
        return self._table(shown, None, given)


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
        at_min = {i: min(FLEX_MIN_WIDTH, _natural(spec, i)) for i in trial if spec.columns[i].wrap}
        if _width(spec._table(trial, None, at_min)) <= width:
            shown = trial
    return shown


def indented(text: str, indent: int = 2) -> Padding:
    """A line of plain text set in by `indent` columns, its wrapped continuation lines too."""
    return Padding(Text(text), (0, 0, 0, indent), expand=False)


def sayer(console: Console) -> Callable[..., None]:
    """print() for the notes under a table: plain text (no markup), its leading spaces an indentation that the
    wrapped continuation lines keep, so a note stays readable as one block at any width."""
    def say(text: str, **_: object) -> None:
        indent = len(text) - len(text.lstrip(" "))
        console.print(indented(text[indent:], indent) if indent else Text(text), highlight=False)

    return say
