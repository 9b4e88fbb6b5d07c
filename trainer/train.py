"""``acep train``: a history graph and a signed sketch from archives, on Spark.

The job reads rows as ``acep match`` does (:mod:`trainer.sources`), chunks them
(:mod:`trainer.chunks`), runs the traced, unconstrained matcher on each unit in the
executors (:mod:`history.pieces`), sums the pieces into the same
:class:`history.HistoryGraph` that ``build_history`` makes in one process, then builds,
fits (:mod:`trainer.fit`), signs and publishes the sketch. The steps are in
docs/DESIGN.md, "As built: the trainer"; the command is in docs/TRAINING.md, "Train
histories on Spark".
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import msgpack
import numpy as np

from acep import Pattern
from acep.events import EventBatch, EventSpec
from acep.pattern import partition_attribute
from acep.shedding import VectorBins
from history import pieces as P
from history.graph import HistoryGraph
from history.sketch import Sketch

from .chunks import ChunkPlan, choose_plan
from .outputs import absolute, check_outputs, replacing
from .publish import collector_tls, publish_sketch  # noqa: F401 - their old home
from .sources import (
    SYSTEM,
    ReadPlan,
    SourceError,
    arrow_schema,
    events_of,
    plan_archive,
    plan_files,
    read_task,
    task_groups,
    unreadable_files,
)
from .spark import progress, session

__all__ = ["PatternSpec", "TrainResult", "train", "publish_sketch", "events_dataframe",
           "unit_batches", "bins_of", "BAD"]

_EQUIVALENCE = re.compile(r"\s*\[\s*\w+\s*\]\s*")
BAD = 7  # piece rows of kind BAD carry a bad event met by the matcher (msgpack in `key`)


@dataclass(frozen=True)
class PatternSpec:
    """What to match: an ACEP pattern with its window, error bound, predicates, partition.

    Parameters
    ----------
    text : str
        The pattern (docs/CLI.md, Pattern language).
    window : float
        The window, in tag units.
    k : int
        The error bound.
    where : tuple of str
        Predicates between bound events.
    partition : str, optional
        The attribute to partition by.

    Examples
    --------
    >>> from trainer.train import PatternSpec
    >>> PatternSpec("late late+ verylate", window=7200, k=1, partition="origin")
    PatternSpec(text='late late+ verylate', window=7200, k=1, where=(), partition='origin')
    """

    text: str
    window: float
    k: int = 0
    where: tuple[str, ...] = ()
    partition: str | None = None

    @property
    def n_states(self) -> int:
        return Pattern.compile(self.text, list(self.where)).automaton.n_states

    @property
    def partition_by(self) -> str | None:
        """The partition attribute: ``partition``, else the equivalence test ``[attr]``."""
        return partition_attribute(self.where, self.partition)


@dataclass
class TrainResult:
    graph: HistoryGraph
    bins: VectorBins
    stats: dict = field(default_factory=dict)
    quarantined: list[dict] = field(default_factory=list)  # the first bad rows, for messages
    sketch: Sketch | None = None  # with ``fit``: the sketch with its fitted reserves
    skipped: list[dict] = field(default_factory=list)  # unreadable files (skip_bad_files)


# --------------------------------------------------------------------------- the job


def _check_source_options(archive: bool, spec: EventSpec | None, pattern_hash: str | None,
                          days: tuple[str | None, str | None]) -> None:
    """Refuse options that the source would ignore (``acep train`` refuses them too)."""
    if archive and spec is not None:
        raise ValueError("spec is for event files; the archive has its own columns")
    if not archive and (pattern_hash is not None or tuple(days) != (None, None)):
        raise ValueError("pattern_hash and days pick an archive's windows: they go with "
                         "archive=True")


def train(inputs: Sequence[str], pattern: PatternSpec | None = None, *,
          spec: EventSpec | None = None, archive: bool = False, pattern_id: str | None = None,
          pattern_hash: str | None = None, bins: VectorBins | None = None, n_bins: int = 8,
          master: str | None = None, cores: int | None = None, chunk: float | None = None,
          key_groups: int | None = None, quarantine: str | None = None,
          show_progress: bool = True, spark=None, fit: Sequence[float] = (),
          burst: float = 64.0, search: int = 0,
          days: tuple[str | None, str | None] = (None, None),
          skip_bad_files: bool = False, bins_from: HistoryGraph | None = None) -> TrainResult:
    """Train a history and its sketch on Spark, from event files or the collector's archive.

    What ``acep train`` runs (docs/TRAINING.md); the steps are in the module docstring.
    ``archive=True`` reads the
    collector's archive directory ``inputs[0]``; then ``pattern`` defaults to the archived
    one (``pattern_id`` and ``pattern_hash`` pick it, ``days`` = (since, before) the days
    read: :func:`trainer.sources.plan_archive`); ``pattern_hash`` and ``days`` without it,
    or ``spec`` with it, are a ValueError.
    ``quarantine``: a directory for the bad rows (Parquet), replaced even when there are
    none. Relative paths are taken in the current directory at the call. A file that cannot
    be read raises :class:`trainer.sources.SourceError` unless ``skip_bad_files``.
    ``bins_from``: a history whose bins to use (instead of ``bins`` or pass 1), refused
    unless built for the same pattern definition.
    ``fit``: budget ratios to fit the sketch's reserves to (docs/SHEDDING.md 10), for
    devices whose bucket holds ``burst`` events' worth of credit, tuning ``search`` cells
    per budget by coordinate search (``history.fit``, step 4); the result's ``sketch`` has
    them.

    Parameters
    ----------
    inputs : sequence of str
        Event files or object storage URIs; with ``archive=True``, the archive directory.
    pattern : PatternSpec, optional
        The pattern, window, k, predicates and partition (from an archive: its own).
    spec : acep.EventSpec, optional
        How the files' columns map to events (event files only).
    archive, pattern_id, pattern_hash, days
        Read the collector's archive, and which pattern definition and days of it.
    bins, n_bins, bins_from
        The match-vector bins: given, chosen in pass 1 (``n_bins`` per time) or another
        history's.
    master, cores, spark
        The Spark master, the local session's cores, or a session to use.
    chunk, key_groups
        The chunk length in tag units and the number of key groups (default: from the data).
    quarantine : str, optional
        A directory for the bad rows.
    show_progress : bool
        Show progress bars.
    fit, burst, search
        Budget ratios to fit reserves to, the devices' bucket in events, the search rounds.
    skip_bad_files : bool
        Skip files that cannot be read instead of failing.

    Returns
    -------
    TrainResult
        ``graph`` (the history), ``bins``, ``stats`` (events, chunks, bad rows, seconds),
        ``quarantined`` (the first bad rows), ``sketch`` (with ``fit``) and ``skipped``.

    Examples
    --------
    A local Spark session (Java 17) on ten events; it takes the JVM's start, about a minute
    on a busy machine:

    >>> import json, os, tempfile
    >>> from trainer.train import PatternSpec, train
    >>> path = os.path.join(tempfile.mkdtemp(), "events.jsonl")
    >>> with open(path, "w") as f:
    ...     for t, kind in enumerate("abcabxabcc"):
    ...         print(json.dumps({"type": kind, "t": t}), file=f)
    >>> result = train([path], PatternSpec("a b c", window=3, k=1), cores=1,
    ...                show_progress=False)
    >>> result.stats["events"], result.stats["bad_rows"], result.graph.n_bundles
    (10, 0, 1)
    """
    _check_source_options(archive, spec, pattern_hash, days)
    started = time.perf_counter()
    plan = plan_archive(inputs[0], pattern_id, pattern_hash, days, skip_bad_files) \
        if archive else plan_files(inputs, spec, skip_bad_files)
    check_outputs({"--quarantine": quarantine}, inputs[:1] if archive else inputs)
    quarantine = absolute(quarantine)  # the caller's directory, not the Spark JVM's
    pattern = pattern or _archived_pattern(plan)
    if bins_from is not None:
        bins = bins_of(bins_from, pattern)
    spark = spark or session(master, cores)
    stats: dict = {"read_tasks": len(plan.tasks)}
    with progress(spark, "reading", show_progress):
        rows = events_dataframe(spark, plan).cache()
        bad = rows.filter(rows._bad.isNotNull())
        good = rows.filter(rows._bad.isNull()).drop("_bad", "_source", "_line", "_field")
        if plan.is_archive:
            good = good.dropDuplicates(["_stream", "_pos"])
        from pyspark.sql import functions as F

        t_min, t_max, n_events = good.agg(F.min("_tag"), F.max("_tag"), F.count("_pos")) \
            .collect()[0]
        skipped = unreadable_files(rows, skip_bad_files)
    stats.update(events=int(n_events), bad_files=len({f["source"] for f in skipped}))
    if not n_events:
        raise ValueError("no good events to train on (see the quarantine)")
    cplan = choose_plan(t_min, t_max, pattern.window, before=0.0, after=pattern.window,
                        parallelism=spark.sparkContext.defaultParallelism, chunk=chunk,
                        key_groups=key_groups)
    stats.update(chunks=cplan.n_chunks, key_groups=cplan.key_groups, chunk_length=cplan.length)
    plan = _narrowed(plan, pattern)  # the matcher reads only these attributes
    good = good.select(*SYSTEM, *plan.attributes)
    units = unit_frame(good, cplan, _key_columns(plan, pattern)).cache()
    if bins is None:
        with progress(spark, "pass 1 (bins)", show_progress):
            counts = _run_units(units, plan, pattern, cplan, None)
            bins = _bins_from(counts, n_bins)
    with progress(spark, "pass 2 (history)", show_progress):
        pieces = _run_units(units, plan, pattern, cplan, bins).cache()
        graph = _assemble(pieces, pattern, bins)
        matcher_bad = _matcher_bad(pieces)
    fitted = None
    if fit:
        from .fit import fit_on_spark

        fit_started = time.perf_counter()
        with progress(spark, "fitting reserves", show_progress):
            fitted, stats["fit"] = fit_on_spark(good, plan, pattern, Sketch.from_graph(graph),
                                                fit, _matcher_args(plan, pattern), burst=burst,
                                                search=search)
        stats["fit_seconds"] = round(time.perf_counter() - fit_started, 3)
    quarantined = _quarantine(spark, bad, matcher_bad, quarantine)
    stats.update(bad_rows=quarantined["count"], seconds=round(time.perf_counter() - started, 3),
                 bundles=graph.n_bundles, visits=int(graph.visits.sum()))
    for df in (pieces, units, rows):
        df.unpersist()
    return TrainResult(graph, bins, stats, quarantined["first"], fitted, skipped)


def bins_of(history: HistoryGraph, pattern: PatternSpec) -> VectorBins:
    """The bins of ``history`` (``--bins-from``); :class:`trainer.sources.SourceError`
    naming what differs unless it was built for ``pattern``'s definition: bins of another
    window or pattern would cut this one's match vectors in meaningless places."""
    pairs = {"pattern": (history.pattern, pattern.text),
             "window": (float(history.window), float(pattern.window)),
             "k": (history.k, pattern.k), "where": (list(history.where), list(pattern.where))}
    if history.partition_recorded:
        pairs["partition"] = (history.partition_by, pattern.partition_by)
    differ = [f"{name} {theirs!r} (here {ours!r})" for name, (theirs, ours) in pairs.items()
              if theirs != ours]
    if differ:
        raise SourceError("--bins-from: the history was built for another definition: "
                          + ", ".join(differ))
    return history.bins()


