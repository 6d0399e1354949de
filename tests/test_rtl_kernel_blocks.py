"""The sampler kernel's blocks (rtl/kernel.py's parts) in the Amaranth simulator, each on its own.

- ``EdgeStreamer`` (one lane) behind its ``TaggedReadStream`` and a randomly stalling AXI read slave:
  for jobs with d <= k and d > k, the index reads it issues are those of the golden model's
  positions (``spec.golden.floyd_positions``), dense jobs read a beat of ids at a time, and every id
  lands at its reserved node-list place; a read error stops the lane with the failing address.
- ``NodeListCollector`` (the lane's collector) between randomly stalling producers of answers and
  jobs and a stalling write port: every id of every answer lands at its job's next slot, in order.
- ``FrontierPrefetcher`` behind a ``ReadStream`` (device memory) and a ``TaggedReadStream``
  (storage): the frontier read in order, ids range-checked, keys H_v as ``spec.rng.node_key``, one
  indptr read per in-range id when indptr[v] and indptr[v+1] share a beat and two otherwise.
- ``JobDispatcher``: jobs go to the lane after the last one served that has room, and stop when no
  lane has room.
- ``CommandSequencer`` with stream models of its neighbours: a one-hop command's jobs, counts and
  result header, and a bad image header's status.

All randomness is seeded and the seed printed.
"""

from __future__ import annotations

import gc
import random
import struct
import warnings
from collections import deque

import numpy as np
import pytest
from amaranth.hdl import Module
from amaranth.hdl._ir import UnusedElaboratable
from amaranth.lib import wiring
from amaranth.sim import Simulator

from smartsage.rtl.command_sequencer import IMAGE_WORDS, CommandSequencer
from smartsage.rtl.edge_streamer import EdgeStreamer, ids_tag_shape
from smartsage.rtl.frontier_prefetcher import FrontierPrefetcher, indptr_tag_shape
from smartsage.rtl.job_dispatcher import JOBS_PER_LANE, JobDispatcher
from smartsage.rtl.node_list_collector import NodeListCollector
from smartsage.rtl.read_stream import ReadStream
from smartsage.rtl.tagged_read_stream import TaggedReadStream
from smartsage.spec import image as spec_image
from smartsage.spec import rng as spec_rng
from smartsage.spec.config import CONFIGS
from smartsage.spec.descriptor import Descriptor, ResultHeader, Status
from smartsage.spec.golden import floyd_positions

RESP_OKAY, RESP_SLVERR = 0, 2


def _seed() -> int:
    seed = random.SystemRandom().randrange(1 << 30)
    print(f"test seed {seed}")
    return seed


def _axi_read_slave(bus, memory: bytearray, beat_bytes: int, rng: random.Random, stall: float,
                    requests: list, errors=frozenset()):
    """A single-beat AXI4 read slave (background testbench) over ``memory``: random AR/R stalls,
    answers in order; every AR address goes to ``requests``; beats in ``errors`` answer SLVERR."""
    async def model(ctx):
        queue = deque()
        while True:
            ctx.set(bus.arready, rng.random() > stall)
            if queue and rng.random() > stall:
                address = queue[0]
                ctx.set(bus.rdata, int.from_bytes(memory[address:address + beat_bytes], "little"))
                ctx.set(bus.rresp, RESP_SLVERR if address in errors else RESP_OKAY)
                ctx.set(bus.rlast, 1)
                ctx.set(bus.rvalid, 1)
            else:
                ctx.set(bus.rvalid, 0)
            _, _, arvalid, arready, araddr, arlen, rvalid, rready = await ctx.tick().sample(
                bus.arvalid, bus.arready, bus.araddr, bus.arlen, bus.rvalid, bus.rready)
            if rvalid and rready:
                queue.popleft()
            if arvalid and arready:
                assert arlen == 0 and araddr % beat_bytes == 0
                queue.append(araddr)
                requests.append(araddr)
    return model


def _consumer(port, rng: random.Random, stall: float, taken: list, fields=None):
    """A stream consumer (background testbench) with random ready stalls; payloads go to ``taken``."""
    async def model(ctx):
        while True:
            ctx.set(port.ready, rng.random() > stall)
            _, _, valid, ready, payload = await ctx.tick().sample(port.valid, port.ready, port.payload)
            if valid and ready:
                taken.append({name: getattr(payload, name) for name in fields} if fields else payload)
    return model


# ---- the tagged read stream

@pytest.mark.parametrize("data_width, stall, registers", [(64, 0.3, False), (512, 0.5, True), (512, 0.3, False),
                                                           (64, 0.1, True)])
