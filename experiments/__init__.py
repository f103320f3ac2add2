"""Studies over the simulator: sweeps (grid, runs, results), plots (Gantt, sweep curves,
regime maps), named studies, the claim checker and the benchmark."""
