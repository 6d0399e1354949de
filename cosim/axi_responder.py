"""Transaction-level AXI4 slaves for the kernel's masters (cocotb 2).

Why not cocotbext-axi's ``AxiRamRead``/``AxiRamWrite``: they run Python on every clock cycle of every
channel (TOOLCHAIN.md measured ~23 K cycles/s against ~680 K with no Python per cycle), and the storage
model needs timing per *transaction* (page latency, IOPS, cache). These slaves sleep on the master's
``*valid`` edges while idle and on one ``Timer`` per response delay, so Python runs per transaction
(plus one wake per beat while data moves and per cycle of injected backpressure). cocotbext-axi's
AXI4-Lite master is still used for the control port (a handful of transfers per command).

Handshake sampling follows the cocotbext-axi convention, checked on this simulator: values read right
after ``RisingEdge(clk)`` are those the flip-flops sampled at that edge; values written then take
effect for the next cycle.
"""

from __future__ import annotations

import collections
import dataclasses
import random
from collections.abc import Callable

import cocotb
from cocotb.triggers import Event, RisingEdge, Timer
from cocotb.utils import get_sim_time

__all__ = ["ReadRequest", "WriteRequest", "AxiReadResponder", "AxiWriteResponder", "Backpressure",
           "RESP_OKAY", "RESP_SLVERR", "RESP_DECERR"]

RESP_OKAY, RESP_SLVERR, RESP_DECERR = 0, 2, 3


@dataclasses.dataclass
class ReadRequest:
    address: int
    beats: int
    beat_bytes: int
    cycle: int  # cycle of the AR handshake
    ready: int = 0  # cycle from which its data may return (the timing model's answer, asked at AR time)

    @property
    def nbytes(self) -> int:
        return self.beats * self.beat_bytes


@dataclasses.dataclass
class WriteRequest:
    address: int
    beats: int
    beat_bytes: int
    data: list[int]
    strobes: list[int]


@dataclasses.dataclass
class Backpressure:
    """Random idle/backpressure: each channel cycle is stalled with this probability (seeded)."""

    probability: float = 0.0
    seed: int = 0

    def generator(self, salt: int) -> Callable[[], bool]:
        rng = random.Random(self.seed * 7919 + salt)
        p = self.probability
        if p <= 0:
            return lambda: False
        return lambda: rng.random() < p


