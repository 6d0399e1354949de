"""Amaranth gateware of the near-storage kernel, one block per file. Imports only ``smartsage.spec``."""
