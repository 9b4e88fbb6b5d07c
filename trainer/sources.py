"""What the trainer reads: event files or the collector's archive, as read tasks.

The driver plans (:func:`plan_files`, :func:`plan_archive`). Executors run each
:class:`ReadTask` with :func:`read_task`, which converts rows as ``acep match`` does
(``acep.events.read_chunks``, the same event spec) into one normalized Arrow table.
Consecutive small Parquet tasks share a Spark task (:func:`task_groups`). The table's
columns and the task rules are in docs/DESIGN.md, "As built: the trainer".
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from acep import storage
from acep.arguments import text_arg
from acep.events import EventBatch, EventError, EventSpec, partition_key, read_chunks
from acep.utils import one_line

__all__ = ["ReadTask", "ReadPlan", "Definition", "SourceError", "plan_files", "plan_archive",
           "task_groups", "read_task", "arrow_schema", "events_of", "print_quarantined",
           "describe_row", "unreadable_files", "add_bad_file_option", "TASK_ROWS"]

TASK_ROWS = 250_000  # rows per Parquet read task (whole row groups)
FILE_STRIDE = 1 << 40  # _pos of file i's row r is i * FILE_STRIDE + r
SYSTEM = ("_stream", "_pos", "_tag", "_type")
QUARANTINE = ("_bad", "_source", "_line", "_field")
ARCHIVE_RESERVED = ("batch_id", "pattern_id", "position", "tag", "type")
EVENT_EXTENSIONS = (".parquet", ".pq", ".csv", ".jsonl", ".ndjson", ".json", ".msgpack", ".mpk")


class SourceError(ValueError):
    """Input the trainer cannot read at all (missing, unknown kind, no rows for a pattern)."""


class _Unreadable(SourceError):
    """A file that cannot be read on: the job skips it with ``--skip-bad-files``."""


SKIP_HINT = "; --skip-bad-files skips unreadable files"


@dataclass(frozen=True)
class ReadTask:
    source: str
    row_groups: tuple[int, ...] | None = None
    file_index: int = 0
    stream: str = ""
    rows: int = 0  # rows to read, from the Parquet metadata (0: not known)


@dataclass(frozen=True)
class Definition:
    """One definition of an archived pattern id and the archive files uploaded under it."""

    pattern: dict  # id, text, window, k, where, partition_by, hash
    files: list[str]

    @property
    def short(self) -> str:
        """The first 12 hex digits of the pattern hash (``--pattern-hash`` selects by it)."""
        return str(self.pattern.get("hash") or "")[:12]

    def describe(self) -> str:
        p = self.pattern
        dates = sorted(_day_of(f) for f in self.files)
        devices = {_device_of(f) for f in self.files}
        span = dates[0] if dates[0] == dates[-1] else f"{dates[0]} to {dates[-1]}"
        return (f"{self.short}: pattern {p['text']!r}, k={p['k']}, window={p['window']:g}, "
                f"where={list(p.get('where', ()))}, partition={p.get('partition_by')!r}: "
                f"{len(self.files)} file(s) from {len(devices)} device(s), {span}")


@dataclass
class ReadPlan:
    """Read tasks plus what every task's table looks like."""

    tasks: list[ReadTask]
    spec: EventSpec
    attributes: dict[str, str]  # name -> "number" | "text"
    tag_is_time: bool
    archive_pattern: str | None = None  # the archive's pattern id to keep (archives only)
    pattern: dict = field(default_factory=dict)  # the archive's pattern, when known

    @property
    def is_archive(self) -> bool:
        return self.archive_pattern is not None


# --------------------------------------------------------------------------- planning


