"""smartsage: an open near-storage neighbor-sampling and aggregation accelerator for GraphSAGE.

This file is the root of the import tree only. The design's top-level folders are mapped under it
by ``pyproject.toml`` (``[tool.setuptools] package-dir``):

=====================  ==========  ==========================================================
import name            folder      layer
=====================  ==========  ==========================================================
``smartsage.spec``     ``spec/``   image format, descriptor/result layouts, configuration,
                                   counter-based RNG and the golden model (imports nothing
                                   else of the project)
``smartsage.rtl``      ``rtl/``    Amaranth gateware (imports ``spec`` only)
``smartsage.cosim``    ``cosim/``  cocotb testbenches and storage model (``rtl``, ``spec``)
``smartsage.host``     ``host/``   graph tools, backends, driver, training, CLI (all above)
=====================  ==========  ==========================================================
"""

__version__ = "0.1.0"
