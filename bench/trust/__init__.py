"""make bench-trust: the reliability suite at a scale no unit test can afford.

Each part is a module of this package with ``run(dsn: str, args) -> dict``: it prints
its own progress and figures and returns them; bench/trust.py runs the parts in order
and ends with one JSON line holding every part's figures.
"""
