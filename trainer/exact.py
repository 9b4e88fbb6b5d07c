"""``acep exact-batch``: the exact NFA^b engine (:mod:`acep.nfab`) over archives on Spark.

::

    acep exact-batch rising.sase flights.parquet --spec flights --out matches/
    acep exact-batch rising.sase /srv/acep/archive --archive --pattern-id rising --out m/

Rows are read as ``acep exact`` reads them, cut into chunks and key groups, matched in the
executors and written as one Parquet row per match. The spec, with the output columns, is
docs/EXACT.md section 12, "Batch matching on Spark".
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from acep.arguments import UsageError, id_arg, load_spec, path_arg, text_arg
from acep.events import EventBatch, EventSpec

from .chunks import ChunkPlan, choose_plan
from .outputs import OutputError, absolute, check_outputs, replacing
from .sources import (
    QUARANTINE,
    SYSTEM,
    ReadPlan,
    SourceError,
    add_bad_file_option,
    add_day_options,
    archive_days,
    events_of,
    plan_archive,
    plan_files,
    print_quarantined,
    unreadable_files,
)
from .spark import progress, session

__all__ = ["ExactBatchResult", "exact_batch", "key_split", "match_schema", "main"]

STRATEGIES_SPLITTABLE = ("skip_till_any_match", "skip_till_next_match", "partition_contiguity")


@dataclass
class ExactBatchResult:
    output_dir: str
    stats: dict = field(default_factory=dict)
    quarantined: list[dict] = field(default_factory=list)  # the first bad rows, for messages
    skipped: list[dict] = field(default_factory=list)  # unreadable files (skip_bad_files)


def match_schema():
    import pyarrow as pa

    return pa.schema([("stream", pa.string()), ("partition", pa.string()),
                      ("first_tag", pa.float64()), ("last_tag", pa.float64()),
                      ("positions", pa.list_(pa.int64())), ("tags", pa.list_(pa.float64())),
                      ("sizes", pa.list_(pa.int32())), ("values", pa.string())])


def key_split(query) -> tuple[bool, str]:
    """May the events be split by the query's equivalence key? (and why, or why not)."""
    from acep.nfab.compile import compile_query

    cq = compile_query(query)
    strategy = query.strategy.value
    if strategy not in STRATEGIES_SPLITTABLE:
        return False, f"off: {strategy} sees every event of the input (EXACT.md 3.4)"
    if not cq.equivalence:
        return False, "off: the query has no equivalence test [attr]"
    bound = {id(c) for c in cq.equivalence_conjuncts}
    for neg in cq.negations:
        if not any(id(c) in bound for c in neg.conjuncts):
            return False, (f"off: negated component {neg.component.var} is not bound by the "
                           f"equivalence test (EXACT.md 3.6)")
    return True, f"by equivalence key [{', '.join(cq.equivalence)}]"


def required_attributes(query) -> dict[str, set[str]]:
    """attribute -> the event types that must carry it (EXACT.md 1, as the engine checks)."""
    from acep.nfab.compile import compile_query
    from acep.nfab.runs import needed_attributes

    needed = needed_attributes(compile_query(query))
    out: dict[str, set[str]] = {}
    for c in query.components:
        for attr in needed.get(c.var, ()):
            out.setdefault(attr, set()).add(c.type)
    return out


# --------------------------------------------------------------------------- the job


