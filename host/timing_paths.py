"""The top register-to-register paths of a placed and routed ECP5 design, from nextpnr's own outputs.

nextpnr-ecp5's JSON report (``--report``) names one critical path per clock pair; ``smartsage rtl synth``
wants the top five paths by slack. This module is a small static timing analyser over the two files
nextpnr writes with ``--write routed.json --report report.json --detailed-timing-report``:

- ``routed.json``: the packed, placed and routed netlist (Yosys JSON: cells with type, ports and bit
  connections, ``NEXTPNR_BEL`` placement attributes; one single-bit net per ``netnames`` entry);
- ``report.json``: ``critical_paths`` (segments ``clk-to-q``/``source``/``logic``/``routing``/``setup``
  with cells, ports, locations and delays) and ``detailed_net_timings`` (per net driving a register
  input: nextpnr's own ``[min, max]`` *arrival* time at that input, clock-to-out included).

How delays are modelled
-----------------------

- **Endpoint arrival** (what slack and ``delay_ns`` use): nextpnr's own maximum arrival at the register
  input from ``detailed_net_timings``, plus the input's setup time. It is exact: nextpnr computed it
  with the routed delays and its speed-grade cell delays. An endpoint the report does not list falls
  back to the modelled arrival (below).
- **The path itself** (start, nets, logic levels, ``model_ns``) is traced backwards through a timing
  graph built from ``routed.json``: cell arcs inside combinational cells (``TRELLIS_COMB`` LUT, carry
  and wide-mux arcs, ``TRELLIS_RAMW``, an unregistered ``MULT18X18D``) and routing arcs net driver ->
  sink. Arrival times are propagated forwards from the start points (clock-to-out of ``TRELLIS_FF``
  Q, ``DP16KD`` DO*, a registered ``MULT18X18D`` P*), and at each cell the input that arrives last is
  followed back.
- **Cell delays** are learned from the ``logic``, ``clk-to-q`` and ``setup`` segments of all critical
  paths of the same report, keyed by (cell type, slice half ``K0``/``K1`` for carry arcs, from-port
  class, to-port class), port classes being ``LUT`` for A/B/C/D of a ``TRELLIS_COMB`` and the port name
  without its bit index elsewhere (``DOB7`` -> ``DOB``). An arc the report did not show (a DSP's A->P,
  a carry cell's FCI->F...) starts from :data:`DEFAULT_CELL_DELAYS` (speed grade 6 values of this flow)
  scaled by this report's LUT delay over the speed-6 one (0.180/0.236 for ``--speed 8``), and is then
  calibrated (below). Setup times the report did not show are the defaults (0 ns for a TRELLIS_FF).
- **Routing delays**: a connection that one of the report's critical paths contains is taken as is.
  Every other one is walked from its sink wire back to the driver through the net's ``ROUTING``
  attribute (``wire;pip;strength``) and costs the sum of its pips, one weight per class of the wire a
  pip drives (``H02``, ``V06``, ``A_SLICE``, ``JDIA_EBR``...). Where the route is not found, the
  placement distance: ``a + b * (|dx| + |dy|)`` tiles, ``a`` and ``b`` fitted to the report's routing
  segments (:data:`DEFAULT_ROUTE` when too few). Dedicated carry (FCO->FCI) and wide-mux (F->F1,
  OFX->FXA/FXB) connections cost 0.
- **Calibration**: the unknown weights (pip classes, unseen cell arcs, distance model) start from
  priors and are fitted by ridge least squares, clipped at zero, to the report's critical-path routing
  segments and to nextpnr's arrival at every endpoint it lists, alternately tracing each endpoint's
  worst path with the current weights and refitting (three rounds). On the fixture the calibrated
  arrivals are within ~1% of nextpnr's on average (4% standard deviation).

Validation (tests/test_timing_paths.py): with nothing excluded, the worst path is nextpnr's critical path
(same start and end cell, same named nets, delay and modelled delay within 3%) on the test fixture and
on a PositionSampler block (``smartsage rtl synth --block``-like, --speed 8: 30k edges, 9205
endpoints listed; nextpnr's chain_in_TRELLIS_FF_Q_47 -> kernel.next_n_TRELLIS_FF_Q_1, 6.965 ns,
reproduced exactly; calibrated endpoint arrivals within 1.5% on average, 3.5% standard deviation).

Limitations: one clock domain (every register is assumed clocked by the same clock at ``target_mhz``;
the asynchronous IO paths are left out unless ``include_io``). Routing delays off the reported critical
paths are calibrated estimates, so the path traced to an endpoint can differ from nextpnr's when two
inputs arrive within the estimate's error; the endpoint's delay and slack do not, being nextpnr's, except
where nextpnr's latest arrival there comes from an excluded start (the scan chain): then the delay is the
model's (``exact`` False). Logic levels are not nextpnr's count of ``logic`` segments: a carry chain
counts once and a wide LUT's PFUMX/L6MUX not at all. Combinational loops are cut arbitrarily.
"""

