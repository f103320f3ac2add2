"""Fitting: ``tpsim calibrate`` (an engine profile fitted to measured step times) and the
maintainer scripts that fit the kernel mechanisms."""