def exact_batch(inputs: Sequence[str], query_text: str, *, spec: EventSpec | None = None,
                archive: bool = False, pattern_id: str | None = None,
                pattern_hash: str | None = None, output_dir: str,
                master: str | None = None, cores: int | None = None,
                chunk: float | None = None, key_groups: int | None = None,
                quarantine: str | None = None, show_progress: bool = True,
                spark=None, days: tuple[str | None, str | None] = (None, None),
                skip_bad_files: bool = False) -> ExactBatchResult:
    """Run the exact engine over ``inputs`` on Spark; matches to ``output_dir`` (Parquet).

    ``archive=True`` reads the collector's archive directory ``inputs[0]`` (``pattern_id``
    picks its pattern's windows when it holds several, ``pattern_hash`` the definition when
    that id was uploaded with several, ``days`` = (since, before) the days read:
    :func:`trainer.sources.plan_archive`).
    ``quarantine``: a directory for the bad rows (Parquet: source, line, position, field,
    reason). Relative paths are taken in the current directory at the call; the result's
    ``output_dir`` is absolute. A file that cannot be read raises
    :class:`trainer.sources.SourceError` unless ``skip_bad_files``. See the module
    docstring.
    """
    from pyspark.sql import functions as F

    from acep.nfab import parse_query

    from .train import events_dataframe

    started = time.perf_counter()
    query = parse_query(query_text)
    splittable, split_reason = key_split(query)
    plan = plan_archive(inputs[0], pattern_id, pattern_hash, days, skip_bad_files) \
        if archive else plan_files(inputs, spec, skip_bad_files)
    check_outputs({"--out": output_dir, "--quarantine": quarantine}, inputs[:1] if archive
                  else inputs, extra=("_query.json",))
    # the caller's directory, not the one the Spark JVM started in (it writes them)
    output_dir, quarantine = absolute(output_dir), absolute(quarantine)
    required = required_attributes(query)
    _check_columns(required, plan)
    spark = spark or session(master, cores, app="acep-exact-batch")
    stats: dict = {"read_tasks": len(plan.tasks), "strategy": query.strategy.value}
    with progress(spark, "reading", show_progress):
        rows = _validated(events_dataframe(spark, plan), required, plan)
        # the engine reads only the query's attributes: the others need not be shuffled
        rows = rows.select(*SYSTEM, *sorted(required), *QUARANTINE).cache()
        plan = replace(plan, attributes={a: k for a, k in plan.attributes.items()
                                         if a in required})
        bad = rows.filter(rows._bad.isNotNull())
        good = rows.filter(rows._bad.isNull()).drop("_bad", "_source", "_line", "_field")
        if plan.is_archive:
            good = good.dropDuplicates(["_stream", "_pos"])
        ok, whole_file = rows._bad.isNull(), rows._pos.isNull()
        counts = rows.agg(F.count(F.when(ok, 1)).alias("n"),
                          F.count(F.when(~ok & ~whole_file, 1)).alias("bad"),
                          F.min(F.when(ok, rows._tag)).alias("lo"),
                          F.max(F.when(ok, rows._tag)).alias("hi")).collect()[0]
        summary = {"lo": counts["lo"], "hi": counts["hi"],
                   "n": good.count() if plan.is_archive else counts["n"]}
        n_bad = counts["bad"]
        skipped = unreadable_files(rows, skip_bad_files)
    stats.update(events=int(summary["n"]), bad_rows=int(n_bad),
                 bad_files=len({f["source"] for f in skipped}))
    window = query.window
    if window is None and chunk is not None:
        stats["note"] = "one chunk: the query has no WITHIN"
    key_cols = (["_stream"] if plan.is_archive else []) + \
        (list(_equivalence(query)) if splittable else [])
    if not splittable:
        split_reason = ("by device only; equivalence key " if plan.is_archive else "") + \
            split_reason
    elif plan.is_archive:
        split_reason = "by device and " + split_reason
    if not key_cols:
        key_groups = 1
    stats["key_split"] = split_reason
    with replacing(output_dir) as staging:
        if summary["n"]:
            w = 0.0 if window is None else float(window)
            cplan = choose_plan(summary["lo"], summary["hi"], w, before=w, after=w,
                                parallelism=spark.sparkContext.defaultParallelism,
                                chunk=None if window is None else chunk,
                                key_groups=key_groups)
            stats.update(chunks=cplan.n_chunks, key_groups=cplan.key_groups,
                         chunk_length=cplan.length, origin=cplan.origin)
            with progress(spark, "matching", show_progress):
                units = _unit_frame(good, cplan, key_cols, plan)
                matches = _run_units(units, query_text, plan, cplan)
                matches.write.mode("overwrite").parquet(staging)
        else:  # nothing to match: still replace the output, with an empty result
            stats.update(chunks=0, key_groups=0)
            from pyspark.sql.pandas.types import from_arrow_schema

            spark.createDataFrame([], from_arrow_schema(match_schema())).coalesce(1) \
                .write.mode("overwrite").parquet(staging)
        _ensure_part(staging)
        _stamp(staging, query_text, plan.tag_is_time)
    stats["matches"] = _count_matches(output_dir)
    quarantined = _quarantine(bad, n_bad, quarantine)
    stats["seconds"] = round(time.perf_counter() - started, 3)
    rows.unpersist()
    return ExactBatchResult(output_dir, stats, quarantined, skipped)


