"""Kernel costs: roofline GEMMs, attention and elementwise kernels, measured kernel tables, and the
pricing of an op."""
