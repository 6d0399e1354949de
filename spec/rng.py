"""Counter-based random numbers shared by every implementation (docs/spec.md, section 1).

A draw is a pure function of (seed, hop, node, draw index): any lane may sample any node in any
order, a node that appears twice in a frontier gets the same sample, and the host can reproduce any
device result. The mixing round is ``lowbias32`` (two xor-shift-multiply steps, 32-bit): two 32x32
multipliers per round in hardware, fully pipelinable.

Scalar functions take and return Python ints; the ``*_np`` functions are their vectorized numpy
forms (uint32/uint64 arrays) and are checked against the scalar ones bit for bit.
"""

from __future__ import annotations

import numpy as np

MASK32 = 0xFFFFFFFF
MIX_MUL1 = 0x7FEB352D
MIX_MUL2 = 0x846CA68B
SEED_SALT = 0x243F6A88
HOP_SALT = 0x85A308D3
NODE_SALT = 0x13198A2E
DRAW_SALT = 0x03707344


def mix32(x: int) -> int:
    """One lowbias32 round: a bijection on 32-bit words."""
    x &= MASK32
    x ^= x >> 16
    x = (x * MIX_MUL1) & MASK32
    x ^= x >> 15
    x = (x * MIX_MUL2) & MASK32
    x ^= x >> 16
    return x


def command_key(seed: int) -> int:
    """K = mix32(mix32(seed_lo ^ SEED_SALT) ^ seed_hi), once per command (seed is a u64)."""
    if not 0 <= seed < 1 << 64:
        raise ValueError(f"Seed must be an unsigned 64-bit integer, not {seed!r}")
    return mix32(mix32((seed & MASK32) ^ SEED_SALT) ^ (seed >> 32))


def hop_key(key: int, hop: int) -> int:
    """K_h = mix32(K ^ hop ^ HOP_SALT), once per hop."""
    return mix32(key ^ hop ^ HOP_SALT)


def node_key(hkey: int, node: int) -> int:
    """H_v = mix32(mix32(K_h ^ node_lo) ^ node_hi ^ NODE_SALT), once per (hop, node)."""
    return mix32(mix32(hkey ^ (node & MASK32)) ^ (node >> 32) ^ NODE_SALT)


def draw(nkey: int, index: int) -> int:
    """r = mix32(mix32(H_v ^ index) ^ DRAW_SALT), the index-th 32-bit draw of a node."""
    return mix32(mix32(nkey ^ (index & MASK32)) ^ DRAW_SALT)


def rand32(seed: int, hop: int, node: int, index: int) -> int:
    """The 32-bit draw for (seed, hop, node, draw index)."""
    return draw(node_key(hop_key(command_key(seed), hop), node), index)


def bounded(nkey: int, n: int, index: int) -> tuple[int, int]:
    """Uniform integer in [0, n) without bias (Lemire's multiply-shift with exact rejection).

    Consumes draws ``index, index+1, ...`` until one is accepted; returns (value, next index).
    ``m = r * n`` (64-bit); accept unless ``m mod 2^32 < (2^32 - n) mod n``. The threshold needs a
    remainder only when ``m mod 2^32 < n`` (probability n / 2^32), so hardware computes it on a rare
    slow path.
    """
    if not 1 <= n <= MASK32:
        raise ValueError(f"Range must be in [1, 2^32), not {n!r}")
    while True:
        m = draw(nkey, index) * n
        index += 1
        low = m & MASK32
        if low < n and low < ((1 << 32) - n) % n:
            continue
        return m >> 32, index


# ---------------------------------------------------------------- vectorized (numpy) forms

def mix32_np(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.uint32).copy()
    x ^= x >> np.uint32(16)
    x *= np.uint32(MIX_MUL1)
    x ^= x >> np.uint32(15)
    x *= np.uint32(MIX_MUL2)
    x ^= x >> np.uint32(16)
    return x


def node_key_np(hkey: int, nodes: np.ndarray) -> np.ndarray:
    nodes = np.asarray(nodes, dtype=np.uint64)
    lo = (nodes & np.uint64(MASK32)).astype(np.uint32)
    hi = (nodes >> np.uint64(32)).astype(np.uint32)
    return mix32_np(mix32_np(np.uint32(hkey) ^ lo) ^ hi ^ np.uint32(NODE_SALT))


def draw_np(nkeys: np.ndarray, index: np.ndarray) -> np.ndarray:
    index = np.asarray(index).astype(np.uint32)
    return mix32_np(mix32_np(np.asarray(nkeys, np.uint32) ^ index) ^ np.uint32(DRAW_SALT))


