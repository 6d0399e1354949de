"""Shared test helpers: small graphs, an instrumented image and the reference CSR (not a test module)."""

from __future__ import annotations

import numpy as np

from smartsage.spec.image import FeatureDtype, GraphImage, write_image


def random_csr(gen: np.random.Generator, num_nodes: int, max_degree: int, isolated: float = 0.1):
    """CSR arrays with multi-edges, self loops and isolated nodes (degree 0)."""
    degree = gen.integers(0, max_degree + 1, num_nodes)
    degree[gen.random(num_nodes) < isolated] = 0
    indptr = np.zeros(num_nodes + 1, np.uint64)
    np.cumsum(degree, out=indptr[1:])
    indices = gen.integers(0, num_nodes, int(indptr[-1]))
    v = int(np.argmax(degree))
    if degree[v] >= 4:  # at least one self loop and one multi-edge
        lo = int(indptr[v])
        indices[lo] = v
        indices[lo + 1] = indices[lo + 2] = indices[lo + 3]
    return indptr, indices


def special_bits(gen, n, dtype: FeatureDtype) -> np.ndarray:
    """Raw element bits mixing ordinary values with +-0, subnormals, +-inf, NaNs and near-overflow values."""
    if dtype is FeatureDtype.INT8:
        return gen.integers(-128, 128, n).astype(np.int8)
    width, man = (32, 23) if dtype is FeatureDtype.FP32 else (16, 10 if dtype is FeatureDtype.FP16 else 7)
    exp_bits = width - 1 - man
    emax = (1 << exp_bits) - 1
    sign = gen.integers(0, 2, n).astype(np.uint64) << np.uint64(width - 1)
    mantissa = gen.integers(0, 1 << man, n).astype(np.uint64)
    kind = gen.integers(0, 10, n)
    exponent = np.where(kind < 4, gen.integers(emax // 2 - 4, emax // 2 + 5, n),     # ordinary, near 1
               np.where(kind == 4, 0,                                             # subnormal
               np.where(kind == 5, gen.integers(emax - 3, emax, n),               # near overflow
               np.where(kind == 6, emax,                                          # inf / NaN
               gen.integers(1, emax, n))))).astype(np.uint64)
    mantissa = np.where((kind == 6) & (gen.random(n) < 0.5), 0, mantissa)         # half of them inf
    mantissa = np.where((kind == 7) & (gen.random(n) < 0.5), 0, mantissa)
    bits = sign | (exponent << np.uint64(man)) | mantissa
    bits = np.where(kind == 8, sign, bits)                                         # +-0
    if dtype is FeatureDtype.FP32:
        return bits.astype(np.uint32).view(np.float32)
    raw = bits.astype(np.uint16)
    return raw.view(np.float16) if dtype is FeatureDtype.FP16 else raw


def open_image(path, indptr, indices, features=None, feature_dtype="fp32", **kw) -> GraphImage:
    write_image(path, indptr, indices, features, feature_dtype=feature_dtype, **kw)
    return GraphImage(path)


class CountingArray:
    """A section view that counts the elements each read returns and refuses whole-section loads."""

    def __init__(self, array: np.ndarray):
        self._array = array
        self.dtype = array.dtype
        self.shape = array.shape
        self.reads = 0

    def __getitem__(self, key):
        if isinstance(key, slice):
            start, stop, step = key.indices(self.shape[0])
            if (stop - start) // step > 4096:
                raise AssertionError(f"bulk read {key} of a section")
        out = self._array[key]
        self.reads += int(np.asarray(out).shape[0]) if np.ndim(out) and not isinstance(key, int | np.integer) \
            else 1
        return out

    def __len__(self):
        return self.shape[0]

    def __array__(self, *args, **kwargs):
        raise AssertionError("a whole section was converted to an array")


class CountingImage:
    """Wraps a GraphImage; its section views count reads (``reads()``)."""

    def __init__(self, image: GraphImage):
        self._image = image
        self.header = image.header
        self.buffer = image.buffer
        self.indptr = CountingArray(image.indptr)
        self.indices = CountingArray(image.indices)
        self.features = CountingArray(image.features)
        self.num_nodes = image.num_nodes
        self.feature_dim = image.feature_dim
        self.feature_dtype = image.feature_dtype

    def reads(self) -> dict[str, int]:
        return {"indptr": self.indptr.reads, "indices": self.indices.reads, "features": self.features.reads}


def reference_csr(src, dst, num_nodes, symmetrize=False, drop_self_loops=False, drop_duplicates=False):
    """The canonical CSR, the slow obvious way."""
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    if drop_self_loops:
        keep = src != dst
        src, dst = src[keep], dst[keep]
    if symmetrize:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    order = np.lexsort((dst, src))
    src, dst = src[order], dst[order]
    if drop_duplicates and len(src):
        keep = np.ones(len(src), bool)
        keep[1:] = (src[1:] != src[:-1]) | (dst[1:] != dst[:-1])
        src, dst = src[keep], dst[keep]
    indptr = np.zeros(num_nodes + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=num_nodes), out=indptr[1:])
    return indptr, dst
