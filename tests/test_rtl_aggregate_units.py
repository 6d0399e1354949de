"""Unit tests of the aggregation's bus blocks in Amaranth's simulator: the burst reader with the row
unpacker behind it, and the beat writer, each against a byte-array memory behind a randomly stalling
AXI slave (Python, per cycle)."""

from __future__ import annotations

import random

import pytest
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.sim import Simulator

from smartsage.rtl.beat_writer import WRITE_BURST_BEATS, BeatWriter
from smartsage.rtl.burst_reader import MAX_BURST_BEATS, PAGE_BYTES, BurstReader
from smartsage.rtl.row_unpacker import RowUnpacker

RESP_SLVERR = 2


def _seed() -> int:
    seed = random.SystemRandom().randrange(1 << 30)
    print(f"test seed {seed}")
    return seed


class _Reader(wiring.Component):
    def __init__(self, data_width):
        self.reader = BurstReader(data_width, 8)
        self.unpacker = RowUnpacker(data_width)
        super().__init__({"request": wiring.In(self.reader.request.signature.flip()),
                          "units": wiring.Out(self.unpacker.units.signature),
                          "bus": wiring.Out(self.reader.bus.signature),
                          "unit_log2": wiring.In(self.unpacker.unit_log2.shape())})

    def elaborate(self, platform):
        m = Module()
        m.submodules.reader = self.reader
        m.submodules.unpacker = self.unpacker
        wiring.connect(m, self.reader.response, self.unpacker.beats)
        wiring.connect(m, wiring.flipped(self.request), self.reader.request)
        wiring.connect(m, self.unpacker.units, wiring.flipped(self.units))
        wiring.connect(m, self.reader.bus, wiring.flipped(self.bus))
        m.d.comb += self.unpacker.unit_log2.eq(self.unit_log2)
        return m