def plan_files(paths: Sequence[str | os.PathLike], spec: EventSpec,
               skip_bad_files: bool = False) -> ReadPlan:
    """Tasks for event files (a directory stands for the event files under it, sorted).
    Files and directories may be URIs that ``pyarrow.fs`` reads (``s3://bucket/dir``:
    :mod:`acep.storage`). The tasks name local files by absolute path: relative paths are
    taken in the current directory now, not in the one the executors (and the Spark JVM)
    started in. A Parquet file whose footer does not read raises :class:`SourceError`,
    unless ``skip_bad_files``: then its task fails in the executor and is skipped there
    (:func:`unreadable_files`)."""
    files = _expand(paths)
    tasks = []
    for i, path in enumerate(files):
        groups = _row_group_tasks(path, skip_bad_files)
        source = storage.absolute(path)  # an executor opens it, in a directory of its own
        tasks.extend(ReadTask(source, g, i, rows=n) for g, n in groups) if groups else \
            tasks.append(ReadTask(source, None, i))
    attributes, is_time = _probe(files, spec, skip_bad_files)
    return ReadPlan(tasks, spec, attributes, is_time)


def add_day_options(parser) -> None:
    """``--since``/``--before``: which archive days a job reads."""
    parser.add_argument("--since", metavar="DAY", type=text_arg,
                        help="archive: only the days from this one: YYYY-MM-DD (UTC; the day "
                             "a batch was made on its device, the archive's date= folders), "
                             "or Nd, N days before today (a timer's --since 28d; default: "
                             "from the first day)")
    parser.add_argument("--before", metavar="DAY", type=text_arg,
                        help="archive: only the days before this one (YYYY-MM-DD or Nd; "
                             "default: to the last day)")


def archive_days(archive: str | None, since: str | None, before: str | None,
                 today: dt.date | None = None) -> tuple[str | None, str | None]:
    """``(since, before)`` as ISO days, checked: real days, in order, for an archive.
    ``Nd`` is ``N`` days before ``today`` (default: today, UTC)."""
    if (since or before) and not archive:
        raise SourceError("--since and --before pick days of an --archive")
    today = today or dt.datetime.now(dt.UTC).date()
    since, before = (None if day is None else _day(flag, day, today)
                     for flag, day in (("--since", since), ("--before", before)))
    if since and before and since >= before:
        raise SourceError(f"--since {since} is not before --before {before}: no day between")
    return since, before


def _day(flag: str, text: str, today: dt.date) -> str:
    if text[:-1].isdigit() and text.endswith("d"):
        return (today - dt.timedelta(days=int(text[:-1]))).isoformat()
    try:
        return dt.date.fromisoformat(text).isoformat()
    except ValueError:
        raise SourceError(f"{flag} {text!r} is not a day (YYYY-MM-DD, or Nd: N days ago)"
                          ) from None


