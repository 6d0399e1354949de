"""The storage image format: header, reader views, bf16/int8 encoding, verifier, one test per fault class."""

from __future__ import annotations

import dataclasses
import pathlib

import numpy as np
import pytest

from smartsage.spec import image as image_mod
from smartsage.spec.image import (
    HEADER_SIZE,
    PAGE_SIZE,
    FeatureDtype,
    GraphImage,
    ImageFormatError,
    ImageHeader,
    IndexDtype,
    SectionKind,
    Split,
    bf16_bits_to_float32,
    decode_features,
    encode_features,
    float32_to_bf16_bits,
    format_table_markdown,
    layout_sections,
    verify_image,
    write_image,
)
from smartsage.spec.image_faults import FAULTS, inject_fault

ROOT = pathlib.Path(__file__).resolve().parents[1]
SEED = 1234


def _random_csr(rng: np.random.Generator, num_nodes: int, num_edges: int):
    src = np.sort(rng.integers(0, num_nodes, num_edges))
    dst = rng.integers(0, num_nodes, num_edges)
    indptr = np.zeros(num_nodes + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=num_nodes), out=indptr[1:])
    return indptr, dst


@pytest.fixture(scope="module")
def sound_image(tmp_path_factory) -> pathlib.Path:
    """A small labeled image with features and a split, the base of every fault."""
    rng = np.random.default_rng(SEED)
    print(f"seed {SEED}")
    n = 300
    indptr, indices = _random_csr(rng, n, 2000)
    path = tmp_path_factory.mktemp("fmt") / "sound.img"
    write_image(path, indptr, indices, features=rng.standard_normal((n, 8)).astype(np.float32),
                labels=rng.integers(0, 5, n), num_classes=5, split=rng.integers(0, 4, n), flags=7)
    verify_image(path)
    return path


def test_docs_image_format_is_current():
    text = (ROOT / "docs" / "image-format.md").read_text(encoding="utf-8")
    assert text == format_table_markdown(), "regenerate: python -m smartsage.spec.image -o docs/image-format.md"