from __future__ import annotations

import collections
import dataclasses
import gzip
import json
import os
import re

__all__ = ["TimingPath", "top_paths", "worst_paths", "paths_markdown", "DEFAULT_CELL_DELAYS", "DEFAULT_ROUTE"]

#: Fallback cell delays in ns (nextpnr-ecp5 0.11.1 on this flow, speed grade 6), keyed by
#: (cell type, variant, from-port class, to-port class). Variant ``K0``/``K1`` is the slice half of a
#: carry cell (the pair of TRELLIS_COMB cells one CCU2C became), None for any. ``clk-to-q`` arcs are
#: ("clk-to-q", port class) under the cell type, ``setup`` arcs ("setup", port class). LUT, wide-mux,
#: carry, flip-flop and block RAM values were read off nextpnr reports of this flow; the DSP ones are
#: priors only (a combinational MULT18X18D calibrates to ~4.0 ns A->P on the test fixture).
DEFAULT_CELL_DELAYS: dict[tuple, float] = {
    ("TRELLIS_COMB", None, "LUT", "F"): 0.236,
    ("TRELLIS_COMB", None, "LUT", "OFX"): 0.236 + 0.165,  # LUT then the PFUMX
    ("TRELLIS_COMB", None, "F1", "OFX"): 0.165,
    ("TRELLIS_COMB", None, "M", "OFX"): 0.165,
    ("TRELLIS_COMB", None, "FXA", "OFX"): 0.165,
    ("TRELLIS_COMB", None, "FXB", "OFX"): 0.165,
    ("TRELLIS_COMB", None, "LUT", "FCO"): 0.465,
    ("TRELLIS_COMB", None, "FCI", "F"): 0.430,
    ("TRELLIS_COMB", "K0", "FCI", "FCO"): 0.073,
    ("TRELLIS_COMB", "K1", "FCI", "FCO"): 0.0,
    ("TRELLIS_COMB", None, "FCI", "FCO"): 0.073,
    ("TRELLIS_RAMW", None, "*", "*"): 0.0,
    ("MULT18X18D", None, "A", "P"): 4.0,
    ("MULT18X18D", None, "B", "P"): 4.0,
    ("TRELLIS_FF", None, "clk-to-q", "Q"): 0.525,
    ("DP16KD", None, "clk-to-q", "DOA"): 5.83,
    ("DP16KD", None, "clk-to-q", "DOB"): 5.83,
    ("MULT18X18D", None, "clk-to-q", "P"): 2.5,
    ("TRELLIS_COMB", None, "clk-to-q", "F"): 0.525,
    ("TRELLIS_FF", None, "setup", "*"): 0.0,
    ("DP16KD", None, "setup", "*"): 0.0,
    ("MULT18X18D", None, "setup", "*"): 0.0,
}
_SPEED6_LUT = DEFAULT_CELL_DELAYS[("TRELLIS_COMB", None, "LUT", "F")]

#: Fallback routing model (ns): intercept and slope per tile of Manhattan distance, speed grade 6.
DEFAULT_ROUTE = (0.45, 0.05)

_CONST = {"0", "1", "x", "z"}
_DEDICATED_SINKS = {"FCI", "F1", "FXA", "FXB"}


def _dedicated(port: str) -> bool:
    """A sink fed by dedicated wiring, not the general routing: carry in, wide-mux inputs, the LUT RAM's
    write data and address from its TRELLIS_RAMW."""
    return port in _DEDICATED_SINKS or port.startswith(("WAD", "WD"))


_PACKER_SUFFIX = re.compile(r"(_TRELLIS_FF_Q(_\d+)?|\$tr_io|\$DPRAM_COMB\d|\$RAMW)$")