def _archived_pattern(plan: ReadPlan) -> PatternSpec:
    if not plan.pattern:
        raise ValueError("give the pattern (--pattern, --window): event files carry none")
    p = plan.pattern
    return PatternSpec(p["text"], float(p["window"]), int(p["k"]), tuple(p.get("where", ())),
                       p.get("partition_by"))


def events_dataframe(spark, plan: ReadPlan):
    """The normalized rows of every read task (good and bad), one Spark task per group of
    read tasks (:func:`trainer.sources.task_groups`)."""
    schema = arrow_schema(plan)
    tasks = plan.tasks
    groups = task_groups(tasks, spark.sparkContext.defaultParallelism)

    def read(batches):
        for batch in batches:
            for g in batch.column(0).to_pylist():
                for i in groups[g]:
                    yield from read_task(tasks[i], plan).to_batches()

    ids = spark.range(0, len(groups), numPartitions=max(1, len(groups)))
    from pyspark.sql.pandas.types import from_arrow_schema

    return ids.mapInArrow(read, from_arrow_schema(schema))


def _narrowed(plan: ReadPlan, pattern: PatternSpec) -> ReadPlan:
    """The plan with only the attributes the pattern reads (predicates and partition)."""
    compiled = Pattern.compile(pattern.text, list(pattern.where))
    needed = set(compiled.predicates.columns) | {pattern.partition_by}
    return replace(plan, attributes={a: k for a, k in plan.attributes.items() if a in needed})


