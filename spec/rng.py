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
    """Vectorized :func:`bounded`: values in [0, n) and the next draw index, elementwise."""
    nkeys = np.asarray(nkeys, np.uint32)
    n = np.asarray(n, np.uint64)
    index = np.asarray(index, np.uint64).copy()
    value = np.zeros(n.shape, np.uint64)
    pending = np.ones(n.shape, bool)
    while pending.any():
        sel = np.flatnonzero(pending)
        m = draw_np(nkeys[sel], index[sel]).astype(np.uint64) * n[sel]
        index[sel] += np.uint64(1)
        low = m & np.uint64(MASK32)
        reject = low < n[sel]
        if reject.any():
            rs = np.flatnonzero(reject)
            nr = n[sel][rs]
            threshold = (np.uint64(1 << 32) - nr) % nr
            reject[rs] = low[rs] < threshold
        accept = sel[~reject]
        value[accept] = m[~reject] >> np.uint64(32)
        pending[accept] = False
    return value, index