@dataclasses.dataclass
class TimingPath:
    """One register-to-register path: ``start`` and ``end`` are readable register (group) names."""

    start: str
    end: str
    levels: int
    delay_ns: float
    slack_ns: float
    nets: list[str]
    start_cell: str = ""
    end_cell: str = ""
    carry: bool = False  # the path runs through a carry chain (counted as one logic level)
    model_ns: float = 0.0  # the modelled delay of the traced path (delay_ns is nextpnr's arrival)
    exact: bool = True  # delay_ns is nextpnr's arrival (False: modelled; nextpnr did not list the
    # endpoint, or its worst start there is an excluded one)

    @property
    def fmax_mhz(self) -> float:
        return 1000.0 / self.delay_ns if self.delay_ns > 0 else float("inf")


def readable(name: str) -> str:
    """A cell or net name without Yosys escapes, the harness prefix and nextpnr's packer suffixes.

    The harness prefix is the scan harness's instance (``kernel.``, or ``kernel_`` and K ``s`` at name salt K:
    :func:`smartsage.host.synth.harness_instance`) and, on the whole kernel, the Vitis top's own
    ``kernel.`` below it; all are stripped, so that every salt names a register as salt 0 does and the
    paths of different salts compare one by one."""
    name = re.sub(r"^kernel(_s+)?\.(kernel\.)*", "", name.replace("\\", ""))
    prev = None
    while prev != name:
        prev, name = name, _PACKER_SUFFIX.sub("", name)
    return name


def _group(cell: str) -> str:
    """The register group of an endpoint or start cell: a bus ``foo_TRELLIS_FF_Q_3`` is ``foo``, and a
    memory's LUT-RAM or block-RAM cells (``foo.storage.0.28$DPRAM_COMB1``: Yosys' row and column of
    the split memory) are ``foo.storage``, so a memory counts once among the top paths."""
    return re.sub(r"(\.\d+){1,2}$", "", readable(cell))


def _load(src) -> dict:
    if isinstance(src, dict):
        return src
    path = os.fspath(src)
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        return json.load(f)


def _port_class(ctype: str, port: str) -> str:
    if ctype == "TRELLIS_COMB" and port in ("A", "B", "C", "D"):
        return "LUT"
    return re.sub(r"\d+$", "", port) or port


def _bel(attrs: dict) -> tuple[int, int, str]:
    m = re.match(r"X(\d+)/Y(\d+)/(.*)", attrs.get("NEXTPNR_BEL", ""))
    return (int(m.group(1)), int(m.group(2)), m.group(3)) if m else (0, 0, "")


def _wire_class(wire: str) -> str:
    """The class of a routing wire (what a pip driving it costs depends on): ``H02``, ``V06``, ``A_SLICE``..."""
    local = wire.rsplit("/", 1)[-1]
    m = re.match(r"[HV]\d\d", local)
    return m.group(0) if m else re.sub(r"\d+", "", local)


class _RouteTree:
    """A routed net's wires (nextpnr's ``ROUTING`` attribute: ``wire;pip;strength`` triples), each with the
    wire that drives it through its pip, so that a sink's route is walked back to the driver."""

    def __init__(self, routing: str):
        self.parent: dict[str, str | None] = {}
        self.by_local: dict[str, list[str]] = collections.defaultdict(list)
        t = routing.split(";")
        for i in range(0, len(t) - 2, 3):
            wire, pip = t[i], t[i + 1]
            src = None
            m = re.match(r"X(-?\d+)/Y(-?\d+)/(-?\d+)_(-?\d+)_(.*?)->", pip)
            if m:
                src = f"X{int(m.group(1)) + int(m.group(3))}/Y{int(m.group(2)) + int(m.group(4))}/{m.group(5)}"
            self.parent[wire] = src
            self.by_local[wire.rsplit("/", 1)[-1]].append(wire)

    def sink_wire(self, bel: tuple[int, int, str], port: str) -> str | None:
        x, y, site = bel
        m = re.match(r"SLICE([A-D])\.(?:K|FF)([01])$", site)
        slice_, half = (m.group(1), m.group(2)) if m else (None, None)
        ramw = re.match(r"SLICE([A-D])\.RAMW$", site)
        if ramw and re.fullmatch(r"[A-D][01]", port):  # a RAMW's A0..D1: its slice's two LUTs' inputs
            slice_, half, port = ramw.group(1), port[1], port[0]
        if slice_:
            s = ord(slice_) - ord("A")
            for local in (f"{port}{2 * s + int(half)}_SLICE", f"{port}{s}_SLICE"):
                wire = f"X{x}/Y{y}/{local}"
                if wire in self.parent:
                    return wire
            return None
        prefixes = (f"J{port}_", f"{port}_")
        cands = [w for local, ws in self.by_local.items() if local.startswith(prefixes) for w in ws]
        if not cands:
            return None
        def dist(w):
            mm = re.match(r"X(\d+)/Y(\d+)/", w)
            return abs(int(mm.group(1)) - x) + abs(int(mm.group(2)) - y) if mm else 0
        return min(cands, key=dist)

    def classes(self, wire: str) -> collections.Counter:
        out: collections.Counter = collections.Counter()
        seen = set()
        while wire is not None and wire not in seen and wire in self.parent:
            seen.add(wire)
            if self.parent[wire] is not None:
                out["pip:" + _wire_class(wire)] += 1
            wire = self.parent[wire]
        return out


