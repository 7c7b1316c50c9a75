"""The results folder's listing in the console: two lines per run or observation, newest first (its id, kind, start
and status; then what it holds and the database), then the files that could not be read, each with its sentence.
Lines rather than a table: an id must never be folded, and a database's address can be long."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from capmark.analysis.stored import StoredList

# statuses that need no reason beside them: a run that completed, an observation that ran its planned time
FINISHED = frozenset({"complete", "ended"})


def print_stored(listing: StoredList, console: Console) -> None:
    if not listing.entries and not listing.unreadable:
        console.print(f"Nothing is stored under {escape(listing.results_dir)} yet: capmark run and capmark observe "
                      "store there (or pass --results-dir).")
        return
    console.print(f"Stored under {escape(listing.results_dir)}, newest first (times in UTC):")
    width = max((len(e.id) for e in listing.entries), default=0)
    for e in listing.entries:
        started = e.created_at.replace("T", " ")[:16]
        console.print(f"  [bold]{escape(e.id):<{width}}[/]  {e.kind:<11}  {started}  {escape(e.status)}",
                      soft_wrap=True)
        said = f"{e.reason}; " if e.reason and e.status not in FINISHED else ""
        console.print(f"      {escape(said + e.contents)}; {escape(e.target)}")
    for u in listing.unreadable:
        console.print(f"{escape(u.folder)} could not be read: {escape(u.problem)}")
    console.print("Name one by its id to capmark report, compare, whatif or size; capmark baseline takes an "
                  "observation.")