def test_tagged_read_stream_returns_each_tag_with_its_answer(data_width, stall, registers):
    """Random addresses and tags under AR/R and consumer stalls: the answers come in order, each with
    its tag, word and beat, with and without the tag and answer registers; with ``clear`` and
    ``drain`` the reads in flight are taken and dropped."""
    seed = _seed()
    rng = random.Random(seed)
    beat_bytes = data_width // 8
    memory = bytearray(rng.getrandbits(8) for _ in range(8192))
    dut = TaggedReadStream(data_width, 8, range(17), tag_register=registers, answer_register=registers)
    reads = [(rng.randrange(0, 8192 // 8) * 8, rng.randrange(17)) for _ in range(150)]
    answers, requests = [], []

    async def requester(ctx):
        for address, tag in reads:
            while rng.random() < stall:
                await ctx.tick()
            ctx.set(dut.port.request.payload, address)
            ctx.set(dut.port.tag, tag)
            ctx.set(dut.port.request.valid, 1)
            await ctx.tick().until(dut.port.request.ready)
            ctx.set(dut.port.request.valid, 0)
        while len(answers) < len(reads):
            await ctx.tick()
        # reads left in flight at a command's end: cleared tags, drained answers
        for address, tag in reads[:6]:
            ctx.set(dut.port.request.payload, address)
            ctx.set(dut.port.tag, tag)
            ctx.set(dut.port.request.valid, 1)
            await ctx.tick().until(dut.port.request.ready)
        ctx.set(dut.port.request.valid, 0)
        ctx.set(dut.clear, 1)
        ctx.set(dut.drain, 1)
        for _ in range(200):
            await ctx.tick()
        assert ctx.get(dut.idle)

    async def consumer(ctx):
        while True:
            ctx.set(dut.port.response.ready, rng.random() > stall and len(answers) < len(reads))
            _, _, valid, ready, word, tag, beat = await ctx.tick().sample(
                dut.port.response.valid, dut.port.response.ready, dut.port.response.payload,
                dut.port.answer_tag, dut.port.beat)
            if valid and ready:
                answers.append((word.address, word.data, word.error, tag, beat))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(requester)
    sim.add_testbench(consumer, background=True)
    sim.add_testbench(_axi_read_slave(dut.bus, memory, beat_bytes, rng, stall, requests), background=True)
    sim.run()
    expected = []
    for address, tag in reads:
        first = address & ~(beat_bytes - 1)
        expected.append((address, int.from_bytes(memory[address:address + 8], "little"), 0, tag,
                         int.from_bytes(memory[first:first + beat_bytes], "little")))
    assert answers == expected, seed
    assert len(requests) == len(reads) + 6


def test_block_parameter_errors():
    with warnings.catch_warnings():
        # the half-constructed components are never elaborated, by design
        warnings.simplefilter("ignore", UnusedElaboratable)
        with pytest.raises(TypeError, match=r"^Config must be a KernelConfig, not 'small'$"):
            EdgeStreamer("small")
        with pytest.raises(TypeError, match=r"^Config must be a KernelConfig, not 'small'$"):
            FrontierPrefetcher("small")
        with pytest.raises(TypeError, match=r"^Lanes must be a positive integer, not 0$"):
            JobDispatcher(0, 16)
        with pytest.raises(ValueError, match=r"^Outstanding reads must be an integer in 1\.\.256, not 0$"):
            TaggedReadStream(64, 0, 1)
        gc.collect()


# ---- the edge streamer (one lane)

def _lane_expectations(jobs, k, wide, indices, indices_base, nodes_ptr, beat_bytes):
    """The reads (address, ids) a lane issues for ``jobs``, in order, and the node-list content."""
    size = 8 if wide else 4
    reads, appends = [], {}
    for key, degree, edge_start, base in jobs:
        count = min(degree, k)
        if degree > k:
            positions = [int(p) for p in floyd_positions(np.array([key]), np.array([degree]), k)[0][0]]
            reads += [(indices_base + (edge_start + p) * size, 1) for p in positions]
        else:
            positions = list(range(degree))
            address, left = indices_base + edge_start * size, degree
            while left:
                ids = min(left, (beat_bytes - address % beat_bytes) // size)
                reads.append((address, ids))
                address, left = (address | (beat_bytes - 1)) + 1, left - ids
        for j, p in enumerate(positions):
            appends[nodes_ptr + (base + j) * size] = (int(indices[edge_start + p]), wide)
        assert len(positions) == count
    return reads, appends


@pytest.mark.parametrize("config_name, wide, stall", [("small", False, 0.3), ("wide2", False, 0.2),
                                                      ("wide2", True, 0.4), ("default", False, 0.0)])
def test_edge_streamer_reads_the_golden_positions(config_name, wide, stall):
    """Jobs with d <= k (dense reads, a beat of ids at a time, from any offset in a beat) and d > k
    (one read per golden Floyd position): the lane's index reads and its node-list appends."""
    seed = _seed()
    rng = random.Random(seed)
    config = CONFIGS[config_name]
    beat_bytes = config.data_bytes
    k = rng.randint(2, min(config.max_fanout, 12))
    size = 8 if wide else 4
    edges = 4000
    indices = np.array([rng.getrandbits(8 * size - 1) for _ in range(edges)], dtype=np.uint64)
    indices_base = 0x1000 + rng.randrange(0, 64) * 64
    memory = bytearray(indices_base + edges * size + beat_bytes)
    for i, value in enumerate(indices):
        memory[indices_base + i * size:indices_base + (i + 1) * size] = int(value).to_bytes(size, "little")
    jobs, base = [], 0
    for n in range(24):
        degree = rng.choice([1, k, k + 1, rng.randint(1, k), rng.randint(k + 1, 200), rng.randint(1, 3 * k)])
        degree = k if n == 0 else (k + 1 if n == 1 else degree)
        edge_start = rng.randrange(0, edges - degree)
        jobs.append((rng.getrandbits(32), degree, edge_start, base))
        base += min(degree, k)
    nodes_ptr = 0x40000
    expected_reads, expected_appends = _lane_expectations(jobs, k, wide, indices, indices_base, nodes_ptr,
                                                          beat_bytes)
    assert any(ids == 1 for _, ids in expected_reads) and len(expected_appends) >= 24
    assert beat_bytes == 8 and not wide or any(ids > 1 for _, ids in expected_reads)

    streamer = EdgeStreamer(config)
    reader = TaggedReadStream(config.data_width, config.outstanding_reads, ids_tag_shape(config.data_width))
    m = Module()
    m.submodules.streamer, m.submodules.reader = streamer, reader
    wiring.connect(m, streamer.reads, reader.port)
    requests, ar_addresses, appended = [], [], []

    async def jobs_in(ctx):
        ctx.set(streamer.wide_ids, wide)
        ctx.set(streamer.fanout, k)
        for key, degree, edge_start, job_base in jobs:
            while rng.random() < stall:
                await ctx.tick()
            ctx.set(streamer.job.payload, {"shifted_key": key ^ (key >> 16), "degree": degree,
                                           "count": min(degree, k), "dense": degree <= k,
                                           "edge_address": indices_base + edge_start * size, "base": job_base,
                                           "node_address": nodes_ptr + job_base * size})
            ctx.set(streamer.job.valid, 1)
            await ctx.tick().until(streamer.job.ready)
            ctx.set(streamer.job.valid, 0)

    async def request_monitor(ctx):
        port = streamer.reads
        while True:
            _, _, valid, ready, address, ids = await ctx.tick().sample(
                port.request.valid, port.request.ready, port.request.payload, port.tag)
            if valid and ready:
                requests.append((address, ids))

    async def done(ctx):
        cycles = 0
        while not (len(appended) == len(expected_appends) and ctx.get(streamer.idle)):
            await ctx.tick()
            cycles += 1
            assert cycles < 100_000, "the lane did not finish"

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(jobs_in)
    sim.add_testbench(_axi_read_slave(reader.bus, memory, beat_bytes, rng, stall, ar_addresses), background=True)
    sim.add_testbench(_consumer(streamer.appends, rng, stall, appended, ("address", "data", "wide")),
                      background=True)
    sim.add_testbench(request_monitor, background=True)
    sim.add_testbench(done)
    sim.run()

    assert requests == expected_reads, f"seed {seed}"
    assert ar_addresses == [address & ~(beat_bytes - 1) for address, _ in expected_reads]
    got = {a["address"]: (a["data"], bool(a["wide"])) for a in appended}
    assert len(got) == len(appended), "an id was appended twice"
    assert got == expected_appends, f"seed {seed}"


def _producer(port, items, rng: random.Random, stall: float):
    """A stream producer (testbench) of ``items`` with random valid gaps; holds each until taken."""
    async def model(ctx):
        for item in items:
            while rng.random() < stall:
                await ctx.tick()
            ctx.set(port.payload, item)
            ctx.set(port.valid, 1)
            await ctx.tick().until(port.ready)
            ctx.set(port.valid, 0)
    return model


@pytest.mark.parametrize("config_name, wide, stall", [("small", False, 0.3), ("small", True, 0.5),
                                                      ("default", True, 0.3), ("default", False, 0.6)])
def test_node_list_collector_appends_each_id_at_its_slot(config_name, wide, stall):
    """Jobs of 1..k ids at scattered places, their ids in answers of 1..(ids the beat holds from the
    address on) at any offset of a beat: each id goes to ``job address + i x id size`` in order,
    with the id size ``wide_ids`` says, under stalls on both inputs and on the write port."""
    seed = _seed()
    rng = random.Random(seed)
    config = CONFIGS[config_name]
    beat_bytes, size = config.data_bytes, 8 if wide else 4
    jobs, answers, expected = [], [], []
    for _ in range(40):
        count = rng.randint(1, config.max_fanout)
        address = 0x40000 + rng.randrange(0, 1 << 12) * size
        jobs.append({"count": count, "address": address})
        ids = [rng.getrandbits(8 * size) for _ in range(count)]
        expected += [(address + i * size, value, wide) for i, value in enumerate(ids)]
        while ids:   # the reads of a job's ids: a beat's ids from a random offset on (one id when sampled)
            offset = rng.randrange(0, beat_bytes // size) * size
            n = min(len(ids), rng.randint(1, (beat_bytes - offset) // size))
            beat = bytearray(rng.getrandbits(8) for _ in range(beat_bytes))
            for i in range(n):
                beat[offset + i * size:offset + (i + 1) * size] = ids[i].to_bytes(size, "little")
            read_address = 0x100000 + rng.randrange(0, 1 << 10) * beat_bytes + offset
            answers.append({"beat": int.from_bytes(beat, "little"), "address": read_address, "error": 0, "ids": n})
            ids = ids[n:]
    dut = NodeListCollector(config)
    appended = []

    async def settings(ctx):
        ctx.set(dut.wide_ids, wide)
        while len(appended) < len(expected):
            await ctx.tick()
        await ctx.tick().repeat(5)
        assert ctx.get(dut.idle) and not ctx.get(dut.failed)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(settings)
    sim.add_testbench(_producer(dut.jobs, jobs, rng, stall), background=True)
    sim.add_testbench(_producer(dut.answers, answers, rng, stall), background=True)
    sim.add_testbench(_consumer(dut.appends, rng, stall, appended, ("address", "data", "wide")), background=True)
    sim.run()
    assert [(a["address"], a["data"], bool(a["wide"])) for a in appended] == expected, f"seed {seed}"


def test_edge_streamer_stops_on_a_read_error():
    """An error answer: ``storage_error`` with the failing address, nothing of it appended, the lane
    ``failed`` (and idle) until ``resume``."""
    seed = _seed()
    rng = random.Random(seed)
    config = CONFIGS["small"]
    memory = bytearray(range(256)) * 64
    bad = 0x800
    streamer = EdgeStreamer(config)
    reader = TaggedReadStream(config.data_width, config.outstanding_reads, ids_tag_shape(config.data_width))
    m = Module()
    m.submodules.streamer, m.submodules.reader = streamer, reader
    wiring.connect(m, streamer.reads, reader.port)
    appended, errors = [], []

    async def bench(ctx):
        ctx.set(streamer.fanout, 16)
        # d <= k: ids at bad - 8, bad - 4 (answered), then bad, bad + 4 (the error beat)
        ctx.set(streamer.job.payload, {"shifted_key": 1, "degree": 4, "count": 4, "dense": 1,
                                       "edge_address": bad - 8, "base": 0,
                                       "node_address": 0x10000})
        ctx.set(streamer.job.valid, 1)
        await ctx.tick().until(streamer.job.ready)
        ctx.set(streamer.job.valid, 0)
        for _ in range(200):
            _, _, error, address = await ctx.tick().sample(streamer.storage_error, streamer.storage_error_address)
            if error:
                errors.append(address)
        assert ctx.get(streamer.failed) and ctx.get(streamer.idle)
        ctx.set(streamer.resume, 1)
        await ctx.tick()
        ctx.set(streamer.resume, 0)
        assert not ctx.get(streamer.failed)

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.add_testbench(_axi_read_slave(reader.bus, memory, 8, rng, 0.2, [], errors={bad}), background=True)
    sim.add_testbench(_consumer(streamer.appends, rng, 0.2, appended, ("address", "data")), background=True)
    sim.run()
    assert errors == [bad]
    assert [a["address"] for a in appended] == [0x10000, 0x10004]


# ---- the frontier prefetcher

@pytest.mark.parametrize("config_name, wide, stall", [("small", False, 0.3), ("wide2", False, 0.2),
                                                      ("wide2", True, 0.3), ("default", False, 0.0)])
def test_frontier_prefetcher_checks_ids_keys_and_indptr_pairs(config_name, wide, stall):
    seed = _seed()
    rng = random.Random(seed)
    config = CONFIGS[config_name]
    beat_bytes = config.data_bytes
    size = 8 if wide else 4
    num_nodes = 300
    degrees = [rng.randint(0, 50) for _ in range(num_nodes)]
    degrees[-1] = (1 << 16) + 3    # the count is k, though the degree's low 16 bits are below k
    indptr = np.cumsum([0] + degrees).astype(np.uint64)
    frontier = [rng.randrange(num_nodes) for _ in range(60)]
    frontier[5] = num_nodes + 7  # out of range: passes through without indptr reads
    frontier[20] = num_nodes - 1
    if wide:   # ids with a high half: out of range, and keyed with both halves (mix32's second round)
        frontier[7] = (1 << 32) + rng.randrange(num_nodes)
        frontier[9] = (rng.getrandbits(31) << 32) | rng.randrange(num_nodes)
        frontier[10] = (1 << 64) - 1
    nodes_ptr, indptr_base = 0x2000 + 64 * rng.randrange(4), 0x800 + 8 * rng.randrange(8)
    indices_base = 0x10_0000_0000 + 4 * rng.randrange(1 << 20)   # (beyond 32 bits: the add's carry)
    hop_key = rng.getrandbits(32)
    fanout = rng.randint(1, config.max_fanout)
    device = bytearray(nodes_ptr + len(frontier) * size + beat_bytes)
    for i, v in enumerate(frontier):
        device[nodes_ptr + i * size:nodes_ptr + (i + 1) * size] = v.to_bytes(size, "little")
    storage = bytearray(indptr_base + indptr.size * 8 + beat_bytes)
    for v, value in enumerate(indptr):
        storage[indptr_base + v * 8:indptr_base + v * 8 + 8] = int(value).to_bytes(8, "little")

    prefetcher = FrontierPrefetcher(config)
    mem = ReadStream(config.data_width, config.outstanding_reads)
    storage_reader = TaggedReadStream(config.data_width, config.outstanding_reads, indptr_tag_shape(config.data_width),
                                      tag_register=True, answer_register=True)
    m = Module()
    m.submodules.prefetcher, m.submodules.mem, m.submodules.storage = prefetcher, mem, storage_reader
    wiring.connect(m, prefetcher.frontier_reads.request, mem.request)
    wiring.connect(m, mem.response, prefetcher.frontier_reads.response)
    wiring.connect(m, prefetcher.indptr_reads, storage_reader.port)
    frontier_requests, storage_requests, nodes, pairs = [], [], [], []

    async def sequencer(ctx):
        """Takes a node (and its pair when in range) as the sequencer's FRONTIER state does."""
        for name, value in (("frontier_size", len(frontier)), ("nodes_ptr", nodes_ptr), ("num_nodes", num_nodes),
                            ("indptr_base", indptr_base), ("indices_base", indices_base), ("wide_ids", wide),
                            ("hop_key", hop_key), ("fanout", fanout)):
            ctx.set(getattr(prefetcher, name), value)
        ctx.set(prefetcher.restart, 1)
        await ctx.tick()
        ctx.set(prefetcher.restart, 0)
        ctx.set(prefetcher.active, 1)
        cycles = 0
        while len(nodes) < len(frontier):
            cycles += 1
            assert cycles < 50_000, "the prefetcher did not finish"
            node_valid, pair_valid = ctx.get(prefetcher.nodes.valid), ctx.get(prefetcher.pairs.valid)
            take = False
            if node_valid and rng.random() > stall:
                node = ctx.get(prefetcher.nodes.payload)
                take = not node.in_range or pair_valid
                if take:
                    nodes.append((node.node, node.in_range, node.shifted_key))
                    if node.in_range:
                        pair = ctx.get(prefetcher.pairs.payload)
                        pairs.append((pair.edge_address, pair.end, pair.degree, pair.error))
                        assert pair.error or pair.count == min(pair.degree, fanout)
            ctx.set(prefetcher.nodes.ready, take)
            ctx.set(prefetcher.pairs.ready, take and bool(ctx.get(prefetcher.nodes.payload).in_range))
            await ctx.tick()
            ctx.set(prefetcher.nodes.ready, 0)
            ctx.set(prefetcher.pairs.ready, 0)

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(sequencer)
    sim.add_testbench(_axi_read_slave(mem.bus, device, beat_bytes, rng, stall, frontier_requests), background=True)
    sim.add_testbench(_axi_read_slave(storage_reader.bus, storage, beat_bytes, rng, stall, storage_requests),
                      background=True)
    sim.run()

    assert frontier_requests == [(nodes_ptr + i * size) & ~(beat_bytes - 1) for i in range(len(frontier))]
    # (keys after mix32's first xor-shift, as a position sampler takes them)
    keys = [spec_rng.node_key(hop_key, v) for v in frontier]
    assert nodes == [(v, v < num_nodes, key ^ (key >> 16)) for v, key in zip(frontier, keys, strict=True)], seed
    in_range = [v for v in frontier if v < num_nodes]
    # (the first edge's storage address: indices_base + indptr[v] x the id size)
    assert pairs == [(indices_base + int(indptr[v]) * size, int(indptr[v + 1]), int(indptr[v + 1] - indptr[v]), 0)
                     for v in in_range]
    expected_reads = []
    for v in in_range:
        start = indptr_base + 8 * v
        same_beat = beat_bytes > 8 and start // beat_bytes == (start + 8) // beat_bytes
        expected_reads += [start & ~(beat_bytes - 1)] + ([] if same_beat else [(start + 8) & ~(beat_bytes - 1)])
    assert storage_requests == expected_reads, seed


# ---- the job dispatcher

@pytest.mark.parametrize("lanes", [1, 2, 4])
def test_job_dispatcher_round_robin_and_backpressure(lanes):
    """Jobs enter a two-entry buffer (``job.ready`` while it holds fewer than two); its head goes to
    the first lane with room after the last lane served; with every queue full the buffer fills, no
    job is taken (``job.ready`` low) and the queues hold JOBS_PER_LANE jobs each."""
    seed = _seed()
    rng = random.Random(seed)
    dut = JobDispatcher(lanes, 16)
    jobs = [{"shifted_key": n, "degree": rng.randint(1, 100), "count": rng.randint(1, 16),
             "edge_address": rng.getrandbits(20), "base": n, "node_address": rng.getrandbits(20)} for n in range(200)]
    for job in jobs[::3]:   # dense jobs (d == n): the queue's flag
        job["degree"] = job["count"]
    received = [[] for _ in range(lanes)]
    expected = [[] for _ in range(lanes)]
    blocked = {"cycles": 0}

    async def bench(ctx):
        occupancy, last, sent, cycle, intake = [0] * lanes, 0, 0, 0, deque()
        while sent < len(jobs) or any(occupancy) or intake:
            cycle += 1
            assert cycle < 20_000
            # lanes stall hard for a while (every queue fills), then at random
            hold = cycle < 60
            for lane in range(lanes):
                ctx.set(dut.lanes[lane].ready, not hold and rng.random() < (0.3 if lane == 0 else 0.6))
            offer = sent < len(jobs) and rng.random() < 0.8
            if offer:
                ctx.set(dut.job.payload, jobs[sent])
            ctx.set(dut.job.valid, offer)
            sampled = await ctx.tick().sample(dut.job.valid, dut.job.ready, dut.waiting,
                                              *(dut.lanes[i].valid for i in range(lanes)),
                                              *(dut.lanes[i].ready for i in range(lanes)),
                                              *(dut.lanes[i].payload for i in range(lanes)))
            valid, ready, waiting = sampled[2:5]
            lane_valid, lane_ready = sampled[5:5 + lanes], sampled[5 + lanes:5 + 2 * lanes]
            payloads = sampled[5 + 2 * lanes:]
            assert ready == (len(intake) < 2), (cycle, intake)
            assert waiting == (any(occupancy) or bool(intake))
            if hold and not ready:
                blocked["cycles"] += 1
            for lane in range(lanes):
                assert lane_valid[lane] == (occupancy[lane] > 0)
                if lane_valid[lane] and lane_ready[lane]:
                    payload = payloads[lane]
                    received[lane].append(payload.shifted_key)
                    assert payload.dense == (payload.degree == payload.count), (seed, payload.shifted_key)
                    occupancy[lane] -= 1
            # the buffer's head to a lane with room (the queue levels of the cycle's start)
            free = [lane for lane in ((last + n) % lanes for n in range(1, lanes + 1))
                    if occupancy[lane] + (1 if lane_valid[lane] and lane_ready[lane] else 0) < JOBS_PER_LANE]
            if intake and free:
                expected[free[0]].append(intake.popleft())
                occupancy[free[0]] += 1
                last = free[0]
            if valid and ready:
                intake.append(jobs[sent]["shifted_key"])
                sent += 1

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert received == expected, seed
    assert sum(map(len, received)) == len(jobs)
    assert blocked["cycles"] > 0, "the queues never all filled"


# ---- the command sequencer

def _header_words(num_nodes: int, magic: bytes = spec_image.MAGIC) -> dict[int, int]:
    """The image header words the sequencer reads, by byte offset (u32 ids, no features)."""
    header = bytearray(4096)
    header[0:len(magic)] = magic
    for name, value in (("version", spec_image.VERSION), ("num_nodes", num_nodes),
                        ("index_dtype", int(spec_image.IndexDtype.U32))):
        for field, code, offset, _ in spec_image.HEADER_FIELDS:
            if field == name:
                struct.pack_into("<" + code, header, offset, value)
    kinds = list(spec_image.SectionKind)
    for kind, offset in ((spec_image.SectionKind.INDPTR, 0x1000), (spec_image.SectionKind.INDICES, 0x9000)):
        entry = spec_image.SECTION_TABLE_OFFSET + kinds.index(kind) * spec_image.SECTION_STRUCT.size
        field_offset = next(o for f, _, o, _ in spec_image.SECTION_FIELDS if f == "offset")
        struct.pack_into("<Q", header, entry + field_offset, offset)
    return {offset: int.from_bytes(header[offset:offset + 8], "little") for offset in IMAGE_WORDS.values()}


def _run_sequencer(descriptor: bytes, header: dict[int, int], frontier_degrees, seed: int):
    """Runs one command: the descriptor at 0x100, the image at 0x10_0000; the prefetcher's nodes and
    pairs (degrees ``frontier_degrees`` for hop 0) come from a stream model. Returns the fields
    written (address -> value), the jobs and the read addresses."""
    rng = random.Random(seed)
    dut = CommandSequencer(CONFIGS["small"])
    image_base, descriptor_base = 0x10_0000, 0x100
    fields, jobs, header_reads, descriptor_reads, hop_keys = {}, [], [], [], []

    def responder(port, words, log):
        async def model(ctx):
            queue = deque()
            while True:
                ctx.set(port.request.ready, rng.random() > 0.3)
                if queue and rng.random() > 0.3:
                    address = queue[0]
                    ctx.set(port.response.payload, {"data": words(address), "address": address, "error": 0})
                    ctx.set(port.response.valid, 1)
                else:
                    ctx.set(port.response.valid, 0)
                _, _, rv, rr, address, av, ar = await ctx.tick().sample(
                    port.request.valid, port.request.ready, port.request.payload, port.response.valid,
                    port.response.ready)
                if av and ar:
                    queue.popleft()
                if rv and rr:
                    queue.append(address)
                    log.append(address)
        return model

    async def prefetcher(ctx):
        """Offers the hop's nodes and pairs in frontier order (node v = index, edges from 10 x v), each
        pair with its first edge's storage address (from the sequencer's ``indices_base`` and id
        width) and its sample count min(degree, k) for the hop's fanout k, as the prefetcher queues it."""
        taken = 0
        while True:
            if ctx.get(dut.prefetch.prefetcher) and not hop_keys:
                hop_keys.append(ctx.get(dut.hop_key))
            if ctx.get(dut.prefetch.prefetcher) and taken < len(frontier_degrees):
                v = taken
                ctx.set(dut.nodes.payload, {"node": v, "in_range": 1, "error": 0, "address": 0,
                                            "shifted_key": 1000 + v})
                edge_address = ctx.get(dut.indices_base) + (8 if ctx.get(dut.wide_ids) else 4) * 10 * v
                ctx.set(dut.pairs.payload, {"edge_address": edge_address, "end": 10 * v + frontier_degrees[v],
                                            "degree": frontier_degrees[v],
                                            "count": min(frontier_degrees[v], ctx.get(dut.fanout)),
                                            "error": 0, "address": 0})
                ctx.set(dut.nodes.valid, 1)
                ctx.set(dut.pairs.valid, 1)
            else:
                ctx.set(dut.nodes.valid, 0)
                ctx.set(dut.pairs.valid, 0)
            _, _, valid, ready = await ctx.tick().sample(dut.nodes.valid, dut.nodes.ready)
            if valid and ready:
                taken += 1

    async def dispatcher(ctx):
        while True:
            ctx.set(dut.job.ready, rng.random() > 0.3)
            _, _, valid, ready, job = await ctx.tick().sample(dut.job.valid, dut.job.ready, dut.job.payload)
            if valid and ready:
                jobs.append((job.shifted_key, job.degree, job.count, job.edge_address, job.base, job.node_address))

    async def bench(ctx):
        for name, value in (("writes_idle", 1), ("reads_idle", 1), ("streamers_idle", 1)):
            ctx.set(getattr(dut, name), value)
        ctx.set(dut.image, image_base)
        ctx.set(dut.descriptor, descriptor_base)
        ctx.set(dut.start, 1)
        await ctx.tick().until(dut.ready)
        ctx.set(dut.start, 0)
        await ctx.tick().until(dut.done)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.add_testbench(responder(dut.descriptor_reads,
                                lambda a: int.from_bytes(descriptor[a - descriptor_base:a - descriptor_base + 8],
                                                         "little"), descriptor_reads), background=True)
    sim.add_testbench(responder(dut.header_reads, lambda a: header.get(a - image_base, 0), header_reads),
                      background=True)
    sim.add_testbench(_consumer(dut.fields, rng, 0.3, written := [], ("address", "data", "wide")), background=True)
    sim.add_testbench(prefetcher, background=True)
    sim.add_testbench(dispatcher, background=True)
    sim.run()
    for field in written:
        fields[field["address"]] = field["data"]
    return fields, jobs, header_reads, descriptor_reads, hop_keys


def _result(fields: dict[int, int], result_ptr: int) -> ResultHeader:
    return ResultHeader.unpack(b"".join(fields[result_ptr + 8 * i].to_bytes(8, "little") for i in range(8)))


def _job(key, degree, count, edge_start, base):
    """A job of :func:`_run_sequencer`'s command as the sequencer forms it: its first edge's storage
    address (the image at 0x10_0000, indices at 0x9000, u32 ids) and its place's device address
    (the node list at 0x1000)."""
    return key, degree, count, 0x10_9000 + 4 * edge_start, base, 0x1000 + 4 * base


def test_command_sequencer_one_hop():
    """A one-hop command over three targets of degrees 2, 0 and 9 (k = 4): the descriptor and the
    image header read word by word, the hop key, the counts written in frontier order, a job per
    node with edges at its reserved place, and the result header."""
    seed = _seed()
    command_seed = random.Random(seed).getrandbits(64)
    descriptor = Descriptor(seed=command_seed, num_targets=3, fanouts=(4,), nodes_ptr=0x1000, nodes_capacity=100,
                            counts_ptr=0x2000, counts_capacity=100, result_ptr=0x3000).pack()
    fields, jobs, header_reads, descriptor_reads, hop_keys = _run_sequencer(descriptor, _header_words(300), [2, 0, 9],
                                                                            seed)
    assert descriptor_reads == [0x100 + 8 * i for i in range(16)]
    assert header_reads == [0x10_0000 + offset for offset in IMAGE_WORDS.values()]
    assert hop_keys == [spec_rng.hop_key(spec_rng.command_key(command_seed), 0)]
    assert [fields[0x2000 + 4 * i] for i in range(3)] == [2, 0, 4]
    assert jobs == [_job(1000, 2, 2, 0, 3), _job(1002, 9, 4, 20, 5)]
    result = _result(fields, 0x3000)
    assert (result.status, result.nodes_written, result.counts_written, result.edges_sampled) == (Status.OK, 9, 3, 6)
    assert result.storage_bytes == 0 and result.cycles > 0


@pytest.mark.parametrize("capacity", [9, 8])
def test_command_sequencer_tight_node_list(capacity):
    """The node list's room near full, where the room check is the head's own (worked out a cycle
    before it decides, not the "room for any count" flag): with room for exactly the 3 targets and
    6 samples the command is the one-hop command above; one entry short, the third node (count 4)
    fails NODES_CAPACITY with the entries it would need, and no job for it is handed out."""
    seed = _seed()
    command_seed = random.Random(seed).getrandbits(64)
    descriptor = Descriptor(seed=command_seed, num_targets=3, fanouts=(4,), nodes_ptr=0x1000,
                            nodes_capacity=capacity, counts_ptr=0x2000, counts_capacity=100,
                            result_ptr=0x3000).pack()
    fields, jobs, _, _, _ = _run_sequencer(descriptor, _header_words(300), [2, 0, 9], seed)
    result = _result(fields, 0x3000)
    if capacity == 9:
        assert jobs == [_job(1000, 2, 2, 0, 3), _job(1002, 9, 4, 20, 5)]
        assert (result.status, result.nodes_written) == (Status.OK, 9)
    else:
        assert jobs == [_job(1000, 2, 2, 0, 3)]
        assert (result.status, result.error_index, result.error_value) == (Status.NODES_CAPACITY, 2, 9)


def test_command_sequencer_bad_image():
    """A wrong image magic: BAD_IMAGE in the result header, no hop, no job, no count."""
    seed = _seed()
    descriptor = Descriptor(seed=1, num_targets=3, fanouts=(4,), nodes_ptr=0x1000, nodes_capacity=100,
                            counts_ptr=0x2000, counts_capacity=100, result_ptr=0x3000).pack()
    fields, jobs, _, _, hop_keys = _run_sequencer(descriptor, _header_words(300, magic=b"NOTANIMG"), [2, 0, 9], seed)
    assert jobs == [] and hop_keys == []
    assert sorted(fields) == [0x3000 + 8 * i for i in range(8)]
    assert _result(fields, 0x3000).status == Status.BAD_IMAGE