class _Model:
    """Delays of the timing graph's edges. An edge is ``fixed`` ns (a delay the report states: a learned
    cell arc, a routing segment of a reported critical path) plus ``features`` x weights (routing pips by
    wire class, or placement distance; cell arcs the report did not show). Weights start at documented
    priors and are calibrated against nextpnr's endpoint arrivals (:meth:`calibrate`)."""

    def __init__(self, report: dict, ctype_of, variant_of):
        self.learned: dict[tuple, float] = {}
        self.route_exact: dict[tuple[str, str, str], float] = {}
        self.route_samples: list[tuple[int, float]] = []
        for cp in report.get("critical_paths", []):
            for seg in cp.get("path", []):
                kind, fr, to, d = seg.get("type"), seg.get("from", {}), seg.get("to", {}), float(seg.get("delay", 0))
                fc, tc = fr.get("cell", ""), to.get("cell", "")
                if kind == "routing":
                    self.route_exact[(seg.get("net", ""), tc, to.get("port", ""))] = d
                    if not _dedicated(to.get("port", "")) and fr.get("loc") and to.get("loc"):
                        dist = abs(fr["loc"][0] - to["loc"][0]) + abs(fr["loc"][1] - to["loc"][1])
                        self.route_samples.append((dist, d))
                    continue
                ctype = ctype_of(fc)
                if ctype is None:
                    continue
                if kind == "logic":
                    key = (ctype, _port_class(ctype, fr.get("port", "")), _port_class(ctype, to.get("port", "")))
                elif kind == "clk-to-q":
                    key = (ctype, "clk-to-q", _port_class(ctype, to.get("port", "")))
                elif kind == "setup":
                    key = (ctype, "setup", _port_class(ctype, to.get("port", "")))
                else:
                    continue
                for variant in (variant_of(fc), None):
                    k = (key[0], variant) + key[1:]
                    self.learned[k] = max(self.learned.get(k, 0.0), d)
        lut = self.learned.get(("TRELLIS_COMB", None, "LUT", "F"))
        self.scale = lut / _SPEED6_LUT if lut else 1.0
        self.route = self._fit_route()
        self.prior: dict[str, float] = {"route:base": self.route[0], "route:dist": self.route[1]}
        self.pip_prior = 0.1 * self.scale
        self.weights: dict[str, float] = dict(self.prior)
        self.segment_rows: list[tuple[collections.Counter, float]] = []

    def _fit_route(self) -> tuple[float, float]:
        pts = self.route_samples
        if len(pts) >= 4 and len({x for x, _ in pts}) >= 2:
            n = len(pts)
            mx = sum(x for x, _ in pts) / n
            my = sum(y for _, y in pts) / n
            sxx = sum((x - mx) ** 2 for x, _ in pts)
            b = max(sum((x - mx) * (y - my) for x, y in pts) / sxx, 0.0)
            a = max(my - b * mx, 0.0)
            return a, b
        return DEFAULT_ROUTE[0] * self.scale, DEFAULT_ROUTE[1] * self.scale

    def _feature(self, name: str, prior: float) -> dict:
        self.prior.setdefault(name, prior)
        self.weights.setdefault(name, prior)
        return {name: 1}

    def cell(self, ctype: str, variant: str | None, frm: str, to: str) -> tuple[float, dict]:
        """(fixed, features) of a cell arc; ``frm`` is ``clk-to-q`` or ``setup`` for those."""
        keys = ((ctype, variant, frm, to), (ctype, None, frm, to), (ctype, None, frm, "*"), (ctype, None, "*", "*"))
        for key in keys:
            if key in self.learned:
                return self.learned[key], {}
        for key in keys:
            if key in DEFAULT_CELL_DELAYS:
                prior = DEFAULT_CELL_DELAYS[key] * self.scale
                if frm == "setup":
                    return prior, {}
                return 0.0, self._feature("cell:" + ":".join(str(k) for k in key), prior)
        return 0.0, {}

    def routing(self, net: str, src_loc, sink_cell: str, sink_port: str, sink_loc, pips) -> tuple[float, dict]:
        """(fixed, features) of the connection from ``net``'s driver to one sink; ``pips``: the route's pip
        classes (a Counter) or None when the route is not known."""
        exact = self.route_exact.get((net, sink_cell, sink_port))
        if _dedicated(sink_port):
            return exact or 0.0, {}
        if pips:
            for name in pips:
                self.prior.setdefault(name, self.pip_prior)
                self.weights.setdefault(name, self.pip_prior)
            if exact is not None:
                self.segment_rows.append((pips, exact))
                return exact, {}
            return 0.0, dict(pips)
        if exact is not None:
            return exact, {}
        dist = abs(src_loc[0] - sink_loc[0]) + abs(src_loc[1] - sink_loc[1])
        return 0.0, {"route:base": 1, "route:dist": dist}

    def fit(self, rows: list[tuple[dict, float]], ridge: float = 1.0) -> None:
        """Least-squares weights for ``rows`` (features, target ns) and the exact critical-path routing
        segments, pulled towards the priors (ridge), clipped at zero."""
        import numpy as np

        rows = [(dict(f), y) for f, y in self.segment_rows] + [r for r in rows if r[0]]
        names = sorted({n for f, _ in rows for n in f})
        if not names:
            return
        index = {n: i for i, n in enumerate(names)}
        a = np.zeros((len(rows), len(names)))
        y = np.array([t for _, t in rows])
        for r, (f, _) in enumerate(rows):
            for n, c in f.items():
                a[r, index[n]] += c
        w0 = np.array([self.prior.get(n, 0.0) for n in names])
        lhs = a.T @ a + ridge * np.eye(len(names))
        w = np.linalg.solve(lhs, a.T @ y + ridge * w0)
        for n, v in zip(names, w, strict=True):
            self.weights[n] = max(float(v), 0.0)


