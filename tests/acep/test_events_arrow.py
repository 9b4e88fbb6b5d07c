"""Text columns of Arrow formats kept as dictionaries (``EventBatch.text_codes``): a
Parquet file gives the same events, matches and output lines as the same events in JSON
Lines, whether its text columns are stored dictionary-encoded, plain, or as Arrow
dictionaries, with nulls, empty texts and non-ASCII."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from acep._output import bundle_lines, match_lines
from acep.events import EventBatch, EventSpec, read_all, read_events
from acep.events.model import TextCodes, text_column
from acep.matcher import MatchBatch, Matcher, Pattern, bundles

SPEC = EventSpec(tag="t", type="type", attributes=("origin", "note", "v"))
texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=4)
# a few keys per file, so partitions repeat; None is a missing value
keys = st.lists(
    st.one_of(st.none(), st.just(""), st.sampled_from(["ATL", "Zürich", "東京"]), texts),
    min_size=1,
    max_size=5,
)


@st.composite
def flights(draw) -> list[dict]:
    n = draw(st.integers(0, 60))
    origins, notes = draw(keys), draw(keys)
    tags = np.cumsum(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))).tolist()
    gaps = draw(st.sets(st.integers(0, max(n - 1, 0)), max_size=3))  # bad events, skipped
    tags = [None if i in gaps else t for i, t in enumerate(tags)]
    return [
        {
            "t": t,
            "type": draw(st.sampled_from("abc")),
            "origin": draw(st.sampled_from(origins)),
            "note": draw(st.sampled_from(notes)),
            "v": draw(st.integers(0, 9)),
        }
        for t in tags
    ]


def _parquet(path, rows: list[dict], storage: str, row_group: int) -> None:
    schema = pa.schema(
        [
            ("t", pa.int64()),
            ("type", pa.string()),
            ("origin", pa.string()),
            ("note", pa.large_string()),
            ("v", pa.int64()),
        ]
    )
    table = pa.Table.from_pylist(rows, schema=schema)
    if storage == "arrow dictionary":  # the schema itself says dictionary
        table = table.set_column(2, "origin", table.column("origin").dictionary_encode())
    pq.write_table(table, path, row_group_size=max(row_group, 1), use_dictionary=storage != "plain")


def _jsonl(path, rows: list[dict], ascii_only: bool) -> None:
    path.write_text(
        "".join(json.dumps(r, ensure_ascii=ascii_only) + "\n" for r in rows), encoding="utf-8"
    )


def _outputs(path, batch_size: int) -> tuple[str, str, dict]:
    matcher = Matcher(Pattern.compile("a b c"), 4.0, 1, partition="origin", on_bad_event="skip")
    found = [
        matcher.match_batch(b)
        for b in read_events(path, SPEC, batch_size=batch_size, on_bad_event="skip")
    ]
    found.append(matcher.flush())
    merged = MatchBatch.concat(found)
    stats = {k: v for k, v in matcher.stats.items() if k != "bytes_per_node"}
    return match_lines(merged), bundle_lines(bundles(merged, 4.0), False), stats


def _values(column: np.ndarray) -> list:
    return [
        None if v is None or (isinstance(v, float) and math.isnan(v)) else v
        for v in column.tolist()
    ]


def _check_codes(batch: EventBatch) -> None:
    for name in batch.text_codes:
        encoded = batch.codes_of(name)
        assert encoded is not None, name
        table = [*encoded.values.tolist(), None]
        assert [table[c] for c in encoded.codes.tolist()] == batch.columns[name].tolist()


@pytest.mark.parametrize("storage", ["dictionary", "plain", "arrow dictionary"])
@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    rows=flights(),
    row_group=st.integers(1, 70),
    batch_size=st.integers(1, 70),
    ascii_only=st.booleans(),
)
# a dictionary holds the texts of the whole row group: "" of a bad event here, a value of a
# later batch elsewhere; the partitions are those of the events, in the order they come
@example(
    rows=[
        {"t": None, "type": "a", "origin": "", "note": None, "v": 0},
        {"t": 0, "type": "a", "origin": None, "note": None, "v": 0},
        {"t": 1, "type": "b", "origin": "y", "note": None, "v": 0},
        {"t": 2, "type": "c", "origin": "x", "note": None, "v": 0},
        {"t": 3, "type": "a", "origin": "y", "note": None, "v": 0},
    ],
    row_group=5,
    batch_size=3,
    ascii_only=False,
)
def test_parquet_text_columns_give_the_json_lines_matches(
    tmp_path, storage, rows, row_group, batch_size, ascii_only
):
    parquet, jsonl = tmp_path / "ev.parquet", tmp_path / "ev.jsonl"
    _parquet(parquet, rows, storage, row_group)
    _jsonl(jsonl, rows, ascii_only)
    batches = list(read_events(parquet, SPEC, batch_size=batch_size, on_bad_event="skip"))
    for batch in batches:
        _check_codes(batch)
        assert set(batch.text_codes) == ({"origin", "note"} if len(batch) else set())
    if batches:
        a, b = (read_all(p, SPEC, on_bad_event="skip") for p in (parquet, jsonl))
        for name in ("origin", "note", "v"):
            assert _values(a.columns[name]) == _values(b.columns[name]), name
        _check_codes(a)
    assert _outputs(parquet, batch_size) == _outputs(jsonl, batch_size)


def _batch(origins: list) -> EventBatch:
    column, encoded = text_column(np.array(origins, dtype=np.int32), ["x", "y", ""])
    n = len(origins)
    return EventBatch(
        np.zeros(n, np.int32),
        ["a"],
        np.arange(n, dtype=np.float64),
        {"origin": column},
        text_codes={"origin": encoded},
    )


def test_codes_follow_slices_and_concatenation():
    a, b = _batch([0, -1, 2, 1]), _batch([2, 2, -1, 0])
    b.text_codes["origin"] = TextCodes(
        b.columns["origin"],
        b.text_codes["origin"].codes,
        np.array(["", "q", "x"], dtype=object)[[1, 1, 0]],
    )
    b.columns["origin"] = np.array(["q", "q", None, "q"], dtype=object)  # replaced: stale
    assert b.codes_of("origin") is None
    for batch in (a.slice(1, 3), EventBatch.concat([a, a.slice(2, 4)])):
        _check_codes(batch)
        assert batch.codes_of("origin") is not None
    assert batch.columns["origin"].tolist() == ["x", None, "", "y", "", "y"]
    assert EventBatch.concat([a, b]).codes_of("origin") is None  # b's is stale: none kept


def test_a_replaced_column_is_matched_by_its_values_not_stale_codes():
    batch = _batch([0, 0, 0, 1, 1, 1])
    batch.columns["origin"] = np.array(["p", "q", "p", "q", "p", "q"], dtype=object)
    found = Matcher(Pattern.compile("a a"), 10.0, 0, partition="origin").match(batch)
    assert sorted(set(found.partition.tolist())) == ["p", "q"]
