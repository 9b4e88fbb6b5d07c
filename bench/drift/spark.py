"""The retrained row through the fleet's own path: the agent's upload batch
(``edge.wire.batch_from_matches``, with the agent's sample), the collector's ingest into a
real archive (``Collector.ingest_group``, as ``bench/archive`` does) and
``trainer.train(archive=True)`` on a local Spark session, fitted at the device's budget
(``search=0``)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from acep.events import EventBatch
from acep.matcher import MatchBatch
from acep.shedding import Budget
from acep.windows import sample_mask

from ..shedding.run import BURST
from ..shedding.workloads import Workload
from .run import SAMPLE_SEED, SAMPLE_SHARE, upload_ratio, uploaded

DEVICE = "drift-device"


class SparkTrainer:
    """A ``run_retrained`` trainer: each period's uploads archived apart and trained on."""

    def __init__(self, cores: int = 2, share: float = SAMPLE_SHARE):
        from trainer.spark import session

        self.spark = session(f"local[{cores}]")
        self.seq, self.share = 0, share

    def __call__(self, w: Workload, period: EventBatch, found: MatchBatch, budget: Budget,
                 sketch) -> tuple:
        started = time.perf_counter()
        uploads, facts = uploaded(w, period, found, self.share)
        ratio = upload_ratio(w, uploads, budget)
        facts.update(fit_ratio=ratio, path="spark")
        if ratio is None:
            return sketch, {**facts, "kept": True, "seconds": 0.0}
        with tempfile.TemporaryDirectory(prefix="acep-bench-drift-") as tmp:
            root = self.archive(Path(tmp), w, period, found)
            trained = self.train(root, ratio)
        facts["archived_events"] = trained.stats["events"]
        return trained.sketch, {**facts, "kept": False,
                                "seconds": time.perf_counter() - started}

    def archive(self, work: Path, w: Workload, period: EventBatch, found: MatchBatch) -> Path:
        """The period's upload batch through the collector's ingest: its archive's root."""
        self.seq += 1
        return archive_uploads(work, w, period, found, self.share, self.seq - 1)

    def train(self, root: Path, ratio: float):
        from trainer.train import train

        return train([str(root)], archive=True, spark=self.spark, show_progress=False,
                     fit=[ratio], burst=BURST, search=0)

    def close(self) -> None:
        self.spark.stop()


def archive_uploads(work: Path, w: Workload, period: EventBatch, found: MatchBatch,
                    share: float = SAMPLE_SHARE, seq: int = 0) -> Path:
    """The agent's upload batch of ``period`` (its matches' windows and its sample) through
    a fresh collector's ingest under ``work``: the root of the archive it wrote."""
    from edge.collector import Collector
    from edge.collector.archive import Archive
    from edge.collector.store import open_store
    from edge.wire import PatternRef, batch_from_matches, encode_batch

    ref = PatternRef("drift", w.pattern, w.window, w.k, tuple(w.where), w.partition)
    sample = sample_mask(period, w.partition, w.window, share, SAMPLE_SEED) if share else None
    batch = batch_from_matches(found, period, device=DEVICE, seq=seq, pattern=ref,
                               created_at=time.time(), sample=sample)
    collector = Collector(open_store(work / "collector.db"), Archive(work / "archive"))
    try:
        [(status, answer)] = collector.ingest_group([(encode_batch(batch), DEVICE, None)])
    finally:
        collector.close()
    if status != 200:
        raise RuntimeError(f"the collector refused the upload: {answer}")
    return work / "archive"
