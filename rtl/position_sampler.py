"""Edge positions of one node's sample: all of them, or Robert Floyd's k-subset (docs/spec.md s. 2).

A little over the ~400 lines of the other blocks: one sampler holds one or two nodes whose draws
share its draw pipeline, and most of the length is the comments that give each register's timing
reason on the ECP5 proxy.
"""

from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from smartsage.spec import rng as spec_rng
from smartsage.spec.descriptor import SPEC_MAX_FANOUT

from .delay_line import delay_line
from .free_slot_fifo import FreeSlotFIFO
from .register_copies import register_copies
from .rng import (
    MIX32_LATENCY,
    MULTIPLY_LATENCY,
    RejectionThreshold,
    mix32_first_shift,
    mix32_pipelined,
    multiply_pipelined,
)

__all__ = ["PositionRequest", "PositionSampler", "DRAW_LATENCY", "POSITION_BUFFER", "ISSUE_COPIES", "PICK_COPIES",
           "MAX_NODES"]

#: Stages from a draw's issue to its decision (two mix32 rounds, the bounded product, the decision).
DRAW_LATENCY = 2 * MIX32_LATENCY + MULTIPLY_LATENCY + 1
#: Entries of a node's output FIFO: a position taken frees room for a draw issued the next cycle
#: and decided :data:`DRAW_LATENCY` cycles later, in the FIFO a cycle after that, and the room for it
#: is known from a flag registered a cycle before (one place short); with this many places the
#: loop streams one position per cycle.
POSITION_BUFFER = DRAW_LATENCY + 5
#: Nodes one sampler holds at most, their draws taking turns on its pipeline.
MAX_NODES = 2

#: Copies of a node's issue flip-flop (``register_copies``): the pipeline's valid, ``reserved`` and
#: ``left``; the draw counter ``next_c``; mix32's input ``keyed_c``.
ISSUE_COPIES = 3
#: Further copies of node 1's issue in a two-node sampler, each picking its share of the pipeline's
#: ~100 input multiplexers (node 1's draw or node 0's).
PICK_COPIES = 4

#: One node to sample: its RNG key H_v after mix32's first xor-shift (``shifted_key`` is
#: ``mix32_first_shift(H_v)``, ``H_v ^ (H_v >> 16)``), its degree d (>= 1) and the hop's fanout k.
#: The xor-shift is linear, so mix32's first step of ``H_v ^ c`` is ``shifted_key ^ (c ^ (c >> 16))``:
#: the sampler never needs H_v itself, and a requester that shifts the key where it stages the node
#: puts no LUT between its register and the sampler's first mix32 register.
PositionRequest = data.StructLayout({"shifted_key": 32, "degree": 32, "fanout": 16})