def plan_archive(root: str | os.PathLike, pattern_id: str | None = None,
                 pattern_hash: str | None = None,
                 days: tuple[str | None, str | None] = (None, None),
                 skip_bad_files: bool = False) -> ReadPlan:
    """Tasks for the collector's archive (``ROOT/date=*/device=*/part-*.parquet``), a
    local directory or a copy of it in object storage (``s3://bucket/archive``:
    :mod:`acep.storage`).

    ``days``: ``(since, before)``, ISO days (None: open), the ``date=`` folders read;
    definitions uploaded only outside them do not count.

    ``pattern_id`` picks the pattern when the archive holds more than one; the pattern's
    text, window, k, where and partition come from the files' metadata. Devices may have
    uploaded several definitions under one id (the pattern was changed, or a device runs an
    old one): then ``pattern_hash`` (a prefix of the hex pattern hash, as the refusal lists
    them) picks the definition whose files are read, and without it the archive is refused;
    an empty or blank ``pattern_hash`` is a ``ValueError`` (it would pick every definition:
    ``None`` is the one that means none given). As for :func:`plan_files`, the tasks name
    local files by absolute path, and a file whose footer does not read (so its pattern is
    not known) raises :class:`SourceError` unless ``skip_bad_files``: then it is read with
    the chosen definition's files, and skipped.
    """
    if pattern_hash is not None and not pattern_hash.strip():
        raise ValueError(f"pattern_hash {pattern_hash!r}: an empty or blank prefix matches "
                         "every definition; give the first digits of one, or None")
    root = storage.absolute(root)
    found = _kind(root)
    if found != "dir":
        raise SourceError(f"{root}: " + ("not a directory" if found else "no such directory"))
    files = sorted((source for source, rel in _listing(root) if _is_archive_file(rel)),
                   key=storage.parts)
    if not files:
        raise SourceError(f"{root}: no archive files (date=*/device=*/*.parquet) under it")
    files = _on_days(root, files, *days)
    patterns, rows, unknown = _archive_patterns(files, skip_bad_files)
    if not patterns:
        raise SourceError(f"{root}: none of its {len(files)} archive files can be read; the "
                          f"first: {unknown[0][1]}")
    if pattern_id is None:
        if len(patterns) > 1:
            raise SourceError(f"{root}: the archive holds patterns {sorted(patterns)}; "
                              f"choose one with --pattern-id")
        pattern_id = next(iter(patterns))
    if pattern_id not in patterns:
        raise SourceError(f"{root}: no archived windows of pattern {pattern_id!r} "
                          f"(patterns: {', '.join(sorted(patterns))})")
    chosen = _definition(root, pattern_id, patterns[pattern_id], pattern_hash)
    tasks = []
    for i, source in enumerate(chosen.files):  # a compacted file: about TASK_ROWS rows a task
        groups = _row_group_tasks(source) if rows[source] > TASK_ROWS else \
            [(None, rows[source])]
        tasks.extend(ReadTask(source, g, i, _device_of(source), n) for g, n in groups)
    tasks += [ReadTask(source, None, len(chosen.files) + i, _device_of(source))
              for i, (source, _) in enumerate(unknown)]  # they fail, and are skipped, there
    spec = EventSpec(tag="tag", type="type", attributes=None)
    attributes, is_time = _probe(chosen.files, spec, skip_bad_files)
    attributes = {_archive_name(a): kind for a, kind in attributes.items()
                  if a not in ARCHIVE_RESERVED}
    return ReadPlan(tasks, spec, attributes, is_time, pattern_id, chosen.pattern)


def _is_archive_file(rel: str) -> bool:
    """``date=*/device=*/*.parquet``, not a hidden file (a compaction's file in the making)."""
    names = rel.split("/")
    return (len(names) == 3 and names[0].startswith("date=") and
            names[1].startswith("device=") and names[2].endswith(".parquet") and
            not names[2].startswith("."))


def _day_of(source: str) -> str:
    return storage.parts(source)[-3].split("=", 1)[1]


def _device_of(source: str) -> str:
    return storage.parts(source)[-2].split("=", 1)[1]


def _on_days(root: str, files: list[str], since: str | None, before: str | None
             ) -> list[str]:
    kept = [f for f in files if (since is None or _day_of(f) >= since)
            and (before is None or _day_of(f) < before)]
    if not kept:
        held = sorted({_day_of(f) for f in files})
        raise SourceError(f"{root}: no archive files from {since or 'the first day'} to "
                          f"before {before or 'the end'} (it holds {held[0]} to {held[-1]})")
    return kept


def _definition(root: str, pattern_id: str, definitions: list[Definition],
                pattern_hash: str | None) -> Definition:
    listing = "".join(f"\n  {d.describe()}" for d in definitions)
    if pattern_hash is not None:
        found = [d for d in definitions if d.short and
                 str(d.pattern["hash"]).startswith(pattern_hash.lower())]
        if len(found) != 1:
            what = "matches none" if not found else "matches several"
            raise SourceError(f"{root}: --pattern-hash {pattern_hash!r} {what} of the "
                              f"definitions of pattern {pattern_id!r}:{listing}")
        return found[0]
    if len(definitions) > 1:
        raise SourceError(f"{root}: pattern {pattern_id!r} has {len(definitions)} different "
                          f"definitions in the archive; choose one with --pattern-hash "
                          f"(its first digits):{listing}")
    return definitions[0]