#: A TRELLIS_RAMW passes a LUT RAM's write address and data on (nextpnr's ECP5 packer: WAD0..3 on
#: D0/B0/C0/A0, DI0..3 on C1/A1/D1/B1).
_RAMW_ARCS = {"D0": "WADO0", "B0": "WADO1", "C0": "WADO2", "A0": "WADO3",
              "C1": "WDO0", "A1": "WDO1", "D1": "WDO2", "B1": "WDO3"}


def _comb_arcs(ctype: str, params: dict, conn: dict) -> list[tuple[str, str]]:
    """The combinational input -> output arcs of a cell (connected ports only)."""
    live = {p for p, bits in conn.items() if bits and not all(str(b) in _CONST for b in bits)}
    arcs = []
    if ctype == "TRELLIS_COMB":
        luts = [p for p in ("A", "B", "C", "D") if p in live]
        for o in ("F", "FCO"):
            if o in live:
                arcs += [(i, o) for i in luts] + ([("FCI", o)] if "FCI" in live else [])
        if "OFX" in live:
            arcs += [(i, "OFX") for i in luts + [p for p in ("F1", "M", "FXA", "FXB") if p in live]]
    elif ctype == "TRELLIS_RAMW":
        arcs += [(i, o) for i, o in _RAMW_ARCS.items() if i in live and o in live]
    elif ctype == "MULT18X18D" and not _mult_clocked(params):
        ins = [p for p in live if re.fullmatch(r"[AB]\d+", p)]
        outs = [p for p in live if re.fullmatch(r"P\d+", p)]
        arcs += [(i, o) for i in ins for o in outs]
    return arcs


def _mult_clocked(params: dict) -> bool:
    return any(k.startswith("REG_") and k.endswith("_CLK") and str(v).strip() not in ("NONE", "")
               for k, v in params.items())


def _start_ports(ctype: str, params: dict, conn: dict) -> list[str]:
    live = [p for p, bits in conn.items() if bits]
    if ctype == "TRELLIS_FF":
        return [p for p in live if p == "Q"]
    if ctype == "DP16KD":
        return [p for p in live if p.startswith(("DOA", "DOB"))]
    if ctype == "MULT18X18D" and _mult_clocked(params):
        return [p for p in live if re.fullmatch(r"P\d+", p)]
    return []


