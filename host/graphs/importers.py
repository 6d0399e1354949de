"""Import existing graphs into storage images (streamed through :class:`ImageWriter`).

Sources:

- text edge lists: ``src dst`` per line (whitespace separated; further columns such as weights are
  ignored; ``#`` and ``%`` start comments; blank lines skipped), read in chunks of lines;
- ``.npy`` / ``.npz`` with an ``edge_index`` array of shape ``(2, E)`` (a ``.npz`` holding one array,
  or the key ``edge_index``), or a binary edge list of shape ``(E, 2)`` (one ``src, dst`` pair per
  row; a ``(2, 2)`` array is read as ``(2, E)``), int32/int64 (or unsigned). A ``.npy`` file is
  streamed: read in chunks at its offsets (``pread``), never loaded or memory-mapped whole, so
  it may be far larger than memory and its pages never count toward the process's resident set;
- a scipy sparse matrix (row -> column; square) or a scipy ``.npz`` (``scipy.sparse.save_npz``);
- a PyG ``Data`` object (``edge_index``, and ``x``, ``y``, ``train_mask`` / ``val_mask`` /
  ``test_mask`` when present).

Node data comes from arrays or ``.npy`` files: features ``(N, F)``, labels ``(N,)`` (-1: unlabeled),
split ``(N,)`` codes 0 none / 1 train / 2 val / 3 test. Options: symmetrize, drop duplicate edges,
drop self loops, ``num_nodes`` (default: the node data's length, else the largest id + 1).

Feature dtype: by default the input's (fp16 and int8 kept, other numbers -> fp32, a PyG ``x`` in
torch bfloat16 -> bf16); float input stored as bf16 is rounded to nearest even; float input stored as
int8 is quantized symmetrically with scale ``127 / max|x|`` (computed in a first pass).
"""

from __future__ import annotations

import os
import pickle
import warnings
import zipfile
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from smartsage.spec.image import FeatureDtype, ImageHeader
from smartsage.spec.image_writer import DEFAULT_MEMORY_BUDGET, ImageWriter

__all__ = ["import_graph", "import_edge_list", "import_edge_index", "import_scipy", "import_pyg",
           "read_edge_list", "detect_format", "import_edges", "EDGE_LIST_CHUNK", "NpyEdges"]

#: Edges per chunk of an array source; bytes per block of a text edge list.
EDGE_LIST_CHUNK = 1 << 20
EDGE_LIST_CHUNK_BYTES = 8 << 20
FORMATS = ("edgelist", "npy", "npz", "scipy")