def _key_columns(plan: ReadPlan, pattern: PatternSpec) -> list[str]:
    cols = ["_stream"] if plan.is_archive else []
    return cols + ([pattern.partition_by] if pattern.partition_by else [])


def unit_frame(good, cplan: ChunkPlan, key_cols: list[str]):
    """Every event once per chunk that reads it, tagged with its (key group, chunk) unit
    and sorted by (unit, tag, stream position) within Spark partitions of whole units."""
    from pyspark.sql import functions as F

    if key_cols and cplan.key_groups > 1:
        group = F.pmod(F.hash(*[F.col(c) for c in key_cols]), F.lit(cplan.key_groups))
    else:
        group = F.lit(0)
    units = (good.withColumn("_chunk", F.explode(cplan.spark_chunks(F.col("_tag"))))
             .withColumn("_group", group.cast("int")))
    n = max(1, min(cplan.n_chunks * cplan.key_groups, 4 * units.sparkSession.sparkContext
                   .defaultParallelism))
    # range partitioning on the unit balances partitions by rows (hashing 8 units into 8
    # partitions often leaves some empty and puts 2-3 in another); a unit is never split
    units = units.withColumn("_unit", F.col("_group") * F.lit(cplan.n_chunks) + F.col("_chunk"))
    return (units.repartitionByRange(n, "_unit")
            .sortWithinPartitions("_group", "_chunk", "_tag", "_pos"))


