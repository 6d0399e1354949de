"""The write combiner (rtl/write_combiner.py) in the Amaranth simulator against a byte-level model.

Two ports append fields (u32, u64, and jumps to other addresses) under random AW/W/B stalls and
random producer gaps; a flush at the end. Checked: memory equals the fields written (nothing else
strobed), every burst stays within 4 KiB and MAX_BURST beats, sequential appends become full-beat
bursts, and an error response names an address inside the failing burst.
"""

from __future__ import annotations

import gc
import random
import warnings

import pytest
from amaranth.hdl import UnusedElaboratable
from amaranth.sim import Simulator

from smartsage.rtl.write_combiner import BURST_BOUNDARY, MAX_BURST, WriteCombiner


def _seed() -> int:
    seed = random.SystemRandom().randrange(1 << 30)
    print(f"test seed {seed}")
    return seed


def _fields(rng: random.Random, base: int, count: int, wide_choice: bool) -> list[tuple[int, int, bool]]:
    """(address, value, wide) appends from ``base``, with a jump now and then."""
    fields = []
    address = base
    for _ in range(count):
        wide = wide_choice and rng.random() < 0.5
        size = 8 if wide else 4
        address = (address + size - 1) // size * size
        if rng.random() < 0.03:
            address += rng.choice([64, BURST_BOUNDARY - address % BURST_BOUNDARY, 1000]) // size * size
        fields.append((address, rng.getrandbits(8 * size), wide))
        address += size
    return fields


def _run(data_width: int, streams, stall: float, seed: int, error_byte: int | None = None):
    rng = random.Random(seed)
    dut = WriteCombiner(data_width, 8, ports=len(streams))
    beat_bytes = data_width // 8
    memory: dict[int, int] = {}
    bursts: list[tuple[int, int, list[tuple[int, int]]]] = []
    outcome = {}

    async def bench(ctx):
        position = [0] * len(streams)
        addresses, data_beats, pending_b = [], [], []
        current_beats: list[tuple[int, int]] = []
        flushing = 0
        cycles = 0
        while True:
            cycles += 1
            assert cycles < 200_000, "the combiner did not finish"
            for number, stream in enumerate(streams):
                port = dut.fields[number]
                if position[number] < len(stream) and rng.random() > stall:
                    address, value, wide = stream[position[number]]
                    ctx.set(port.payload, {"address": address, "data": value, "wide": wide})
                    ctx.set(port.valid, 1)
                else:
                    ctx.set(port.valid, 0)
            done = all(position[n] == len(s) for n, s in enumerate(streams))
            ctx.set(dut.flush, done)
            ctx.set(dut.bus.awready, rng.random() > stall)
            ctx.set(dut.bus.wready, rng.random() > stall)
            if pending_b and rng.random() > stall:
                ctx.set(dut.bus.bvalid, 1)
                ctx.set(dut.bus.bresp, pending_b[0][0])
            else:
                ctx.set(dut.bus.bvalid, 0)
            bus = dut.bus
            sampled = await ctx.tick().sample(
                *(dut.fields[n].valid for n in range(len(streams))),
                *(dut.fields[n].ready for n in range(len(streams))),
                bus.awvalid, bus.awready, bus.awaddr, bus.awlen, bus.wvalid, bus.wready, bus.wdata, bus.wstrb,
                bus.wlast, bus.bvalid, bus.bready, dut.idle, dut.error, dut.error_address)
            values = sampled[2:]
            ports = len(streams)
            valids, readies = values[:ports], values[ports:2 * ports]
            (awvalid, awready, awaddr, awlen, wvalid, wready, wdata, wstrb, wlast, bvalid, bready, idle, error,
             error_address) = values[2 * ports:]
            for number in range(ports):
                if valids[number] and readies[number]:
                    position[number] += 1
            if awvalid and awready:
                addresses.append((awaddr, awlen + 1))
            if wvalid and wready:
                current_beats.append((wdata, wstrb))
                if wlast:
                    data_beats.append(current_beats)
                    current_beats = []
            while addresses and data_beats:
                (address, length), beats = addresses.pop(0), data_beats.pop(0)
                assert len(beats) == length, "WLAST does not match AWLEN"
                assert address % beat_bytes == 0 and length <= MAX_BURST
                assert address // BURST_BOUNDARY == (address + length * beat_bytes - 1) // BURST_BOUNDARY
                strobed = []
                for beat, (word, strobe) in enumerate(beats):
                    for byte in range(beat_bytes):
                        if strobe >> byte & 1:
                            strobed.append(address + beat * beat_bytes + byte)
                            memory[address + beat * beat_bytes + byte] = word >> (8 * byte) & 0xFF
                assert strobed, "a burst with no strobed byte"
                bursts.append((address, length, [(min(strobed), max(strobed))]))
                failing = error_byte is not None and error_byte in strobed
                pending_b.append((2 if failing else 0, min(strobed), max(strobed)))
            if bvalid and bready:
                pending_b.pop(0)
            if done and idle and not pending_b and not addresses:
                flushing += 1
                if flushing > 2:
                    outcome.update(error=error, error_address=error_address)
                    return

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return memory, bursts, outcome