class _Clocked:
    def __init__(self, clock, period_ps: int):
        self.clock = clock
        self.period_ps = period_ps

    def cycle(self) -> int:
        return int(get_sim_time("ps")) // self.period_ps

    async def wait_cycles(self, cycles: int) -> None:
        """Sleep ``cycles`` clock edges with one Timer (no Python per cycle), ending on a rising edge."""
        if cycles <= 0:
            return
        if cycles > 1:
            await Timer(cycles * self.period_ps - self.period_ps // 2, unit="ps")
        await RisingEdge(self.clock)


class AxiReadResponder(_Clocked):
    """Serves an AXI4 read master (AR, R) in order, one callback per transaction.

    Parameters
    ----------
    dut, prefix :
        The toplevel and the port prefix (``m_axi_storage``): signals are ``{prefix}__{name}``.
    clock, period_ps :
        The clock and its period.
    read :
        ``read(request) -> (bytes, resp)``: the burst's data (``request.nbytes``) and its response code
        (or a list of one code per beat).
    ready_cycle :
        ``ready_cycle(request) -> cycle`` at which the data may start to return (timing model). It is
        asked when the AR handshake happens, so several masters sharing one timing model (one
        storage device) present their reads to it in the order they were issued.
    backpressure :
        Random AR stalls and R idle cycles.
    accepted :
        Optional ``accepted(request)``, called once per AR handshake, in issue order, when the
        transaction is accepted (before any of its data returns): the accounting hook of the storage model.
    """

    def __init__(self, dut, prefix: str, clock, period_ps: int, read, ready_cycle, backpressure: Backpressure,
                 salt: int = 0, accepted: Callable[[ReadRequest], None] | None = None):
        super().__init__(clock, period_ps)
        sig = lambda name: getattr(dut, f"{prefix}__{name}")  # noqa: E731
        self.arvalid, self.arready = sig("arvalid"), sig("arready")
        self.araddr, self.arlen, self.arsize = sig("araddr"), sig("arlen"), sig("arsize")
        self.rvalid, self.rready = sig("rvalid"), sig("rready")
        self.rdata, self.rresp, self.rlast = sig("rdata"), sig("rresp"), sig("rlast")
        self.read = read
        self.ready_cycle = ready_cycle
        self.accepted = accepted
        self._stall_ar = backpressure.generator(salt * 2 + 1)
        self._idle_r = backpressure.generator(salt * 2 + 2)
        self._pending: collections.deque[ReadRequest] = collections.deque()
        self._arrived = Event()
        self.transactions = 0
        self.beats = 0
        self.arready.value = 1
        self.rvalid.value = 0
        self._tasks = [cocotb.start_soon(self._accept()), cocotb.start_soon(self._respond())]

    def stop(self) -> None:
        for task in self._tasks:
            task.cancel()

    @property
    def idle(self) -> bool:
        return not self._pending and not int(self.rvalid.value)

    async def _accept(self):
        while True:
            if not int(self.arvalid.value):
                await RisingEdge(self.arvalid)
            await RisingEdge(self.clock)
            if int(self.arvalid.value) and int(self.arready.value):
                request = ReadRequest(int(self.araddr.value), int(self.arlen.value) + 1,
                                      1 << int(self.arsize.value), self.cycle())
                request.ready = self.ready_cycle(request)
                self._pending.append(request)
                if self.accepted is not None:
                    self.accepted(request)
                self._arrived.set()
            self.arready.value = 0 if self._stall_ar() else 1

    async def _respond(self):
        while True:
            while not self._pending:
                self._arrived.clear()
                await self._arrived.wait()
            request = self._pending[0]
            await self.wait_cycles(request.ready - self.cycle())
            payload, resp = self.read(request)
            self.transactions += 1
            for beat in range(request.beats):
                while self._idle_r():
                    self.rvalid.value = 0
                    await RisingEdge(self.clock)
                chunk = payload[beat * request.beat_bytes:(beat + 1) * request.beat_bytes]
                self.rdata.value = int.from_bytes(chunk, "little")
                self.rresp.value = resp[beat] if isinstance(resp, list) else resp
                self.rlast.value = int(beat == request.beats - 1)
                self.rvalid.value = 1
                await RisingEdge(self.clock)
                while not int(self.rready.value):
                    await RisingEdge(self.clock)
                self.beats += 1
            self.rvalid.value = 0
            self._pending.popleft()


class AxiWriteResponder(_Clocked):
    """Serves an AXI4 write master (AW, W, B), one callback per burst, pipelined.

    AW and W are accepted independently (one transfer per cycle each when not stalled); a burst is
    applied once its address and its last data beat are in, and its response queues on B in order.

    Parameters
    ----------
    write :
        ``write(request) -> resp``: applies the burst (byte strobes) and returns its response code.
    """

    def __init__(self, dut, prefix: str, clock, period_ps: int, write, backpressure: Backpressure,
                 salt: int = 0):
        super().__init__(clock, period_ps)
        sig = lambda name: getattr(dut, f"{prefix}__{name}")  # noqa: E731
        self.awvalid, self.awready = sig("awvalid"), sig("awready")
        self.awaddr, self.awlen, self.awsize = sig("awaddr"), sig("awlen"), sig("awsize")
        self.wvalid, self.wready = sig("wvalid"), sig("wready")
        self.wdata, self.wstrb, self.wlast = sig("wdata"), sig("wstrb"), sig("wlast")
        self.bvalid, self.bready, self.bresp = sig("bvalid"), sig("bready"), sig("bresp")
        self.write = write
        self._stall_aw = backpressure.generator(salt * 3 + 1)
        self._stall_w = backpressure.generator(salt * 3 + 2)
        self._idle_b = backpressure.generator(salt * 3 + 3)
        self._addresses: collections.deque[tuple[int, int, int]] = collections.deque()
        self._bursts: collections.deque[tuple[list[int], list[int]]] = collections.deque()
        self._responses: collections.deque[int] = collections.deque()
        self._responded = Event()
        self.transactions = 0
        self.awready.value = 1
        self.wready.value = 1
        self.bvalid.value = 0
        self._tasks = [cocotb.start_soon(self._accept_address()), cocotb.start_soon(self._accept_data()),
                       cocotb.start_soon(self._respond())]

    def stop(self) -> None:
        for task in self._tasks:
            task.cancel()

    def _join(self) -> None:
        while self._addresses and self._bursts:
            address, beats, beat_bytes = self._addresses.popleft()
            data, strobes = self._bursts.popleft()
            self._responses.append(self.write(WriteRequest(address, beats, beat_bytes, data, strobes)))
            self.transactions += 1
            self._responded.set()

    async def _accept_address(self):
        while True:
            if not int(self.awvalid.value):
                await RisingEdge(self.awvalid)
            await RisingEdge(self.clock)
            if int(self.awvalid.value) and int(self.awready.value):
                self._addresses.append((int(self.awaddr.value), int(self.awlen.value) + 1,
                                        1 << int(self.awsize.value)))
                self._join()
            self.awready.value = 0 if self._stall_aw() else 1

    async def _accept_data(self):
        data: list[int] = []
        strobes: list[int] = []
        while True:
            if not int(self.wvalid.value):
                await RisingEdge(self.wvalid)
            await RisingEdge(self.clock)
            if int(self.wvalid.value) and int(self.wready.value):
                data.append(int(self.wdata.value))
                strobes.append(int(self.wstrb.value))
                if int(self.wlast.value):
                    self._bursts.append((data, strobes))
                    data, strobes = [], []
                    self._join()
            self.wready.value = 0 if self._stall_w() else 1

    async def _respond(self):
        while True:
            while not self._responses:
                self._responded.clear()
                await self._responded.wait()
            while self._idle_b():
                self.bvalid.value = 0
                await RisingEdge(self.clock)
            self.bresp.value = self._responses[0]
            self.bvalid.value = 1
            await RisingEdge(self.clock)
            while not int(self.bready.value):
                await RisingEdge(self.clock)
            self._responses.popleft()
            if not self._responses:
                self.bvalid.value = 0
