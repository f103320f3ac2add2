"""Sweeps: a grid of points, run in a process pool or on a Dask cluster, to a results file (the
ledger)."""
