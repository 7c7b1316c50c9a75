"""MySQL and MariaDB behind the engine interface (being built)."""
