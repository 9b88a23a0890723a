"""Helpers that the tests, the benchmarks, the demo and ``make try`` share.

Importable as ``tests.support`` from the repository root (pytest.ini puts it on the path).
"""