def unit_batches(table, plan: ReadPlan, pattern: PatternSpec):
    """Split a sorted Arrow table of unit rows into (chunk, EventBatch, positions) per unit."""
    group = table.column("_group").to_numpy()
    chunk = table.column("_chunk").to_numpy()
    if not len(chunk):
        return
    cut = np.flatnonzero((np.diff(group) != 0) | (np.diff(chunk) != 0)) + 1
    for lo, hi in zip(np.r_[0, cut], np.r_[cut, len(chunk)]):
        part = table.slice(int(lo), int(hi - lo))
        yield int(chunk[lo]), _event_batch(part, plan, pattern), \
            part.column("_pos").to_numpy()


def _event_batch(table, plan: ReadPlan, pattern: PatternSpec) -> EventBatch:
    events = events_of(table, plan)
    if plan.is_archive:
        columns = events.columns
        stream = np.asarray(table.column("_stream").to_numpy(zero_copy_only=False), object)
        value = columns.get(pattern.partition_by) if pattern.partition_by else None
        columns["_key"] = stream if value is None else \
            np.array([f"{s}/{v}" for s, v in zip(stream, value)], dtype=object)
    return events


def _run_units(units, plan: ReadPlan, pattern: PatternSpec, cplan: ChunkPlan,
               bins: VectorBins | None):
    """Pass 1 (``bins`` None: value counts) or pass 2 (history pieces) over every unit."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import from_arrow_schema

    schema = P.piece_schema()
    common = {k: v for k, v in _matcher_args(plan, pattern).items()
              if k in ("where", "partition")}

    def run(batches):
        batches = list(batches)
        if not batches:
            return
        table = pa.Table.from_batches(batches)
        for c, events, pos in unit_batches(table, plan, pattern):
            bad: list = []
            owned = cplan.owned(c)
            if bins is None:
                out = P.bin_rows(pattern.text, events, pattern.window, pattern.k, owned,
                                 bad_events=bad, **common)
            else:
                out = P.piece_rows(pattern.text, events, pattern.window, pattern.k, bins,
                                   owned, bad_events=bad, **common)
            yield from out.to_batches()
            if bad:
                yield from _bad_rows(bad, events, pos, owned, schema).to_batches()

    return units.mapInArrow(run, from_arrow_schema(schema))


def _matcher_args(plan: ReadPlan, pattern: PatternSpec) -> dict:
    """The matcher's keyword arguments over the events of :func:`_event_batch`."""
    args = {"pattern": pattern.text, "window": pattern.window, "k": pattern.k}
    if plan.is_archive:  # the key joins device and partition value: drop a test [attr]
        return {**args, "where": [w for w in pattern.where if not _EQUIVALENCE.fullmatch(w)],
                "partition": "_key"}
    return {**args, "where": list(pattern.where), "partition": pattern.partition_by}


