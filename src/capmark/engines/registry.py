"""Which engine serves a DSN, a stored run or a stored statistics delta."""

from __future__ import annotations

from urllib.parse import urlsplit

from capmark.engines.base import Delta, Engine
from capmark.errors import CapmarkError

# A delta (or snapshot) from an engine other than PostgreSQL names its engine in this view; runs stored before
# there was a second engine have none and are PostgreSQL's.
ENGINE_VIEW = "engine"
DEFAULT = "postgresql"


def _engines() -> dict[str, Engine]:
    from capmark.engines.mysql.engine import MYSQL
    from capmark.engines.postgres.engine import POSTGRESQL
    return {e.name: e for e in (POSTGRESQL, MYSQL)}


def all_engines() -> list[Engine]:
    return list(_engines().values())


def named(name: str | None) -> Engine:
    """The engine a stored run's target names (PostgreSQL for runs stored without one)."""
    engines = _engines()
    try:
        return engines[name or DEFAULT]
    except KeyError:
        raise CapmarkError(f"This run was measured on '{name}', an engine this capmark does not know; use the "
                           "capmark version that measured it.") from None


def scheme_of(dsn: str) -> str:
    """The URL scheme of a DSN, or '' for PostgreSQL's key=value form."""
    return urlsplit(dsn).scheme.lower() if "://" in dsn else ""


def for_dsn(dsn: str) -> Engine:
    """The engine a DSN's scheme names; PostgreSQL's key=value settings are PostgreSQL's."""
    scheme = scheme_of(dsn)
    for engine in _engines().values():
        if scheme in engine.schemes or (not scheme and engine.name == DEFAULT):
            return engine
    known = ", ".join(f"{s}://" for e in _engines().values() for s in e.schemes)
    raise CapmarkError(f"The DSN scheme '{scheme}://' names no engine capmark knows; use one of {known}.")


def of_delta(delta: Delta) -> Engine:
    """The engine whose views a stored snapshot or delta holds."""
    rows = delta.get(ENGINE_VIEW) or []
    return named(rows[0].get("name") if rows else DEFAULT)