def _equivalence(query) -> tuple[str, ...]:
    from acep.nfab.ast import Equiv

    return tuple(a for c in query.conjuncts if isinstance(c, Equiv) for a in c.attrs)


def _check_columns(required: dict[str, set[str]], plan: ReadPlan) -> None:
    """An attribute the query reads that no column holds: every such event would be bad."""
    for attr in sorted(required):
        if attr not in plan.attributes:
            types = ", ".join(sorted(required[attr]))
            raise SourceError(f"the query reads attribute {attr!r} (of {types} events), which "
                              f"the input has no column for (attributes: "
                              f"{', '.join(plan.attributes) or 'none'})")


def _validated(rows, required: dict[str, set[str]], plan: ReadPlan):
    """Mark the events the exact engine would refuse: a component event lacking an
    attribute the query reads (EXACT.md 1). The reason is the engine's own message."""
    from pyspark.sql import functions as F

    reason, where = None, None
    for attr in sorted(required):
        col = F.col(attr)
        missing = col.isNull() if plan.attributes[attr] == "text" else \
            (col.isNull() | F.isnan(col))
        hit = F.col("_type").isin(sorted(required[attr])) & missing
        text = F.concat(F.col("_type"), F.lit(f" event lacks attribute {attr!r} that the "
                                              f"query reads"))
        reason = F.when(hit, text) if reason is None else reason.when(hit, text)
        where = F.when(hit, F.lit(attr)) if where is None else where.when(hit, F.lit(attr))
    if reason is None:
        return rows
    fresh = F.col("_bad").isNull()
    return (rows.withColumn("_field", F.when(fresh & reason.isNotNull(), where)
                            .otherwise(F.col("_field")))
            .withColumn("_bad", F.when(fresh, reason).otherwise(F.col("_bad"))))


def _unit_frame(good, cplan: ChunkPlan, key_cols: list[str], plan: ReadPlan):
    """Every event once per chunk that reads it, tagged with its (key group, chunk) unit,
    sorted by (unit, stream, tag, stream position) within Spark partitions of whole units."""
    from pyspark.sql import functions as F

    if key_cols and cplan.key_groups > 1:
        # + 0.0 makes -0.0 and 0.0 (equal keys to the engine) hash alike
        cols = [F.col(c) + F.lit(0.0) if plan.attributes.get(c) == "number" else F.col(c)
                for c in key_cols]
        group = F.pmod(F.hash(*cols), F.lit(cplan.key_groups))
    else:
        group = F.lit(0)
    units = (good.withColumn("_chunk", F.explode(cplan.spark_chunks(F.col("_tag"))))
             .withColumn("_group", group.cast("int")))
    spark = good.sparkSession
    n = max(1, min(cplan.n_chunks * cplan.key_groups, 4 * spark.sparkContext.defaultParallelism,
                   int(spark.conf.get("spark.sql.shuffle.partitions", "200"))))
    # range partitioning on the unit balances the partitions by rows (hashing 8 units into
    # 4 partitions often puts 3 or 4 in one); a unit never straddles two partitions
    units = units.withColumn("_unit", F.col("_group") * F.lit(cplan.n_chunks) + F.col("_chunk"))
    return (units.repartitionByRange(n, "_unit")
            .sortWithinPartitions("_group", "_chunk", "_stream", "_tag", "_pos"))


def _run_units(units, query_text: str, plan: ReadPlan, cplan: ChunkPlan):
    import pyarrow as pa
    from pyspark.sql.pandas.types import from_arrow_schema

    schema = match_schema()

    def run(batches):
        from acep.nfab import Engine, parse_query

        batches = list(batches)
        if not batches:
            return
        query = parse_query(query_text)
        table = pa.Table.from_batches(batches)
        for c, stream, part in _pieces(table):
            lo, hi = cplan.owned(c)
            out = _match_rows(query, part, plan, lo, hi, stream, Engine)
            if out is not None:
                yield out

    return units.mapInArrow(run, from_arrow_schema(schema))


