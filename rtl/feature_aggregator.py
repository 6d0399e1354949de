"""Exact near-storage feature aggregation (docs/spec.md, section 4): self rows and neighbor sums.

After the last hop, for each entry i of the last frontier F_{L-1} (a prefix of the node list), the
block reads v = F_{L-1}[i] and its count n = counts[c_{L-1} + i] from device memory, then the ids of
its n last-hop samples u_0..u_{n-1} (node-list entries from |F_{L-1}| + counts[c_{L-1}] + ... on,
tracked as a running index), and turns each into the storage address of its feature row.

The row is processed in groups of :data:`GROUP` elements (the last group may be shorter). For a
group, the element reads of u_0, u_1, ... (j-major, element-minor) are followed by those of v's row
(copied to ``self[i]`` as stored, one strobed write per element); the answers return in order, so
the consumer folds each element's values in sample order:

- fp32, fp16, bf16: each element widened exactly to binary32 (NaNs canonical), the first one
  loaded into the element's accumulator, every later one added by the shared pipelined
  :class:`~smartsage.rtl.fp32_adder.Fp32Adder` (the accumulator lane is its tag). A lane waits
  while its previous addition is in the adder; with ``GROUP`` lanes taking turns, a lane comes back
  every ``GROUP`` answers, more than the adder's latency + 1, so the adder never stalls the stream
  for rows of at least ``GROUP`` elements.
- int8: sign-extended and summed exactly in 32 bits in the same cycle.

Then the group's sums are handed to a sum writer that writes them to ``sum[i]`` (4 bytes each;
n = 0 leaves +0.0 / 0) while the next group's sample answers (which need no write) stream in; the
self answers, last in a group, wait for it. Reads run ahead of the consumer (up to the read
engine's ``outstanding`` reads). A read error stops the
block with ``error`` and the failing address. Every write lies inside ``self[0..entries)`` and
``sum[0..entries)``; the kernel checks their capacities before ``start``.
"""

from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from smartsage.spec.image import FeatureDtype

from .field_writer import WriteWord
from .float_widen import widen_to_fp32
from .fp32_adder import DEFAULT_LATENCY, Fp32Adder
from .read_stream import StreamWord

__all__ = ["FeatureAggregator", "AggregateParameters", "GROUP"]

#: Feature elements folded together (accumulator lanes): more than the adder's latency + 1.
GROUP = 8
assert GROUP > DEFAULT_LATENCY + 1

#: What the kernel hands over at ``start`` (held stable while ``busy``).
AggregateParameters = data.StructLayout({
    "entries": 64,          # |F_{L-1}|
    "nodes_ptr": 64,        # node list (F_{L-1} is its prefix)
    "wide_ids": 1,          # node ids are u64 (else u32)
    "counts_addr": 64,      # device address of counts[c_{L-1}]
    "features_base": 64,    # storage address of the features section
    "feature_dim": 32,      # F
    "feature_dtype": 8,     # FeatureDtype code
    "self_ptr": 64,
    "sum_ptr": 64,
})