def _bad_rows(bad: list, events: EventBatch, pos: np.ndarray, owned, schema):
    """A bad event counts once: in the unit that owns its tag."""
    import pyarrow as pa

    keys, kept = [], 0
    for exc in bad:
        i = int(exc.position)
        if not owned[0] <= events.tags[i] < owned[1]:
            continue
        kept += 1
        keys.append(msgpack.packb({"pos": int(pos[i]), "field": exc.field,
                                   "reason": exc.message}))
    n = len(keys)
    return pa.table({"kind": pa.array([BAD] * n, pa.int8()), "key": pa.array(keys, pa.binary()),
                     "a": pa.array(np.zeros(n, np.int64)), "b": pa.array(np.zeros(n, np.int64)),
                     "x": pa.array(np.zeros(n)), "n": pa.array(np.ones(n, np.int64))},
                    schema=schema)


def _bins_from(counts, n_bins: int) -> VectorBins:
    summed = counts.filter(counts.kind.isin(P.REM, P.GAP)).groupBy("kind", "x").sum("n") \
        .toArrow()
    kind = summed.column("kind").to_numpy()
    x = summed.column("x").to_numpy()
    n = summed.column("sum(n)").to_numpy()
    return P.bins_from_counts((x[kind == P.REM], n[kind == P.REM]),
                              (x[kind == P.GAP], n[kind == P.GAP]), n_bins)


def _assemble(pieces, pattern: PatternSpec, bins: VectorBins) -> HistoryGraph:
    def col(t, name):
        return t.column(name).to_numpy(zero_copy_only=False)

    cells_t = pieces.filter(pieces.kind.isin(P.VISIT, P.SUCCESS)).groupBy("kind", "a") \
        .sum("n").toArrow()
    cells = {k: (col(cells_t, "a")[col(cells_t, "kind") == k],
                 col(cells_t, "sum(n)")[col(cells_t, "kind") == k]) for k in (P.VISIT, P.SUCCESS)}
    e = pieces.filter(pieces.kind == P.EDGE).groupBy("a", "b").sum("n").toArrow()
    pt = pieces.filter(pieces.kind == P.POINT).select("key", "x").distinct().toArrow()
    r = pieces.filter(pieces.kind == P.REACH).groupBy("key", "x", "a").sum("n").toArrow()
    return P.graph_from_parts(
        pattern.text, pattern.window, pattern.k, pattern.n_states, bins, where=pattern.where,
        cells=cells, edges=(col(e, "a"), col(e, "b"), col(e, "sum(n)")),
        points=(col(pt, "key"), col(pt, "x")),
        reach=(col(r, "key"), col(r, "x"), col(r, "a"), col(r, "sum(n)")),
        partition_by=pattern.partition_by)


def _matcher_bad(pieces) -> list[dict]:
    rows = pieces.filter(pieces.kind == BAD).select("key").toArrow()
    return [msgpack.unpackb(b, raw=False) for b in rows.column("key").to_pylist()]


def _quarantine(spark, bad, matcher_bad: list[dict], directory: str | None) -> dict:
    """Count the bad rows, write them (with their reason, and the unreadable files) under
    ``directory`` as Parquet, replacing an earlier quarantine even with none."""
    cols = ["_source", "_line", "_pos", "_field", "_bad"]
    reader_bad = bad.select(*cols).withColumnRenamed("_bad", "_reason")
    if matcher_bad:
        extra = spark.createDataFrame(
            [(None, None, d["pos"], d["field"], d["reason"]) for d in matcher_bad],
            "_source string, _line long, _pos long, _field string, _reason string")
        reader_bad = reader_bad.unionByName(extra)
    out = reader_bad.toDF("source", "line", "position", "field", "reason")
    rows = out.filter(out.position.isNotNull())  # a null position: a whole file
    count = rows.count()
    if directory:
        with replacing(directory) as staging:
            out.coalesce(1).write.mode("overwrite").parquet(staging)
    first = [r.asDict() for r in rows.limit(5).collect()] if count else []
    return {"count": int(count), "first": first}
