"""Benchmarks of accelbackends, each measured as a ratio against a reference in the same run.

Run them through the one entry point: ``python -m benchmarks --help`` lists them.
"""
