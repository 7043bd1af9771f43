"""Approximation under limited resources: precision model, memory allocation and load control."""
