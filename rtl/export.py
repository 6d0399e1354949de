"""Verilog export of the kernel, one module per :class:`~smartsage.spec.config.KernelConfig`."""

from __future__ import annotations

import functools
import hashlib

from amaranth.back import verilog

from smartsage.spec.config import KernelConfig

from .kernel import SamplerKernel

__all__ = ["TOP_NAME", "kernel_verilog", "verilog_digest"]

#: Module name of the exported kernel.
TOP_NAME = "smartsage_kernel"


@functools.lru_cache(maxsize=8)
def kernel_verilog(config: KernelConfig) -> str:
    """The kernel for ``config`` as Verilog text (no source paths inside: reproducible; cached)."""
    top = SamplerKernel(config)
    return verilog.convert(top, name=TOP_NAME, emit_src=False, strip_internal_attrs=True)


def verilog_digest(text: str, config: KernelConfig) -> str:
    """Short hash of the Verilog and the config: the key of a simulator build directory."""
    return hashlib.sha256((text + config.to_json()).encode()).hexdigest()[:16]