def _end_ports(ctype: str, params: dict, conn: dict) -> list[str]:
    live = [p for p, bits in conn.items() if bits and not all(str(b) in _CONST for b in bits)]
    if ctype == "TRELLIS_FF":
        return [p for p in live if p in ("DI", "M", "CE", "LSR")]
    if ctype == "DP16KD":
        return [p for p in live if not p.startswith(("CLK", "DOA", "DOB"))]
    if ctype == "MULT18X18D" and _mult_clocked(params):
        return [p for p in live if not p.startswith(("CLK", "P", "SRO", "SIGN"))]
    if ctype == "TRELLIS_COMB" and params.get("MODE") == "DPRAM":
        return [p for p in live if p.startswith(("WD", "WAD", "WRE"))]
    return []


def _excluded(name: str, patterns) -> bool:
    name = name.replace("\\", "")
    return any(re.search(rf"(^|\.){re.escape(p)}($|[_\[.$])", name) for p in patterns)


class _Graph:
    """The timing graph of a routed netlist: pins (cell, port), edges with their (fixed, features)."""

    def __init__(self, routed: dict, report: dict, exclude, include_io: bool):
        modules = routed.get("modules", {})
        top = next((m for m in modules.values() if str(m.get("attributes", {}).get("top", "0")).strip("0")),
                   next(iter(modules.values())))
        self.cells = cells = top.get("cells", {})
        bit_name: dict = {}
        trees: dict = {}
        for name, info in top.get("netnames", {}).items():
            for b in info.get("bits", []):
                if b not in bit_name or (bit_name[b][1] and not info.get("hide_name")):
                    bit_name[b] = (name, info.get("hide_name", 0))
                routing = info.get("attributes", {}).get("ROUTING")
                if routing and len(info.get("bits", [])) == 1:
                    trees[b] = routing
        self.bel = bel = {c: _bel(info.get("attributes", {})) for c, info in cells.items()}
        self.model = model = _Model(report, lambda c: cells[c]["type"] if c in cells else None, self.variant)
        self.fixed: list[float] = []
        self.features: list[dict] = []
        drivers, sinks = {}, collections.defaultdict(list)
        for c, info in cells.items():
            dirs = info.get("port_directions", {})
            for p, bits in info.get("connections", {}).items():
                for b in bits:
                    if str(b) in _CONST:
                        continue
                    if dirs.get(p) == "output":
                        drivers[b] = (c, p)
                    elif dirs.get(p) == "input":
                        sinks[b].append((c, p))
        self.succ: dict = collections.defaultdict(list)  # pin -> [(pin, edge, net name or None)]
        for b, (dc, dp) in drivers.items():
            if cells[dc]["type"] == "DCCA":
                continue
            net = bit_name.get(b, (str(b), 1))[0]
            tree = _RouteTree(trees[b]) if b in trees else None
            for sc, sp in sinks.get(b, []):
                if sp.startswith("CLK") or sp == "WCK":
                    continue
                pips = None
                if tree is not None:
                    wire = tree.sink_wire(bel[sc], sp)
                    pips = tree.classes(wire) if wire else None
                edge = self._edge(*model.routing(net, bel[dc], sc, sp, bel[sc], pips))
                self.succ[(dc, dp)].append(((sc, sp), edge, net))

        def cell_excluded(c):
            info = cells[c]
            dirs = info.get("port_directions", {})
            return _excluded(c, exclude) or any(
                _excluded(bit_name.get(b, ("", 1))[0], exclude)
                for p, bits in info.get("connections", {}).items() if dirs.get(p) == "output" for b in bits
                if str(b) not in _CONST)

        self.starts: dict = {}  # pin -> edge (its clock-to-out)
        self.kept: set = set()
        self.ends: list = []
        self.setup: dict = {}
        for c, info in cells.items():
            t, params, conn = info["type"], info.get("parameters", {}), info.get("connections", {})
            for i, o in _comb_arcs(t, params, conn):
                edge = self._edge(*model.cell(t, self.variant(c), _port_class(t, i), _port_class(t, o)))
                self.succ[(c, i)].append(((c, o), edge, None))
            out = cell_excluded(c)
            if t == "TRELLIS_IO":
                if include_io and not out:
                    if conn.get("O"):
                        self.starts[(c, "O")] = self._edge(0.0, {})
                        self.kept.add((c, "O"))
                    if conn.get("I"):
                        self.ends.append((c, "I"))
                        self.setup[(c, "I")] = 0.0
                continue
            for p in _start_ports(t, params, conn):
                self.starts[(c, p)] = self._edge(*model.cell(t, None, "clk-to-q", _port_class(t, p)))
                if not out:
                    self.kept.add((c, p))
            for p in _end_ports(t, params, conn):
                self.setup[(c, p)] = model.cell(t, None, "setup", _port_class(t, p))[0]
                if not out:
                    self.ends.append((c, p))
        self.order = self._topological()

    def variant(self, c: str) -> str | None:
        b = self.bel.get(c, (0, 0, ""))[2]
        return b[-2:] if b[-2:] in ("K0", "K1") else None

    def _edge(self, fixed: float, features: dict) -> int:
        self.fixed.append(fixed)
        self.features.append(features)
        return len(self.fixed) - 1

    def _topological(self) -> list:
        indeg: dict = collections.Counter()
        for outs in self.succ.values():
            for nxt, _, _ in outs:
                indeg[nxt] += 1
        queue = collections.deque(p for p in set(self.succ) | set(indeg) if indeg[p] == 0)
        order = []
        while queue:  # Kahn; pins on a combinational loop never reach indegree 0 and are left out
            pin = queue.popleft()
            order.append(pin)
            for nxt, _, _ in self.succ.get(pin, ()):
                indeg[nxt] -= 1
                if indeg[nxt] == 0:
                    queue.append(nxt)
        return order

    def delays(self) -> list[float]:
        w = self.model.weights
        return [f + sum(w.get(n, 0.0) * c for n, c in feats.items())
                for f, feats in zip(self.fixed, self.features, strict=True)]

    def propagate(self, delays: list[float], starts) -> tuple[dict, dict]:
        """Latest arrival at every pin from ``starts`` and each pin's predecessor (pin, edge, net)."""
        arrival = {p: delays[self.starts[p]] for p in starts}
        pred: dict = {}
        for pin in self.order:
            a = arrival.get(pin)
            if a is None:
                continue
            for nxt, edge, net in self.succ.get(pin, ()):
                t = a + delays[edge]
                if nxt not in self.starts and (nxt not in arrival or t > arrival[nxt]):
                    arrival[nxt] = t
                    pred[nxt] = (pin, edge, net)
        return arrival, pred

    def edges_to(self, pin, pred) -> list[int]:
        edges = []
        while pin in pred:
            prev, edge, _ = pred[pin]
            edges.append(edge)
            pin = prev
        return edges + [self.starts[pin]] if pin in self.starts else edges

    def calibrate(self, exact: dict, rounds: int = 3) -> None:
        """Fit the feature weights so that the traced worst path to each endpoint nextpnr lists arrives when
        nextpnr says it does (alternating: trace with the current weights, refit)."""
        for _ in range(rounds):
            arrival, pred = self.propagate(self.delays(), self.starts)
            rows = []
            for pin, t in exact.items():
                if pin not in arrival:
                    continue
                feats: collections.Counter = collections.Counter()
                fixed = 0.0
                for e in self.edges_to(pin, pred):
                    fixed += self.fixed[e]
                    feats.update(self.features[e])
                rows.append((feats, t - fixed))
            self.model.fit(rows)


