"""The upload wire format: round trips, the builder from engine output, and refusals."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import acep
from acep import EventBatch
from acep.windows import sample_mask
from edge.wire import (
    ARCHIVE_RESERVED,
    Condenser,
    Limits,
    PatternRef,
    SummaryBatch,
    UploadBatch,
    WireError,
    batch_from_matches,
    decode,
    decode_batch,
    decode_condensed,
    encode_batch,
    encode_condensed,
)

REF = PatternRef("p1", "a b c", 3.0, 1, (), "o")


def assert_same(a, b) -> None:
    assert type(a) is type(b)
    for name, x in vars(a).items():
        y = vars(b)[name]
        if isinstance(x, np.ndarray):
            np.testing.assert_array_equal(x, y, err_msg=name)
            assert x.dtype.kind == y.dtype.kind, name
        elif isinstance(x, dict):
            assert list(x) == list(y), name
            for k in x:
                np.testing.assert_array_equal(x[k], y[k], err_msg=f"{name}[{k}]")
                if x[k].dtype == object:  # 7 and "7", 7 and 7.0 are different values
                    assert kinds(x[k]) == kinds(y[k]), f"{name}[{k}]"
        else:
            assert x == y, name


# --------------------------------------------------------------------------- strategies

keys = st.one_of(st.none(), st.text(max_size=5), st.integers(-5, 5),
                 st.floats(allow_nan=False, allow_infinity=False))


# the events' columns; the pattern's partition attribute is none of them, else its values
# would have to include every match's partition (a batch the collector refuses)
COLUMNS = ("text", "num", "mixed")


@st.composite
def upload_batches(draw) -> UploadBatch:
    n_ev = draw(st.integers(0, 30))
    pos = np.unique(np.array(draw(st.lists(st.integers(0, 10**6), min_size=n_ev,
                                           max_size=n_ev)), dtype=np.int64))
    n_ev = len(pos)
    tags = np.sort(np.array(draw(st.lists(st.floats(-1e6, 1e6), min_size=n_ev,
                                          max_size=n_ev)), dtype=float))
    names = draw(st.lists(st.text(min_size=1, max_size=4), min_size=1, max_size=4,
                          unique=True))
    types = np.array(draw(st.lists(st.integers(0, len(names) - 1), min_size=n_ev,
                                   max_size=n_ev)), dtype=np.int32)
    parts, points, starts, errors, ptr, traj = [], [], [], [], [0], []
    for _ in range(draw(st.integers(0, 8)) if n_ev else 0):
        chosen = sorted(set(draw(st.lists(st.integers(0, n_ev - 1), min_size=1, max_size=4))))
        traj += pos[chosen].tolist()
        ptr.append(len(traj))
        points.append(tags[chosen[-1]])
        starts.append(tags[chosen[0]])
        errors.append(draw(st.integers(0, 5)))
        parts.append(draw(keys))
    window = max([p - s for p, s in zip(points, starts)], default=0.0) + draw(
        st.floats(0, 10))
    text_col = np.empty(n_ev, dtype=object)
    text_col[:] = draw(st.lists(st.one_of(st.none(), st.text(max_size=6)), min_size=n_ev,
                                max_size=n_ev))
    num_col = np.array(draw(st.lists(st.floats(allow_infinity=False), min_size=n_ev,
                                     max_size=n_ev)), dtype=float)
    mixed_col = np.empty(n_ev, dtype=object)
    mixed_col[:] = draw(st.lists(st.one_of(st.none(), st.text(max_size=3),
                                           st.integers(-2**63, 2**64 - 1),
                                           st.floats(allow_nan=False)),
                                 min_size=n_ev, max_size=n_ev))
    return UploadBatch(
        device=draw(st.from_regex(r"[A-Za-z0-9._-]{1,64}", fullmatch=True)),
        seq=draw(st.integers(0, 2**63 - 1)),
        pattern=PatternRef(draw(st.from_regex(r"[A-Za-z0-9._-]{1,10}", fullmatch=True)),
                           draw(st.text(max_size=20)), window,
                           draw(st.integers(0, 9)),
                           tuple(draw(st.lists(st.text(max_size=10), max_size=3))),
                           draw(st.one_of(st.none(), st.text(max_size=5).filter(
                               lambda name: name not in COLUMNS)))),
        created_at=draw(st.floats(0, 2e9)), tag_is_time=draw(st.booleans()),
        partition=parts, point=np.array(points, dtype=float),
        start=np.array(starts, dtype=float), errors=np.array(errors, dtype=np.int32),
        trajectory_ptr=np.array(ptr, dtype=np.int64), trajectory=np.array(traj, np.int64),
        event_position=pos, event_tag=tags, event_type=types, type_names=names,
        columns=dict(zip(COLUMNS, (text_col, num_col, mixed_col))))


@given(upload_batches())
@settings(max_examples=150, deadline=None)
def test_round_trip_of_random_batches(batch):
    assert_same(decode_batch(encode_batch(batch)), batch)


@given(upload_batches(), st.data())
@settings(max_examples=100, deadline=None)
def test_every_truncation_and_random_byte_flip_is_a_wire_error_or_a_valid_batch(batch, data):
    raw = encode_batch(batch)
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(WireError):
        decode(raw[:cut])
    i = data.draw(st.integers(0, len(raw) - 1))
    flipped = raw[:i] + bytes([raw[i] ^ data.draw(st.integers(1, 255))]) + raw[i + 1:]
    try:
        assert isinstance(decode(flipped), (UploadBatch, SummaryBatch))
    except WireError:
        pass


@given(st.binary(max_size=200))
def test_garbage_is_a_wire_error(garbage):
    with pytest.raises(WireError):
        decode(garbage)


# --------------------------------------------------------------------------- from the engine


def flights_like(n: int, seed: int) -> EventBatch:
    rng = np.random.default_rng(seed)
    tags = np.cumsum(rng.integers(0, 3, n)).astype(float)
    return EventBatch.from_events(
        [{"type": "abcd"[rng.integers(4)], "t": t, "o": "xyz"[rng.integers(3)],
          "v": float(rng.normal())} for t in tags])


@pytest.mark.parametrize("seed", range(5))
def test_batch_from_engine_output_carries_exactly_the_window_events(seed):
    events = flights_like(300, seed)
    found = acep.match("a b c", events, 4.0, 1, partition="o")
    ref = PatternRef("p", "a b c", 4.0, 1, (), "o")
    batch = batch_from_matches(found, events, device="pi", seq=seed, pattern=ref,
                               created_at=5.0)
    back = decode_batch(encode_batch(batch))
    assert_same(back, batch)
    assert len(back) == len(found) > 0
    np.testing.assert_array_equal(back.trajectory, found.trajectory)
    # brute force: an event is sent iff it lies in some match's window of its partition
    parts, tags = events.columns["o"], events.tags
    want = sorted({j for p, pt in zip(found.partition, found.point)
                   for j in range(len(events))
                   if parts[j] == p and pt - 4.0 <= tags[j] <= pt})
    assert back.event_position.tolist() == want
    names = events.types()
    assert [back.type_names[c] for c in back.event_type] == names[want].tolist()
    np.testing.assert_array_equal(back.columns["v"], events.columns["v"][want])


@pytest.mark.parametrize("seed", range(3))
def test_a_sample_adds_its_events_to_the_windows_and_may_travel_alone(seed):
    events = flights_like(300, seed)
    found = acep.match("a b c", events, 4.0, 1, partition="o")
    ref = PatternRef("p", "a b c", 4.0, 1, (), "o")
    sample = sample_mask(events, "o", 4.0, 0.3, seed=seed)
    plain = batch_from_matches(found, events, device="pi", seq=1, pattern=ref)
    both = decode_batch(encode_batch(batch_from_matches(found, events, device="pi", seq=2,
                                                        pattern=ref, sample=sample)))
    want = set(plain.event_position.tolist()) | set(np.flatnonzero(sample).tolist())
    assert both.event_position.tolist() == sorted(want)
    np.testing.assert_array_equal(both.trajectory, found.trajectory)
    alone = decode_batch(encode_batch(batch_from_matches(
        acep.MatchBatch.empty(), events, device="pi", seq=3, pattern=ref, sample=sample)))
    assert len(alone) == 0 and alone.event_position.tolist() == np.flatnonzero(sample).tolist()
    np.testing.assert_array_equal(alone.columns["v"], events.columns["v"][sample])
    with pytest.raises(ValueError, match="sample has 5 entries for 300 events"):
        batch_from_matches(found, events, device="pi", seq=4, pattern=ref,
                           sample=np.ones(5, bool))


def test_batch_from_matches_refuses_a_trajectory_outside_the_events():
    events = flights_like(200, 1)
    found = acep.match("a b c", events, 4.0, 1, partition="o")
    with pytest.raises(ValueError, match="outside events"):
        batch_from_matches(found, events.slice(50, 200), device="pi", seq=0,
                           pattern=PatternRef("p", "a b c", 4.0, 1, (), "o"))


def test_condensed_counts_match_points_and_bundles_per_slot():
    events = flights_like(400, 3)
    found = acep.match("a b c", events, 4.0, 1, partition="o")
    ref = PatternRef("p", "a b c", 4.0, 1, (), "o")
    half = len(found) // 2
    condenser = Condenser(slot=25.0, window=4.0)
    batches = [condenser.summarize(_rows(found, sl), device="pi", seq=i, pattern=ref)
               for i, sl in enumerate([slice(0, half), slice(half, None)])]
    got: dict = {}
    for b in batches:
        back = decode_condensed(encode_condensed(b))
        assert_same(back, b)
        for p, j, m, n_b in zip(back.partition, back.slot_index, back.matches, back.bundles):
            old = got.get((p, j), (0, 0))
            got[(p, j)] = (old[0] + m, old[1] + n_b)
    want: dict = {}
    for p, pt in zip(found.partition, found.point):
        j = int(pt // 25.0)
        want[(p, j)] = (want.get((p, j), (0, 0))[0] + 1, want.get((p, j), (0, 0))[1])
    for b in acep.bundles(found, 4.0):
        j = int(b.first // 25.0)
        want[(b.partition, j)] = (want[(b.partition, j)][0], want[(b.partition, j)][1] + 1)
    assert got == want
    assert sum(v[1] for v in got.values()) == len(acep.bundles(found, 4.0))


def _rows(found, sl):
    idx = np.arange(len(found))[sl]
    return type(found)(found.partition[idx], found.point[idx], found.start[idx],
                       found.errors[idx], np.zeros(len(idx) + 1, np.int64),
                       np.zeros(0, np.int64), np.zeros(0), found.tag_is_time)


# --------------------------------------------------------------------------- refusals


def small_batch() -> UploadBatch:
    events = EventBatch.from_events(
        [{"type": t, "t": i, "o": o, "v": i * 1.5}
         for i, (t, o) in enumerate(zip("abcabdabc", "xyxyxyxyx"))])
    found = acep.match("a b c", events, 3, 1, partition="o")
    return batch_from_matches(found, events, device="pi-1", seq=7, pattern=REF,
                              created_at=1.0)


def mutated(change) -> bytes:
    doc = msgpack.unpackb(encode_batch(small_batch()), raw=False)
    change(doc)
    return msgpack.packb(doc, use_bin_type=True)


def _set(path: str, value):
    def change(doc):
        *head, last = path.split(".")
        for k in head:
            doc = doc[int(k)] if isinstance(doc, list) else doc[k]
        if value is _DELETE:
            del doc[last]
        else:
            doc[last] = value
    return change


_DELETE = object()
I4 = np.array([5], dtype="<i4").tobytes()

BAD = [
    ("version", 2, "unsupported version 2"),
    ("version", "1", "field 'version'"),
    ("format", "other", "field 'format'"),
    ("kind", "pictures", "field 'kind'"),
    ("device", "a/b", "field 'device'"),
    ("device", 7, "field 'device'"),
    ("seq", -1, "field 'seq'"),
    ("seq", True, "field 'seq'"),
    ("batch_id", "pi-1/8", "field 'batch_id'"),
    ("created_at", float("nan"), "field 'created_at'"),
    ("tag_is_time", 1, "field 'tag_is_time'"),
    ("pattern.hash", "0" * 64, "field 'pattern.hash'"),
    ("pattern.k", 2, "field 'pattern.hash'"),
    ("pattern.where", "x", "field 'pattern.where'"),
    ("pattern.extra", 1, "unknown keys"),
    ("pattern", _DELETE, "field 'pattern': missing"),
    ("pattern.id", "", "field 'pattern.id': '' does not match"),
    ("pattern.id", "../../etc", "field 'pattern.id': '../../etc' does not match"),
    ("matches.point", [2.0, 8.0], "field 'matches.point'"),
    ("matches.point", b"\0" * 9, "not a multiple of 8"),
    ("matches.start", b"", "field 'matches.start'"),
    ("matches.errors", np.array([-1, 0], "<i4").tobytes(), "field 'matches.errors'"),
    ("matches.partition", np.array([0, 3], "<i4").tobytes(), "field 'matches.partition'"),
    ("matches.partitions", [["x"]], "field 'matches.partitions[0]'"),
    ("matches.trajectory_ptr", np.array([0, 3, 4], "<i8").tobytes(),
     "field 'matches.point': not the tag"),
    ("matches.trajectory_ptr", np.array([0, 0, 4], "<i8").tobytes(),
     "field 'matches.trajectory_ptr'"),
    ("matches.trajectory", np.array([0, 2, 6, 7], "<i8").tobytes(),
     "field 'matches.trajectory': a position"),
    ("matches.trajectory", np.array([2, 0, 6, 8], "<i8").tobytes(),
     "field 'matches.trajectory'"),
    ("events.position", np.array([0, 2, 2, 8], "<i8").tobytes(), "field 'events.position'"),
    ("events.type", np.array([0, 1, 0, 9], "<i4").tobytes(), "field 'events.type'"),
    ("events.type_names", ["a", "a"], "duplicate"),
    ("events.columns.0.kind", "pickle", "field 'events.columns[0]'"),
    ("events.columns.1.data", b"\0" * 8, "field 'events.columns[1].data'"),
    ("events.columns.0.name", "v", "duplicate column"),
    ("summary", {}, "unknown top-level keys"),
]


@pytest.mark.parametrize("path,value,message", BAD, ids=[f"{p}={v!r}"[:40] for p, v, _ in BAD])
def test_bad_fields_are_refused_naming_the_field(path, value, message):
    with pytest.raises(WireError, match=_re(message)):
        decode_batch(mutated(_set(path, value)))


def _re(text: str) -> str:
    import re

    return re.escape(text)


def test_the_mutation_helper_keeps_a_good_batch_good():
    assert_same(decode_batch(mutated(lambda doc: None)), small_batch())


def test_oversized_bodies_are_refused_before_decoding():
    raw = encode_batch(small_batch())
    with pytest.raises(WireError, match="above the limit"):
        decode(raw, Limits(max_bytes=len(raw) - 1))
    assert decode(raw, Limits(max_bytes=len(raw)))


def test_long_strings_and_arrays_hit_the_msgpack_limits():
    with pytest.raises(WireError, match="max_str_len"):
        decode(mutated(_set("device", "x" * 5000)))
    big = mutated(_set("events.type_names", [str(i) for i in range(100)]))
    with pytest.raises(WireError, match="max_array_len"):
        decode(big, Limits(max_types=50, max_matches=50, max_events=50, max_partitions=50,
                           max_columns=50, max_slots=50))


def test_too_many_events_or_matches_are_refused_by_count():
    raw = encode_batch(small_batch())
    with pytest.raises(WireError, match="field 'events.position'.*limit of 2"):
        decode(raw, Limits(max_events=2))
    with pytest.raises(WireError, match="field 'matches.point'.*limit of 1"):
        decode(raw, Limits(max_matches=1))


@pytest.mark.parametrize("depth", [7, 50, 5000])
def test_deep_nesting_is_refused(depth):
    raw = b"\x91" * depth + b"\xa1x"  # [[[...["x"]...]]] written directly: packb recurses
    with pytest.raises(WireError, match="nested deeper|not valid msgpack"):
        decode(raw)
    wrapped = b"\x81\xa6format" + raw  # the same under a map key
    with pytest.raises(WireError, match="nested deeper|not valid msgpack"):
        decode(wrapped)
    nested = mutated(_set("pattern.where", [[[[["w"]]]]]))
    with pytest.raises(WireError, match="nested deeper than 6"):
        decode(nested)


@pytest.mark.parametrize("raw,message", [
    (b"", "empty"),
    (msgpack.packb([1, 2]), "top level is list"),
    (msgpack.packb({1: 2}), "not valid msgpack"),  # strict_map_key: keys are strings
    (msgpack.packb(msgpack.ExtType(1, b"abcd")), "not valid msgpack"),
    ("text", "expected bytes"),
])
def test_non_documents_are_refused(raw, message):
    with pytest.raises(WireError, match=message):
        decode(raw)


def test_trailing_bytes_and_kind_mismatch_are_refused():
    raw = encode_batch(small_batch())
    with pytest.raises(WireError, match="trailing bytes"):
        decode(raw + b"\x00")
    with pytest.raises(WireError, match="'matches' where 'summary'"):
        decode_condensed(raw)
    summary = Condenser(4, 3).summarize(acep.match("a", EventBatch.from_events(
        [{"type": "a", "t": 1}]), 1), device="d", seq=1, pattern=REF, created_at=0)
    with pytest.raises(WireError, match="'summary' where 'matches'"):
        decode_batch(encode_condensed(summary))


def test_summary_rows_outside_their_slot_are_refused():
    found = acep.match("a", EventBatch.from_events([{"type": "a", "t": 9}]), 1)
    good = Condenser(4, 3).summarize(found, device="d", seq=1, pattern=REF, created_at=0)
    assert decode_condensed(encode_condensed(good)).slot_index.tolist() == [2]
    good.slot_index[:] = 1
    with pytest.raises(WireError, match="outside the row's slot"):
        decode(encode_condensed(good))


def test_limits_must_be_positive():
    with pytest.raises(ValueError, match="max_depth"):
        Limits(max_depth=0)


def _with_columns(*names: str):
    def change(doc):
        n = len(np.frombuffer(doc["events"]["position"], "<i8"))
        for k, name in enumerate(names):
            doc["events"]["columns"].append(
                {"name": name, "kind": "f8", "data": np.full(n, 111.0 * (k + 1)).tobytes()})
    return change


@pytest.mark.parametrize("names", [("attr_tag", "tag"), ("tag", "attr_tag"), ("attr_type",)])
def test_an_attribute_named_like_an_archived_reserved_one_is_refused(names):
    """The archive keeps attribute ``tag`` as ``attr_tag``: an attribute of that name
    would overwrite it there (or be read back by the trainer as ``tag``)."""
    bad = next(n for n in names if n.startswith("attr_"))
    with pytest.raises(WireError, match=_re(f"attribute {bad!r} is not taken")):
        decode_batch(mutated(_with_columns(*names)))


def test_a_reserved_attribute_is_archived_apart_and_read_back_by_its_name():
    import pyarrow as pa
    import pyarrow.parquet as pq

    from edge.collector.archive import encode
    from trainer import sources

    assert sources.ARCHIVE_RESERVED == ARCHIVE_RESERVED  # the trainer reads what is written
    batch = decode_batch(mutated(_with_columns("tag", "type")))
    table = pq.read_table(pa.BufferReader(encode(batch)))
    assert set(table.column("attr_tag").to_pylist()) == {111.0}
    assert set(table.column("attr_type").to_pylist()) == {222.0}
    assert table.column("tag").to_pylist() == batch.event_tag.tolist()
    assert [sources._archive_name(n) for n in ("attr_tag", "attr_type", "v")] == \
        ["tag", "type", "v"]


# --------------------------------------------------------------------------- mixed columns

BIG = 2**53  # above it a float64 rounds integers: ids stay Python ints


def kinds(values) -> list[tuple[str, object]]:
    """Each value with its kind: 7, 7.0 and "7" are three."""
    return [(type(v).__name__, v) for v in values]


def mixed_events() -> EventBatch:
    """``a b c`` in the partitions 7 (its b written 7.0), "7", two ids a float would round
    to one, and "x"."""
    ids = [(7, 7.0, 7), ("7",) * 3, (BIG,) * 3, (BIG + 1,) * 3, ("x",) * 3]
    return EventBatch.from_events(
        [{"type": ty, "t": float(3 * i + j), "id": key}
         for i, trio in enumerate(ids) for j, (ty, key) in enumerate(zip("abc", trio))])


def test_a_column_that_mixes_numbers_and_text_keeps_each_values_kind():
    """7 and "7" are two partitions (README, ``acep match``): the wire keeps them apart, in
    the matches' partitions and in the events' column, with big ids exact."""
    events = mixed_events()
    found = acep.match("a b c", events, 3.0, 0, partition="id")
    assert kinds(found.partition) == kinds([7, "7", BIG, BIG + 1, "x"])
    ref = PatternRef("p", "a b c", 3.0, 0, (), "id")
    raw = encode_batch(batch_from_matches(found, events, device="pi", seq=0, pattern=ref,
                                          created_at=1.0))
    back = decode_batch(raw)
    assert kinds(back.partition) == kinds(found.partition)
    sent = events.columns["id"][back.event_position]
    assert kinds(back.columns["id"]) == kinds(sent)  # 7.0 stays a float
    doc = msgpack.unpackb(raw, raw=False)
    assert [c["kind"] for c in doc["events"]["columns"]] == ["mixed"]


def test_a_column_of_text_alone_is_sent_as_text():
    events = EventBatch.from_events([{"type": t, "t": float(i), "o": "x", "note": note}
                                     for i, (t, note) in enumerate(zip("abc", ["y", None, "y"]))])
    found = acep.match("a b c", events, 3.0, 1, partition="o")
    raw = encode_batch(batch_from_matches(found, events, device="pi", seq=0, created_at=1.0,
                                          pattern=PatternRef("p", "a b c", 3.0, 1, (), "o")))
    columns = msgpack.unpackb(raw, raw=False)["events"]["columns"]
    assert [(c["kind"], c["values"]) for c in columns] == [("text", ["x"]), ("text", ["y"])]
    assert decode_batch(raw).columns["note"].tolist() == ["y", None, "y"]


def huge_id_matches():
    """``a b`` matched in partition 2**70 (beyond msgpack's integers) and in partition 7."""
    events = EventBatch.from_events([{"type": t, "t": float(i), "id": key} for i, (t, key)
                                     in enumerate(zip("abab", [2**70, 2**70, 7, 7]))])
    return events, acep.match("a b", events, 3.0, 0, partition="id")


def test_a_summary_sends_a_partition_beyond_64_bits_as_its_text():
    """msgpack holds integers in [-2**63, 2**64): packing a larger key raised
    OverflowError, which stopped the agent with a traceback at every start."""
    _, found = huge_id_matches()
    ref = PatternRef("p", "a b", 3.0, 0, (), "id")
    summary = Condenser(4, 3).summarize(found, device="pi", seq=1, pattern=ref, created_at=0)
    assert sorted(kinds(decode_condensed(encode_condensed(summary)).partition), key=repr) == \
        sorted(kinds([str(2**70), 7]), key=repr)


def test_a_batch_sends_an_id_beyond_64_bits_as_its_text_in_partitions_and_column():
    """The same text in both, so the collector finds the partition's events."""
    events, found = huge_id_matches()
    ref = PatternRef("p", "a b", 3.0, 0, (), "id")
    back = decode_batch(encode_batch(batch_from_matches(found, events, device="pi", seq=0,
                                                        pattern=ref, created_at=1.0)))
    assert kinds(back.partition) == kinds([str(2**70), 7])
    assert kinds(back.columns["id"]) == kinds([str(2**70), str(2**70), 7, 7])


def _mixed_column(values, codes):
    def change(doc):
        n = len(np.frombuffer(doc["events"]["position"], "<i8"))
        doc["events"]["columns"].append(
            {"name": "m", "kind": "mixed", "values": values,
             "codes": np.resize(np.array(codes, "<i4"), n).tobytes()})
    return change


@pytest.mark.parametrize("values,codes,message", [
    ([7, True], [0, 1], "field 'events.columns[2].values[1]': bool is not allowed"),
    ([7, ["x"]], [0, 1], "field 'events.columns[2].values[1]': list is not allowed"),
    ([7, float("nan")], [0, 1], "field 'events.columns[2].values[1]': NaN is no value"),
    ([7, "7", 7], [0, 1], "field 'events.columns[2].values': duplicate entries"),
    ([7, "7"], [0, 2], "field 'events.columns[2].codes': code out of range"),
])
def test_bad_mixed_columns_are_refused_naming_the_field(values, codes, message):
    with pytest.raises(WireError, match=_re(message)):
        decode_batch(mutated(_mixed_column(values, codes)))


@pytest.mark.parametrize("values", [[7, 7.0, "7", None], [-2**63, 2**64 - 1, "x", None]])
def test_a_mixed_column_holds_each_values_kind_and_msgpack_s_integers(values):
    back = decode_batch(mutated(_mixed_column(values[:-1], [0, 1, 2, -1])))
    n = len(back.event_position)
    assert kinds(back.columns["m"]) == kinds(np.resize(np.array(values, object), n))
