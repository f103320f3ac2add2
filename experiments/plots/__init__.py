"""Figures: Gantt charts, sweep plots, the regime map, Pareto fronts, and their words."""
