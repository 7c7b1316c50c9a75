"""`python -m capmark`: the same entry point as the `capmark` command (signal handlers first)."""

from capmark.launch import main

main()
