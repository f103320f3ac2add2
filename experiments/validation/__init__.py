"""Validation: every comparison of tpsim with published measurements."""
