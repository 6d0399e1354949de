"""AXI4 and AXI4-Lite interface signatures (master view).

These are interface definitions, not gateware: every block that speaks AXI uses them, so the port
names of the exported Verilog are the same everywhere (``m_axi_storage__araddr``, ...). Amaranth
joins the member path with ``__``; a Vitis packaging wrapper renames ``__`` to ``_``.

Only the signals the kernel needs are present: one ID (responses in order), INCR bursts, no locks,
caches, QoS or user bits (the shell ties those to their defaults).
"""

from __future__ import annotations

from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["ADDRESS_WIDTH", "AxiReadSignature", "AxiWriteSignature", "AxiSignature", "AxiLiteSignature", "BURST_INCR",
           "RESP_OKAY", "check_data_width"]

#: Byte address width of every AXI4 master (64-bit pointers, as the descriptor holds).
ADDRESS_WIDTH = 64
BURST_INCR = 1
RESP_OKAY = 0


def check_data_width(data_width) -> int:
    """Validate an AXI data width in bits; returns it."""
    if data_width not in (64, 128, 256, 512):
        raise ValueError(f"AXI data width must be one of 64, 128, 256, 512 bits, not {data_width!r}")
    return data_width


class AxiReadSignature(wiring.Signature):
    """AXI4 read channels (AR, R), master view.

    Parameters
    ----------
    data_width : int
        RDATA width in bits (64..512).
    """

    def __init__(self, data_width: int):
        self._data_width = check_data_width(data_width)
        super().__init__({
            "araddr": Out(ADDRESS_WIDTH), "arlen": Out(8), "arsize": Out(3), "arburst": Out(2),
            "arvalid": Out(1), "arready": In(1),
            "rdata": In(data_width), "rresp": In(2), "rlast": In(1), "rvalid": In(1), "rready": Out(1),
        })

    @property
    def data_width(self) -> int:
        return self._data_width

    def __eq__(self, other):
        return type(other) is type(self) and other.data_width == self.data_width

    def __repr__(self):
        return f"AxiReadSignature({self.data_width})"


class AxiWriteSignature(wiring.Signature):
    """AXI4 write channels (AW, W, B), master view.

    Parameters
    ----------
    data_width : int
        WDATA width in bits (64..512).
    """

    def __init__(self, data_width: int):
        self._data_width = check_data_width(data_width)
        super().__init__({
            "awaddr": Out(ADDRESS_WIDTH), "awlen": Out(8), "awsize": Out(3), "awburst": Out(2),
            "awvalid": Out(1), "awready": In(1),
            "wdata": Out(data_width), "wstrb": Out(data_width // 8), "wlast": Out(1),
            "wvalid": Out(1), "wready": In(1),
            "bresp": In(2), "bvalid": In(1), "bready": Out(1),
        })

    @property
    def data_width(self) -> int:
        return self._data_width

    def __eq__(self, other):
        return type(other) is type(self) and other.data_width == self.data_width

    def __repr__(self):
        return f"AxiWriteSignature({self.data_width})"


class AxiSignature(wiring.Signature):
    """AXI4 read and write channels (AR, R, AW, W, B), master view.

    Parameters
    ----------
    data_width : int
        RDATA/WDATA width in bits (64..512).
    """

    def __init__(self, data_width: int):
        self._data_width = check_data_width(data_width)
        members = dict(AxiReadSignature(data_width).members)
        members.update(AxiWriteSignature(data_width).members)
        super().__init__(members)

    @property
    def data_width(self) -> int:
        return self._data_width

    def __eq__(self, other):
        return type(other) is type(self) and other.data_width == self.data_width

    def __repr__(self):
        return f"AxiSignature({self.data_width})"


class AxiLiteSignature(wiring.Signature):
    """AXI4-Lite, 32-bit data, master view (the control slave uses ``.flip()``).

    Parameters
    ----------
    address_width : int
        Byte address width of the register window.
    """

    def __init__(self, address_width: int):
        if not isinstance(address_width, int) or not 2 <= address_width <= 32:
            raise ValueError(f"AXI4-Lite address width must be an integer in 2..32, not {address_width!r}")
        self._address_width = address_width
        super().__init__({
            "awaddr": Out(address_width), "awvalid": Out(1), "awready": In(1),
            "wdata": Out(32), "wstrb": Out(4), "wvalid": Out(1), "wready": In(1),
            "bresp": In(2), "bvalid": In(1), "bready": Out(1),
            "araddr": Out(address_width), "arvalid": Out(1), "arready": In(1),
            "rdata": In(32), "rresp": In(2), "rvalid": In(1), "rready": Out(1),
        })

    @property
    def address_width(self) -> int:
        return self._address_width

    def __eq__(self, other):
        return type(other) is type(self) and other.address_width == self.address_width

    def __repr__(self):
        return f"AxiLiteSignature({self.address_width})"
