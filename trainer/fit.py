"""``acep train --fit``: a sketch's reserves fitted to budgets, over every device's stream.

The fit of docs/SHEDDING.md section 10 (:mod:`history.fit`) replays the training stream
under a budget, and a budget is one bucket per device: a device's stream cannot be cut
into time chunks like the history's pass 2, and two devices never share credit. So the
events are grouped by stream (``_stream``: the device of an archive, one stream for event
files), each Spark task replays whole streams with the tasks of :mod:`history.fit`, and the
driver sums their counts between the three steps. On event files the tables are those
``acep history build --fit`` chooses in one process on the same events.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import msgpack
import numpy as np

from history.fit import FitStream, fit_streams
from history.sketch import Sketch

__all__ = ["fit_on_spark"]


def fit_on_spark(good, plan, pattern, sketch: Sketch, ratios: Sequence[float], args: dict, *,
                 burst: float, min_visits: int = 50, search: int = 0) -> tuple[Sketch, dict]:
    """``history.fit.fit_streams`` over the good events of ``plan``, one stream per device.

    ``good``: the trainer's normalized rows (system columns and the pattern's attributes);
    ``args``: the matcher's keyword arguments for these rows (``trainer.train``).
    The tasks of one step (one per budget ratio) run as concurrent Spark jobs, so a few
    streams still fill the cores; each stream's unconstrained run, made by the first job,
    is shipped to the later ones instead of being made again.
    """
    context = good.sparkSession.sparkContext
    streams = (good.repartition(context.defaultParallelism, "_stream")
               .sortWithinPartitions("_stream", "_tag", "_pos").cache())
    truths: dict[str, bytes] = {}
    shipped = [context.broadcast(truths)]  # made again only when a job adds truths

    def map_streams(tasks):
        with ThreadPoolExecutor(len(tasks)) as pool:
            jobs = list(pool.map(lambda task: _job(streams, task, shipped[0], plan, pattern),
                                 tasks))
        made = {name: truth for _, new in jobs for name, truth in new.items()}
        if made:
            truths.update(made)
            shipped[0].destroy()
            shipped[0] = context.broadcast(dict(truths))
        return [results for results, _ in jobs]

    try:
        return fit_streams(sketch, ratios, map_streams, dict(args, on_bad_event="skip"),
                           burst=burst, min_visits=min_visits, search=search)
    finally:
        streams.unpersist()
        shipped[0].destroy()


def _job(streams, task, shipped, plan, pattern) -> tuple[list[dict], dict[str, bytes]]:
    """One Spark job: ``task`` over every stream; its results, and the truths it made."""
    from .train import _event_batch

    def run(batches):
        import pyarrow as pa

        batches = list(batches)
        if not batches:
            return
        table = pa.Table.from_batches(batches)
        names = table.column("_stream").to_numpy(zero_copy_only=False)
        cut = np.flatnonzero(names[1:] != names[:-1]) + 1
        for lo, hi in zip(np.r_[0, cut], np.r_[cut, len(names)]):
            name = str(names[lo])
            known = shipped.value.get(name)
            stream = FitStream(_event_batch(table.slice(int(lo), int(hi - lo)), plan, pattern),
                               None if known is None else msgpack.unpackb(known))
            result = _pack(task(stream))
            made = b"" if known is not None else msgpack.packb(stream.truth_state())
            yield pa.record_batch([pa.array([name]), pa.array([result], pa.binary()),
                                   pa.array([made], pa.binary())],
                                  names=["stream", "result", "truth"])

    rows = streams.mapInArrow(run, "stream string, result binary, truth binary").toArrow()
    made = {name: truth for name, truth in zip(rows.column("stream").to_pylist(),
                                               rows.column("truth").to_pylist()) if truth}
    return [_unpack(b) for b in rows.column("result").to_pylist()], made


def _pack(result: dict) -> bytes:
    """A task's counts (numbers and integer arrays) as msgpack, arrays as raw int64."""
    return msgpack.packb({name: [list(np.shape(v)), np.asarray(v, np.int64).tobytes()]
                          for name, v in result.items()})


def _unpack(data: bytes) -> dict:
    out = {}
    for name, (shape, raw) in msgpack.unpackb(data, raw=False).items():
        value = np.frombuffer(raw, dtype=np.int64).reshape(shape)
        out[name] = int(value) if not shape else value.copy()
    return out