def bounded_np(nkeys: np.ndarray, n: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vectorized :func:`bounded` over 1-D arrays: values in [0, n) and the next draw index, elementwise.

    Every element takes one draw; only those whose low word falls below ``n`` (probability
    n / 2^32) compute the threshold, and only rejected ones draw again.
    """
    nkeys = np.asarray(nkeys, np.uint32)
    n = np.asarray(n, np.uint64)
    index = np.array(index, np.uint64)  # a copy
    value = np.empty(n.shape, np.uint64)
    pending = np.arange(n.size)
    while pending.size:
        nn = n[pending]
        m = draw_np(nkeys[pending], index[pending]).astype(np.uint64) * nn
        index[pending] += np.uint64(1)
        value[pending] = m >> np.uint64(32)
        low = m & np.uint64(MASK32)
        suspect = np.flatnonzero(low < nn)
        if suspect.size:
            ns = nn[suspect]
            suspect = suspect[low[suspect] < (np.uint64(1 << 32) - ns) % ns]
        pending = pending[suspect]
    return value, index


# ---------------------------------------------------------------- test vectors

def reference_vectors() -> dict:
    """The contents of ``tests/vectors/rng.json`` (``python -m smartsage.spec.rng --vectors``).

    Every implementation (golden, RTL, HLS) checks its RNG, bounded draws and Floyd sampling against
    these. Integers are plain JSON numbers (u64 values up to 2^64 - 1: parse them as integers, not
    doubles).
    """
    from .golden_scalar import floyd  # the sampling rule's scalar reference (imports this module)

    words = [0, 1, 2, 0x7FFFFFFF, 0x80000000, MASK32, 0x12345678, 0xDEADBEEF, 0x243F6A88, 0x9E3779B9]
    seeds = [0, 1, 42, MASK32, 1 << 32, 0x0123456789ABCDEF, (1 << 64) - 1]
    nodes = [0, 1, 17, 1_000_000, MASK32, 1 << 32, (1 << 40) + 5]
    keys = [command_key(s) for s in seeds]
    hkeys = [hop_key(keys[i % len(keys)], h) for i, h in enumerate([0, 1, 2, 3, 0, 3, 1])]
    nkeys = [node_key(hkeys[i % len(hkeys)], v) for i, v in enumerate(nodes)]
    out: dict = {
        "about": "Counter-based RNG of docs/spec.md section 1 and the sampling rule of section 2. "
                 "Generated by `python -m smartsage.spec.rng --vectors`; tests/test_rng.py checks it is current.",
        "constants": {"MIX_MUL1": MIX_MUL1, "MIX_MUL2": MIX_MUL2, "SEED_SALT": SEED_SALT,
                      "HOP_SALT": HOP_SALT, "NODE_SALT": NODE_SALT, "DRAW_SALT": DRAW_SALT},
        "mix32": [{"x": x, "out": mix32(x)} for x in words],
        "command_key": [{"seed": s, "out": k} for s, k in zip(seeds, keys, strict=True)],
        "hop_key": [{"key": keys[i % len(keys)], "hop": h, "out": hk}
                    for i, (h, hk) in enumerate(zip([0, 1, 2, 3, 0, 3, 1], hkeys, strict=True))],
        "node_key": [{"hop_key": hkeys[i % len(hkeys)], "node": v, "out": nk}
                     for i, (v, nk) in enumerate(zip(nodes, nkeys, strict=True))],
        "draw": [{"node_key": nk, "index": c, "out": draw(nk, c)}
                 for nk in nkeys[:3] for c in (0, 1, 2, 1023, MASK32)],
        "rand32": [{"seed": s, "hop": h, "node": v, "index": c, "out": rand32(s, h, v, c)}
                   for s, h, v, c in [(0, 0, 0, 0), (1, 2, 3, 4), ((1 << 64) - 1, 3, (1 << 40) + 5, 7),
                                      (0x0123456789ABCDEF, 1, 1_000_000, 25)]],
    }
    # Bounded draws: small ranges, a power of two, ranges near 2^32 and 2^31 + 1 (rejection about half
    # the time): each case lists the value and the next draw index; cases with rejections are included.
    bounded_cases = []
    for n in (1, 2, 3, 10, 1000, 1 << 20, (1 << 31) + 1, MASK32 - 2, MASK32):
        found = 0
        for i, nk in enumerate(nkeys + [mix32(j) for j in range(200)]):
            value, nxt = bounded(nk, n, i % 3)
            rejected = nxt - (i % 3) > 1
            if i < 2 or (rejected and found < 2):
                found += rejected
                bounded_cases.append({"node_key": nk, "n": n, "index": i % 3, "value": value,
                                      "next_index": nxt})
    out["bounded"] = bounded_cases
    # Floyd samples: positions in insertion order and the draws consumed, for d > k.
    floyd_cases = []
    for seed, hop, node, degree, fanout in [(0, 0, 0, 5, 2), (1, 0, 7, 30, 25), (42, 1, 12345, 100, 10),
                                            (7, 2, 99, 1_000_000, 10), (3, 3, (1 << 33) + 1, 40, 32),
                                            (9, 0, 5, MASK32, 16), (11, 1, 6, (1 << 31) + 3, 8)]:
        nk = node_key(hop_key(command_key(seed), hop), node)
        positions, draws = floyd(nk, degree, fanout)
        floyd_cases.append({"seed": seed, "hop": hop, "node": node, "degree": degree, "fanout": fanout,
                            "node_key": nk, "positions": positions, "draws": draws})
    out["floyd"] = floyd_cases
    return out


if __name__ == "__main__":
    import json
    import sys

    if sys.argv[1:] == ["--vectors"]:
        print(json.dumps(reference_vectors(), indent=1))
    else:
        sys.exit("usage: python -m smartsage.spec.rng --vectors > tests/vectors/rng.json")
