"""Windowed joins: stream mode, the self-join (a stream-mode join of a table with itself) and table mode."""
