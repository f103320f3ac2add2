"""Calibration: every published or fitted constant of the model, loaded from data files."""
