"""Write combining: fields appended to output buffers go out as strobed full-beat AXI4 bursts."""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .axi import ADDRESS_WIDTH, BURST_INCR, RESP_OKAY, AxiWriteSignature, check_data_width
from .compare import carry_equal
from .free_slot_fifo import FreeSlotFIFO
from .register_copies import and_copies, register_copies
from .stream_buffer import StreamBuffer

__all__ = ["WriteCombiner", "AppendWord", "MAX_BURST", "BURST_BOUNDARY"]

#: A field to write: byte address (naturally aligned), value, and 8 bytes (wide) or 4.
AppendWord = data.StructLayout({"address": ADDRESS_WIDTH, "data": 64, "wide": 1})

#: Beats per AXI burst at most (1 KiB at 512 bits).
MAX_BURST = 16
#: AXI4 bursts never cross a 4 KiB boundary.
BURST_BOUNDARY = 4096
#: Flip-flops of a port's open beat (data, strobes) per copy of the port's room flag and handshake.
BEAT_GROUP_BITS = 128


class WriteCombiner(wiring.Component):
    """Merges naturally aligned u32/u64 fields into beats and writes runs of consecutive beats as bursts.

    A field passes two two-entry buffers at its port, a cycle each: the first is a register slice at
    the block's edge (the producers sit across the chip: their handshakes and payloads end at its
    flip-flops), the second holds the field with whether it is for the same beat as the field before
    it (worked out from the first's registers), so neither the producers nor that compare run into the
    merge logic. Each input port owns one *open beat*: a field for the same beat is merged into it (its
    bytes strobed), a field for another beat closes it. A beat whose every byte is strobed closes at
    once; ``flush`` closes every open beat (the kernel raises it at each drain point; it is taken a
    cycle late, through a flip-flop, as the fields are). Closed beats of a port queue in its beat
    FIFO; consecutive closed beats (the next beat address, not past a 4 KiB boundary, at most
    ``MAX_BURST``) form one *run*, published when the next beat is not consecutive, the run is full,
    or on ``flush``. Runs of all ports are written in turn:
    one AW per run (``awlen`` = beats - 1), its beats on W back to back, answers counted back against a
    FIFO of the runs in flight (depth ``outstanding``). Only the fields' bytes are strobed, so nothing
    outside the output buffers is written.

    The first write answered SLVERR/DECERR latches ``error`` and ``error_address``: the address of
    the first strobed byte of that burst (an address inside the failing write).

    Parameters
    ----------
    data_width : int
        AXI data width in bits (64..512).
    outstanding : int
        Bursts in flight at most.
    ports : int
        Independent input streams (each appends to its own buffer).
    edge_registers : bool
        The register slice at each port and the flush's flip-flops (default). The formal checks
        (rtl/formal/writers.py) leave them out: they only delay the free inputs by a cycle, so every
        trace of the logic behind them is a trace without them a cycle later, and the bounded check's
        steps reach a cycle further into the bursts.

    Members
    -------
    fields : ``In(stream.Signature(AppendWord)).array(ports)``
    flush : ``In(1)``
        Close every open beat and run (level; hold it until ``idle``). Registered: it acts from the
        next cycle on, once the fields taken before it have merged.
    bus : ``Out(AxiWriteSignature(data_width))``
    idle : ``Out(1)``
        Nothing open, queued or unanswered.
    error : ``Out(1)``
        Some burst was answered SLVERR/DECERR (sticky until ``clear``).
    error_address : ``Out(64)``
    clear : ``In(1)``
        Clears ``error`` (a new command).
    """

    def __init__(self, data_width: int, outstanding: int, ports: int = 2, edge_registers: bool = True):
        self._data_width = check_data_width(data_width)
        if not isinstance(outstanding, int) or not 1 <= outstanding <= 256:
            raise ValueError(f"Outstanding writes must be an integer in 1..256, not {outstanding!r}")
        if not isinstance(ports, int) or not 1 <= ports <= 8:
            raise ValueError(f"Write combiner ports must be an integer in 1..8, not {ports!r}")
        self._outstanding = outstanding
        self._ports = ports
        self._edge_registers = edge_registers
        super().__init__({
            "fields": In(stream.Signature(AppendWord)).array(ports),
            "flush": In(1),
            "bus": Out(AxiWriteSignature(data_width)),
            "idle": Out(1),
            "error": Out(1),
            "error_address": Out(ADDRESS_WIDTH),
            "clear": In(1),
        })

    @property
    def data_width(self) -> int:
        return self._data_width

    @property
    def ports(self) -> int:
        return self._ports

    def elaborate(self, platform):
        m = Module()
        data_bytes = self._data_width // 8
        size_log2 = data_bytes.bit_length() - 1
        bus = self.bus
        beat_layout = data.StructLayout({"data": self._data_width, "strobe": data_bytes})
        run_layout = data.StructLayout({"first": ADDRESS_WIDTH, "length": range(MAX_BURST + 1)})
        depth = 2 * MAX_BURST  # an open run (< MAX_BURST beats) never fills a port's FIFO alone

        def first_strobed(strobe, name):
            """Index of the lowest strobed byte (a flat priority encoder)."""
            index = Signal(range(data_bytes), name=name)
            for byte in reversed(range(data_bytes)):
                with m.If(strobe[byte]):
                    m.d.comb += index.eq(byte)
            return index

        beat_fifos, run_fifos, idles = [], [], []
        # the flush as a flip-flop per port (the sequencer's state decode drove it into every port's
        # flush conditions and on into the run FIFOs' write and level, 8.2-8.9 ns on the whole
        # kernel's proxy)
        flush_next = Signal()
        m.d.comb += flush_next.eq(self.flush)
        flushes = (register_copies(m, platform, "flush", flush_next, self._ports) if self._edge_registers
                   else [self.flush] * self._ports)
        # the beat's 4-byte words: a naturally aligned field strobes whole words (one, or two when wide)
        words = data_bytes // 4
        staged_layout = data.StructLayout({"field": AppendWord, "same_beat": 1, "next_beat": 1,
                                           "strobe": data_bytes, "words": words})
        for number in range(self._ports):
            # ---- the port's input stage: a two-entry buffer (ready and payload from flip-flops), and
            # whether a field is for the same beat as the field before it, worked out as it enters
            # (a compare of the field's address with a register): while a beat is open it is the
            # previous field's beat, so the merge decision reads one bit, not a 58-bit compare
            # (each compare a carry chain on the ECP5 proxy, :func:`~smartsage.rtl.compare.carry_equal`:
            # as LUT trees, the edge register -> the stage's compare bits was four levels, 7.2-8.0 ns
            # on ``small``'s proxy)
            # the register slice at the block's edge (the field's address came from the producer's
            # multiplexer, across the chip, into the beat compares below: from the lane collector's
            # ``first`` copy, 9.7-10.1 ns on the whole kernel's proxy)
            if self._edge_registers:
                edge = StreamBuffer(AppendWord)
                m.submodules[f"edge{number}"] = edge
                m.d.comb += [edge.i.valid.eq(self.fields[number].valid),
                             edge.i.payload.eq(self.fields[number].payload),
                             self.fields[number].ready.eq(edge.i.ready)]
                incoming, edge_idle = edge.o, edge.idle
            else:
                incoming, edge_idle = self.fields[number], 1
            stage = StreamBuffer(staged_layout)
            m.submodules[f"stage{number}"] = stage
            # (and whether it is for the beat after that one, not across a 4 KiB boundary: the run
            # check, below, then reads one bit too)
            boundary = BURST_BOUNDARY.bit_length() - 1
            # (the addresses are read only while a beat or a run is open, set after the first field:
            # no reset reaches them, nor the open beat's and run's payloads below)
            previous_beat = Signal(ADDRESS_WIDTH - size_log2, name=f"previous_beat{number}", reset_less=True)
            previous_next = Signal(ADDRESS_WIDTH - size_log2, name=f"previous_next{number}",  # previous_beat + 1
                                   reset_less=True)
            incoming_beat = incoming.payload.address[size_log2:]
            m.d.comb += [stage.i.valid.eq(incoming.valid), incoming.ready.eq(stage.i.ready),
                         stage.i.payload.field.eq(incoming.payload),
                         stage.i.payload.same_beat.eq(carry_equal(m, platform, f"same_beat{number}",
                                                                  incoming_beat, previous_beat)),
                         # (the field's byte strobes too: the shift by the field's offset was in front
                         # of "the merged beat is full" and the run FIFO's write, 6.9 ns on the proxy)
                         stage.i.payload.strobe.eq(Mux(incoming.payload.wide, 0xFF, 0x0F)
                                                   << incoming.payload.address[:size_log2]),
                         stage.i.payload.words.eq(Mux(incoming.payload.wide, 0b11, 0b01)
                                                  << incoming.payload.address[2:size_log2]),
                         stage.i.payload.next_beat.eq(carry_equal(m, platform, f"next_beat{number}",
                                                                  incoming_beat, previous_next)
                                                      & (incoming_beat[:boundary - size_log2] != 0))]
            with m.If(incoming.valid & incoming.ready):
                m.d.sync += [previous_beat.eq(incoming_beat), previous_next.eq(incoming_beat + 1)]
            port = stage.o
            # (their writes are counted a cycle late: the push reaches a flip-flop in each, not their
            # pointers and levels, 8.3-8.4 ns from the room flag's copy on the ECP5 proxy; and the run
            # FIFO's reads likewise: the burst intake's decision, behind the ports' run flags and the
            # AW handshake, reached its pointer and level, 7.4-7.7 ns)
            beats = FreeSlotFIFO(width=beat_layout.size, depth=depth, late_write=True)
            runs = FreeSlotFIFO(width=run_layout.size, depth=depth, late_write=True, late_read=True)
            m.submodules[f"beats{number}"] = beats
            m.submodules[f"runs{number}"] = runs
            beat_fifos.append(beats)
            run_fifos.append(runs)

            # ---- the open beat
            is_open = Signal(name=f"open{number}")
            beat_address = Signal(ADDRESS_WIDTH, name=f"beat_address{number}", reset_less=True)
            # the open beat follows the beat pushed before it (the last pushed beat is always the
            # previous field's: a beat opens only as the one before it is pushed, or after it was), not
            # across a 4 KiB boundary: with the run open it continues the run (its next address)
            beat_follows = Signal(name=f"beat_follows{number}")
            beat = Signal(beat_layout, name=f"beat{number}", reset_less=True)
            # which of its words are strobed, flip-flops beside the byte strobes (a field strobes whole
            # words): "the field fills the beat" is an AND of these or-ed with the field's, two LUT
            # levels (the AND of the 64 merged byte strobes was four, in front of the push and the beat
            # and run FIFOs' writes and levels: 7.6-8.3 ns paths on the whole kernel's ECP5 proxy)
            beat_words = Signal(words, name=f"beat_words{number}", reset_less=True)
            field = port.payload.field
            lane_value = Mux(field.wide, field.data, Cat(field.data[:32], field.data[:32]))
            field_strobe = Signal(data_bytes, name=f"field_strobe{number}")
            m.d.comb += field_strobe.eq(port.payload.strobe)
            field_data = lane_value.replicate(data_bytes // 8)
            byte_mask = Cat(*(field_strobe[byte].replicate(8) for byte in range(data_bytes)))
            # the field at the port is for the open beat (flip-flops only: the stage's valid and
            # compare, the open flag)
            same = Signal(name=f"same{number}")
            m.d.comb += same.eq(port.valid & is_open & port.payload.same_beat)
            merged = Signal(beat_layout, name=f"merged{number}")
            m.d.comb += [merged.data.eq((beat.data & ~byte_mask) | (field_data & byte_mask)),
                         merged.strobe.eq(beat.strobe | field_strobe)]
            # "the field fills the beat", a flip-flop worked out a cycle ahead from what the open beat's
            # words and the stage's head will be (the head stays, or takes the stage's next): from
            # ``beat_words``, the AND of the merged words ran on through the push into the beat and
            # run FIFOs' levels, four levels and 10.1-10.7 ns on ``default``'s ECP5 proxy
            # (as two ANDs of flip-flops, whether the port takes its field this cycle or not, picked by
            # the take at the last LUT: behind the take, the AND was four levels from the port's room
            # flag, 12.09 ns on ``default``'s proxy)
            full = Signal(name=f"full{number}")
            full_if_taken = Signal(name=f"full_if_taken{number}")
            full_if_held = Signal(name=f"full_if_held{number}")

            # what is pushed this cycle (at most one beat): the open beat (another beat's field came, or
            # a flush), or the merged beat once full. Which of the two is picked by ``same``, so the
            # beat FIFO's write data does not wait for the push
            push = Signal(name=f"push{number}")
            push_address = Signal(ADDRESS_WIDTH, name=f"push_address{number}")
            push_beat = Signal(beat_layout, name=f"push_beat{number}")
            # room in both FIFOs: their levels a cycle before were below depth - 2 (a level grows by at most
            # one a cycle, and a push is counted a cycle after it), flags of their own, so no level compare
            # sits in front of the port's handshake and the open beat's enables. The flag is copied: one copy
            # is the port's ready (the input stage's ~150 enables), one decides the push, the others enable a
            # group of the open beat's flip-flops each, through their own copy of the handshake (as one net,
            # the flag reached some 700 enables; with the ready and the push on one copy, that copy -> the
            # push -> the run FIFO's level was 9.7 ns on the whole kernel's proxy)
            beat_bits = beat_layout.size
            beat_groups = max(1, beat_bits // BEAT_GROUP_BITS)
            rooms = register_copies(m, platform, f"room{number}_",
                                    (beats.level < depth - 2) & (runs.level < depth - 2), 2 + beat_groups)
            room = rooms[1]
            taking = port.valid & room
            m.d.comb += [port.ready.eq(rooms[0]), beats.w_data.eq(push_beat), beats.w_en.eq(push),
                         push_address.eq(beat_address), push_beat.eq(Mux(same, merged, beat))]
            # the open beat takes every field (the merged beat, or the field's own): a filled beat is
            # pushed and closed, and what it keeps is not read again, so neither ``same`` nor
            # ``full`` enables the beat's flip-flops, only the handshake
            fresh = Signal(beat_layout, name=f"fresh{number}")
            m.d.comb += [fresh.data.eq(field_data), fresh.strobe.eq(field_strobe)]
            beat_next = Mux(same, merged.as_value(), fresh.as_value())
            for group in range(beat_groups):
                [take] = and_copies(m, platform, f"beat_take{number}_{group}_", port.valid, rooms[2 + group], 1)
                part = slice(group * beat_bits // beat_groups, (group + 1) * beat_bits // beat_groups)
                with m.If(take):
                    m.d.sync += beat.as_value()[part].eq(beat_next[part])
            # the head leaves when taken (the stage's next comes), stays when the port has no room, and
            # the stage's next comes into an empty head
            m.d.comb += [
                full_if_taken.eq((Mux(same, beat_words, 0) | port.payload.words | stage.next_head.words).all()),
                full_if_held.eq((beat_words | Mux(port.valid, port.payload.words, stage.next_head.words)).all()),
            ]
            m.d.sync += full.eq(Mux(taking, full_if_taken, full_if_held))
            with m.If(taking):
                m.d.sync += beat_words.eq(Mux(same, beat_words, 0) | port.payload.words)
                with m.If(same):
                    with m.If(full):
                        m.d.comb += push.eq(1)
                        m.d.sync += is_open.eq(0)
                with m.Else():
                    m.d.comb += push.eq(is_open)
                    m.d.sync += [is_open.eq(1), beat_follows.eq(port.payload.next_beat),
                                 beat_address.eq(field.address & ~(data_bytes - 1))]
            # (a flush closes the open beat once the fields in the input buffers have merged)
            flush = flushes[number] & ~port.valid & edge_idle
            with m.Elif(flush & is_open & room):
                m.d.comb += push.eq(1)
                m.d.sync += is_open.eq(0)

            # ---- runs of consecutive beats
            run_open = Signal(name=f"run_open{number}")
            run_first = Signal(ADDRESS_WIDTH, name=f"run_first{number}", reset_less=True)
            run_length = Signal(range(MAX_BURST + 1), name=f"run_length{number}")
            # run_length == MAX_BURST - 1, a flip-flop kept beside it (the compare was in front of the
            # run FIFO's write and level, 6.7 ns on the proxy); an open run is below MAX_BURST beats
            # (it is published as it reaches them), so it continues while open and followed
            run_nearly_full = Signal(name=f"run_nearly_full{number}")
            # the run published this cycle: the open one, its length one more when the pushed beat
            # fills it; flip-flops only (a beat is pushed only while open), so the run FIFO's write data
            # does not wait for the push
            run_out = Signal(run_layout, name=f"run_out{number}")
            m.d.comb += [run_out.first.eq(run_first),
                         run_out.length.eq(Mux(is_open & beat_follows & run_nearly_full, MAX_BURST, run_length)),
                         runs.w_data.eq(run_out)]
            # the pushed beat's first strobed byte: none but the first when the field filled it
            push_first = Mux(same, 0, first_strobed(beat.strobe, f"push_first{number}"))
            # (the pushed beat is the open one: its address is the run's next, not at a 4 KiB
            # boundary, when it follows the beat pushed before it, worked out as its field entered)
            continues = run_open & beat_follows
            # the open run is published as a beat is pushed that does not continue it, or fills it; or
            # on a flush once no beat is open
            m.d.comb += runs.w_en.eq(Mux(is_open, push & run_open & (~beat_follows | run_nearly_full),
                                         flush & run_open))
            with m.If(push):
                with m.If(continues):
                    m.d.sync += [run_length.eq(run_length + 1), run_nearly_full.eq(run_length == MAX_BURST - 2)]
                    with m.If(run_nearly_full):  # full: published at once
                        m.d.sync += run_open.eq(0)
                with m.Else():
                    m.d.sync += [run_open.eq(1), run_first.eq(push_address | push_first), run_length.eq(1),
                                 run_nearly_full.eq(MAX_BURST == 2)]
            with m.Elif(flush & ~is_open & run_open):
                m.d.sync += run_open.eq(0)
            idles.append(edge_idle & stage.idle & ~is_open & ~run_open & ~beats.r_rdy & ~runs.r_rdy
                         & ~beats.w_pending & ~runs.w_pending)

        # ---- AW: one run at a time from the ports in turn, registered (AWADDR holds while AWVALID)
        port_bits = max(1, (self._ports - 1).bit_length())
        burst_layout = data.StructLayout({"port": port_bits, "length": range(MAX_BURST + 1)})
        m.submodules.bursts = bursts = FreeSlotFIFO(width=burst_layout.size, depth=4, next_flag=True)
        m.submodules.in_flight = in_flight = FreeSlotFIFO(width=ADDRESS_WIDTH, depth=self._outstanding)
        aw_valid = Signal()
        aw_first = Signal(ADDRESS_WIDTH)
        aw_length = Signal(range(MAX_BURST + 1))
        last_port = Signal(port_bits)
        # AWVALID waits for room in the in-flight FIFO: a run loaded in the cycle its predecessor's AW
        # went out may find the FIFO full (found by issue 15's formal check: a third AW accepted with
        # two outstanding)
        m.d.comb += bus.awvalid.eq(aw_valid & in_flight.w_rdy)
        aw_fire = bus.awvalid & bus.awready
        m.d.comb += [
            bus.awaddr.eq(aw_first & ~(data_bytes - 1)), bus.awlen.eq(aw_length - 1),
            bus.awsize.eq(size_log2), bus.awburst.eq(BURST_INCR),
        ]
        with m.If(aw_fire):
            m.d.sync += aw_valid.eq(0)
        load = (~aw_valid | aw_fire) & bursts.w_rdy & in_flight.w_rdy
        burst_in = Signal(burst_layout)
        m.d.comb += [bursts.w_data.eq(burst_in), in_flight.w_data.eq(aw_first)]
        # round robin: the first port with a run after the one served last
        chosen = Signal(port_bits)
        found = Signal()
        with m.Switch(last_port):
            for last in range(self._ports):
                with m.Case(last):
                    candidates = [(last + offset) % self._ports for offset in range(1, self._ports + 1)]
                    for n, number in enumerate(candidates):
                        with (m.If if n == 0 else m.Elif)(run_fifos[number].r_rdy):
                            m.d.comb += [chosen.eq(number), found.eq(1)]
        with m.If(load & found):
            with m.Switch(chosen):
                for number in range(self._ports):
                    with m.Case(number):
                        run = run_layout(run_fifos[number].r_data)
                        m.d.comb += [run_fifos[number].r_en.eq(1), burst_in.length.eq(run.length)]
                        m.d.sync += [aw_first.eq(run.first), aw_length.eq(run.length)]
            m.d.comb += [burst_in.port.eq(chosen), bursts.w_en.eq(1)]
            m.d.sync += [aw_valid.eq(1), last_port.eq(chosen)]
        # the run's first strobed byte goes in flight once its AW is out (checked on its B answer)
        m.d.comb += in_flight.w_en.eq(aw_fire)

        # ---- W: the beats of each burst, in AW order, back to back. "This beat is the burst's
        # last" (WLAST) is a flip-flop worked out a cycle ahead (the beat count compared with the head
        # burst's length behind the burst FIFO's LUT-RAM read was in front of its pop and ready flags,
        # 6.7 ns on the proxy): after a burst's last beat it is the next burst's "one beat" flag (the
        # FIFO's ``next_flag``); while the FIFO is empty, that of the burst queued next
        current = burst_layout(bursts.r_data)
        sent = Signal(range(MAX_BURST))
        sent_next = Signal(range(MAX_BURST + 1), init=1)   # sent + 1
        at_last = Signal()
        head = Signal(beat_layout)
        head_ready = Signal()
        with m.Switch(current.port):
            for number in range(self._ports):
                with m.Case(number):
                    m.d.comb += [head.eq(beat_fifos[number].r_data), head_ready.eq(beat_fifos[number].r_rdy)]
        w_fire = bus.wvalid & bus.wready
        m.d.comb += [
            bus.wvalid.eq(bursts.r_rdy & head_ready), bus.wdata.eq(head.data), bus.wstrb.eq(head.strobe),
            bus.wlast.eq(at_last),
        ]
        burst_in_one_beat = burst_in.length == 1
        m.d.comb += bursts.w_flag.eq(burst_in_one_beat)
        with m.If(w_fire):
            with m.Switch(current.port):
                for number in range(self._ports):
                    with m.Case(number):
                        m.d.comb += beat_fifos[number].r_en.eq(1)
            with m.If(at_last):
                m.d.comb += bursts.r_en.eq(1)
                m.d.sync += [sent.eq(0), sent_next.eq(1), at_last.eq(bursts.next_flag)]
            with m.Else():
                m.d.sync += [sent.eq(sent_next), sent_next.eq(sent_next + 1),
                             at_last.eq(sent_next == current.length - 1)]
        with m.Elif(~bursts.r_rdy):
            m.d.sync += at_last.eq(burst_in_one_beat)   # the burst queued next is the head

        # ---- B
        m.d.comb += [
            bus.bready.eq(in_flight.r_rdy),
            in_flight.r_en.eq(bus.bvalid & bus.bready),
            self.idle.eq(Cat(*idles).all() & ~aw_valid & ~bursts.r_rdy & ~in_flight.r_rdy),
        ]
        with m.If(bus.bvalid & bus.bready & (bus.bresp != RESP_OKAY) & ~self.error):
            m.d.sync += [self.error.eq(1), self.error_address.eq(in_flight.r_data)]
        with m.If(self.clear):
            m.d.sync += self.error.eq(0)
        return m
