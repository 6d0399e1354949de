"""cocotb testbenches on Verilator, the storage timing model and scoreboards. Imports ``rtl`` and ``spec``."""
