"""Example user-defined functions."""
