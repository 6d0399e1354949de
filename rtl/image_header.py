"""The image header words the kernel reads, located from ``spec.image``'s tables (nothing repeated)."""

from __future__ import annotations

import struct

from smartsage.spec import image as spec_image

__all__ = ["IMAGE_WORDS", "field_span"]


def field_span(fields, name) -> tuple[int, int]:
    """(byte offset, size) of the field ``name`` in a ``spec`` field table (name, code, offset, doc)."""
    for field, code, offset, _ in fields:
        if field == name:
            return offset, struct.calcsize("<" + code)
    raise KeyError(name)


def _image_words() -> dict[str, int]:
    """Byte offsets of the 64-bit header words the kernel reads (from spec.image's tables)."""
    section_entry = spec_image.SECTION_STRUCT.size
    section_offset_field = field_span(spec_image.SECTION_FIELDS, "offset")[0]
    kinds = list(spec_image.SectionKind)
    words = {
        "magic": field_span(spec_image.HEADER_FIELDS, "magic")[0],
        "version": field_span(spec_image.HEADER_FIELDS, "version")[0],
        "num_nodes": field_span(spec_image.HEADER_FIELDS, "num_nodes")[0],
        "index_dtype": field_span(spec_image.HEADER_FIELDS, "index_dtype")[0],
    }
    for kind in (spec_image.SectionKind.INDPTR, spec_image.SectionKind.INDICES, spec_image.SectionKind.FEATURES):
        words[kind.name.lower()] = (spec_image.SECTION_TABLE_OFFSET + kinds.index(kind) * section_entry
                                    + section_offset_field)
    return {name: offset & ~7 for name, offset in words.items()}


#: Header words read from storage: name -> byte offset of the enclosing 64-bit word.
IMAGE_WORDS = _image_words()
