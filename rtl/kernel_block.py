"""The base of the kernel's blocks that are built for one :class:`KernelConfig`."""

from __future__ import annotations

from amaranth.lib import wiring

from smartsage.spec.config import KernelConfig

__all__ = ["KernelBlock", "check_kernel_config"]


def check_kernel_config(config) -> KernelConfig:
    """``config`` itself, or TypeError when it is not a :class:`KernelConfig` (a block calls it before
    building its signature from the config)."""
    if not isinstance(config, KernelConfig):
        raise TypeError(f"Config must be a KernelConfig, not {config!r}")
    return config


class KernelBlock(wiring.Component):
    """A ``wiring.Component`` parametrized by a :class:`KernelConfig` (checked, kept read-only).

    Parameters
    ----------
    config : KernelConfig
    members : dict
        The block's signature members.

    Raises
    ------
    TypeError
        ``config`` is not a :class:`KernelConfig`.
    """

    def __init__(self, config: KernelConfig, members: dict):
        self._config = check_kernel_config(config)
        super().__init__(members)

    @property
    def config(self) -> KernelConfig:
        return self._config
