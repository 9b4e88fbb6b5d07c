"""The bulk JSON Lines writer of ``acep match`` (and ``--bundles``) prints the very bytes of
the per-match writer it replaced: that writer is frozen here as the oracle, one
``json.dumps`` of a dict per match, timestamps formatted one at a time with ``datetime``."""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.cli import run_acep

from acep import _output
from acep._output import bundle_lines, match_lines, tag_texts
from acep.events import read_all
from acep.matcher import Bundle, MatchBatch, Matcher, Pattern, bundles

_EPOCH = datetime(1970, 1, 1)  # naive: isoformat adds no offset


def _iso(t: float) -> str:
    """A timestamp as the old writer showed it: UTC, whole seconds, else ms, else us."""
    micros = round(t * 1e6)
    stamp = _EPOCH + timedelta(microseconds=micros)
    if micros % 1_000_000 == 0:
        return stamp.isoformat(timespec="seconds")
    return stamp.isoformat(timespec="milliseconds" if micros % 1000 == 0 else "microseconds")


def _tag(t: float, is_time: bool):
    if is_time:
        return _iso(t)
    return int(t) if float(t).is_integer() else t


def _old_match_lines(found: MatchBatch) -> str:
    ptr, lines = found.trajectory_ptr, []
    for i, key in enumerate(found.partition):
        a, b = int(ptr[i]), int(ptr[i + 1])
        lines.append(json.dumps({
            "partition": key.item() if isinstance(key, np.generic) else key,
            "start": _tag(float(found.start[i]), found.tag_is_time),
            "point": _tag(float(found.point[i]), found.tag_is_time),
            "errors": int(found.errors[i]),
            "events": [_tag(float(t), found.tag_is_time) for t in found.trajectory_tags[a:b]],
            "positions": [int(p) for p in found.trajectory[a:b]]}) + "\n")
    return "".join(lines)


def _old_bundle_lines(found: list[Bundle], is_time: bool) -> str:
    return "".join(json.dumps({"partition": b.partition, "first": _tag(b.first, is_time),
                               "last": _tag(b.last, is_time), "points": b.n_points}) + "\n"
                   for b in found)


# partition keys of every kind; ints and non-integral floats are never equal, so no two
# keys of one batch are one dict key with two texts
keys = st.one_of(
    st.text(max_size=6),
    st.integers(-10, 10),
    st.integers(2**53, 2**64).flatmap(lambda n: st.sampled_from([n, -n, n + 1])),
    st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: not f.is_integer()),
)
# seconds with no fraction, a whole number of milliseconds, or microseconds
time_tags = st.builds(
    lambda s, kind, k: s + (0, k // 1000 * 1000, k)[kind] / 1e6,
    st.integers(0, 4_000_000_000), st.integers(0, 2), st.integers(0, 999_999))
# whole seconds over the years 1-9999 (the compiled writer formats these itself), some a
# fraction of a microsecond off
whole_tags = st.one_of(
    st.builds(lambda s, e: s + e, st.integers(-62135596800, 253402300799),
              st.sampled_from([0.0, 4e-7, -4e-7])),
    st.sampled_from([-62135596800.0, 253402300799.0, 0.0, -1.0, 951782400.0, 951868799.0,
                     4107542400.0, -2208988800.0, -86400.0, 1e-7]))
plain_tags = st.one_of(st.integers(-2**60, 2**60).map(float),
                       st.floats(-1e300, 1e300, allow_nan=False),
                       st.sampled_from([0.5, -0.0, 1e20, 2.0**53 + 2, 0.1]))


@st.composite
def match_batches(draw) -> MatchBatch:
    is_time = draw(st.booleans())
    tags = (draw(st.sampled_from([time_tags, whole_tags])) if is_time else plain_tags)
    n = draw(st.integers(0, 12))
    sizes = draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
    ptr = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int64)
    m = int(ptr[-1])
    partition = np.empty(n, dtype=object)
    partition[:] = draw(st.lists(st.sampled_from(draw(st.lists(keys, min_size=1, max_size=4))),
                                 min_size=n, max_size=n))
    floats = lambda k: np.array(draw(st.lists(tags, min_size=k, max_size=k)), dtype=np.float64)  # noqa: E731
    return MatchBatch(partition, floats(n), floats(n),
                      np.array(draw(st.lists(st.integers(0, 9), min_size=n, max_size=n)),
                               dtype=np.int32), ptr,
                      np.array(draw(st.lists(st.integers(0, 2**40), min_size=m, max_size=m)),
                               dtype=np.int64), floats(m), is_time)


# both writers: the compiled one (acep/_lines.pyx, where it is built) and the numpy one
def _compiled_match_lines(found: MatchBatch) -> str:
    return _output._compiled_match_lines(found).decode("ascii")


WRITERS = [_output._assembled_match_lines] + (
    [_compiled_match_lines] if _output._lines is not None else [])


@pytest.mark.parametrize("writer", WRITERS, ids=lambda w: w.__name__.strip("_"))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(found=match_batches())
def test_match_lines_are_the_old_writers_bytes(writer, found):
    assert (writer(found) if len(found) else match_lines(found)) == _old_match_lines(found)


def test_the_compiled_writer_is_built_where_compiled_code_is_required():
    """CI (``ACEP_REQUIRE_COMPILED``) checks the writer it ships, not only the fallback."""
    if not os.environ.get("ACEP_REQUIRE_COMPILED"):
        pytest.skip("ACEP_REQUIRE_COMPILED is not set")
    assert _output._lines is not None


