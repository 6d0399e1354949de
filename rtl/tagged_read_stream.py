"""Storage read ports of the kernel's blocks, and a read engine whose requests carry a tag.

A *read port* is the requester's side of a :class:`~smartsage.rtl.read_stream.ReadStream`: a
request stream of byte addresses and a response stream of :data:`StreamWord`\\ s, in order. A port
has only the fields its requester uses: a tag that travels with each read and comes back with its
answer (the prefetcher's ``pair``, a lane's ``ids``), and the whole beat of each answer for a
requester that takes several fields from one read.
"""

from __future__ import annotations

from amaranth.hdl import Module, ResetInserter, Shape
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .axi import ADDRESS_WIDTH, AxiReadSignature, check_data_width
from .free_slot_fifo import FreeSlotFIFO
from .read_stream import ReadStream, StreamWord

__all__ = ["ReadPortSignature", "TaggedReadStream"]


class ReadPortSignature(wiring.Signature):
    """A requester's read port (requester view: requests out, answers in).

    Parameters
    ----------
    tag_shape : shape-castable or None
        A tag held with each request (``tag``) and returned with its answer (``answer_tag``).
    data_width : int or None
        With a data width, the whole beat of each answer (``beat``, valid with ``response``).

    Members
    -------
    request : ``Out(stream.Signature(64))``
        Byte address of a naturally aligned field of at most 8 bytes.
    response : ``In(stream.Signature(StreamWord))``
        The enclosing 64-bit word, in request order.
    tag : ``Out(tag_shape)``, ``answer_tag`` : ``In(tag_shape)``
        Only with a ``tag_shape``.
    beat : ``In(data_width)``
        Only with a ``data_width``.
    """

    def __init__(self, tag_shape=None, data_width: int | None = None):
        self._tag_shape = tag_shape
        self._data_width = data_width
        members = {"request": Out(stream.Signature(ADDRESS_WIDTH)), "response": In(stream.Signature(StreamWord))}
        if tag_shape is not None:
            members.update({"tag": Out(tag_shape), "answer_tag": In(tag_shape)})
        if data_width is not None:
            members["beat"] = In(check_data_width(data_width))
        super().__init__(members)

    @property
    def tag_shape(self):
        return self._tag_shape

    @property
    def data_width(self) -> int | None:
        return self._data_width

    def __eq__(self, other):
        return type(other) is type(self) and other.members == self.members

    def __repr__(self):
        return f"ReadPortSignature({self._tag_shape!r}, {self._data_width!r})"


class TaggedReadStream(wiring.Component):
    """A :class:`ReadStream` whose requests carry a tag that comes back with the answer.

    The tags wait in a FIFO (depth ``outstanding``) beside the reads in flight; a request is taken
    only when its tag has room. ``clear`` empties the tag FIFO (a command that ends early); with
    ``drain`` every answer is taken and dropped, with or without its tag. ``clear`` is raised only
    with ``drain`` or with no read in flight: outside a drain an answer is taken on the port's ready
    alone (it has its tag).

    Parameters
    ----------
    data_width : int
        AXI data width in bits (64..512).
    outstanding : int
        Reads in flight at most.
    tag_shape : shape-castable
        What travels with a read.
    tag_register : bool
        The answer's tag from a register (a shift register of the tags beside the FIFO's LUT RAM),
        for a requester whose logic the tag selects (the prefetcher's pair words); else from the
        LUT RAM's read.
    answer_register : bool
        :class:`ReadStream`'s: the R channel registered.

    Members
    -------
    port : ``In(ReadPortSignature(tag_shape, data_width))``
        The requester's port.
    bus : ``Out(AxiReadSignature(data_width))``
    drain : ``In(1)``
        Take and drop every answer.
    clear : ``In(1)``
        Synchronous reset of the tag FIFO.
    idle : ``Out(1)``
        No read in flight.
    """

    def __init__(self, data_width: int, outstanding: int, tag_shape, *, tag_register: bool = False,
                 answer_register: bool = False):
        self._reader = ReadStream(data_width, outstanding, answer_register=answer_register)  # checks both
        self._tag_shape = tag_shape
        self._tag_register = tag_register
        super().__init__({
            "port": In(ReadPortSignature(tag_shape, data_width)),
            "bus": Out(AxiReadSignature(data_width)),
            "drain": In(1),
            "clear": In(1),
            "idle": Out(1),
        })

    @property
    def data_width(self) -> int:
        return self._reader.data_width

    @property
    def outstanding(self) -> int:
        return self._reader.outstanding

    @property
    def tag_shape(self):
        return self._tag_shape

    def elaborate(self, platform):
        m = Module()
        m.submodules.reader = reader = self._reader
        tag_bits = Shape.cast(self._tag_shape).width
        tags = FreeSlotFIFO(width=tag_bits, depth=self.outstanding, head_bits=tag_bits if self._tag_register else 0)
        m.submodules.tags = ResetInserter(self.clear)(tags)
        wiring.connect(m, wiring.flipped(self.bus), reader.bus)
        port = self.port
        m.d.comb += [
            reader.request.valid.eq(port.request.valid & tags.w_rdy),
            reader.request.payload.eq(port.request.payload),
            port.request.ready.eq(reader.request.ready & tags.w_rdy),
            tags.w_data.eq(port.tag),
            tags.w_en.eq(reader.request.valid & reader.request.ready),
            port.response.payload.eq(reader.response.payload),
            port.answer_tag.eq(tags.r_head if self._tag_register else tags.r_data),
            port.beat.eq(reader.beat),
            port.response.valid.eq(reader.response.valid & tags.r_rdy),
            # a command that ends early drains its reads with the tags already cleared. Outside a
            # drain every answer has its tag (``clear`` comes with ``drain`` or with no read in
            # flight), so the tag FIFO's ready is not in the engine's: with it, the FIFO's ready flag
            # was in front of the engine's answer register's enables (~520 with a 512-bit beat) and
            # ran through its own read back into itself, 11.96 ns on ``default``'s ECP5 proxy
            reader.response.ready.eq(self.drain | port.response.ready),
            tags.r_en.eq(reader.response.valid & reader.response.ready),
            self.idle.eq(reader.idle),
        ]
        return m
