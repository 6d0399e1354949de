"""Exact aggregation (docs/spec.md section 4): the vectorized fold against the scalar reference, bit for
bit, for fp32/fp16/bf16/int8 with signed zeros, subnormals, infinities and NaNs."""

import struct

import numpy as np
import pytest
from golden_graphs import open_image, random_csr, special_bits

from smartsage.spec import golden
from smartsage.spec.config import KernelConfig
from smartsage.spec.golden_scalar import aggregate_scalar, f32_add, sample_scalar, widen_bits
from smartsage.spec.image import FeatureDtype

WIDE = KernelConfig(name="wide", max_fanout=1024)


def test_scalar_f32_add_equals_hardware_binary32():
    """The rational reference and numpy's float32 add agree, subnormals included (no flush to zero)."""
    gen = np.random.default_rng(1)
    a = special_bits(gen, 20_000, FeatureDtype.FP32)
    b = np.concatenate([special_bits(gen, 10_000, FeatureDtype.FP32), -a[:10_000]])   # exact cancellations
    with np.errstate(all="ignore"):
        total = a + b
    bits = total.view(np.uint32).copy()
    bits[np.isnan(total)] = golden.CANONICAL_NAN
    reference = [f32_add(int(x), int(y)) for x, y in zip(a.view(np.uint32), b.view(np.uint32), strict=True)]
    assert bits.tolist() == reference
    tiny = np.array([1e-45], np.float32)                 # smallest subnormal
    assert (tiny + tiny)[0] == np.float32(2.8e-45) and f32_add(1, 1) == 2


def test_f32_add_corner_cases():
    neg0, pos0, inf, ninf = 0x80000000, 0, 0x7F800000, 0xFF800000
    one = struct.unpack("<I", struct.pack("<f", 1.0))[0]
    minus_one = one | 0x80000000
    assert f32_add(neg0, neg0) == neg0 and f32_add(neg0, pos0) == pos0 and f32_add(one, minus_one) == pos0
    assert f32_add(inf, ninf) == golden.CANONICAL_NAN and f32_add(inf, one) == inf
    assert f32_add(0x7F7FFFFF, 0x7F7FFFFF) == inf                 # overflow rounds to infinity
    assert f32_add(0x7FA00001, one) == golden.CANONICAL_NAN       # a signalling NaN payload is not kept
    assert f32_add(one, 0x33800000) == one                        # 1 + 2^-24: tie, to even
    assert f32_add(one, 0x33800001) == one + 1                    # just above the tie


def test_fp16_and_bf16_widening_is_exact():
    every = np.arange(1 << 16, dtype=np.uint16)
    widened = golden.widen_to_fp32(every.view(np.float16), FeatureDtype.FP16).view(np.uint32)
    nan = np.isnan(every.view(np.float16))
    assert [widen_bits(int(x), FeatureDtype.FP16) for x in every[~nan]] == widened[~nan].tolist()
    assert np.isnan(widened.view(np.float32)[nan]).all()
    bf = golden.widen_to_fp32(every, FeatureDtype.BF16).view(np.uint32)
    assert bf.tolist() == [int(x) << 16 for x in every]


def test_left_fold_order_not_pairwise():
    """The fold is ((x0 + x1) + x2) + ...: differs from np.sum and from any other order here."""
    column = np.array([1e8, 1, -1e8, 1, 1, 1, 1, 1, 1, 1, 1], np.float32)
    rows = column[:, None]
    got = golden.aggregate_rows(rows, [column.size], FeatureDtype.FP32)[0, 0]
    acc = np.float32(column[0])
    for x in column[1:]:
        acc = np.float32(acc + x)
    assert got == acc == np.float32(8.0)   # 1e8 + 1 rounds back to 1e8
    assert np.sum(column) != got   # numpy's pairwise sum gives 7
    bits = aggregate_scalar([[int(x)] for x in column.view(np.uint32)], FeatureDtype.FP32, 1)
    assert bits == [int(np.float32(8.0).view(np.uint32))]


