"""The simulation core: lowering, kernel and collective costs, the SimPy engine, metrics.

Knows nothing of plots, sweeps or the command line (tests/package/test_layers.py holds it to that).
"""