def read_edge_list(path: str | os.PathLike, chunk_bytes: int = EDGE_LIST_CHUNK_BYTES
                   ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Chunks ``(src, dst)`` (int64) of a text edge list, read in blocks of whole lines."""
    with open(path, "rb") as f:
        carry = b""
        line_no = 0
        while True:
            data = f.read(chunk_bytes)
            if data:
                block = carry + data
                cut = block.rfind(b"\n")
                if cut < 0:
                    carry = block
                    continue
                block, carry = block[:cut + 1], block[cut + 1:]
            else:
                block, carry = carry, b""
            if block:
                rows = _parse_block(block, path, line_no)
                line_no += block.count(b"\n")
                if len(rows):
                    yield rows[:, 0].copy(), rows[:, 1].copy()
            if not data:
                return


def _parse_block(block: bytes, path, first_line: int) -> np.ndarray:
    rows = _parse_plain(block)
    if rows is not None:
        return rows
    try:
        lines = block.decode("utf-8").splitlines()
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not a text edge list ({err.reason} at byte {err.start} of a block)") from None
    return _parse_lines(lines, path, first_line)


def _parse_plain(block: bytes) -> np.ndarray | None:
    """The fast path: exactly two integer tokens on every non-blank line, no comments. None if not."""
    if b"#" in block or b"%" in block:
        return None
    buf = np.frombuffer(block, np.uint8)
    space = buf <= 32
    starts = np.flatnonzero(~space[1:] & space[:-1]) + 1
    if buf.size and not space[0]:
        starts = np.concatenate([[0], starts])
    if starts.size == 0:
        return np.zeros((0, 2), np.int64)
    line_of = np.searchsorted(np.flatnonzero(buf == 10), starts)
    tokens_per_line = np.bincount(line_of)
    if (tokens_per_line[tokens_per_line > 0] != 2).any():
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            values = np.fromstring(block.decode("ascii"), dtype=np.int64, sep=" ")
        except (Warning, ValueError, UnicodeDecodeError):
            return None
    if values.size != starts.size:
        return None
    return values.reshape(-1, 2)


def _parse_lines(lines: list[str], path, first_line: int) -> np.ndarray:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "input contained no data": comments only
            rows = np.loadtxt(lines, dtype=np.int64, usecols=(0, 1), ndmin=2, comments=("#", "%"))
        return rows.reshape(-1, 2)
    except ValueError:
        for i, line in enumerate(lines):  # only on error: find the offending line for the message
            fields = line.split("#", 1)[0].split("%", 1)[0].split()
            if not fields:
                continue
            try:
                if len(fields) < 2:
                    raise ValueError
                int(fields[0])
                int(fields[1])
            except ValueError:
                raise ValueError(f"{path}:{first_line + i + 1}: expected 'src dst' node ids, got "
                                 f"{line.strip()[:60]!r}") from None
        raise


def _np_load(path, **kwargs):
    """``numpy.load`` with a file that is not a numpy file reported as one clear ValueError."""
    try:
        return np.load(path, **kwargs)
    except (EOFError, zipfile.BadZipFile, pickle.UnpicklingError, ValueError) as err:
        raise ValueError(f"{os.fspath(path)}: not a readable .npy/.npz file ({err})") from None


def detect_format(path: str | os.PathLike) -> str:
    """``edgelist``, ``npy``, ``npz`` (numpy edge_index) or ``scipy`` (scipy.sparse.save_npz)."""
    path = os.fspath(path)
    if path.endswith(".npy"):
        return "npy"
    if path.endswith(".npz"):
        with _np_load(path) as archive:
            return "scipy" if "format" in archive.files and "shape" in archive.files else "npz"
    return "edgelist"


def _load_edge_index(path: str | os.PathLike) -> np.ndarray:
    path = os.fspath(path)
    if path.endswith(".npy"):
        array = _np_load(path, mmap_mode="r")
    else:
        with _np_load(path) as archive:
            if "edge_index" in archive.files:
                array = archive["edge_index"]
            elif len(archive.files) == 1:
                array = archive[archive.files[0]]
            else:
                raise ValueError(f"{path}: no 'edge_index' array among {archive.files}")
    if array.ndim != 2 or array.shape[0] != 2:
        raise ValueError(f"{path}: edge_index must have shape (2, E), not {array.shape}")
    if array.dtype.kind not in "iu":
        raise ValueError(f"{path}: edge_index must hold integers, not {array.dtype}")
    return array


class NpyEdges:
    """A ``.npy`` edge array on disk, ``(2, E)`` or ``(E, 2)``, streamed in chunks of edges.

    Only the header is parsed up front; :meth:`chunks` reads each chunk's bytes at its offset
    (``os.pread``): memory is O(chunk), whatever the file's size.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        with open(self.path, "rb") as f:
            try:
                version = np.lib.format.read_magic(f)
                if version == (1, 0):
                    shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
                else:
                    shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            except (ValueError, OSError) as err:
                raise ValueError(f"{self.path}: not a readable .npy/.npz file ({err})") from None
            self.offset = f.tell()
        if dtype.kind not in "iu" or dtype.hasobject:
            raise ValueError(f"{self.path}: edge array must hold integers, not {dtype}")
        if len(shape) != 2 or 2 not in shape:
            raise ValueError(f"{self.path}: edge array must have shape (2, E) or (E, 2), not {shape}")
        self.dtype = dtype
        self.shape = tuple(int(d) for d in shape)
        self.fortran = bool(fortran)
        #: ``(2, E)`` layout (rows of sources and destinations), else ``(E, 2)`` (pairs)
        self.rows_layout = self.shape[0] == 2
        self.num_edges = self.shape[1] if self.rows_layout else self.shape[0]
        size = os.path.getsize(self.path)
        if self.offset + 2 * self.num_edges * dtype.itemsize > size:
            raise ValueError(f"{self.path}: file is shorter than its {self.shape} {dtype} array")
        # contiguous columns (src block, dst block) or interleaved pairs, whatever the header says
        self.planar = self.rows_layout != self.fortran

    def _read(self, fd: int, first: int, count: int) -> np.ndarray:
        itemsize = self.dtype.itemsize
        out = np.empty(count, self.dtype)
        view = memoryview(out.view(np.uint8))
        offset = self.offset + first * itemsize
        while len(view):
            got = os.preadv(fd, [view], offset)
            if got <= 0:
                raise ValueError(f"{self.path}: file ended early")
            view = view[got:]
            offset += got
        return out

    def chunks(self, chunk: int = EDGE_LIST_CHUNK) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        fd = os.open(self.path, os.O_RDONLY)
        try:
            e = self.num_edges
            for start in range(0, e, chunk):
                count = min(chunk, e - start)
                if self.planar:
                    yield self._read(fd, start, count), self._read(fd, e + start, count)
                else:
                    pairs = self._read(fd, 2 * start, 2 * count)
                    yield pairs[0::2].copy(), pairs[1::2].copy()
        finally:
            os.close(fd)


def _array_chunks(edge_index, chunk: int = EDGE_LIST_CHUNK) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    for start in range(0, edge_index.shape[1], chunk):
        block = np.asarray(edge_index[:, start:start + chunk])
        yield block[0], block[1]


def _load_node_array(value, name: str):
    if value is None:
        return None
    if isinstance(value, (str, os.PathLike)):
        path = os.fspath(value)
        if not path.endswith(".npy"):
            raise ValueError(f"{name} file must be a .npy array, not {path!r}")
        return _np_load(path, mmap_mode="r")
    if hasattr(value, "detach"):  # torch tensor
        return _torch_to_numpy(value)
    return np.asarray(value)


def _torch_to_numpy(tensor) -> np.ndarray:
    """A tensor's values as numpy (bfloat16 as float32: exact, and exactly bf16 again when stored)."""
    import torch

    tensor = tensor.detach().cpu()
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.float()
    return tensor.numpy()


def _input_feature_dtype(features: np.ndarray) -> FeatureDtype:
    if features.dtype == np.float16:
        return FeatureDtype.FP16
    if features.dtype == np.int8:
        return FeatureDtype.INT8
    if features.dtype.kind in "fiub":
        return FeatureDtype.FP32
    raise ValueError(f"Features must be numbers, not {features.dtype}")


def _feature_chunks(features: np.ndarray, rows: int) -> Iterator[tuple[int, np.ndarray]]:
    for start in range(0, features.shape[0], rows):
        yield start, np.asarray(features[start:start + rows])


def _int8_scale(features: np.ndarray, dtype: FeatureDtype, rows: int) -> float | None:
    """Symmetric quantization scale for float features stored as int8 (``127 / max|x|``)."""
    if dtype is not FeatureDtype.INT8 or features.dtype.kind in "iub":
        return None
    peak = 0.0
    for _, chunk in _feature_chunks(features, rows):
        if chunk.size:
            peak = max(peak, float(np.max(np.abs(chunk))))
    return 127.0 / peak if peak > 0 else 1.0


def import_edges(path, edges: Iterable[tuple[np.ndarray, np.ndarray]], *, num_nodes: int | None = None,
                 features=None, labels=None, split=None, num_classes: int | None = None,
                 feature_dtype: FeatureDtype | str | None = None, symmetrize: bool = False,
                 drop_duplicates: bool = False, drop_self_loops: bool = False,
                 memory_budget: int | str = DEFAULT_MEMORY_BUDGET, progress: bool = False, temp_dir=None,
                 expected_edges: int | None = None) -> tuple[ImageHeader, dict]:
    """Write an image from edge chunks and optional node data. Returns its header and the writer's stats."""
    features = _load_node_array(features, "features")
    labels = _load_node_array(labels, "labels")
    split = _load_node_array(split, "split")
    lengths = {name: len(a) for name, a in (("features", features), ("labels", labels), ("split", split))
               if a is not None}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"Node data lengths differ: {lengths}")
    if lengths:
        rows = next(iter(lengths.values()))
        if num_nodes is None:
            num_nodes = rows
        elif num_nodes != rows:
            raise ValueError(f"Node data has {rows} rows, the graph {num_nodes} nodes")
    if features is not None and features.ndim != 2:
        raise ValueError(f"Features must have shape (N, F), not {features.shape}")
    if labels is not None and labels.ndim != 1:
        raise ValueError(f"Labels must have shape (N,), not {labels.shape}")
    if split is not None and split.ndim != 1:
        raise ValueError(f"Split must have shape (N,), not {split.shape}")
    dtype = FeatureDtype.parse(feature_dtype) if feature_dtype is not None else (
        _input_feature_dtype(features) if features is not None else FeatureDtype.FP32)
    feature_dim = features.shape[1] if features is not None else 0
    row_bytes = max(feature_dim * 8, 1)
    rows_per_chunk = max(int(min(parse_budget(memory_budget) // 8, 64 << 20)) // row_bytes, 1)
    if features is not None:
        if dtype is FeatureDtype.BF16 and features.dtype == np.uint16:
            raise ValueError("uint16 features are ambiguous for bf16: pass float values")
        feature_rows, int8_scale = _feature_chunks(features, rows_per_chunk), _int8_scale(
            features, dtype, rows_per_chunk)
    else:
        feature_rows, int8_scale = iter(()), None
    with ImageWriter(path, num_nodes, feature_dim=feature_dim, feature_dtype=dtype, num_classes=num_classes,
                     symmetrize=symmetrize, drop_self_loops=drop_self_loops, drop_duplicates=drop_duplicates,
                     memory_budget=memory_budget, int8_scale=int8_scale, progress=progress, temp_dir=temp_dir,
                     expected_edges=expected_edges) as writer:
        if num_nodes is not None:
            for start, rows in feature_rows:
                writer.write_features(start, rows)
            for name, array, write in (("labels", labels, writer.write_labels),
                                       ("split", split, writer.write_split)):
                if array is None:
                    continue
                if name == "split" and array.dtype == bool:
                    raise ValueError("Split must hold codes 0..3, not booleans (pass masks to import_pyg)")
                for start in range(0, len(array), 1 << 22):
                    write(start, np.asarray(array[start:start + (1 << 22)]))
        for src, dst in edges:
            writer.add_edges(src, dst)
        header = writer.finalize()
    return header, writer.stats


def _edge_chunk(memory_budget) -> int:
    """Edges read per chunk of a streamed file: a small share of the budget."""
    return int(min(max(parse_budget(memory_budget) // 256, 1 << 12), EDGE_LIST_CHUNK))


def parse_budget(value) -> int:
    from smartsage.spec.image_writer import parse_size

    return parse_size(value)


def import_edge_list(source, path, **options) -> tuple[ImageHeader, dict]:
    """A text edge list -> image (see :func:`import_edges` for the options)."""
    return import_edges(path, read_edge_list(source), **options)


def import_edge_index(source, path, **options) -> tuple[ImageHeader, dict]:
    """An ``edge_index`` ``(2, E)`` array, or a ``.npy`` / ``.npz`` file holding one -> image.

    A ``.npy`` file may also hold ``(E, 2)`` pairs; it is streamed (:class:`NpyEdges`)."""
    if isinstance(source, (str, os.PathLike)) and os.fspath(source).endswith(".npy"):
        edges = NpyEdges(source)
        chunk = _edge_chunk(options.get("memory_budget", DEFAULT_MEMORY_BUDGET))
        return import_edges(path, edges.chunks(chunk), expected_edges=edges.num_edges, **options)
    array = _load_edge_index(source) if isinstance(source, (str, os.PathLike)) else _edge_index_array(source)
    return import_edges(path, _array_chunks(array), expected_edges=array.shape[1], **options)


def _edge_index_array(source) -> np.ndarray:
    array = _torch_to_numpy(source) if hasattr(source, "detach") else np.asarray(source)
    if array.ndim != 2 or array.shape[0] != 2 or array.dtype.kind not in "iu":
        raise ValueError(f"edge_index must be an integer array of shape (2, E), not {array.dtype} {array.shape}")
    return array


def import_scipy(matrix, path, **options) -> tuple[ImageHeader, dict]:
    """A square scipy sparse matrix (entry (i, j): edge i -> j; values ignored) or a ``save_npz`` file."""
    import scipy.sparse as sp

    if isinstance(matrix, (str, os.PathLike)):
        try:
            matrix = sp.load_npz(matrix)
        except (EOFError, zipfile.BadZipFile, KeyError, ValueError) as err:
            raise ValueError(f"{os.fspath(matrix)}: not a scipy sparse .npz file ({err})") from None
    if not sp.issparse(matrix):
        raise ValueError(f"Expected a scipy sparse matrix, not {type(matrix).__name__}")
    if matrix.shape[0] != matrix.shape[1]:
        raise ValueError(f"Adjacency matrix must be square, not {matrix.shape}")
    options.setdefault("num_nodes", matrix.shape[0])
    if options["num_nodes"] != matrix.shape[0]:
        raise ValueError(f"Matrix has {matrix.shape[0]} rows, the graph {options['num_nodes']} nodes")
    return import_edges(path, _sparse_chunks(matrix), expected_edges=matrix.nnz, **options)


def _sparse_chunks(matrix) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    import scipy.sparse as sp

    if sp.isspmatrix_csr(matrix) or getattr(matrix, "format", None) == "csr":
        indptr = np.asarray(matrix.indptr, np.int64)
        indices = matrix.indices
        rows_per_chunk = 1 << 16
        for start in range(0, matrix.shape[0], rows_per_chunk):
            end = min(start + rows_per_chunk, matrix.shape[0])
            lo, hi = int(indptr[start]), int(indptr[end])
            counts = np.diff(indptr[start:end + 1])
            yield np.repeat(np.arange(start, end, dtype=np.int64), counts), np.asarray(indices[lo:hi])
        return
    coo = matrix.tocoo()
    for start in range(0, coo.nnz, EDGE_LIST_CHUNK):
        yield np.asarray(coo.row[start:start + EDGE_LIST_CHUNK]), np.asarray(coo.col[start:start + EDGE_LIST_CHUNK])


def import_pyg(data: Any, path, **options) -> tuple[ImageHeader, dict]:
    """A PyG ``Data`` object -> image: ``edge_index``, ``x`` (features), ``y`` (labels) and the
    ``train_mask`` / ``val_mask`` / ``test_mask`` (split) it has. Keyword options override them."""
    edge_index = _edge_index_array(data.edge_index)
    options.setdefault("num_nodes", int(data.num_nodes))
    x = getattr(data, "x", None)
    if x is not None and "features" not in options:
        if str(getattr(x, "dtype", "")) == "torch.bfloat16":
            options.setdefault("feature_dtype", FeatureDtype.BF16)
        options["features"] = _torch_to_numpy(x) if hasattr(x, "detach") else np.asarray(x)
    if getattr(data, "y", None) is not None:
        y = _torch_to_numpy(data.y)
        if y.ndim == 2 and y.shape[1] == 1:
            y = y[:, 0]
        if y.ndim != 1 or y.dtype.kind not in "iu":
            raise ValueError(f"Data.y must hold one integer class per node, not {y.dtype} {y.shape}")
        options.setdefault("labels", y)
    masks = [getattr(data, f"{name}_mask", None) for name in ("train", "val", "test")]
    if any(m is not None for m in masks) and "split" not in options:
        split = np.zeros(options["num_nodes"], np.uint8)
        for code, mask in reversed(list(enumerate(masks, start=1))):
            if mask is not None:
                split[_torch_to_numpy(mask).astype(bool)] = code
        options["split"] = split
    return import_edges(path, _array_chunks(edge_index), expected_edges=edge_index.shape[1], **options)


def import_graph(source, path, *, format: str = "auto", **options) -> tuple[ImageHeader, dict]:
    """Import a file (format ``auto`` by suffix: ``.npy``, ``.npz``, else a text edge list) or an
    in-memory object (scipy sparse matrix, PyG ``Data``, ``(2, E)`` array)."""
    if not isinstance(source, (str, os.PathLike)):
        if hasattr(source, "edge_index"):
            return import_pyg(source, path, **options)
        try:
            import scipy.sparse as sp

            if sp.issparse(source):
                return import_scipy(source, path, **options)
        except ImportError:  # pragma: no cover
            pass
        return import_edge_index(source, path, **options)
    if not os.path.exists(source):
        raise FileNotFoundError(f"No such graph file: {os.fspath(source)!r}")
    kind = detect_format(source) if format == "auto" else format
    if kind == "edgelist":
        return import_edge_list(source, path, **options)
    if kind in ("npy", "npz"):
        return import_edge_index(source, path, **options)
    if kind == "scipy":
        return import_scipy(source, path, **options)
    raise ValueError(f"Graph format must be one of auto, {', '.join(FORMATS)}, not {format!r}")