@pytest.mark.parametrize("data_width, stall", [(512, 0.0), (512, 0.3), (64, 0.3), (128, 0.2)])
def test_write_combiner_matches_the_fields(data_width, stall):
    seed = _seed()
    rng = random.Random(seed)
    streams = [_fields(rng, 0x10000 + 64 * rng.randint(0, 4), 700, False),
               _fields(rng, 0x80000 + 4 * rng.randint(0, 40), 300, True)]
    memory, bursts, outcome = _run(data_width, streams, stall, seed)
    expected = {}
    for stream in streams:
        for address, value, wide in stream:
            for byte in range(8 if wide else 4):
                expected[address + byte] = value >> (8 * byte) & 0xFF
    assert memory == expected
    assert not outcome["error"]
    # each beat written once, full runs of consecutive beats in one burst: exactly the bursts an ideal
    # combiner needs (appends only move forward)
    assert sum(length for _, length, _ in bursts) == sum(len(_beats(s, data_width)) for s in streams)
    assert len(bursts) == sum(_ideal_bursts(_beats(s, data_width), data_width) for s in streams)


def _beats(stream, data_width: int) -> list[int]:
    beat_bytes = data_width // 8
    beats = []
    for address, _, _ in stream:
        if not beats or beats[-1] != address // beat_bytes * beat_bytes:
            beats.append(address // beat_bytes * beat_bytes)
    return beats


def _ideal_bursts(beats: list[int], data_width: int) -> int:
    bursts, length = 0, 0
    for n, beat in enumerate(beats):
        consecutive = n and beat == beats[n - 1] + data_width // 8 and beat % BURST_BOUNDARY
        if consecutive and length < MAX_BURST:
            length += 1
        else:
            bursts, length = bursts + 1, 1
    return bursts


def test_write_combiner_error_names_the_failing_burst():
    seed = _seed()
    rng = random.Random(seed)
    streams = [_fields(rng, 0x10000, 400, False), _fields(rng, 0x80000, 100, False)]
    error_byte = streams[0][137][0] + 1
    memory, bursts, outcome = _run(512, streams, 0.2, seed, error_byte=error_byte)
    assert outcome["error"]
    failing = [(lo, hi) for _, _, spans in bursts for lo, hi in spans if lo <= error_byte <= hi]
    assert failing and failing[0][0] <= outcome["error_address"] <= failing[0][1]


def test_write_combiner_parameter_errors():
    with warnings.catch_warnings():
        # the half-constructed components are never elaborated, by design
        warnings.simplefilter("ignore", UnusedElaboratable)
        with pytest.raises(ValueError, match="Write combiner ports must be an integer in 1..8, not 0"):
            WriteCombiner(512, 8, ports=0)
        with pytest.raises(ValueError, match="Outstanding writes must be an integer in 1..256, not 0"):
            WriteCombiner(512, 0)
        gc.collect()
