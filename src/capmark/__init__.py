"""capmark: a database performance laboratory (measure -> model -> plan -> diagnose -> report)."""

__version__ = "0.1.0"