@settings(max_examples=200, deadline=None)
@given(is_time=st.booleans(), data=st.data())
def test_bundle_lines_are_the_old_writers_bytes(is_time, data):
    tags = time_tags if is_time else plain_tags
    found = data.draw(st.lists(st.builds(Bundle, keys, tags, tags, st.integers(1, 10**6)),
                               max_size=10))
    assert bundle_lines(found, is_time) == _old_bundle_lines(found, is_time)


def test_fractions_of_seconds_print_as_milliseconds_or_microseconds():
    texts = tag_texts(np.array([978307200.0, 978307200.1, 978307200.000123, 978307200.0]), True)
    assert texts.tolist() == ['"2001-01-01T00:00:00"', '"2001-01-01T00:00:00.100"',
                              '"2001-01-01T00:00:00.000123"', '"2001-01-01T00:00:00"']


def test_acep_match_prints_the_old_bytes_end_to_end(tmp_path):
    """Through the command line, on partitions of mixed kinds and fractional timestamps,
    per match and per bundle."""
    rows = []
    for i in range(400):
        key = ["ATL", 7, 2**60 + 1, 2.5][i % 4]
        rows.append({"type": "abc"[(i * 7) % 3], "t": f"2001-01-01T00:{i // 60:02d}:"
                     f"{i % 60:02d}.{(i * 37) % 1000:03d}", "id": key})
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    found = Matcher(Pattern.compile("a b c"), 20.0, 1, partition="id").match(read_all(path))
    for extra, expected in (([], _old_match_lines(found)),
                            (["--bundles"], _old_bundle_lines(bundles(found, 20.0), True))):
        out = run_acep("match", "-p", "a b c", "-w", "20s", "-k", "1", "--partition", "id", path,
                       *extra, check=True).stdout
        assert out == expected and out.count("\n") >= 4


def _old_exact_line(m, components, tags, is_time) -> dict:
    """``acep exact``'s verbose object, each tag formatted on its own (the old writer)."""
    events, positions = {}, {}
    for (var, single), block in zip(components, m.positions):
        texts = [_tag(float(tags[p]), is_time) for p in block]
        events[var] = texts[0] if single else texts
        positions[var] = block[0] if single else list(block)
    partition = None if m.partition is None else [
        int(v) if isinstance(v, float) and v.is_integer() else v for v in m.partition]
    if partition is not None and len(partition) == 1:
        partition = partition[0]
    return {"start": _tag(m.start, is_time), "end": _tag(m.end, is_time),
            "partition": partition, "events": events, "positions": positions, "values": None}


@pytest.mark.parametrize("seed, is_time", [(1, True), (2, True), (3, False), (4, False)])
def test_acep_exact_prints_the_old_bytes(seed, is_time, tmp_path_factory):
    """Verbose and compact output of ``acep exact``, with tags formatted in one call, are
    the old writer's bytes: fractions of seconds, time and plain tags, Kleene lists."""
    from acep.nfab import Engine, load_query
    from acep.nfab.ast import Kind

    rng = np.random.default_rng(seed)
    folder = tmp_path_factory.mktemp("exact")
    steps = rng.choice([0.0, 0.25, 1.0, 0.000123, 2.5], size=60)
    tags = (978307200.0 if is_time else 0.0) + np.cumsum(steps)
    rows = [{"type": "AB"[rng.integers(2)], "t": float(t), "symbol": ["x", 7][rng.integers(2)]}
            for t in tags]
    if is_time:
        for r in rows:
            r["t"] = _iso(r["t"]) + "Z"
    (folder / "events.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "q.sase").write_text("PATTERN SEQ(A a, B+ b[ ], A c)\nWHERE skip_till_any_match("
                                   "a, b[ ], c) { [symbol] }\nWITHIN 3\n")
    query = load_query(str(folder / "q.sase"))
    batch = read_all(folder / "events.jsonl")
    components = [(c.var, c.kind is Kind.ONE) for c in query.positive]
    found = Engine(query, engine="shared").run(batch)
    verbose = [_old_exact_line(m, components, batch.tags, is_time) for m in found]
    groups = Engine(query, output="compact", engine="shared").run(batch)
    compact = [{"end": _tag(float(batch.tags[g.end_position]), is_time),
                "end_position": g.end_position, "count": g.count(),
                "matches": [_old_exact_line(m, components, batch.tags, is_time)
                            for m in g.expand()]} for g in groups]
    for output, expected in (("verbose", verbose), ("compact", compact)):
        out = run_acep("exact", "--engine", "shared", "--output", output, folder / "q.sase",
                       folder / "events.jsonl", check=True).stdout
        assert out == "".join(json.dumps(d) + "\n" for d in expected)
    assert verbose


def _old_bundles(found: MatchBatch, window: float) -> list[Bundle]:
    """Bundles as acep.matcher.bundles found them point by point (the oracle)."""
    out, by_partition = [], {}
    for key, point in zip(found.partition, found.point):
        by_partition.setdefault(key, set()).add(float(point))
    for key in sorted(by_partition, key=repr):
        points = np.array(sorted(by_partition[key]))
        breaks = np.flatnonzero(np.diff(points) > window) + 1
        for run in np.split(points, breaks):
            out.append(Bundle(key, float(run[0]), float(run[-1]), len(run)))
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(found=match_batches(), window=st.sampled_from([0.0, 1.0, 1e3, 1e9, 1e300]))
def test_bundles_are_those_found_point_by_point(found, window):
    got, expected = bundles(found, window), _old_bundles(found, window)
    assert [(type(b.partition), b) for b in got] == [(type(b.partition), b) for b in expected]