@pytest.mark.parametrize("data_width, unit_log2", [(64, 3), (64, 1), (512, 6), (512, 5), (128, 2)])
def test_burst_reader_and_unpacker(data_width, unit_log2):
    """Requests of any alignment and length (past 4 KiB pages, past 256 beats on a 64-bit bus): every
    burst stays inside a page and within 256 beats, the units carry the requested bytes in order, the
    last unit is marked, and an error beat marks the units it feeds (with its address)."""
    rng = random.Random(_seed())
    beat = data_width // 8
    unit = 1 << unit_log2
    memory = bytes(rng.getrandbits(8) for _ in range(3 * PAGE_BYTES))
    bad = (rng.randrange(0, 3 * PAGE_BYTES // beat) * beat,)
    bad = (bad[0], bad[0] + beat)
    requests = []
    for _ in range(40):
        length = rng.choice([1, unit - 1, unit, unit + 1, rng.randint(1, 300), rng.randint(1, 2 * PAGE_BYTES)])
        requests.append((rng.randrange(0, 3 * PAGE_BYTES - length), length))
    if data_width == 64:
        requests.append((PAGE_BYTES - 8, MAX_BURST_BEATS * 8 + 100))   # a page boundary and 256 beats
    dut = _Reader(data_width)
    bursts = []
    units = []

    async def producer(ctx):
        ctx.set(dut.unit_log2, unit_log2)
        for address, length in requests:
            ctx.set(dut.request.payload, {"address": address, "length": length})
            ctx.set(dut.request.valid, 1)
            await ctx.tick().until(dut.request.ready)
            ctx.set(dut.request.valid, 0)
            for _ in range(rng.randrange(3)):
                await ctx.tick()

    async def address_slave(ctx):
        while True:
            ctx.set(dut.bus.arready, rng.random() < 0.7)
            _, _, valid, ready, address, arlen = await ctx.tick().sample(
                dut.bus.arvalid, dut.bus.arready, dut.bus.araddr, dut.bus.arlen)
            if valid and ready:
                beats = arlen + 1
                assert address % beat == 0 and beats <= MAX_BURST_BEATS
                assert address // PAGE_BYTES == (address + beats * beat - 1) // PAGE_BYTES, (address, beats)
                bursts.append((address, beats))

    async def data_slave(ctx):
        served = 0
        while True:
            if served < len(bursts) and rng.random() < 0.8:
                address, beats = bursts[served]
                for index in range(beats):
                    at = address + index * beat
                    ctx.set(dut.bus.rdata, int.from_bytes(memory[at:at + beat], "little"))
                    ctx.set(dut.bus.rresp, RESP_SLVERR if bad[0] <= at < bad[1] else 0)
                    ctx.set(dut.bus.rlast, index == beats - 1)
                    ctx.set(dut.bus.rvalid, 1)
                    await ctx.tick().until(dut.bus.rready)
                    ctx.set(dut.bus.rvalid, 0)
                served += 1
            else:
                await ctx.tick()

    async def consumer(ctx):
        expected_units = sum((length + unit - 1) // unit for _, length in requests)
        while len(units) < expected_units:
            ctx.set(dut.units.ready, rng.random() < 0.8)
            _, _, valid, ready, payload = await ctx.tick().sample(dut.units.valid, dut.units.ready,
                                                                  dut.units.payload)
            if valid and ready:
                units.append((payload.data, payload.last, payload.error, payload.address))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(producer)
    sim.add_testbench(address_slave, background=True)
    sim.add_testbench(data_slave, background=True)
    sim.add_testbench(consumer)
    sim.run()

    position = 0
    for address, length in requests:
        count = (length + unit - 1) // unit
        for k in range(count):
            value, last, error, error_address = units[position + k]
            size = min(unit, length - k * unit)
            start = address + k * unit
            got = int(value).to_bytes(beat, "little")[:size]
            touched = range(start // beat * beat, (start + unit - 1) // beat * beat + beat, beat)
            faulty = [at for at in touched if bad[0] <= at < bad[1] and at < address + length]
            assert last == (k == count - 1), (address, length, k)
            if faulty and error:
                assert error_address == faulty[0]
            elif not faulty:
                assert not error and got == memory[start:start + size], (address, length, k)
        position += count
    assert position == len(units)
    assert any(error for _, _, error, _ in units) == any(
        a < bad[1] and a + n > bad[0] for a, n in requests)


@pytest.mark.parametrize("data_width", [64, 512])
def test_beat_writer(data_width):
    """Runs of contiguous pieces at any alignment: memory ends up with exactly their bytes (nothing
    outside them strobed), pieces merged into beats and beats into bursts (within 4 KiB, at most
    WRITE_BURST_BEATS); an error response names the burst's first strobed byte."""
    rng = random.Random(_seed())
    beat = data_width // 8
    size = 8 * PAGE_BYTES
    memory = bytearray(b"\xa5" * size)
    expected = bytearray(memory)
    pieces = []
    cursor = 64
    while cursor < size - 3 * beat * 8:
        cursor += rng.choice([0, 0, rng.randrange(1, 3 * beat)])
        run = rng.randint(1, 6 * beat)
        at = cursor
        while at < cursor + run:
            n = min(rng.randint(1, beat), cursor + run - at)
            data = bytes(rng.getrandbits(8) for _ in range(n))
            pieces.append((at, data, at + n == cursor + run))
            expected[at:at + n] = data
            at += n
        cursor += run
    error_at = rng.choice(pieces)[0]
    dut = BeatWriter(data_width, 4)
    writes = []
    errors = []
    flags = {}

    async def producer(ctx):
        for address, data, flush in pieces:
            garbage = rng.getrandbits(8 * beat) << (8 * len(data))     # bytes past nbytes are ignored
            value = (int.from_bytes(data, "little") | garbage) & ((1 << (8 * beat)) - 1)
            ctx.set(dut.piece.payload, {"address": address, "data": value,
                                        "nbytes": len(data), "flush": flush})
            ctx.set(dut.piece.valid, 1)
            await ctx.tick().until(dut.piece.ready)
            ctx.set(dut.piece.valid, 0)
            if rng.random() < 0.2:
                await ctx.tick()
        await ctx.tick().until(dut.idle)
        flags.update(error=ctx.get(dut.error), address=ctx.get(dut.error_address))

    async def slave(ctx):
        addresses, bursts, data, responses = [], [], [], []
        while True:
            ctx.set(dut.bus.awready, rng.random() < 0.7)
            ctx.set(dut.bus.wready, rng.random() < 0.7)
            ctx.set(dut.bus.bvalid, bool(responses))
            ctx.set(dut.bus.bresp, responses[0] if responses else 0)
            (_, _, awvalid, awready, awaddr, awlen, wvalid, wready, wdata, wstrb, wlast, bready) = \
                await ctx.tick().sample(dut.bus.awvalid, dut.bus.awready, dut.bus.awaddr, dut.bus.awlen,
                                        dut.bus.wvalid, dut.bus.wready, dut.bus.wdata, dut.bus.wstrb,
                                        dut.bus.wlast, dut.bus.bready)
            if responses and bready:
                responses.pop(0)
            if awvalid and awready:
                beats = awlen + 1
                assert awaddr % beat == 0 and beats <= WRITE_BURST_BEATS
                assert awaddr // PAGE_BYTES == (awaddr + beats * beat - 1) // PAGE_BYTES
                addresses.append((awaddr, beats))
            if wvalid and wready:
                data.append((wdata, wstrb))
                if wlast:
                    bursts.append(data)
                    data = []
            while addresses and bursts:
                (address, count), burst = addresses.pop(0), bursts.pop(0)
                assert len(burst) == count
                writes.append(address)
                strobed_all = []
                for index, (value, strobe) in enumerate(burst):
                    at = address + index * beat
                    raw = int(value).to_bytes(beat, "little")
                    strobed = [at + i for i in range(beat) if strobe >> i & 1]
                    assert strobed
                    for byte in strobed:
                        memory[byte] = raw[byte - at]
                    strobed_all += strobed
                failing = error_at in strobed_all
                responses.append(RESP_SLVERR if failing else 0)
                if failing:
                    errors.append(strobed_all[0])

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(producer)
    sim.add_testbench(slave, background=True)
    sim.run()
    assert memory == expected
    assert len(writes) < len(pieces) / 2     # pieces were merged into beats, beats into bursts
    assert errors and errors[0] <= error_at < errors[0] + WRITE_BURST_BEATS * beat
    assert flags == {"error": 1, "address": errors[0]}