def _pieces(table):
    """(chunk, stream, rows) for each run of equal (group, chunk, stream) in sorted rows."""
    n = table.num_rows
    if not n:
        return
    group = table.column("_group").to_numpy()
    chunk = table.column("_chunk").to_numpy()
    stream = np.asarray(table.column("_stream").to_numpy(zero_copy_only=False), dtype=object)
    change = (np.diff(group) != 0) | (np.diff(chunk) != 0) | (stream[1:] != stream[:-1])
    cut = np.flatnonzero(change) + 1
    for lo, hi in zip(np.r_[0, cut], np.r_[cut, n]):
        yield int(chunk[lo]), str(stream[lo]), table.slice(int(lo), int(hi - lo))


def _match_rows(query, table, plan: ReadPlan, lo: float, hi: float, stream: str,
                engine_cls):
    """The owned matches of one stream's events in one unit: a RecordBatch of output rows
    (:func:`match_schema`), or None when there are none. Built column by column: a dict
    per match cost more than the matching."""
    import pyarrow as pa

    events = unit_events(table, plan)
    pos = table.column("_pos").to_numpy()
    keys: dict = {}
    partition, first, last, values = [], [], [], []
    flat: list[int] = []
    sizes: list[int] = []
    ends, size_ends = [0], [0]
    for m in engine_cls(query).run(events):
        if not lo <= m.start < hi:
            continue
        for block in m.positions:
            flat.extend(block)
            sizes.append(len(block))
        ends.append(len(flat))
        size_ends.append(len(sizes))
        key = m.partition
        partition.append(keys[key] if key in keys else keys.setdefault(key, _key_json(key)))
        first.append(m.start)
        last.append(m.end)
        values.append(None if m.values is None else
                      json.dumps({k: _plain(v) for k, v in m.values.items()}))
    if not first:
        return None
    idx = np.asarray(flat, dtype=np.int64)
    offsets = pa.array(np.asarray(ends, dtype=np.int32))
    arrays = [pa.array([stream] * len(first), pa.string()), pa.array(partition, pa.string()),
              pa.array(first, pa.float64()), pa.array(last, pa.float64()),
              pa.ListArray.from_arrays(offsets, pa.array(pos[idx], pa.int64())),
              pa.ListArray.from_arrays(offsets, pa.array(events.tags[idx], pa.float64())),
              pa.ListArray.from_arrays(pa.array(np.asarray(size_ends, dtype=np.int32)),
                                       pa.array(np.asarray(sizes, dtype=np.int32))),
              pa.array(values, pa.string())]
    return pa.RecordBatch.from_arrays(arrays, schema=match_schema())


def unit_events(table, plan: ReadPlan) -> EventBatch:
    """Normalized rows as the EventBatch that ``acep exact`` would have read."""
    return events_of(table, plan)


