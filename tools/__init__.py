"""Diagnostics run by hand: each module's first docstring line says when to use it."""
