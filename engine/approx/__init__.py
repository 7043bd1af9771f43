"""Approximation under limited resources: the overload controller, the precision model and memory allocation."""
