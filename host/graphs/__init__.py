"""Graph generation and import into storage images."""