def _exact_arrivals(report: dict, include_io: bool = False) -> dict:
    """nextpnr's own latest arrival at each register input it lists (``detailed_net_timings``), from
    clocked starts (and from the unclocked IO too with ``include_io``)."""
    exact: dict = {}
    for net in report.get("detailed_net_timings", []):
        if "async" in net.get("event", "") and not include_io:
            continue
        for ep in net.get("endpoints", []):
            d = ep.get("delay")
            d = max(d) if isinstance(d, list) else d
            if d is not None:
                key = (ep.get("cell"), ep.get("port"))
                exact[key] = max(exact.get(key, float("-inf")), float(d))
    return exact


def top_paths(routed_json, report_json, target_mhz: float, count: int = 5,
              exclude=("chain_in", "chain_out"), include_io: bool = False) -> list[TimingPath]:
    """The ``count`` worst register-to-register paths by slack at ``target_mhz``, one per endpoint register
    group (a bus counts once), worst first. ``routed_json``/``report_json``: paths (``.gz`` too) or the
    loaded JSON of nextpnr's ``--write`` and ``--report`` (with ``--detailed-timing-report``) outputs.
    Paths that start or end at a register named by ``exclude`` (its cell or its output net: the harness
    scan chain by default) are left out, and so are IO cells unless ``include_io``."""
    return worst_paths(routed_json, report_json, target_mhz, count, exclude, include_io)[0]