def test_module_main_writes_the_doc(tmp_path):
    out = tmp_path / "image-format.md"
    assert image_mod._main(["-o", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == format_table_markdown()


def test_header_pack_unpack_round_trip():
    layout = layout_sections(10, 33, 4, FeatureDtype.BF16, IndexDtype.U64)
    sections = tuple(image_mod.Section(kind, off, length, count, 0xDEAD0000 + int(kind))
                     for kind, (off, length, count) in layout.items())
    header = ImageHeader(10, 33, 4, FeatureDtype.BF16, IndexDtype.U64, 3, 5, 4, 3, 2, sections)
    page = header.pack()
    assert len(page) == HEADER_SIZE and page[:8] == b"SSAGEIMG"
    assert ImageHeader.unpack(page) == header
    for offset, _, _ in layout.values():
        assert offset % PAGE_SIZE == 0
    # the indices section comes last, so a streaming writer can lay out the rest before E is known
    assert layout[SectionKind.INDICES][0] == max(off for off, _, _ in layout.values())
    assert layout_sections(10, 0, 4, FeatureDtype.BF16, IndexDtype.U64)[SectionKind.INDICES][0] == \
        layout[SectionKind.INDICES][0]


@pytest.mark.parametrize("dtype", list(FeatureDtype))
@pytest.mark.parametrize("index_dtype", list(IndexDtype))
def test_round_trip_every_feature_dtype(tmp_path, dtype, index_dtype):
    rng = np.random.default_rng(SEED + int(dtype))
    n, f = 50, 6
    indptr, indices = _random_csr(rng, n, 400)
    values = rng.standard_normal((n, f)).astype(np.float32) * 3
    stored = encode_features(values, dtype, int8_scale=32.0)
    labels = rng.integers(-1, 3, n)
    split = rng.integers(0, 4, n)
    path = tmp_path / "g.img"
    header = write_image(path, indptr, indices, features=stored, feature_dtype=dtype, labels=labels,
                         split=split, index_dtype=index_dtype)
    assert header.num_classes == 3  # the largest label + 1
    summary = verify_image(path)
    assert summary["feature_dtype"] == dtype.cli_name and summary["index_dtype"] == index_dtype.name.lower()
    with GraphImage(path) as image:
        assert image.header == header
        assert image.indices.dtype == index_dtype.numpy_dtype
        np.testing.assert_array_equal(image.indptr, indptr)
        np.testing.assert_array_equal(image.indices, indices)
        np.testing.assert_array_equal(image.features, stored)
        np.testing.assert_array_equal(image.labels, labels)
        np.testing.assert_array_equal(image.split, split)
        assert not image.features.flags.writeable  # a view of the read-only map, no copy
        assert (header.num_train, header.num_val, header.num_test) == tuple(int((split == c).sum()) for c in (1, 2, 3))
        np.testing.assert_array_equal(image.split_nodes(Split.TEST), np.flatnonzero(split == 3))
        tensor = image.features_torch()
        decoded = decode_features(image.features, dtype)
        np.testing.assert_array_equal(tensor.float().numpy(), decoded)
        if dtype in (FeatureDtype.FP32, FeatureDtype.FP16, FeatureDtype.BF16):
            tolerance = {FeatureDtype.FP32: 0, FeatureDtype.FP16: 2e-3, FeatureDtype.BF16: 8e-3}[dtype]
            np.testing.assert_allclose(decoded, values, rtol=tolerance, atol=1e-6 if tolerance else 0)


def test_empty_graph_round_trip(tmp_path):
    path = tmp_path / "empty.img"
    write_image(path, np.zeros(1, np.int64), np.zeros(0, np.uint32))
    summary = verify_image(path)
    assert summary["num_nodes"] == 0 and summary["num_edges"] == 0


def test_bf16_rounds_to_nearest_even_like_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(SEED)
    values = np.concatenate([
        (rng.standard_normal(100_000) * 10.0 ** rng.integers(-30, 30, 100_000)).astype(np.float32),
        np.array([0.0, -0.0, np.inf, -np.inf, 3.4e38, -3.4e38, 1e-40, 1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8],
                 np.float32),
    ])
    bits = float32_to_bf16_bits(values)
    expected = torch.from_numpy(values).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    np.testing.assert_array_equal(bits, expected)
    # ties: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7 and goes to the even one (1.0)
    assert bf16_bits_to_float32(float32_to_bf16_bits(np.float32([1 + 2 ** -8])))[0] == 1.0
    assert bf16_bits_to_float32(float32_to_bf16_bits(np.float32([1 + 3 * 2 ** -8])))[0] == 1 + 2 ** -6
    nan = float32_to_bf16_bits(np.array([np.nan], np.float32))
    assert np.isnan(bf16_bits_to_float32(nan))[0]


def test_encode_features_int8_and_errors():
    q = encode_features(np.array([[0.0, 1.0, -1.0, 10.0, -10.0, 0.5]], np.float32), "int8", int8_scale=32)
    np.testing.assert_array_equal(q, [[0, 32, -32, 127, -127, 16]])
    with pytest.raises(ValueError, match="need a quantization scale"):
        encode_features(np.ones((1, 2), np.float32), "int8")
    with pytest.raises(ValueError, match="do not fit int8"):
        encode_features(np.array([[300]]), "int8")
    with pytest.raises(ValueError, match="Feature dtype must be one of"):
        encode_features(np.ones((1, 2)), "fp64")


def test_verify_progress_reaches_total(sound_image):
    seen = []
    verify_image(sound_image, progress=lambda done, total: seen.append((done, total)))
    assert seen[-1][0] == seen[-1][1] > 0
    assert all(a[0] <= b[0] for a, b in zip(seen, seen[1:], strict=False))


def test_every_fault_class_is_listed():
    required = {"bad_magic", "wrong_version", "truncated_section", "non_monotone_indptr", "index_out_of_range",
                "checksum_mismatch", "misaligned_section"}
    assert required <= set(FAULTS)


@pytest.mark.parametrize("fault", list(FAULTS))
def test_fault_raises_typed_error_naming_section(sound_image, tmp_path, fault):
    bad = tmp_path / f"{fault}.img"
    section, fragment = inject_fault(sound_image, fault, bad)
    with pytest.raises(ImageFormatError) as info:
        verify_image(bad)
    err = info.value
    assert err.section == section, str(err)
    assert fragment in str(err)
    assert str(err).startswith(f"section {section!r}: ")
    assert "\n" not in str(err)
    assert isinstance(err, ValueError)


def test_open_rejects_header_faults_before_reading_sections(sound_image, tmp_path):
    """GraphImage itself refuses an image whose header or section table is bad."""
    for fault in ("bad_magic", "wrong_version", "truncated_section", "misaligned_section"):
        bad = tmp_path / f"{fault}.img"
        section, fragment = inject_fault(sound_image, fault, bad)
        with pytest.raises(ImageFormatError, match=fragment):
            GraphImage(bad)


def test_tiny_file_is_truncated_header(tmp_path):
    path = tmp_path / "tiny.img"
    path.write_bytes(b"SSAGEIMG")
    with pytest.raises(ImageFormatError, match="truncated") as info:
        verify_image(path)
    assert info.value.section == "header"


def test_section_count_mismatch(sound_image, tmp_path):
    data = bytearray(sound_image.read_bytes())
    header = ImageHeader.unpack(data[:HEADER_SIZE])
    data[:HEADER_SIZE] = dataclasses.replace(header, num_edges=header.num_edges + 1).pack()
    bad = tmp_path / "count.img"
    bad.write_bytes(bytes(data))
    with pytest.raises(ImageFormatError, match="the header counts need") as info:
        verify_image(bad)
    assert info.value.section == "indices"
