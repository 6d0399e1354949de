"""The spec layer: storage image format, descriptor/result layouts, kernel configuration, counter-based RNG
and the golden model. Imports nothing else of the project; every implementation builds on it."""