def task_groups(tasks: Sequence[ReadTask], parallelism: int) -> list[list[int]]:
    """The read tasks packed into Spark tasks: runs of consecutive tasks of at most
    ``TASK_ROWS`` rows, fewer when that still gives every core two. A task of unknown size
    (not Parquet) stays alone. An archive holds a small file per batch, and a Spark task
    costs far more than reading one."""
    total = sum(t.rows for t in tasks)
    target = max(1, min(TASK_ROWS, -(-total // max(1, 2 * parallelism))))
    groups: list[list[int]] = []
    rows = 0
    for i, task in enumerate(tasks):
        if not groups or not task.rows or not tasks[groups[-1][-1]].rows \
                or rows + task.rows > target:
            groups.append([])
            rows = 0
        groups[-1].append(i)
        rows += task.rows
    return groups


def _expand(paths) -> list[str]:
    files: list[str] = []
    for p in map(os.fspath, paths):
        found = _kind(p)
        if found == "dir":
            inside = sorted(source for source, rel in _listing(p)
                            if storage.suffix(rel) in EVENT_EXTENSIONS
                            and not rel.rsplit("/", 1)[-1].startswith("."))
            if not inside:
                raise SourceError(f"{p}: a directory with no event files in it")
            files.extend(inside)
        elif found == "file":
            files.append(p)
        else:
            raise SourceError(f"{p}: no such file or directory")
    return files


def _kind(source: str) -> str | None:
    try:
        return storage.kind(source)
    except storage.StorageError as e:
        raise SourceError(str(e)) from None


def _listing(root: str) -> list[tuple[str, str]]:
    try:
        return list(storage.list_files(root))
    except OSError as e:
        raise SourceError(str(e)) from None


def _metadata(source: str):
    """A Parquet file's footer (``pyarrow.parquet.FileMetaData``)."""
    import pyarrow.parquet as pq

    try:
        with storage.arrow_file(source) as opened:
            return pq.read_metadata(opened)
    except storage.StorageError as e:
        raise SourceError(str(e)) from None
    except Exception as e:  # noqa: BLE001 - pyarrow raises several kinds for a bad file
        raise _Unreadable(f"{storage.redact(source)}: not a readable Parquet file "
                          f"({one_line(e)})") from None


def _row_group_tasks(path: str, skip_bad_files: bool = False
                     ) -> list[tuple[tuple[int, ...], int]] | None:
    """A Parquet file's tasks: (row groups, rows) of about ``TASK_ROWS`` rows each; None
    for another kind of file, or one whose footer does not read when ``skip_bad_files``."""
    if storage.suffix(path) not in (".parquet", ".pq"):
        return None
    try:
        meta = _metadata(path)
    except _Unreadable as e:
        if skip_bad_files:
            return None
        raise SourceError(f"{e}{SKIP_HINT}") from None
    tasks, current, rows = [], [], 0
    for i in range(meta.num_row_groups):
        current.append(i)
        rows += meta.row_group(i).num_rows
        if rows >= TASK_ROWS:
            tasks.append((tuple(current), rows))
            current, rows = [], 0
    if current:
        tasks.append((tuple(current), rows))
    return tasks


def _probe(files: Sequence[str], spec: EventSpec, skip_bad_files: bool = False
           ) -> tuple[dict[str, str], bool]:
    """Attribute kinds and tag kind from the first rows of the first file, or with
    ``skip_bad_files`` of the first file that can be read."""
    for path in files if skip_bad_files else files[:1]:
        try:
            return _probe_file(path, spec)
        except _Unreadable as e:
            if not skip_bad_files:
                raise SourceError(f"{e}{SKIP_HINT}") from None
            last = e
    raise SourceError(f"none of the {len(files)} input files can be read; the last: {last}")


def _probe_file(path: str, spec: EventSpec) -> tuple[dict[str, str], bool]:
    """Attribute kinds and tag kind from the first rows of the file ``path``."""
    first_bad = None
    try:
        for chunk in read_chunks(path, spec, batch_size=4096):
            if len(chunk.events):
                cols = chunk.events.columns
                return ({name: "text" if col.dtype == object else "number"
                         for name, col in cols.items()}, chunk.events.tag_is_time)
            first_bad = first_bad or (chunk.bad[0] if chunk.bad else None)
    except EventError as e:
        raise _Unreadable(str(e)) from None
    except (OSError, ValueError) as e:  # pyarrow's errors on corrupt data name no file
        raise _Unreadable(f"{storage.redact(path)}: cannot be read ({one_line(e)})"
                          ) from None
    if first_bad is not None:
        row, line, field_, reason = first_bad
        where = f"line {line}" if line is not None else f"row {row + 1}"
        where += "" if field_ is None else f", field {field_!r}"
        raise SourceError(f"{path}: no readable event in its first rows (the first, "
                          f"{where}: {reason})")
    raise SourceError(f"{path}: no readable event in its first rows")


def _archive_patterns(files: list[str], skip_bad_files: bool = False
                      ) -> tuple[dict[str, list[Definition]], dict[str, int],
                                 list[tuple[str, str]]]:
    """{pattern id: its definitions, the most files first}, each file's rows, from the
    files' footers (read side by side: an archive holds a file per batch), and with
    ``skip_bad_files`` the (file, why) whose footer does not tell (else the first raises
    :class:`SourceError`)."""
    from concurrent.futures import ThreadPoolExecutor

    def footer(path: str):
        try:
            meta = _metadata(path)
            raw = (meta.metadata or {}).get(b"acep.pattern")
            if raw is None:
                raise _Unreadable(f"{storage.redact(path)}: not an acep archive file (no "
                                  "acep.pattern metadata)")
            return json.loads(raw), meta.num_rows
        except _Unreadable as e:
            return None, str(e)

    with ThreadPoolExecutor(min(16, len(files))) as pool:
        footers = list(pool.map(footer, files))
    unknown = [(path, why) for path, (pattern, why) in zip(files, footers) if pattern is None]
    if unknown and not skip_bad_files:
        more = f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""
        raise SourceError(f"{unknown[0][1]}{more}{SKIP_HINT}")
    by_definition: dict[tuple, Definition] = {}
    for path, (pattern, _) in zip(files, footers):
        if pattern is None:
            continue
        key = (pattern["id"], pattern["text"], float(pattern["window"]), int(pattern["k"]),
               tuple(pattern.get("where", ())), pattern.get("partition_by"))
        by_definition.setdefault(key, Definition(pattern, [])).files.append(path)
    found: dict[str, list[Definition]] = {}
    for d in sorted(by_definition.values(), key=lambda d: -len(d.files)):
        found.setdefault(d.pattern["id"], []).append(d)
    return found, {path: rows for path, (p, rows) in zip(files, footers) if p is not None}, \
        unknown


def _archive_name(name: str) -> str:
    """The archive stores attribute ``tag`` as ``attr_tag`` (see ``edge.collector.archive``)."""
    if name.startswith("attr_") and name[5:] in ARCHIVE_RESERVED:
        return name[5:]
    return name


# --------------------------------------------------------------------------- reading


def arrow_schema(plan: ReadPlan):
    """The pyarrow schema of :func:`read_task`'s tables."""
    import pyarrow as pa

    fields = [("_stream", pa.string()), ("_pos", pa.int64()), ("_tag", pa.float64()),
              ("_type", pa.string())]
    fields += [(a, pa.string() if kind == "text" else pa.float64())
               for a, kind in plan.attributes.items()]
    fields += [("_bad", pa.string()), ("_source", pa.string()), ("_line", pa.int64()),
               ("_field", pa.string())]
    return pa.schema(fields)


def read_task(task: ReadTask, plan: ReadPlan):
    """One task's rows as a normalized pyarrow table (good and bad rows). A file that
    cannot be read on (a missing or mistyped column, corrupt data) adds one row for the
    whole file: its ``_pos`` is null (:func:`unreadable_files`)."""
    import pyarrow as pa

    schema = arrow_schema(plan)
    parts = []
    try:
        for chunk in read_chunks(task.source, plan.spec, row_groups=task.row_groups):
            parts.append(_good_rows(chunk, task, plan, schema))
            parts.append(_bad_rows(chunk.bad, task, plan, schema))
    except EventError as e:
        parts.append(_file_row(task, schema, e.message, e.line, e.field,
                               sum(p.num_rows for p in parts)))
    except (OSError, ValueError) as e:  # pyarrow's errors on corrupt data name no file
        parts.append(_file_row(task, schema, one_line(e), None, None,
                               sum(p.num_rows for p in parts)))
    parts = [p for p in parts if p.num_rows]
    return pa.concat_tables(parts) if parts else schema.empty_table()


def _file_row(task: ReadTask, schema, reason: str, line: int | None, field_: str | None,
              read: int):
    """The quarantine row of a file that broke off after ``read`` rows of this task."""
    import pyarrow as pa

    if read:
        reason += f" (after {read:,} rows, which were kept; the rest unread)"
    elif task.rows:
        reason += f" ({task.rows:,} rows unread)"
    arrays = {name: pa.nulls(1, schema.field(name).type) for name in schema.names}
    arrays.update(_stream=pa.array([task.stream], pa.string()),
                  _bad=pa.array([reason], pa.string()),
                  _source=pa.array([storage.redact(task.source)], pa.string()),
                  _line=pa.array([line], pa.int64()), _field=pa.array([field_], pa.string()))
    return pa.table(arrays, schema=schema)


def unreadable_files(rows, skip: bool) -> list[dict]:
    """The files :func:`read_task` could not read, from its rows (a Spark DataFrame): a dict
    each (source, line, field, reason). Raises :class:`SourceError` naming the first unless
    ``skip`` (``--skip-bad-files``): a job does not quietly run on part of its input."""
    found = rows.filter(rows._bad.isNotNull() & rows._pos.isNull()) \
        .select("_source", "_line", "_field", "_bad").collect()
    files = [{"source": r["_source"], "line": r["_line"], "field": r["_field"],
              "reason": r["_bad"]} for r in found]
    if files and not skip:
        more = f" (and {len(files) - 1} more unreadable file(s))" if len(files) > 1 else ""
        raise SourceError(f"{describe_row(files[0])}{more}{SKIP_HINT}")
    return files


def add_bad_file_option(parser) -> None:
    """``--skip-bad-files``: a file that cannot be read is skipped instead of failing."""
    parser.add_argument("--skip-bad-files", action="store_true",
                        help="skip an input file that cannot be read (a missing or mistyped "
                             "column, corrupt data, a .parquet that is empty, cut short or "
                             "not Parquet) instead of failing; it is listed, counted in "
                             "bad_files and quarantined with a null position")


def _good_rows(chunk, task: ReadTask, plan: ReadPlan, schema):
    import pyarrow as pa

    ev = chunk.events
    n = len(ev)
    cols = dict(ev.columns)
    pos = chunk.rows + task.file_index * FILE_STRIDE
    bad = np.zeros(n, dtype=object)
    bad[:] = None
    if plan.is_archive:
        keep = cols.pop("pattern_id", np.full(n, plan.archive_pattern, dtype=object)) \
            == plan.archive_pattern
        pos = np.asarray(cols.pop("position"), dtype=np.float64).astype(np.int64)
        cols.pop("batch_id", None)
        cols = {_archive_name(k): v for k, v in cols.items()}
    else:
        keep = np.ones(n, dtype=bool)
    arrays = {"_stream": pa.array([task.stream] * n, pa.string()),
              "_pos": pa.array(pos, pa.int64()),
              "_tag": pa.array(ev.tags, pa.float64()),
              "_type": pa.array(ev.types(), pa.string())}
    field_of = np.full(n, None, dtype=object)
    for name, kind in plan.attributes.items():
        arrays[name], problem = _attribute(cols.get(name), kind, n)
        if problem is not None:
            values = cols[name][problem]
            bad[problem] = [f"expected a number, got text {v!r}" for v in values]
            field_of[problem] = name
    arrays["_bad"] = pa.array(bad, pa.string())
    failed = field_of != None  # noqa: E711 - elementwise on an object array
    lines = None if chunk.events.lines is None else chunk.events.lines
    arrays["_source"] = pa.array(np.where(failed, storage.redact(task.source), None), pa.string())
    arrays["_line"] = pa.array([int(lines[i]) if failed[i] and lines is not None else None
                                for i in range(n)], pa.int64()) if failed.any() else \
        pa.nulls(n, pa.int64())
    arrays["_field"] = pa.array(field_of, pa.string())
    table = pa.table(arrays, schema=schema)
    return table.filter(pa.array(keep)) if not keep.all() else table


def _attribute(col, kind: str, n: int):
    """(Arrow array of the planned kind, rows that could not be converted or None)."""
    import pyarrow as pa

    if col is None:
        return pa.nulls(n, pa.string() if kind == "text" else pa.float64()), None
    if kind == "text":  # numbers (a mixed or big-integer column) as acep prints them
        text = np.array([v if v is None or isinstance(v, str) else _text_of(v)
                         for v in col.tolist()], object)
        return pa.array(text, pa.string()), None
    if col.dtype != object:
        return pa.array(np.asarray(col, np.float64)), None
    values = np.full(n, np.nan)
    failed = []
    for i, v in enumerate(col.tolist()):
        try:
            values[i] = np.nan if v is None else float(v)
        except (TypeError, ValueError):
            failed.append(i)
    return pa.array(values), (np.array(failed, np.int64) if failed else None)


def _text_of(number) -> str | None:
    key = partition_key(number)  # 7 and 7.0 are "7", in every chunk alike
    return None if key is None else str(key)


def _bad_rows(bad: list, task: ReadTask, plan: ReadPlan, schema):
    import pyarrow as pa

    n = len(bad)
    arrays = {name: pa.nulls(n, schema.field(name).type) for name in schema.names}
    arrays["_stream"] = pa.array([task.stream] * n, pa.string())
    arrays["_pos"] = pa.array([task.file_index * FILE_STRIDE + max(r, 0) for r, *_ in bad],
                              pa.int64())
    arrays["_bad"] = pa.array([reason for *_, reason in bad], pa.string())
    arrays["_source"] = pa.array([storage.redact(task.source)] * n, pa.string())
    arrays["_line"] = pa.array([line for _, line, _, _ in bad], pa.int64())
    arrays["_field"] = pa.array([f for _, _, f, _ in bad], pa.string())
    return pa.table(arrays, schema=schema)


def events_of(table, plan: ReadPlan) -> EventBatch:
    """Normalized rows (:func:`trainer.sources.read_task` columns) as the EventBatch that
    ``acep exact`` would have read: the same types, tags and attribute columns."""
    types = np.asarray(table.column("_type").to_numpy(zero_copy_only=False), dtype=object)
    names, codes = np.unique(types, return_inverse=True)
    columns = {}
    for name, kind in plan.attributes.items():
        col = table.column(name)
        columns[name] = np.asarray(col.to_numpy(zero_copy_only=False), dtype=object) \
            if kind == "text" else col.to_numpy(zero_copy_only=False).astype(np.float64)
    tags = table.column("_tag").to_numpy().astype(np.float64)
    return EventBatch(codes.astype(np.int32).reshape(-1), [str(x) for x in names], tags,
                      columns, 0, "<chunk>", None, plan.tag_is_time)


def describe_row(row: dict) -> str:
    """A quarantined row (or unreadable file) as a line: file, line, position, field: why."""
    return (f"{row['source'] or 'event'}"
            f"{'' if row['line'] is None else ', line ' + str(row['line'])}"
            f"{'' if row.get('position') is None else ', position ' + str(row['position'])}"
            f"{'' if row['field'] is None else ', field ' + repr(row['field'])}: "
            f"{row['reason']}")


def print_quarantined(prog: str, first: list[dict], count: int, directory: str | None,
                      files: Sequence[dict] = ()) -> None:
    """The skipped files and the first quarantined rows on stderr, one line each, and how
    many rows there were."""
    import sys

    for row in files:
        print(f"{prog}: skipped file {describe_row(row)}", file=sys.stderr)
    for row in first:
        print(f"{prog}: quarantined {describe_row(row)}", file=sys.stderr)
    if count > len(first):
        where = f" (all in {directory})" if directory else ""
        print(f"{prog}: {count} bad rows quarantined{where}", file=sys.stderr)