class FeatureAggregator(wiring.Component):
    """Self-row copy and exact neighbor sums of the last frontier (one element read per cycle).

    Parameters
    ----------
    max_fanout : int
        Largest count of an entry (the sample ids of one entry are held on chip).

    Members
    -------
    start : ``In(1)``
        Begin with ``parameters`` (while not ``busy``).
    parameters : ``In(AggregateParameters)``
    busy : ``Out(1)``
    error : ``Out(1)``
        A read was answered with an error (valid once ``busy`` falls); ``error_address`` names it.
    error_address : ``Out(64)``
    mem_request : ``Out(stream.Signature(64))``
        Device-memory reads (node ids, counts).
    mem_response : ``In(stream.Signature(StreamWord))``
    storage_request : ``Out(stream.Signature(64))``
        Feature element reads.
    storage_response : ``In(stream.Signature(StreamWord))``
    write : ``Out(stream.Signature(WriteWord))``
        Self elements (``narrow`` for 1- and 2-byte elements) and sums.
    """

    def __init__(self, max_fanout: int):
        if not isinstance(max_fanout, int) or max_fanout < 1:
            raise ValueError(f"Max fanout must be a positive integer, not {max_fanout!r}")
        self._max_fanout = max_fanout
        super().__init__({
            "start": In(1),
            "parameters": In(AggregateParameters),
            "busy": Out(1),
            "error": Out(1),
            "error_address": Out(64),
            "mem_request": Out(stream.Signature(64)),
            "mem_response": In(stream.Signature(StreamWord)),
            "storage_request": Out(stream.Signature(64)),
            "storage_response": In(stream.Signature(StreamWord)),
            "write": Out(stream.Signature(WriteWord)),
        })

    @property
    def max_fanout(self) -> int:
        return self._max_fanout

    def elaborate(self, platform):
        m = Module()
        p = Signal(AggregateParameters)
        m.submodules.adder = adder = Fp32Adder(tag_width=(GROUP - 1).bit_length())
        # row addresses of the current entry's samples
        m.submodules.rows = rows = Memory(shape=64, depth=self._max_fanout, init=[])
        row_write = rows.write_port()
        row_read = rows.read_port(domain="comb")

        dtype = p.feature_dtype
        is_int8 = dtype == int(FeatureDtype.INT8)
        size_log2 = Mux(dtype == int(FeatureDtype.FP32), 2,
                        Mux((dtype == int(FeatureDtype.FP16)) | (dtype == int(FeatureDtype.BF16)), 1, 0))
        row_bytes = Signal(40)
        m.d.comb += row_bytes.eq(p.feature_dim << size_log2)

        entry = Signal(64)          # i
        sample_index = Signal(64)   # node-list index of the entry's first sample
        count = Signal(range(self._max_fanout + 1))
        self_row = Signal(64)       # storage address of v's row
        group_base = Signal(32)     # e0
        group_size = Signal(range(GROUP + 1))
        id_bytes_log2 = Mux(p.wide_ids, 3, 2)

        # sample-id fetch (issue and consume counters)
        fetch_issued = Signal(range(self._max_fanout + 1))
        fetch_taken = Signal(range(self._max_fanout + 1))

        # group reads: issuer (phase self then sample j, element e) and consumer, same order
        issue_self = Signal()
        issue_j = Signal(range(self._max_fanout + 1))
        issue_e = Signal(range(GROUP))
        take_self = Signal()
        take_j = Signal(range(self._max_fanout + 1))
        take_e = Signal(range(GROUP))
        take_done = Signal()
        issue_done = Signal()

        # a finished group's sums, written out while the next group's reads run
        sums_out = Array(Signal(32, name=f"sum_out{lane}") for lane in range(GROUP))
        sums_size = Signal(range(GROUP + 1))
        sums_index = Signal(range(GROUP + 1))
        sums_base = Signal(64)
        sums_writing = Signal()
        m.d.comb += sums_writing.eq(sums_index != sums_size)

        acc = Array(Signal(32, name=f"acc{lane}") for lane in range(GROUP))
        pending = Signal(GROUP)     # lanes whose addition is in the adder

        # the adder's results land in their lanes
        with m.If(adder.o.valid):
            m.d.sync += acc[adder.o.payload.tag].eq(adder.o.payload.sum)
        added = Signal(GROUP)
        issued_add = Signal(GROUP)
        m.d.comb += added.eq(Mux(adder.o.valid, 1 << adder.o.payload.tag, 0))

        def ident(word, address, wide):
            return Mux(wide, word, Mux(address[2], word[32:], word[:32]))

        # the answer's element, widened to binary32 (NaNs canonical) and sign-extended (int8)
        answer = self.storage_response.payload
        element = Signal(32)
        m.d.comb += element.eq(answer.data >> Cat(Const(0, 3), answer.address[:3]))
        widened = Signal(32)
        m.d.comb += widened.eq(Mux(dtype == int(FeatureDtype.FP32),
                                   widen_to_fp32(m, element[:32], FeatureDtype.FP32, name="w32"),
                                   Mux(dtype == int(FeatureDtype.BF16),
                                       widen_to_fp32(m, element[:16], FeatureDtype.BF16, name="wbf"),
                                       widen_to_fp32(m, element[:16], FeatureDtype.FP16, name="w16"))))
        integer = Signal(32)
        m.d.comb += integer.eq(element[:8].as_signed())
        with m.FSM(name="aggregator"):
            with m.State("A_IDLE"):
                with m.If(self.start):
                    m.d.sync += [p.eq(self.parameters), entry.eq(0), sample_index.eq(self.parameters.entries),
                                 self.error.eq(0)]
                    m.next = "A_ENTRY"
            with m.State("A_ENTRY"):
                m.d.comb += self.busy.eq(1)
                with m.If(entry == p.entries):
                    with m.If(~sums_writing):  # the last sums have been handed to the writer
                        m.next = "A_IDLE"
                with m.Else():
                    m.d.comb += [self.mem_request.valid.eq(1),
                                 self.mem_request.payload.eq(p.nodes_ptr + (entry << id_bytes_log2))]
                    with m.If(self.mem_request.ready):
                        m.next = "A_COUNT"
            with m.State("A_COUNT"):
                m.d.comb += [self.busy.eq(1), self.mem_request.valid.eq(1),
                             self.mem_request.payload.eq(p.counts_addr + (entry << 2))]
                with m.If(self.mem_request.ready):
                    m.next = "A_NODE_WAIT"
            with m.State("A_NODE_WAIT"):
                word = self.mem_response.payload
                m.d.comb += [self.busy.eq(1), self.mem_response.ready.eq(1)]
                with m.If(self.mem_response.valid):
                    with m.If(word.error):
                        m.d.sync += [self.error.eq(1), self.error_address.eq(word.address)]
                        m.next = "A_ERROR"
                    with m.Else():
                        m.d.sync += self_row.eq(p.features_base + ident(word.data, word.address, p.wide_ids)
                                                * row_bytes)
                        m.next = "A_COUNT_WAIT"
            with m.State("A_COUNT_WAIT"):
                word = self.mem_response.payload
                m.d.comb += [self.busy.eq(1), self.mem_response.ready.eq(1)]
                with m.If(self.mem_response.valid):
                    with m.If(word.error):
                        m.d.sync += [self.error.eq(1), self.error_address.eq(word.address)]
                        m.next = "A_ERROR"
                    with m.Else():
                        m.d.sync += [count.eq(ident(word.data, word.address, 0)),
                                     fetch_issued.eq(0), fetch_taken.eq(0)]
                        m.next = "A_FETCH"
            with m.State("A_FETCH"):  # the sample ids stream in; each becomes its row's address
                word = self.mem_response.payload
                m.d.comb += [self.busy.eq(1), self.mem_response.ready.eq(1)]
                with m.If(fetch_issued != count):
                    m.d.comb += [self.mem_request.valid.eq(1),
                                 self.mem_request.payload.eq(p.nodes_ptr
                                                             + ((sample_index + fetch_issued) << id_bytes_log2))]
                    with m.If(self.mem_request.ready):
                        m.d.sync += fetch_issued.eq(fetch_issued + 1)
                m.d.comb += [row_write.addr.eq(fetch_taken),
                             row_write.data.eq(p.features_base + ident(word.data, word.address, p.wide_ids)
                                               * row_bytes)]
                with m.If(self.mem_response.valid):
                    with m.If(word.error):
                        m.d.sync += [self.error.eq(1), self.error_address.eq(word.address)]
                        m.next = "A_ERROR"
                    with m.Else():
                        m.d.comb += row_write.en.eq(1)
                        m.d.sync += fetch_taken.eq(fetch_taken + 1)
                with m.If(fetch_taken == count):
                    m.d.sync += group_base.eq(0)
                    m.next = "A_GROUP"
            with m.State("A_GROUP"):
                m.d.comb += self.busy.eq(1)
                remaining = p.feature_dim - group_base
                with m.If(group_base >= p.feature_dim):
                    m.d.sync += [entry.eq(entry + 1), sample_index.eq(sample_index + count)]
                    m.next = "A_ENTRY"
                with m.Else():
                    m.d.sync += [group_size.eq(Mux(remaining < GROUP, remaining, GROUP)),
                                 issue_self.eq(count == 0), issue_j.eq(0), issue_e.eq(0), issue_done.eq(0),
                                 take_self.eq(count == 0), take_j.eq(0), take_e.eq(0), take_done.eq(0)]
                    m.d.sync += [lane.eq(0) for lane in acc]
                    m.next = "A_RUN"
            with m.State("A_RUN"):
                m.d.comb += self.busy.eq(1)
                # issuer: each sample's elements (group_size of them), then v's
                issuing = ~issue_done
                row = Mux(issue_self, self_row, row_read.data)
                m.d.comb += [row_read.addr.eq(issue_j),
                             self.storage_request.valid.eq(issuing),
                             self.storage_request.payload.eq(row + ((group_base + issue_e) << size_log2))]
                with m.If(self.storage_request.valid & self.storage_request.ready):
                    with m.If(issue_e == group_size - 1):
                        m.d.sync += issue_e.eq(0)
                        with m.If(issue_self):
                            m.d.sync += issue_done.eq(1)
                        with m.Else():
                            m.d.sync += issue_j.eq(issue_j + 1)
                            with m.If(issue_j == count - 1):
                                m.d.sync += issue_self.eq(1)
                    with m.Else():
                        m.d.sync += issue_e.eq(issue_e + 1)

                # consumer, in the same order
                lane = acc[take_e]
                busy_lane = pending.bit_select(take_e, 1)
                accept = Signal()
                with m.If(take_done):
                    pass
                with m.Elif(take_self):  # (the writer is the previous group's sums' first)
                    m.d.comb += [
                        self.write.valid.eq(self.storage_response.valid & ~answer.error & ~sums_writing),
                        self.write.payload.address.eq(p.self_ptr + (((entry * p.feature_dim)[:64] + group_base
                                                                      + take_e) << size_log2)),
                        self.write.payload.data.eq(element),
                        self.write.payload.narrow.eq(Mux(size_log2 == 2, 0, Mux(size_log2 == 1, 2, 1))),
                        accept.eq((self.write.ready & ~sums_writing) | answer.error),
                    ]
                with m.Elif(is_int8 | (take_j == 0)):
                    m.d.comb += accept.eq(1)
                with m.Else():
                    m.d.comb += accept.eq(~busy_lane)
                m.d.comb += self.storage_response.ready.eq(accept & ~take_done)
                with m.If(self.storage_response.valid & self.storage_response.ready):
                    with m.If(answer.error):
                        m.d.sync += [self.error.eq(1), self.error_address.eq(answer.address)]
                        m.next = "A_ERROR"
                    with m.Else():
                        with m.If(~take_self):
                            with m.If(is_int8):
                                m.d.sync += lane.eq(Mux(take_j == 0, integer, lane + integer))
                            with m.Elif(take_j == 0):
                                m.d.sync += lane.eq(widened)
                            with m.Else():
                                m.d.comb += [adder.i.valid.eq(1), adder.i.payload.a.eq(lane),
                                             adder.i.payload.b.eq(widened), adder.i.payload.tag.eq(take_e),
                                             issued_add.eq(1 << take_e)]
                        with m.If(take_e == group_size - 1):
                            m.d.sync += take_e.eq(0)
                            with m.If(take_self):
                                m.d.sync += take_done.eq(1)
                            with m.Else():
                                m.d.sync += take_j.eq(take_j + 1)
                                with m.If(take_j == count - 1):
                                    m.d.sync += take_self.eq(1)
                        with m.Else():
                            m.d.sync += take_e.eq(take_e + 1)
                # every answer taken and every addition back: the group's sums are handed to the
                # sum writer (once it has written the previous group's) and the next group starts
                with m.If(take_done & (pending == 0) & ~sums_writing):
                    m.d.sync += [sums_out[lane].eq(acc[lane]) for lane in range(GROUP)]
                    m.d.sync += [sums_size.eq(group_size), sums_index.eq(0),
                                 sums_base.eq(p.sum_ptr + (((entry * p.feature_dim)[:64] + group_base) << 2)),
                                 group_base.eq(group_base + GROUP)]
                    m.next = "A_GROUP"
            with m.State("A_ERROR"):  # stopped; the kernel ends the command
                with m.If(self.start):
                    m.d.sync += [p.eq(self.parameters), entry.eq(0), sample_index.eq(self.parameters.entries),
                                 self.error.eq(0)]
                    m.next = "A_ENTRY"
        m.d.sync += pending.eq((pending | issued_add) & ~added)

        # the sum writer: a finished group's sums, one 4-byte write each, while the FSM goes on
        with m.If(sums_writing):
            m.d.comb += [self.write.valid.eq(1),
                         self.write.payload.address.eq(sums_base + (sums_index << 2)),
                         self.write.payload.data.eq(sums_out[sums_index]),
                         self.write.payload.wide.eq(0), self.write.payload.narrow.eq(0)]
            with m.If(self.write.ready):
                m.d.sync += sums_index.eq(sums_index + 1)
        return m