def _plain(value):
    """A value as ``acep exact`` prints it: integral floats as integers, NaN as null."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return int(value) if value.is_integer() else value
    return value


def _key_json(partition) -> str | None:
    if partition is None:
        return None
    key = [_plain(v) for v in partition]
    return json.dumps(key[0] if len(key) == 1 else key)


def _ensure_part(output_dir: str) -> None:
    """No part file (no events, or Spark wrote none): one empty part with the schema."""
    import pyarrow.parquet as pq

    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    if not _parts(out):
        pq.write_table(match_schema().empty_table(), out / "part-00000.parquet")


def _parts(out: Path) -> list[Path]:
    return sorted(p for p in out.glob("part-*") if p.name.endswith(".parquet"))


def _stamp(output_dir: str, query_text: str, tag_is_time: bool) -> None:
    """A ``_query.json`` beside the part files: the query and the tag kind."""
    (Path(output_dir) / "_query.json").write_text(
        json.dumps({"query": query_text, "tag_is_time": bool(tag_is_time)}) + "\n")


def _count_matches(output_dir: str) -> int:
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(p).metadata.num_rows for p in _parts(Path(output_dir)))


def _quarantine(bad, count: int, directory: str | None) -> list[dict]:
    """Write the bad rows (with their reason) under ``directory``, replacing an earlier
    quarantine even with none; the first five."""
    out = bad.select("_source", "_line", "_pos", "_field", "_bad") \
        .toDF("source", "line", "position", "field", "reason")
    if directory:
        with replacing(directory) as staging:
            out.coalesce(1).write.mode("overwrite").parquet(staging)
    if not count:
        return []
    return [r.asDict() for r in out.filter(out.position.isNotNull()).limit(5).collect()]


# --------------------------------------------------------------------------- command line


def _parser() -> argparse.ArgumentParser:
    from acep.arguments import whole_number

    from .cli import chunk_length

    p = argparse.ArgumentParser(
        prog="acep exact-batch",
        description="Run a SASE+ query with the exact engine over event files or the "
                    "collector's archive on Spark (a local session unless --master); the "
                    "matches are written as Parquet.")
    p.add_argument("query", metavar="QUERY_FILE", type=path_arg,
                   help="query file (docs/EXACT.md section 2)")
    p.add_argument("inputs", metavar="INPUT", nargs="*", type=path_arg,
                   help="event files (.parquet/.csv/.jsonl/.msgpack) or directories of "
                        "them; local, or URIs such as s3://bucket/dir")
    p.add_argument("--archive", metavar="DIR", type=path_arg,
                   help="the collector's Parquet archive instead (as acep train --archive)")
    p.add_argument("--pattern-id", metavar="ID", type=id_arg,
                   help="the archive's pattern whose windows to read")
    p.add_argument("--pattern-hash", metavar="PREFIX", type=text_arg,
                   help="the definition of that pattern to read, when devices uploaded "
                        "several under its id (a prefix of the hash the refusal lists)")
    p.add_argument("--spec", type=path_arg,
                   help="event spec of the files: a JSON/TOML file or a preset")
    p.add_argument("--out", "-o", required=True, metavar="DIR", type=path_arg,
                   help="write the matches here (Parquet): a new or empty directory, or an "
                        "earlier --out of this command (replaced)")
    p.add_argument("--master", type=text_arg, help="Spark master (default local[CORES])")
    p.add_argument("--cores", type=whole_number(1, "cores"),
                   help="cores of the local session (default: all)")
    p.add_argument("--chunk", type=chunk_length, help="time chunk length, e.g. 2h "
                                                     "(default: chosen)")
    p.add_argument("--key-groups", type=whole_number(1, "key groups"),
                   help="equivalence-key groups (default: chosen; 1 when the query forbids "
                        "a key split)")
    p.add_argument("--quarantine", metavar="DIR", type=path_arg,
                   help="write bad rows here (Parquet; as --out, only a new, empty or "
                        "earlier quarantine is replaced, by an empty one when there are no "
                        "bad rows)")
    p.add_argument("--no-progress", action="store_true", help="no progress on stderr")
    add_day_options(p)
    add_bad_file_option(p)
    return p


def _check(args) -> None:
    if bool(args.inputs) == bool(args.archive):
        raise UsageError("give event files or --archive DIR (one of the two)")
    args.since, args.before = archive_days(args.archive, args.since, args.before)
    if args.archive and args.spec:
        raise UsageError("--spec is for event files; the archive has its own columns")
    if (args.pattern_id or args.pattern_hash) and not args.archive:
        raise UsageError("--pattern-id and --pattern-hash go with --archive")


def run(args) -> int:
    from acep.nfab import parse_query

    _check(args)
    try:
        with open(args.query, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise UsageError(f"query file {args.query}: {reason}") from None
    parse_query(text, source=args.query)  # a bad query fails before Spark starts
    spec = load_spec(args.spec)
    result = exact_batch([args.archive] if args.archive else args.inputs, text, spec=spec,
                         archive=bool(args.archive),
                         pattern_id=args.pattern_id, pattern_hash=args.pattern_hash,
                         output_dir=args.out, master=args.master,
                         cores=args.cores, chunk=args.chunk, key_groups=args.key_groups,
                         quarantine=args.quarantine, show_progress=not args.no_progress,
                         days=(args.since, args.before),
                         skip_bad_files=args.skip_bad_files)
    stats = result.stats
    print_quarantined("acep exact-batch", result.quarantined, stats["bad_rows"],
                      args.quarantine, result.skipped)
    print(json.dumps(stats))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from acep.events import EventError
    from acep.pattern import PatternError  # QueryError too: its message shows a caret

    from .spark import run_command

    return run_command("acep exact-batch", run, _parser().parse_args(argv),
                       (UsageError, SourceError, OutputError, PatternError, EventError))
