"""Fault injection for storage images: one corrupted copy per class of fault.

Each fault breaks exactly one invariant. Where the fault is structural, the affected checksums are
recomputed ("resealed"), so the verifier reports that fault and not a checksum mismatch. The
tests of the verifier and of ``smartsage graph verify`` use these, and so can any consumer of
images (the golden model's and the kernel's ``BAD_IMAGE`` path).

    section, fragment = inject_fault("good.img", "non_monotone_indptr", "bad.img")
    # verify_image("bad.img") raises ImageFormatError with .section == section and fragment in str(err)
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import struct
import zlib

import numpy as np

from .image import HEADER_FIELDS, HEADER_SIZE, ImageHeader, SectionKind

__all__ = ["FAULTS", "inject_fault"]

#: Fault classes: name -> what it does.
FAULTS = {
    "bad_magic": "the magic bytes are wrong",
    "wrong_version": "the format version is one this reader does not know",
    "header_checksum": "a header byte changed, its CRC-32 not updated",
    "unknown_feature_dtype": "the feature dtype code is not one of the known codes",
    "unknown_flags": "a flag bit no version defines is set",
    "truncated_section": "the file ends inside the indices section",
    "misaligned_section": "the labels section does not start on a page boundary",
    "overlapping_sections": "the split section starts inside the labels section",
    "non_monotone_indptr": "indptr decreases at one node",
    "index_out_of_range": "an index names a node past the node count",
    "label_out_of_range": "a label is not in [-1, num_classes)",
    "bad_split_code": "a split code is not 0..3",
    "split_count_mismatch": "the header's train count differs from the split section",
    "checksum_mismatch": "a data byte changed, the section's CRC-32 not updated",
}

_FIELD_OFFSETS = {name: (code, offset) for name, code, offset, _ in HEADER_FIELDS}


def _set_field(page: bytearray, name: str, value: int) -> None:
    code, offset = _FIELD_OFFSETS[name]
    struct.pack_into("<" + code, page, offset, value)


def _seal_header(page: bytearray) -> None:
    struct.pack_into("<I", page, _FIELD_OFFSETS["header_crc32"][1], 0)
    struct.pack_into("<I", page, _FIELD_OFFSETS["header_crc32"][1], zlib.crc32(bytes(page[:HEADER_SIZE])))


def _write_header(data: bytearray, header: ImageHeader) -> None:
    data[:HEADER_SIZE] = header.pack()


def _reseal(data: bytearray, header: ImageHeader, kind: SectionKind) -> None:
    """Recompute one section's CRC-32 and the header's."""
    section = header.section(kind)
    crc = zlib.crc32(bytes(data[section.offset:section.offset + section.length]))
    sections = tuple(dataclasses.replace(s, crc32=crc) if s.kind == kind else s for s in header.sections)
    _write_header(data, dataclasses.replace(header, sections=sections))


def _array(data: bytearray, header: ImageHeader, kind: SectionKind, dtype) -> np.ndarray:
    section = header.section(kind)
    return np.frombuffer(memoryview(data)[section.offset:section.offset + section.length], dtype=dtype)


def inject_fault(source: str | os.PathLike, fault: str, target: str | os.PathLike) -> tuple[str, str]:
    """Write a copy of the (sound, small) image ``source`` to ``target`` with ``fault`` injected.

    Returns ``(section, fragment)``: the section the verifier must name and a fragment of its message.
    Needs an image with at least one node with edges, labels and a split (as generated graphs have).
    """
    if fault not in FAULTS:
        raise ValueError(f"Fault must be one of {', '.join(FAULTS)}, not {fault!r}")
    shutil.copyfile(source, target)
    with open(target, "rb") as f:
        data = bytearray(f.read())
    header = ImageHeader.unpack(data[:HEADER_SIZE])
    n, e = header.num_nodes, header.num_edges
    result: tuple[str, str]
    truncate_to = None

    if fault == "bad_magic":
        data[0:8] = b"NOTANIMG"
        result = ("header", "bad magic")
    elif fault == "wrong_version":
        page = bytearray(data[:HEADER_SIZE])
        _set_field(page, "version", 99)
        _seal_header(page)
        data[:HEADER_SIZE] = page
        result = ("header", "unsupported version 99")
    elif fault == "header_checksum":
        data[HEADER_SIZE - 1] ^= 0xFF  # padding of the header page, covered by its CRC
        result = ("header", "checksum mismatch")
    elif fault == "unknown_feature_dtype":
        page = bytearray(data[:HEADER_SIZE])
        _set_field(page, "feature_dtype", 9)
        _seal_header(page)
        data[:HEADER_SIZE] = page
        result = ("header", "unknown feature dtype code 9")
    elif fault == "unknown_flags":
        _write_header(data, dataclasses.replace(header, flags=header.flags | 0x80))
        result = ("header", "unknown flag bits 0x80")
    elif fault == "truncated_section":
        if e == 0:
            raise ValueError("truncated_section needs an image with edges")
        indices = header.section(SectionKind.INDICES)
        truncate_to = indices.offset + indices.length - 1
        result = ("indices", "truncated")
    elif fault == "misaligned_section":
        sections = tuple(dataclasses.replace(s, offset=s.offset + 8) if s.kind == SectionKind.LABELS else s
                         for s in header.sections)
        _write_header(data, dataclasses.replace(header, sections=sections))
        result = ("labels", "is not aligned")
    elif fault == "overlapping_sections":
        labels = header.section(SectionKind.LABELS)
        sections = tuple(dataclasses.replace(s, offset=labels.offset) if s.kind == SectionKind.SPLIT else s
                         for s in header.sections)
        _write_header(data, dataclasses.replace(header, sections=sections))
        result = ("split", "overlaps section 'labels'")
    elif fault == "non_monotone_indptr":
        indptr = _array(data, header, SectionKind.INDPTR, "<u8").copy()
        candidates = np.flatnonzero(indptr[2:] < e)  # node i = candidate + 1: indptr[i + 1] < E
        if candidates.size == 0:
            raise ValueError("non_monotone_indptr needs a node whose list ends before the last edge")
        node = int(candidates[0]) + 1
        indptr[node] = indptr[node + 1] + 1
        section = header.section(SectionKind.INDPTR)
        data[section.offset:section.offset + section.length] = indptr.tobytes()
        _reseal(data, header, SectionKind.INDPTR)
        result = ("indptr", f"not monotone at node {node}")
    elif fault == "index_out_of_range":
        if e == 0:
            raise ValueError("index_out_of_range needs an image with edges")
        indices = _array(data, header, SectionKind.INDICES, header.index_dtype.numpy_dtype)
        position = e // 2
        section = header.section(SectionKind.INDICES)
        start = section.offset + position * header.index_dtype.itemsize
        data[start:start + header.index_dtype.itemsize] = np.array([n], indices.dtype).tobytes()
        _reseal(data, header, SectionKind.INDICES)
        result = ("indices", f"entry {position} is node {n}, out of range")
    elif fault == "label_out_of_range":
        section = header.section(SectionKind.LABELS)
        data[section.offset:section.offset + 4] = np.array([header.num_classes], "<i4").tobytes()
        _reseal(data, header, SectionKind.LABELS)
        result = ("labels", f"node 0 has label {header.num_classes}")
    elif fault == "bad_split_code":
        section = header.section(SectionKind.SPLIT)
        data[section.offset] = 7
        _reseal(data, header, SectionKind.SPLIT)
        result = ("split", "node 0 has split code 7")
    elif fault == "split_count_mismatch":
        changed = header.num_train - 1 if header.num_train else header.num_train + 1
        _write_header(data, dataclasses.replace(header, num_train=changed))
        result = ("split", "the header says")
    else:  # checksum_mismatch
        if not header.feature_dim or not n:
            raise ValueError("checksum_mismatch needs an image with features")
        section = header.section(SectionKind.FEATURES)
        data[section.offset + section.length // 2] ^= 0x01
        result = ("features", "checksum mismatch")

    with open(target, "wb") as f:
        f.write(data if truncate_to is None else data[:truncate_to])
    return result
