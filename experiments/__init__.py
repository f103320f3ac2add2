"""Studies over the simulator: sweeps (grid, runs, results), plots (Gantt, sweep curves,
regime maps), named studies, the claim checker and the benchmark."""

if __name__ != "tpsim.experiments":  # one name per module
    raise ImportError(f"{__name__}: this folder is tpsim.experiments; import tpsim.experiments")
