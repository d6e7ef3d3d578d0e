"""Numba kernels: pure functions, arrays in, arrays out."""