class PositionSampler(wiring.Component):
    """Emits the ordered edge positions of one or two nodes' samples, bit-exact with the golden model.

    d <= k: positions 0..d-1 (no draws). d > k: for j = d-k .. d-1, t = bounded(j + 1) (Lemire's
    multiply-shift with exact rejection, draw indices from 0), then ``j if t in S else t`` is
    appended to S (Floyd). S is a ``max_fanout``-entry register set compared in parallel.

    The draws are pipelined, one position per cycle in steady state, over :data:`DRAW_LATENCY`
    stages (for the ECP5 timing proxy's 150 MHz, no stage holds more than one 16x16 multiplication
    or one carry chain): ``mix32(H_v ^ c)`` (:data:`~smartsage.rtl.rng.MIX32_LATENCY` stages, its
    first xor-shift a register loaded with ``shifted_key ^ (c ^ (c >> 16))`` in front of the first
    adder stage), ``mix32(. ^ DRAW_SALT)`` (as many), the product by ``j + 1``
    (:data:`~smartsage.rtl.rng.MULTIPLY_LATENCY`), then a decision stage that holds the product and
    whether ``low < n``. No stage waits (no pipeline enable to fan out): draws are issued
    speculatively with consecutive indices c, and only while the node's output FIFO
    (:data:`POSITION_BUFFER` entries) has room for every draw in flight, so an accepted draw always
    goes out. When the decision stage finds ``low < n`` (probability n / 2^32 per draw) it holds
    that draw aside, flushes the node's draws behind it and waits for the exact threshold (a
    ~35-cycle divider); a rejected draw is redrawn from (j, c + 1), an accepted one is issued again,
    marked *sure* (its decision skips the compare), and the draws go on from (j + 1, c + 1) behind
    it. Positions leave through the FIFO, so neither ``ready`` nor the membership test reaches the
    consumer's logic in the same cycle.

    With ``nodes=2`` the sampler holds two nodes, each with its own request, Floyd set, held draw,
    divider and output FIFO, and their draws share the one pipeline: in each cycle one of them
    issues, the one whose turn it is (a free-running phase flip-flop) if it can, else the other, so a
    node alone draws a position per cycle and two draw one every other cycle each. Each stage's draw
    carries its node (a flip-flop per stage: a flush drops only its node's draws), and the decision
    stage's data is shared, each node with its own valid bit. Who issues is worked out a cycle ahead
    into flip-flops (``issue`` per node, from the next values of the flags it depends on), which
    pick the pipeline's input multiplexers. The pipeline's mix32 rounds and product are most of a
    sampler's LUTs and carry chains (four 32-bit constant multiplications of 11-12 adders each), so
    two nodes on one pipeline are a little over half the area of two samplers; a lane's nodes
    mostly wait for the lane's one read port (``edge_streamer``).

    Parameters
    ----------
    max_fanout : int
        Largest fanout accepted (size of each node's distinct-position set).
    draws_only : bool
        The requester offers only nodes with ``degree > fanout`` (a lane's dense jobs, d <= k, go
        straight to the index reads): the listing mode is left out, and taking a request sets the
        drawing mode without a 32-bit compare of the request's degree and fanout (on the ECP5 proxy
        that compare, behind the lane's job stage, was a 10.4 ns path). Default False.
    nodes : int
        Nodes held at once (1 or :data:`MAX_NODES`), their draws interleaved. Default 1.

    Members
    -------
    request : ``In(stream.Signature(PositionRequest)).array(nodes)``
        One node per place; ``degree`` must be >= 1 (above ``fanout`` when ``draws_only``) and
        ``fanout`` in 1..max_fanout.
    positions : ``Out(stream.Signature(32)).array(nodes)``
        Each place's node's min(degree, fanout) positions, in sample order.
    ready_unless_taken : ``Out(1).array(nodes)``
        ``request[i].ready`` of the next cycle if this cycle takes no request at place i (one taken
        leaves it low), for a requester that keeps its own registered copy of whether the place it
        offers to is ready (the sampler's reset, in the next cycle, clears ``ready`` whatever this says).
    """

    def __init__(self, max_fanout: int, draws_only: bool = False, nodes: int = 1):
        if not isinstance(max_fanout, int) or not 1 <= max_fanout <= SPEC_MAX_FANOUT:
            raise ValueError(f"Max fanout must be an integer in 1..{SPEC_MAX_FANOUT}, not {max_fanout!r}")
        if not isinstance(nodes, int) or not 1 <= nodes <= MAX_NODES:
            raise ValueError(f"A position sampler holds 1..{MAX_NODES} nodes, not {nodes!r}")
        self._max_fanout = max_fanout
        self._draws_only = bool(draws_only)
        self._nodes = nodes
        super().__init__({
            "request": In(stream.Signature(PositionRequest)).array(nodes),
            "positions": Out(stream.Signature(32)).array(nodes),
            "ready_unless_taken": Out(1).array(nodes),
        })

    @property
    def max_fanout(self) -> int:
        return self._max_fanout

    @property
    def nodes(self) -> int:
        return self._nodes

    def elaborate(self, platform):
        m = Module()
        nodes = self._nodes
        stages = DRAW_LATENCY - 1
        # the decision stage's data, shared (each node has its own valid bit, below)
        s_j, s_c, s_n = (Signal(32, name=f"s_{x}", reset_less=True) for x in "jcn")
        s_m = Signal(64, reset_less=True)
        s_needs = Signal(reset_less=True)     # low < n and not sure: the exact threshold decides
        node_state = [self._node(m, platform, x, s_j, s_c, s_n, s_m, s_needs) for x in range(nodes)]

        # ---- who issues: each node's ``issue`` flip-flops load whether it draws next cycle, worked
        # out from the next values of the flags that decide it (``wants``: drawing, no draw held, room,
        # a position left). With two nodes one goes first (``first``, below) and the other takes the
        # cycles it leaves. (Copies: ``ISSUE_COPIES`` per node for its own registers, and for node 1
        # ``PICK_COPIES`` more that pick the pipeline's inputs.)
        # The request handshakes come last: each issue flip-flop loads one of the grants worked out
        # for a request taken or not at each node (the nodes' own flags and the lane's request payload),
        # picked by the handshakes (a request's valid, an AND of the lane's flip-flops, through the
        # nodes' draw flags and the pick between them into the issue flip-flops was 8-9 ns paths on the
        # ECP5 proxy, four LUT levels)
        taken = [node["taken"] for node in node_state]

        def by_handshakes(grants_for):
            """``grants_for(taken_0, ...)`` (Python bools) for each combination, picked by the handshakes."""
            if nodes == 1:
                return [Mux(taken[0], grants_for(True)[0], grants_for(False)[0])]
            both = {(t0, t1): grants_for(t0, t1) for t0 in (False, True) for t1 in (False, True)}
            return [Mux(taken[1], Mux(taken[0], both[True, True][x], both[False, True][x]),
                        Mux(taken[0], both[True, False][x], both[False, False][x])) for x in range(nodes)]

        def wants_if(node, node_taken):
            return node["wants_taken"] if node_taken else node["wants_kept"]

        if nodes == 1:
            grants = by_handshakes(lambda t0: [wants_if(node_state[0], t0)])
        else:
            # the node whose job came first goes first (its ticket is ahead of the other's in the
            # lane): ``first`` stays while its node draws, and passes to the other node when it stops
            # (so a node that takes a job while the other draws is second). With the nodes first in
            # turn instead, the default build's cycle-count test took 3,333 cycles, not 3,323
            first = Signal()
            first_next = Signal()
            drawing_next = [node["drawing_next"] for node in node_state]
            m.d.comb += first_next.eq(Mux(first, drawing_next[1], ~drawing_next[0]))
            m.d.sync += first.eq(first_next)

            def grants_for(*node_taken):
                drawing_if = [node["drawing_taken"] if t else node["drawing_kept"]
                              for node, t in zip(node_state, node_taken, strict=True)]
                first_if = Mux(first, drawing_if[1], ~drawing_if[0])
                wants = [wants_if(node, t) for node, t in zip(node_state, node_taken, strict=True)]
                return [wants[0] & (~first_if | ~wants[1]), wants[1] & (first_if | ~wants[0])]
            grants = by_handshakes(grants_for)
        picks = []
        for x, node in enumerate(node_state):
            copies = ISSUE_COPIES + (PICK_COPIES if x == 1 else 0)
            issued = register_copies(m, platform, node["name"]("issue"), grants[x], copies)
            m.d.comb += [copy.eq(value) for copy, value in zip(node["issue"], issued[:ISSUE_COPIES], strict=True)]
            if x == 1:
                picks = issued[ISSUE_COPIES:]

        picked = {"degree": 0, "left": 32, "next_c": 32 + len(node_state[0]["left"])}
        picked["keyed_c"] = picked["next_c"] + 32
        picked["sure"] = picked["keyed_c"] + 32

        def pick(key):
            """The issuing node's ``key``: node 1's where its pick copy for the bit is high."""
            values = [node[key] for node in node_state]
            if nodes == 1:
                return values[0]
            start, total = picked[key], picked["sure"] + 1
            return Cat(*(Mux(picks[(start + b) * PICK_COPIES // total], values[1][b], values[0][b])
                         for b in range(len(values[0]))))

        # ---- the shared draw pipeline: free-running (no enable); valid, the node, n = j + 1, c and
        # the draw's *sure* flag ride along the data
        valids = [Signal(name=f"d{i}_valid") for i in range(stages)]
        # (the data registers are reset-less: the valid bits qualify them, and the samplers' reset
        # net reaches the control registers only)
        issue_n = Signal(32, name="d0_n", reset_less=True)
        issue_c = Signal(32, name="d0_c", reset_less=True)
        issue_sure = Signal(name="d0_sure", reset_less=True)
        # (the issue register holds j; from the next stage on the draw's range n = j + 1 rides along)
        m.d.sync += [valids[0].eq(Cat(*(node["issue"][0] for node in node_state)).any()),
                     issue_n.eq(pick("degree") - pick("left")), issue_c.eq(pick("next_c")),
                     issue_sure.eq(pick("sure"))]
        # mix32's input: the issuing node's ``keyed_c``, a register (with two nodes the pick is the one
        # LUT in front of the first adders)
        keyed = pick("keyed_c")
        range_n = Signal(32, name="d1_n", reset_less=True)
        range_c = Signal(32, name="d1_c", reset_less=True)
        range_sure = Signal(name="d1_sure", reset_less=True)
        m.d.sync += [range_n.eq(issue_n + 1), range_c.eq(issue_c), range_sure.eq(issue_sure)]
        always = Const(1)
        # (the first round ends in mix32's first xor-shift of the second's input, the salt folded in)
        first_shifted = mix32_pipelined(m, keyed, always, name="draw_mix1", shifted=True,
                                        shift_out_with=Const(spec_rng.DRAW_SALT, 32))
        second = mix32_pipelined(m, first_shifted, always, name="draw_mix2", shifted=True)
        at_multiply = 2 * MIX32_LATENCY - 1
        # n, c and the sure flag ride beside the rounds in LUT RAM (rtl/delay_line.py), the pipeline
        # being free running: as registers, stage after stage, n and c were 1,216 of a sampler's 3,168
        # flip-flops on the ECP5 proxy. n is read at the product's stage, n, c and sure at the last one.
        at_product = delay_line(m, Cat(range_n, range_c, range_sure), at_multiply - 1, "draw_nc_product")
        at_last = delay_line(m, at_product, stages - 1 - at_multiply, "draw_nc_last")
        last_n, last_c, last_sure = at_last[:32], at_last[32:64], at_last[64]
        product = multiply_pipelined(m, second, at_product[:32], always, name="draw_mul", platform=platform)

        # each stage's node, beside its valid bit (two nodes only)
        if nodes == 1:
            owners = [Const(0)] * stages
        else:
            owners = [Signal(name=f"d{i}_node") for i in range(stages)]
            m.d.sync += owners[0].eq(picks[0])
            m.d.sync += [owners[i].eq(owners[i - 1]) for i in range(1, stages)]

        def owned(values, stage):
            """``values[node]`` of the node whose draw is at ``stage`` now."""
            return values[0] if nodes == 1 else Mux(owners[stage], values[1], values[0])

        # a flush drops the flushing node's draws behind the decision stage; a draw issued in the cycle
        # of a flush is dropped a cycle later, when its node holds a draw
        flushes = [node["flush"] for node in node_state]
        for i in range(1, stages):
            kill = owned(flushes, i - 1)
            if i == 1:
                kill = kill | owned([node["h_busy"] for node in node_state], 0)
            m.d.sync += valids[i].eq(valids[i - 1] & ~kill)

        # the decision stage: takes the last stage's draw every cycle; each node has its own valid bit
        # (and its own ``s_last``, against its degree)
        m.d.sync += [s_j.eq(last_n - 1), s_c.eq(last_c), s_n.eq(last_n), s_m.eq(product),
                     s_needs.eq((product[:32] < last_n) & ~last_sure)]
        last_kill = owned(flushes, stages - 1)
        for x, node in enumerate(node_state):
            mine = Const(1) if nodes == 1 else owners[-1] == x
            m.d.sync += [node["s_valid"].eq(valids[-1] & ~last_kill & mine),
                         node["s_last"].eq(last_n == node["degree"])]
        return m

    def _node(self, m, platform, x, s_j, s_c, s_n, s_m, s_needs):
        """Node place ``x``: its request, Floyd set, output FIFO and held draw; the signals the shared
        pipeline reads and drives, by name."""
        nodes = self._nodes

        def name(base):
            return base if nodes == 1 else f"node{x}_{base}"
        request, positions = self.request[x], self.positions[x]
        threshold = RejectionThreshold()
        out = FreeSlotFIFO(width=32, depth=POSITION_BUFFER)
        m.submodules[name("threshold")] = threshold
        m.submodules[name("out")] = out

        # The node's registers are reset-less: they follow the request while the place is not busy
        # (so in the cycle after any reset) and are read only while it is; the samplers' reset (a lane's
        # flip-flop, set by the kernel's reset or the sequencer's ``reset_samplers``) so reaches the control
        # flags only, not ~700 flip-flops per node (on the ECP5 proxy that net, into the registers,
        # was an 11.8 ns path of the whole kernel)
        shifted_key = Signal(32, name=name("shifted_key"), reset_less=True)    # mix32_first_shift(H_v)
        # positions still to list (d <= k): loaded with d itself, not d - 1, so no subtraction sits
        # between the lane's job stage (a LUT-RAM read) and these registers (11.2 ns on the proxy)
        to_list = Signal(32, name=name("to_list"), reset_less=True)
        degree = Signal(32, name=name("degree"), reset_less=True)
        sequential = Signal(32, name=name("sequential"), reset_less=True)
        busy = Signal(name=name("busy"))
        busy_next = Signal(name=name("busy_next"))  # (set and cleared below; ``ready`` is registered from it)
        busy_kept = Signal(name=name("busy_kept"))  # ``busy_next`` if no request is taken
        m.d.comb += [busy_next.eq(busy), busy_kept.eq(busy)]
        m.d.sync += busy.eq(busy_next)
        listing = Signal(name=name("listing"))      # d <= k: the positions 0..d-1 go out
        drawing = Signal(name=name("drawing"))      # d > k: Floyd's draws
        drawing_next = Signal(name=name("drawing_next"))  # (set and cleared below, as ``busy_next``)
        m.d.comb += drawing_next.eq(drawing)
        m.d.sync += drawing.eq(drawing_next)
        # the next draw to issue: its position index is j = d - left (positions without a draw issued),
        # its draw index next_c, and whether it is sure (a held draw accepted, issued again). Only these
        # bits and mix32's input (below) are loaded by a request, an issue and the held draw's
        # threshold (j is worked out into the issue register), so the flags that pick among those
        # loads fan out to few registers.
        left = Signal(range(self.max_fanout + 1), name=name("left"), reset_less=True)
        # left != 0, a flip-flop loaded where ``left`` is (from compares of the registers ``left`` is
        # loaded from); its next value decides the issue (``left`` -> its compare -> ``issue`` -> the
        # issue registers' enables was 8.0 ns on the ECP5 proxy)
        left_any = Signal(name=name("left_any"), reset_less=True)
        left_any_next = Signal(name=name("left_any_next"))
        m.d.comb += left_any_next.eq(left_any)
        m.d.sync += left_any.eq(left_any_next)
        next_c = Signal(32, name=name("next_c"), reset_less=True)
        sure = Signal(name=name("sure"), reset_less=True)
        # mix32's first xor-shift of H_v ^ next_c, loaded wherever next_c is (equal to
        # ``shifted_key ^ mix32_first_shift(next_c)`` in every cycle), so mix32's first adders start at
        # flip-flops (with two nodes, at the pick between the two): next_c -> that LUT -> a net to
        # some thirteen adder inputs -> the adders was 7.3-8.6 ns on the whole kernel's ECP5 proxy, the
        # most frequent path of its runs. A request loads it with its ``shifted_key`` as is (c = 0)
        keyed_c = Signal(32, name=name("keyed_c"), reset_less=True)
        # (a chosen position is read only while its valid bit is set)
        chosen = Array(Signal(32, name=name(f"chosen{i}"), reset_less=True) for i in range(self.max_fanout))
        chosen_valid = Signal(self.max_fanout, name=name("chosen_valid"))  # thermometer: chosen[i] holds one
        count = Signal(range(self.max_fanout + 1), name=name("count"), reset_less=True)
        # positions in the output FIFO plus draws issued and not yet decided: a draw is issued only
        # while this is below the FIFO's depth, so every decided draw finds room and no stage waits
        reserved = Signal(range(POSITION_BUFFER + 1), name=name("reserved"))

        # the issue flip-flops' copies (driven by the sampler, which picks between its nodes): one for
        # the pipeline's valid, ``reserved`` and ``left``, one each for the draw counter and mix32's
        # input, so no one net of the decision reaches the node's ~70 registers (``left_any`` ->
        # ``issue`` -> ``left``, ``next_c`` was 7.9-8.4 ns at two levels on the proxy)
        issue = [Signal(name=name(f"issues{i}")) for i in range(ISSUE_COPIES)]
        flush = Signal(name=name("flush"))     # drop this node's draws behind the decision stage
        s_valid = Signal(name=name("s_valid"))  # the decision stage holds this node's draw
        s_last = Signal(name=name("s_last"), reset_less=True)   # j == d - 1 (read with s_valid)
        # ``h_busy``: a draw is held aside for its exact threshold (below). Set and cleared as
        # ``h_busy_next``; a copy of its own (``h_holding``) enables the held draw's registers, so the
        # flag's net into the draw counter (``next_c``) is short (as one flip-flop it was an 8.0 ns,
        # one-LUT path on the ECP5 proxy)
        h_busy_next = Signal(name=name("h_busy_next"))
        h_busy, h_holding = register_copies(m, platform, name("h_busy"), h_busy_next, 2)
        m.d.comb += h_busy_next.eq(h_busy)
        # the node would draw next cycle: drawing, no draw held, a position left, and room for one more
        # draw (``reserved`` below POSITION_BUFFER - 1 now: it grows by at most one a cycle, so it is
        # below POSITION_BUFFER then). The sampler registers it (into ``issue``), with two nodes
        # after picking between them
        # (worked out both for a request taken in this cycle and for none: the sampler picks by the
        # handshake last)
        request_taken = Signal(name=name("request_taken"))
        drawing_kept = Signal(name=name("drawing_kept"))     # ``drawing_next`` if no request is taken
        drawing_taken = Signal(name=name("drawing_taken"))   # ``drawing_next`` if one is
        wants_kept = Signal(name=name("wants_kept"))
        wants_taken = Signal(name=name("wants_taken"))
        can_draw = ~h_busy_next & left_any_next & (reserved < POSITION_BUFFER - 1)
        m.d.comb += [wants_kept.eq(drawing_kept & can_draw), wants_taken.eq(drawing_taken & can_draw)]

        candidate = s_m[32:]
        hits = [(chosen[i] == candidate) & chosen_valid[i] for i in range(self.max_fanout)]
        hit = Signal(name=name("hit"))
        m.d.comb += hit.eq(Cat(*hits).any())
        position = Mux(hit, s_j, candidate)
        emit = Signal(name=name("emit"))     # the decision stage's draw is accepted: its position goes out
        m.d.comb += [emit.eq(s_valid & ~s_needs), flush.eq(s_valid & s_needs)]

        # the held draw: one with low < n waits here for its exact threshold while the node's draws are
        # flushed; then it is redrawn from c + 1 (rejected) or issued again, sure (accepted)
        h_pending = Signal(name=name("h_pending"))
        h_j, h_c, h_n, h_low = (Signal(32, name=name(f"h_{v}"), reset_less=True) for v in ("j", "c", "n", "low"))
        # (the divider's operand is the held draw's range, offered whether or not it is asked for: the
        # divider's registers follow it while idle, so no handshake sits in front of its negation)
        m.d.comb += threshold.i.payload.eq(h_n)
        # (the held draw's registers follow the decision stage while none is held: reset-less)
        h_left = Signal(range(self.max_fanout + 1), name=name("h_left"), reset_less=True)   # d - j
        threshold_answered = Signal(name=name("threshold_answered"))   # the threshold came a cycle ago
        threshold_known = Signal(name=name("threshold_known"))
        threshold_rejects = Signal(name=name("threshold_rejects"))

        m.d.comb += [positions.valid.eq(out.r_rdy), positions.payload.eq(out.r_data), out.r_en.eq(positions.ready)]
        taken = positions.valid & positions.ready

        # ---- request and the sequential mode
        # A request is taken into registers, the mode worked out on the way in (one carry chain): the
        # first draw goes out the next cycle. (The requester's payload should come from its own
        # registers.) While the place is not busy its node registers follow the request's payload
        # every cycle (nothing reads them then), so taking a request loads only the three mode flags:
        # the handshake's fan-out is three registers, not the two hundred a load of the node would
        # enable. The next node is taken
        # only once at most two of this one's positions wait in the FIFO (a flag registered from the
        # level a cycle before, "at most one"): a lane whose samplers took nodes as soon as their draws
        # were out would hold work the other lanes could start (on the default build's cycle-count
        # test, 3,334 cycles without this, 3,323 with it). ``ready`` is a flip-flop: not busy in this
        # cycle (``busy_next`` of the cycle before) and that flag (its lane ORs the samplers' ready
        # into its job decision, whose fan-out made ~busy & few_waiting a 9.2 ns path on the ECP5 proxy)
        ready = Signal(name=name("ready"))
        few_waiting = out.level <= 1
        m.d.comb += self.ready_unless_taken[x].eq(~busy_kept & few_waiting)
        m.d.sync += ready.eq(~busy_next & few_waiting)
        m.d.comb += request.ready.eq(ready)
        req = request.payload
        with m.If(~busy):
            m.d.sync += [shifted_key.eq(req.shifted_key), degree.eq(req.degree), count.eq(0), chosen_valid.eq(0),
                         left.eq(req.fanout), next_c.eq(0), keyed_c.eq(req.shifted_key), sure.eq(0)]
            # (a request's fanout is 1 or more: the sequencer refuses a descriptor with a hop's fanout
            # 0, BAD_DESCRIPTOR. As a compare of the lane's fanout register, in front of the issue
            # decision, it was 8.1-8.3 ns paths into the issue flip-flops on the ECP5 proxy)
            m.d.comb += left_any_next.eq(1)
            if not self._draws_only:
                m.d.sync += [sequential.eq(0), to_list.eq(req.degree)]
        m.d.comb += [request_taken.eq(request.valid & request.ready), drawing_kept.eq(drawing & ~(emit & s_last)),
                     drawing_taken.eq(1 if self._draws_only else req.degree > req.fanout)]
        with m.If(request_taken):
            m.d.comb += [busy_next.eq(1), drawing_next.eq(drawing_taken)]
            if not self._draws_only:
                m.d.sync += listing.eq(req.degree <= req.fanout)
        written = Signal(name=name("written"))     # a position enters the output FIFO
        # (without the listing mode none of it is built: Yosys keeps a flip-flop that is never set
        # unless it proves it constant, and the listing's end was the whole kernel's critical path
        # on the ECP5 proxy, into ``ready_unless_taken``)
        if not self._draws_only:
            with m.If(listing):
                m.d.comb += [out.w_en.eq(1), out.w_data.eq(sequential), written.eq(out.w_rdy)]
                with m.If(out.w_rdy):
                    m.d.sync += [sequential.eq(sequential + 1), to_list.eq(to_list - 1)]
                    with m.If(to_list == 1):
                        m.d.comb += [busy_next.eq(0), busy_kept.eq(0)]
                        m.d.sync += listing.eq(0)

        # ---- Floyd: output of the decision stage (room was reserved when the draw was issued)
        # (while no draw is held, the held draw's registers follow the decision stage every cycle,
        # whatever the mode and whichever node's draw it holds: a flush sets the flags only, and the
        # registers' enable is one flip-flop's output)
        with m.If(~h_holding):
            m.d.sync += [h_j.eq(s_j), h_c.eq(s_c), h_n.eq(s_n), h_low.eq(s_m[:32]), h_left.eq(degree - s_j)]
        # what the threshold's answer loads, worked out from the held registers and the answer in the
        # cycle between the answer and ``threshold_known``: the draw counter to go on from (the held
        # draw's own if accepted, the next if rejected) and mix32's first xor-shift of its key with
        # it, and whether any position is left (the held one's). (As a pick between the two counters
        # behind ``threshold_known``, 7.7 ns into ``next_c`` on the ECP5 proxy)
        h_resume_c = Signal(32, name=name("h_resume_c"), reset_less=True)
        h_resume_keyed = Signal(32, name=name("h_resume_keyed"), reset_less=True)
        h_left_any = Signal(name=name("h_left_any"), reset_less=True)
        m.d.sync += [h_resume_c.eq(h_c + threshold_rejects),
                     h_resume_keyed.eq(shifted_key ^ mix32_first_shift(h_c + threshold_rejects)),
                     h_left_any.eq(h_left != 0)]
        with m.If(drawing):
            m.d.comb += [out.w_en.eq(emit), out.w_data.eq(position)]
            with m.If(emit):
                with m.Switch(count):
                    for i in range(self.max_fanout):
                        with m.Case(i):
                            m.d.sync += chosen[i].eq(position)
                m.d.sync += [count.eq(count + 1), chosen_valid.eq(Cat(1, chosen_valid[:-1]))]
                with m.If(s_last):
                    m.d.comb += [busy_next.eq(0), busy_kept.eq(0), drawing_next.eq(0)]

            # slow path: hold the draw, flush the ones behind it, ask for the exact threshold
            with m.If(flush):
                m.d.comb += h_busy_next.eq(1)
                m.d.sync += threshold_known.eq(0)
            with m.If(h_busy & ~h_pending & ~threshold_answered & ~threshold_known):
                m.d.comb += threshold.i.valid.eq(1)
                with m.If(threshold.i.ready):
                    m.d.sync += h_pending.eq(1)
            m.d.comb += threshold.o.ready.eq(h_pending)
            with m.If(threshold.o.valid & h_pending):
                m.d.sync += [h_pending.eq(0), threshold_answered.eq(1),
                             threshold_rejects.eq(h_low < threshold.o.payload)]
            with m.If(threshold_answered):
                m.d.sync += [threshold_answered.eq(0), threshold_known.eq(1)]
        # the threshold's answer, outside the mode's If: ``threshold_known`` is set only while a draw is
        # held in the drawing mode (and cleared here), so it alone is the condition, and no issue is
        # decided for the cycle (``h_busy_next`` is high until this one). The held draw's j is drawn
        # again: from c + 1 if rejected, from c and sure if accepted. (With ``drawing`` and ``h_busy &
        # threshold_known`` in front of the issue as an Elif, ``threshold_known`` went through the
        # issue decision into the 70 issue registers: 7.2-9.0 ns on the ECP5 proxy.)
        with m.If(threshold_known):
            m.d.comb += [h_busy_next.eq(0), left_any_next.eq(h_left_any)]
            m.d.sync += [threshold_known.eq(0), left.eq(h_left), sure.eq(~threshold_rejects),
                         next_c.eq(h_resume_c), keyed_c.eq(h_resume_keyed)]
        with m.If(issue[0]):
            m.d.sync += [left.eq(left - 1), sure.eq(0)]
            m.d.comb += left_any_next.eq(left != 1)
        with m.If(issue[1]):
            m.d.sync += next_c.eq(next_c + 1)
        with m.If(issue[2]):
            m.d.sync += keyed_c.eq(shifted_key ^ mix32_first_shift(next_c + 1))

        # reserved: +1 for a draw issued or a sequential position written, -1 for a position taken;
        # a flush drops the draws behind the held one (it keeps its place until its threshold is
        # known: then it is dropped, or issued again in a place of its own).
        # The count's next values are added from the register alone and picked by the three events
        # (no carry chain behind ``issue`` or ``taken``); ``taken`` picks last, between the next value
        # if a position leaves and if none does, each worked out from the sampler's own flip-flops
        # (the consumer's ready, ANDed into ``taken`` across the lane, went through the whole pick:
        # the lane's read port -> ``reserved`` was 7.6-8.5 ns, four LUT levels, on the ECP5 proxy)
        dropped = threshold_known
        up = issue[0] | written
        if_kept = Signal.like(reserved, name=name("if_kept"))     # no position taken
        if_taken = Signal.like(reserved, name=name("if_taken"))   # one position taken
        m.d.comb += [
            if_kept.eq(Mux(flush, out.level + 1,
                           Mux(up & ~dropped, reserved + 1, Mux(~up & dropped, reserved - 1, reserved)))),
            if_taken.eq(Mux(flush, out.level,
                            Mux(~up & dropped, reserved - 2, Mux(up & dropped, reserved - 1,
                                                                 Mux(up, reserved, reserved - 1))))),
        ]
        m.d.sync += reserved.eq(Mux(taken, if_taken, if_kept))
        return {"name": name, "taken": request_taken, "wants_kept": wants_kept, "wants_taken": wants_taken,
                "drawing_kept": drawing_kept, "drawing_taken": drawing_taken, "drawing_next": drawing_next,
                "issue": issue, "flush": flush,
                "s_valid": s_valid, "s_last": s_last,
                "h_busy": h_busy, "degree": degree, "left": left, "next_c": next_c, "keyed_c": keyed_c, "sure": sure}