def worst_paths(routed_json, report_json, target_mhz: float, count: int = 5,
                exclude=("chain_in", "chain_out"), include_io: bool = False) -> tuple[list[TimingPath], int]:
    """:func:`top_paths`, and how many endpoint register groups miss ``target_mhz`` (negative slack): a
    figure of the whole design's distance from the target that moves less with the placement than
    the worst path alone does (docs/synthesis.md)."""
    report = _load(report_json)
    graph = _Graph(_load(routed_json), report, exclude, include_io)
    exact = {pin: t for pin, t in _exact_arrivals(report, include_io).items() if pin in graph.setup}
    graph.calibrate(exact)
    delays = graph.delays()
    arr_all, _ = graph.propagate(delays, graph.starts)
    arrival, pred = graph.propagate(delays, graph.kept)
    period = 1000.0 / target_mhz
    best: dict = {}
    for pin in graph.ends:
        if pin not in arrival:
            continue
        setup = graph.setup[pin]
        modelled = arrival[pin] + setup
        # nextpnr's arrival counts every start: it is this path's when no excluded start arrives later
        listed = pin in exact and arrival[pin] >= arr_all.get(pin, float("-inf")) - 1e-9
        delay = exact[pin] + setup if listed else modelled
        path = TimingPath(start="", end=_group(pin[0]), levels=0, delay_ns=delay, slack_ns=period - delay,
                          nets=[], end_cell=pin[0], model_ns=modelled, exact=listed)
        if path.end not in best or path.slack_ns < best[path.end][0].slack_ns:
            best[path.end] = (path, pin)
    worst = sorted(best.values(), key=lambda pp: pp[0].slack_ns)[:count]
    for path, pin in worst:
        _trace(path, pin, pred, graph.cells)
    failing = sum(1 for path, _ in best.values() if path.slack_ns < 0)
    return [path for path, _ in worst], failing


def _trace(path: TimingPath, pin, pred: dict, cells: dict) -> None:
    """Follow the latest-arriving inputs back from the endpoint pin: start, nets and logic levels (LUTs,
    a DSP, a RAM read counted once each; a carry chain once; the PFUMX/L6MUX of a wide LUT not at all)."""
    nets, levels, carry, in_carry = [], 0, False, False
    while pin in pred:
        prev, _, net = pred[pin]
        if net is None:  # a cell arc prev -> pin inside one cell
            t, i, o = cells[pin[0]]["type"], prev[1], pin[1]
            if t == "TRELLIS_COMB" and (i == "FCI" or o == "FCO"):
                if not in_carry:
                    levels += 1
                in_carry = carry = True
            elif (t == "TRELLIS_COMB" and i in ("F1", "M", "FXA", "FXB")) or t == "TRELLIS_RAMW":
                in_carry = False  # a wide LUT's mux, a LUT RAM's write distribution: no level of their own
            else:
                levels += 1
                in_carry = False
        elif not _dedicated(pin[1]) and not net.rsplit(".", 1)[-1].startswith("$"):
            name = readable(net)
            if name not in nets:
                nets.append(name)
        pin = prev
    nets.reverse()
    path.start_cell = pin[0]
    path.start = _group(pin[0])
    path.levels, path.nets, path.carry = levels, nets, carry


def paths_markdown(paths: list[TimingPath]) -> str:
    """A Markdown table of :func:`top_paths`' result."""
    lines = ["| # | start | end | logic levels | delay (ns) | slack (ns) | nets |",
             "|---|---|---|---:|---:|---:|---|"]
    for i, p in enumerate(paths, 1):
        levels = f"{p.levels}" + (" (carry chain counted once)" if p.carry else "")
        nets = ", ".join(f"`{n}`" for n in p.nets[:8]) + (f", ... ({len(p.nets)} nets)" if len(p.nets) > 8 else "")
        lines.append(f"| {i} | `{p.start}` | `{p.end}` | {levels} | {p.delay_ns:.2f} | {p.slack_ns:+.2f} | {nets} |")
    return "\n".join(lines) + "\n"