def test_signed_zero_and_empty_sums():
    rows = np.array([[-0.0, -0.0, 0.0], [-0.0, 0.0, -0.0], [-0.0, 1.0, 2.0]], np.float32)
    out = golden.aggregate_rows(rows, [1, 2, 0], FeatureDtype.FP32)
    assert out.view(np.uint32).tolist() == [[0x80000000, 0x80000000, 0], [0x80000000, 0x3F800000, 0x40000000],
                                            [0, 0, 0]]
    nan = golden.aggregate_rows(np.array([[np.inf], [-np.inf], [np.nan]], np.float32), [2, 1], FeatureDtype.FP32)
    assert nan.view(np.uint32).ravel().tolist() == [golden.CANONICAL_NAN] * 2


@pytest.mark.parametrize("dtype", list(FeatureDtype))
def test_aggregation_bit_exact_against_scalar(tmp_path, dtype):
    gen = np.random.default_rng(int(dtype))
    num_nodes, dim = 60, 6
    indptr, indices = random_csr(gen, num_nodes, 12, isolated=0.15)
    features = special_bits(gen, num_nodes * dim, dtype).reshape(num_nodes, dim)
    with open_image(tmp_path / "g.img", indptr, indices, features, feature_dtype=dtype) as image:
        for fanouts, seed in [([3], 1), ([2, 5], 2), ([20, 1, 12], 3)]:
            targets = gen.integers(0, num_nodes, 7)
            a = golden.sample(image, targets, fanouts, seed, aggregate=True, config=WIDE)
            b = sample_scalar(image, targets, fanouts, seed, aggregate=True, config=WIDE)
            assert a.ok and a.header == b.header
            assert a.self_rows.dtype == image.features.dtype and (a.self_rows.view(np.uint8) ==
                                                                  b.self_rows.view(np.uint8)).all()
            expected_dtype = np.int32 if dtype is FeatureDtype.INT8 else np.float32
            assert a.sums.dtype == b.sums.dtype == expected_dtype
            assert (a.sums.view(np.uint32) == b.sums.view(np.uint32)).all()
            if dtype is not FeatureDtype.INT8:
                sums = a.sums.view(np.uint32)
                nans = np.isnan(a.sums)
                assert (sums[nans] == golden.CANONICAL_NAN).all()
            if dtype is FeatureDtype.INT8 and fanouts == [20, 1, 12]:
                frontiers = golden.hop_frontiers(a.node_list, a.counts, targets.size, fanouts)
                last = frontiers[-2]
                assert a.sums.shape == (last.size, dim)
                assert (a.self_rows == features[last.astype(np.int64)]).all()


def test_aggregate_sums_of_star_in_position_order(tmp_path):
    """Fanout >= degree: all neighbors in position order, so the sum is the plain left fold of the rows."""
    rows = np.array([[1e30, 1e-45], [-1e30, 3e-45], [1.0, 5e-39], [5e-39, -1e-45]], np.float32)   # subnormals
    features = np.vstack([np.zeros((1, 2), np.float32), rows])
    indptr = np.array([0, 4, 4, 4, 4, 4], np.uint64)
    with open_image(tmp_path / "s.img", indptr, np.array([1, 2, 3, 4]), features) as image:
        result = golden.sample(image, [0], [8], 0, aggregate=True)
    expected = rows[0].copy()
    for r in rows[1:]:
        expected = expected + r
    assert result.counts.tolist() == [4]
    assert result.sums.view(np.uint32).tolist() == [expected.view(np.uint32).tolist()]
    assert 0 < result.sums[0, 1] < 1.2e-38 and result.sums[0, 0] == 1   # a subnormal sum survived


def test_flush_to_zero_is_refused():
    """If something (here torch) sets FTZ/DAZ, the golden sums would lose subnormals: it raises instead."""
    torch = pytest.importorskip("torch")
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU has no flush-denormal mode")
    try:
        with pytest.raises(RuntimeError, match="flush subnormals"):
            golden.aggregate_rows(np.ones((2, 2), np.float32), [2], FeatureDtype.FP32)
    finally:
        torch.set_flush_denormal(False)
    assert golden.aggregate_rows(np.ones((2, 2), np.float32), [2], FeatureDtype.FP32).tolist() == [[2.0, 2.0]]
