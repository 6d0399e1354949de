"""Node data of generated graphs: class-conditional features, labels and the train/val/test split.

Every generator (R-MAT, Kronecker) assigns each node a class (its planted community); this module
turns classes into what a GraphSAGE model trains on. The construction (docs/graphs.md):

- class means ``mu_c ~ N(0, s^2 I_F)`` with ``s = snr / sqrt(2F)``, so two class means lie
  ``snr`` noise standard deviations apart in expectation;
- features ``x_v = mu_class(v) + eps_v``, ``eps_v ~ N(0, I_F)`` (each element a 16-bit uniform
  mapped through the normal quantile function, :func:`gaussian_table`), then stored as fp32, fp16, bf16
  (round to nearest even) or int8 (``clip(round(32 x), -127, 127)``);
- split: each node independently train / val / test / none with the given fractions.

A node's features and split depend only on (seed, node id, class), never on chunking: random
numbers come from one generator per block of :data:`NODE_BLOCK` consecutive nodes, seeded from
(seed, stream, block).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import numpy as np

from smartsage.spec.image import INT8_FEATURE_SCALE, FeatureDtype, Split, encode_features

from ..pipeline import prefetch  # re-exported: the generators prefetch their edge chunks

__all__ = ["NodeDataConfig", "NODE_BLOCK", "node_rng", "mix64", "class_means", "node_features",
           "split_codes", "write_node_data", "prefetch"]

#: Nodes per random-number block (features, split): the unit of determinism.
NODE_BLOCK = 1 << 16

# Streams of the seed sequence, so that no two uses of one seed share random numbers.
STREAM_MEANS = 1
STREAM_FEATURES = 2
STREAM_SPLIT = 3
STREAM_RMAT = 16
STREAM_KRONECKER = 17
STREAM_PERMUTATION = 18
STREAM_CLASSES = 19


def node_rng(seed: int, stream: int, block: int) -> np.random.Generator:
    """The generator of one (seed, stream, block)."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed & (2**64 - 1), stream, block])))


_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def mix64(values: np.ndarray, key: int) -> np.ndarray:
    """splitmix64's finalizer of ``values ^ key``: a bijective 64-bit hash, vectorized."""
    x = np.asarray(values, dtype=np.uint64) ^ np.uint64(key & (2**64 - 1))
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x ^= x >> np.uint64(27)
    x *= _M2
    x ^= x >> np.uint64(31)
    return x


@dataclasses.dataclass(frozen=True)
class NodeDataConfig:
    """Features, labels and split of a generated graph.

    Parameters
    ----------
    num_classes:
        C, the number of planted communities (labels 0..C-1).
    feature_dim, feature_dtype:
        F and the stored element type.
    feature_snr:
        Distance between two class means in noise standard deviations (expected). Around 1, a
        node's own features say little about its class and its neighbors' features much more.
    train, val, test:
        Fractions of nodes in each split (the rest: none).
    seed:
        Seed of the features and split (the generator's seed by default).
    """

    num_classes: int = 8
    feature_dim: int = 64
    feature_dtype: FeatureDtype = FeatureDtype.FP32
    feature_snr: float = 1.0
    train: float = 0.6
    val: float = 0.2
    test: float = 0.2
    seed: int = 0

    def __post_init__(self):
        object.__setattr__(self, "feature_dtype", FeatureDtype.parse(self.feature_dtype))
        if not isinstance(self.num_classes, int) or not 1 <= self.num_classes < 1 << 16:
            raise ValueError(f"Class count must be an integer in [1, 65536), not {self.num_classes!r}")
        if not isinstance(self.feature_dim, int) or not 0 <= self.feature_dim < 1 << 20:
            raise ValueError(f"Feature dimension must be an integer in [0, 2^20), not {self.feature_dim!r}")
        if not self.feature_snr >= 0:
            raise ValueError(f"Feature SNR must be non-negative, not {self.feature_snr!r}")
        fractions = (self.train, self.val, self.test)
        if any(not 0 <= f <= 1 for f in fractions) or sum(fractions) > 1 + 1e-9:
            raise ValueError(f"Split fractions must lie in [0, 1] and sum to at most 1, not "
                             f"{self.train}/{self.val}/{self.test}")


def class_means(config: NodeDataConfig) -> np.ndarray:
    """``(C, F)`` float32 class means."""
    rng = node_rng(config.seed, STREAM_MEANS, 0)
    scale = config.feature_snr / np.sqrt(2.0 * max(config.feature_dim, 1))
    return (rng.standard_normal((config.num_classes, config.feature_dim)) * scale).astype(np.float32)


@functools.cache
def gaussian_table() -> np.ndarray:
    """The 65536 equiprobable quantiles of N(0, 1): ``Phi^-1((i + 0.5) / 65536)`` as float32.

    A 16-bit uniform looked up in this table is a standard normal sample quantized to 65536 levels
    (tails cut at +-4.3 sigma): several times faster than a ziggurat, and plenty for features.
    """
    from scipy.special import ndtri

    return ndtri((np.arange(1 << 16) + 0.5) / (1 << 16)).astype(np.float32)


def node_features(config: NodeDataConfig, means: np.ndarray, block: int, classes: np.ndarray) -> np.ndarray:
    """float32 features of the nodes of one block (``classes`` of its nodes, in order)."""
    rng = node_rng(config.seed, STREAM_FEATURES, block)
    words = NODE_BLOCK * config.feature_dim
    uniforms = rng.bit_generator.random_raw((words + 3) // 4).view(np.uint16)[:words]
    noise = gaussian_table()[uniforms].reshape(NODE_BLOCK, config.feature_dim)[:len(classes)]
    noise += means[classes]
    return noise


def split_codes(config: NodeDataConfig, block: int, count: int) -> np.ndarray:
    """Split codes (u8) of the first ``count`` nodes of a block."""
    u = node_rng(config.seed, STREAM_SPLIT, block).random(NODE_BLOCK)[:count]
    codes = np.zeros(count, np.uint8)
    edges = np.cumsum([config.train, config.val, config.test])
    codes[u < edges[2]] = Split.TEST
    codes[u < edges[1]] = Split.VAL
    codes[u < edges[0]] = Split.TRAIN
    return codes


def write_node_data(writer, config: NodeDataConfig, num_nodes: int,
                    classes_of: Callable[[np.ndarray], np.ndarray], progress=None) -> None:
    """Write features, labels and split of nodes 0..N-1 through an ImageWriter, block by block.

    ``classes_of(nodes)`` gives the class (int64) of each node id of a uint64 array.
    """
    means = class_means(config)
    for block, start in enumerate(range(0, num_nodes, NODE_BLOCK)):
        end = min(start + NODE_BLOCK, num_nodes)
        classes = np.asarray(classes_of(np.arange(start, end, dtype=np.uint64)), dtype=np.int64)
        if config.feature_dim:
            features = node_features(config, means, block, classes)
            writer.write_features(start, encode_features(features, config.feature_dtype, INT8_FEATURE_SCALE))
        writer.write_labels(start, classes.astype(np.int32))
        writer.write_split(start, split_codes(config, block, end - start))
        if progress is not None:
            progress(end - start)


