"""Benchmarks for the figures in DESIGN.md §6, run as `python -m tests.benchmarks <name>`.

They start real servers on loopback and print tables; they are not part of the test suite
(pytest does not collect them) because their numbers depend on the machine.
"""
