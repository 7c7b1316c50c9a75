"""The compiled parts: the client-side lookup loops of PostgreSQL and MySQL/MariaDB (src/capmark/engines/*/_lookups.c).

PostgreSQL's needs only a C compiler (it uses the libpq psycopg has loaded); MySQL's is built against the client
library mysqlclient links (libmariadb, found by pkg-config or mariadb_config). Both are optional: without a compiler
or the library's headers capmark installs without them, and those lookups run through the Python path.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess

from setuptools import Extension, setup


def _flags(*command: str) -> list[str]:
    if shutil.which(command[0]) is None:
        return []
    try:
        return shlex.split(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
    except subprocess.CalledProcessError:
        return []


def _client_library() -> tuple[list[str], list[str]]:
    """(compile flags, link flags) of libmariadb: pkg-config first, then mariadb_config, then Debian's paths."""
    for cflags, libs in ((("pkg-config", "--cflags", "libmariadb"), ("pkg-config", "--libs", "libmariadb")),
                         (("mariadb_config", "--include"), ("mariadb_config", "--libs"))):
        compile_flags, link_flags = _flags(*cflags), _flags(*libs)
        if link_flags:
            return compile_flags, link_flags
    return ["-I/usr/include/mariadb"], ["-lmariadb"]


compile_flags, link_flags = _client_library()
SHARED = "src/capmark/engines/lookup_loop.h"  # the loops' shared part: a change rebuilds both
setup(ext_modules=[
    Extension("capmark.engines.postgres._lookups", ["src/capmark/engines/postgres/_lookups.c"],
              extra_compile_args=["-O2"], libraries=["dl"], depends=[SHARED], optional=True),
    Extension("capmark.engines.mysql._lookups", ["src/capmark/engines/mysql/_lookups.c"],
              extra_compile_args=[*compile_flags, "-O2"], extra_link_args=link_flags, depends=[SHARED], optional=True),
])
