"""HistoryGraph ([L16] Definition 4) from hand-made node logs: counts, edges, bundles, maps."""

import contextlib
import math
import os
import re
import threading
import tracemalloc
import zlib
from pathlib import Path

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.history import (
    BINS,
    HAND_LOG,
    HAND_MATCHES,
    N_STATES,
    NAN,
    V1_FILE,
    K,
    W,
    flip,
    hand_graph,
    node_log,
)

from history import _format
from history.graph import (
    FORMAT,
    VERSION,
    HistoryFormatError,
    HistoryGraph,
    cell_of,
    compute_bundles,
    decode_cells,
)


def test_hand_log_counts_edges_bundles_and_maps():
    g = hand_graph()
    assert g.n_cells == 24 and g.shape == (3, 2, 2, 2)
    assert {c: int(v) for c, v in enumerate(g.visits) if v} == {5: 2, 9: 3, 23: 1}
    assert {c: int(v) for c, v in enumerate(g.successes) if v} == {5: 2, 9: 2}
    edges = {(int(s), int(d)): int(n) for s, d, n in zip(g.edge_src, g.edge_dst, g.edge_count)}
    assert edges == {(5, 9): 2, (9, 9): 1, (5, 23): 1}
    # bundles sorted by (partition, first); 5 repeated counts once
    assert g.bundle_partition.tolist() == [0, 0, 1]
    assert g.bundle_first.tolist() == [3.0, 20.0, 4.0]
    assert g.bundle_last.tolist() == [5.0, 20.0, 4.0]
    assert g.bundle_points.tolist() == [2, 1, 1]
    reach = {(int(c), int(b)): int(n)
             for c, b, n in zip(g.reach_cell, g.reach_bundle, g.reach_count)}
    assert reach == {(5, 0): 1, (5, 2): 1, (9, 0): 1, (9, 1): 1}
    assert g.match_map(5).tolist() == [0, 2] and g.match_map(23).tolist() == []
    maps = g.match_maps([5, 9, 23])
    assert maps.tolist() == [[0b10100000], [0b11000000], [0]]
    assert np.unpackbits(maps, axis=1)[:, :3].tolist() == [[1, 0, 1], [1, 1, 0], [0, 0, 0]]
    assert g.partition_keys == [0, 1]


def test_match_batch_keys_are_mapped_through_partition_keys():
    class Found:  # the two attributes of a MatchBatch that matter
        partition = np.array(["ATL", "ATL", "ATL", "BOS"], dtype=object)
        point = np.array([3.0, 5.0, 20.0, 4.0])

    g = hand_graph(partition_keys=["ATL", "BOS"])
    h = HistoryGraph.from_node_log(HAND_LOG, Found(), W, K, BINS, "a b", N_STATES,
                                   partition_keys=["ATL", "BOS"])
    assert h.bundle_partition.tolist() == g.bundle_partition.tolist()
    assert h.partition_keys == ["ATL", "BOS"]
    with pytest.raises(ValueError, match="partition_keys"):
        HistoryGraph.from_node_log(HAND_LOG, Found(), W, K, BINS, "a b", N_STATES)


def test_a_reach_point_outside_every_bundle_is_refused():
    log = node_log([(0, 5, -1, 12.0, 0)])
    with pytest.raises(ValueError, match="'reach'.*12"):
        HistoryGraph.from_node_log(log, HAND_MATCHES, W, K, BINS, "a b", N_STATES)
    log = node_log([(1, 5, -1, 3.0, 0)])  # 3 is a point of partition 0, not of 1
    with pytest.raises(ValueError, match="'reach'"):
        HistoryGraph.from_node_log(log, HAND_MATCHES, W, K, BINS, "a b", N_STATES)


def test_log_without_cells_or_with_cells_beyond_the_bins_is_refused():
    with pytest.raises(ValueError, match="bins="):
        HistoryGraph.from_node_log(node_log([(0, -1, -1, NAN, 0)]), HAND_MATCHES, W, K, BINS,
                                   "a b", N_STATES)
    with pytest.raises(ValueError, match="outside"):
        HistoryGraph.from_node_log(node_log([(0, 24, -1, NAN, 0)]), HAND_MATCHES, W, K, BINS,
                                   "a b", N_STATES)
    with pytest.raises(ValueError, match="lacks"):
        HistoryGraph.from_node_log({"cell": np.zeros(1)}, HAND_MATCHES, W, K, BINS, "a b", 3)


def test_cells_decode_back_to_vectors():
    state, err, rem, gap = np.meshgrid(np.arange(3), np.arange(2), np.arange(4), np.arange(5),
                                       indexing="ij")
    cells = cell_of(state, err, rem, gap, 1, 4, 5)
    assert sorted(cells.ravel().tolist()) == list(range(3 * 2 * 4 * 5))
    back = decode_cells(cells, 1, 4, 5)
    for a, b in zip(back, (state, err, rem, gap)):
        assert np.array_equal(a, b)


def test_top_vectors_decode_cells():
    g = hand_graph()
    top = g.top_vectors(2)
    assert [t["cell"] for t in top] == [9, 5]
    # cell 9 = ((state 1 * 2 + err 0) * 2 + rem 0) * 2 + gap 1
    assert (top[0]["state"], top[0]["err"], top[0]["rem_bin"], top[0]["gap_bin"]) == (1, 0, 0, 1)
    assert top[0]["rem"] == (0.0, 5.0) and top[0]["gap"] == (2.0, 10.0)
    assert top[0]["rate"] == pytest.approx(2 / 3) and top[0]["bundles"] == 2
    assert [t["cell"] for t in g.top_vectors(3, by="rate")] == [5, 9, 23]


def test_bundles_follow_definition_3():
    b = compute_bundles([0, 0, 0, 0, 1, 1], [1.0, 11.0, 21.5, 21.0, 0.0, 10.0], 10.0)
    # within w (inclusive) chains: 1, 11, 21 | 21.5 joins 21; partition 1: 0, 10
    assert b["first"].tolist() == [1.0, 0.0] and b["last"].tolist() == [21.5, 10.0]
    assert b["points"].tolist() == [4, 2] and b["partition"].tolist() == [0, 1]
    b = compute_bundles([0, 0], [1.0, 11.5], 10.0)
    assert b["first"].tolist() == [1.0, 11.5]


# ---------------------------------------------------------------------- against loops

def _brute(log, part_pts, window, n_cells):
    """The same graph with dicts and loops, from the definitions."""
    pts = {}
    for p, t in part_pts:
        pts.setdefault(p, set()).add(t)
    bundles = []
    for p in sorted(pts):
        run = []
        for t in sorted(pts[p]):
            if run and t - run[-1] > window:
                bundles.append((p, run[0], run[-1], len(run)))
                run = []
            run.append(t)
        bundles.append((p, run[0], run[-1], len(run)))
    visits, succ, edges, reach = [0] * n_cells, [0] * n_cells, {}, {}
    for p, c, pc, r, m in zip(*(log[f].tolist() for f in
                                ("partition", "cell", "prev_cell", "reach", "merged"))):
        if m and math.isnan(r):
            continue
        visits[c] += 1
        if pc >= 0:
            edges[(pc, c)] = edges.get((pc, c), 0) + 1
        if not math.isnan(r):
            succ[c] += 1
            b = next(i for i, x in enumerate(bundles) if x[0] == p and x[1] <= r <= x[2])
            reach[(c, b)] = reach.get((c, b), 0) + 1
    return visits, succ, edges, bundles, reach


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_vectorised_graph_equals_loops_on_random_logs(data):
    n_part = data.draw(st.integers(1, 3))
    points = data.draw(st.lists(st.tuples(st.integers(0, n_part - 1),
                                          st.integers(0, 60).map(float)), min_size=1, max_size=25))
    window = float(data.draw(st.integers(0, 12)))
    n_cells = 24
    rows = data.draw(st.lists(st.tuples(
        st.integers(0, n_cells - 1), st.integers(-1, n_cells - 1), st.booleans(),
        st.one_of(st.none(), st.sampled_from(points)), st.booleans()), max_size=60))
    log = node_log([(pp[0] if pp else n_part - 1, c, pc, pp[1] if pp else NAN, int(m))
                for c, pc, _, pp, m in rows])
    matches = {"partition": np.array([p for p, _ in points]),
               "point": np.array([t for _, t in points])}
    g = HistoryGraph.from_node_log(log, matches, window, K, BINS, "a b", N_STATES)
    visits, succ, edges, bundles, reach = _brute(log, points, window, n_cells)
    assert g.visits.tolist() == visits and g.successes.tolist() == succ
    assert {(int(s), int(d)): int(n)
            for s, d, n in zip(g.edge_src, g.edge_dst, g.edge_count)} == edges
    assert list(zip(g.bundle_partition.tolist(), g.bundle_first.tolist(),
                    g.bundle_last.tolist(), g.bundle_points.tolist())) == bundles
    assert {(int(c), int(b)): int(n)
            for c, b, n in zip(g.reach_cell, g.reach_bundle, g.reach_count)} == reach
    bits = np.unpackbits(g.match_maps(), axis=1)[:, :g.n_bundles]
    assert {(int(c), int(b)) for c, b in zip(*np.nonzero(bits))} == set(reach)


# ---------------------------------------------------------------------- merge

def test_merge_adds_counts_renumbers_bundles_and_maps_partitions_by_key():
    a = hand_graph(partition_keys=["ATL", "BOS"])
    log = node_log([(0, 5, -1, 7.0, 0), (0, 9, 5, 7.0, 0)])
    b = HistoryGraph.from_node_log(log, {"partition": np.array([0]), "point": np.array([7.0])},
                                   W, K, BINS, "a b", N_STATES, partition_keys=["BOS"])
    m = a.merge(b)
    assert np.array_equal(m.visits, a.visits + b.visits)
    assert np.array_equal(m.successes, a.successes + b.successes)
    edges = {(int(s), int(d)): int(n) for s, d, n in zip(m.edge_src, m.edge_dst, m.edge_count)}
    assert edges == {(5, 9): 3, (9, 9): 1, (5, 23): 1}
    assert m.n_bundles == 4 and m.bundle_partition.tolist() == [0, 0, 1, 1]
    assert m.partition_keys == ["ATL", "BOS"]
    assert m.match_map(5).tolist() == [0, 2, 3] and m.match_map(9).tolist() == [0, 1, 3]
    assert m._invalid() is None
    other = HistoryGraph.from_node_log(log, {"partition": np.array([0]),
                                             "point": np.array([7.0])},
                                       W, 0, BINS, "a b", N_STATES)
    with pytest.raises(ValueError, match="'k'"):
        a.merge(other)


# ---------------------------------------------------------------------- files

def test_save_load_round_trip(tmp_path):
    g = hand_graph(partition_keys=["ATL", "BOS"], where=["b.x > a.x"])
    path = tmp_path / "h.acephist"
    size = g.save(path)
    assert size == path.stat().st_size
    h = HistoryGraph.load(path)
    for name in ("pattern", "k", "window", "n_states", "where", "partition_keys"):
        assert getattr(h, name) == getattr(g, name)
    for name in ("visits", "successes", "edge_src", "edge_dst", "edge_count", "bundle_first",
                 "bundle_last", "bundle_partition", "reach_cell", "reach_bundle", "rem_edges"):
        assert np.array_equal(getattr(h, name), getattr(g, name))
        assert getattr(h, name).dtype == getattr(g, name).dtype
    h.visits[0] = 7  # loaded arrays are writable copies
    assert np.array_equal(h.match_maps(), g.match_maps())


def test_the_partition_attribute_is_recorded_merged_and_checked():
    g = hand_graph(partition_keys=["ATL", "BOS"], partition_by="origin")
    h = HistoryGraph.from_bytes(g.to_bytes())
    assert (h.partition_by, h.partition_recorded) == ("origin", True)
    assert h.canonical().partition_by == "origin"
    one = HistoryGraph.from_bytes(hand_graph().to_bytes())
    assert (one.partition_by, one.partition_recorded) == (None, True)
    with pytest.raises(ValueError, match="different 'partition_by'"):
        g.merge(hand_graph(partition_by="dest"))
    with pytest.raises(ValueError, match="different 'partition_by'"):
        g.merge(one)
    # a file written before the attribute was recorded: unknown, merges with either
    doc = _doc(g)
    del doc["partition_by"]
    old = HistoryGraph.from_bytes(_version_1(doc))
    assert (old.partition_by, old.partition_recorded) == (None, False)
    assert "partition_by" not in _doc(old)
    merged = old.merge(g)
    assert (merged.partition_by, merged.partition_recorded) == ("origin", True)
    assert g.merge(old).partition_by == "origin"
    assert old.merge(old).partition_recorded is False


def test_build_history_records_the_resolved_partition():
    from acep import EventBatch
    from history.build import build_history

    batch = EventBatch.from_events([{"type": "a", "t": 0.0, "o": "x"},
                                    {"type": "b", "t": 1.0, "o": "x"}])
    assert build_history("a b", batch, 5.0, 0, partition="o").partition_by == "o"
    assert build_history("a b", batch, 5.0, 0, where=["[o]"]).partition_by == "o"
    assert build_history("a b", batch, 5.0, 0).partition_by is None


def _doc(g):
    """The document a history file seals (its payload)."""
    return msgpack.unpackb(_envelope(g.to_bytes())["payload"], raw=False)


def _envelope(data):
    return msgpack.unpackb(data, raw=False)


def _sealed(doc):
    """``doc`` as a writer of this version writes it: behind a matching checksum."""
    return _format.sealed(FORMAT, VERSION, doc)


def _version_1(doc):
    """``doc`` as the version 1 writer wrote it: one plain map, no checksum."""
    return msgpack.packb({**doc, "version": 1}, use_bin_type=True)


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(format="acep-sketch"), "'format'"),
    (lambda d: d.update(version=3), "'version'.*unsupported version 3"),
    (lambda d: d.update(k="1"), "'k'"),
    (lambda d: d.update(k=True), "'k'"),
    (lambda d: d.pop("visits"), "'visits': not an array"),
    (lambda d: d["visits"].update(dtype="|O"), "'visits': dtype"),
    (lambda d: d["visits"].update(data=d["visits"]["data"][:-1]), "'visits': 191 bytes"),
    (lambda d: d["visits"].update(shape=[3, 8]), "'visits': bad shape"),
    (lambda d: d["reach_bundle"].update(data=np.full(4, 99, np.int64).tobytes()),
     "'reach_bundle': values outside"),
    (lambda d: d["successes"].update(data=np.full(24, 5, np.int64).tobytes()),
     "'successes'"),
    (lambda d: d.update(partition_keys=[[1]]), "'partition_keys'"),
    (lambda d: d.update(partition_by=3), "'partition_by': 3 is not a name"),
    (lambda d: d.update(partition_by=""), "'partition_by'"),
])
def test_malformed_history_names_the_field(version, change, message):
    """Behind a matching checksum (version 2) or none (version 1), fields are validated."""
    doc = {**_doc(hand_graph()), "version": version}
    change(doc)
    data = _sealed(doc) if version == 2 else msgpack.packb(doc, use_bin_type=True)
    with pytest.raises(HistoryFormatError, match=message):
        HistoryGraph.from_bytes(data)


def test_oversized_and_garbage_history_bytes_are_refused():
    data = hand_graph().to_bytes()
    with pytest.raises(HistoryFormatError, match="above the limit"):
        HistoryGraph.from_bytes(data, max_bytes=len(data) - 1)
    with pytest.raises(HistoryFormatError, match="not valid msgpack"):
        HistoryGraph.from_bytes(data[: len(data) // 2])
    with pytest.raises(HistoryFormatError, match="not a map"):
        HistoryGraph.from_bytes(msgpack.packb([1, 2]))


def test_a_refused_history_file_is_named(tmp_path):
    """`acep history inspect/evaluate` pass on load's message: it names the file."""
    data = hand_graph().to_bytes()
    for name, content in (("cut.history", data[: len(data) // 2]),
                          ("list.history", msgpack.packb([1, 2]))):
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(HistoryFormatError, match=f"^{re.escape(str(path))}: history[ :]"):
            HistoryGraph.load(path)


def test_a_flipped_bit_in_an_array_is_a_checksum_mismatch(tmp_path):
    """Version 1 loaded this file with visits[9] = 2 instead of 3 and no complaint."""
    g = hand_graph()
    path = tmp_path / "h.history"
    g.save(path)
    data = path.read_bytes()
    damaged = flip(data, data.index(g.visits.tobytes()) + 8 * 9, 0x01)
    path.write_bytes(damaged)
    expected = f"{_envelope(data)['crc32']:08x}"
    got = f"{zlib.crc32(_envelope(damaged)['payload']):08x}"
    assert expected != got
    with pytest.raises(HistoryFormatError) as exc:
        HistoryGraph.load(path)
    assert str(exc.value) == (f"{path}: checksum mismatch: the file is damaged "
                              f"(expected {expected}, got {got})")


SAVED = hand_graph(partition_keys=["ATL", "BOS"], partition_by="origin").to_bytes()


def _payload_span() -> range:
    """Where SAVED's payload lies."""
    payload = _envelope(SAVED)["payload"]
    start = SAVED.index(payload)
    return range(start, start + len(payload))


def _refused_or_intact(damaged: bytes) -> str | None:
    """The message refusing ``damaged`` bytes of SAVED; None if they load to the very graph
    saved (a byte whose change keeps the value: a CRC's uint32 read as int32)."""
    try:
        loaded = HistoryGraph.from_bytes(damaged)
    except HistoryFormatError as exc:
        return str(exc)
    assert loaded.to_bytes() == SAVED
    return None


@settings(max_examples=300, deadline=None)
@given(st.integers(0, len(SAVED) - 1), st.integers(1, 255))
def test_any_damaged_byte_of_a_history_file_is_refused(at, mask):
    refused = _refused_or_intact(flip(SAVED, at, mask))
    if at in _payload_span():
        assert refused is not None
        assert refused.startswith("checksum mismatch: the file is damaged (expected ")


def test_every_damaged_byte_of_the_envelope_is_refused():
    """Each byte before the payload (format, version, checksum, the payload's length) with
    every change of it: the format's error, or the same graph."""
    intact = [(at, mask) for at in range(_payload_span().start) for mask in range(1, 256)
              if _refused_or_intact(flip(SAVED, at, mask)) is None]
    assert {(SAVED[at], SAVED[at] ^ mask) for at, mask in intact} <= {(0xCE, 0xD2)}


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_a_partly_overwritten_history_file_is_refused(data):
    start = data.draw(st.integers(_payload_span().start, len(SAVED) - 1))
    new = data.draw(st.binary(min_size=1, max_size=len(SAVED) - start))
    damaged = SAVED[:start] + new + SAVED[start + len(new):]
    if damaged != SAVED:
        with pytest.raises(HistoryFormatError, match="^checksum mismatch: the file is damaged"):
            HistoryGraph.from_bytes(damaged)


@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(version=3), "'version': unsupported version 3 .*versions 1 and 2"),
    (lambda d: d.update(version=True), "'version': unsupported version True"),
    (lambda d: d.update(version=2.0), "'version': unsupported version 2.0"),
    (lambda d: d.pop("crc32"), "'crc32': None is not a CRC-32"),
    (lambda d: d.update(crc32=1 << 32), "'crc32': 4294967296 is not a CRC-32"),
    (lambda d: d.update(payload="text"), "'payload': not bytes"),
    (lambda d: d.update(payload=_version_1(_doc(hand_graph())),
                        crc32=zlib.crc32(_version_1(_doc(hand_graph())))),
     "'version': unsupported version 1 .*knows version 2"),
])
def test_a_malformed_envelope_names_the_field(change, message):
    envelope = _envelope(hand_graph().to_bytes())
    change(envelope)
    with pytest.raises(HistoryFormatError, match=message):
        HistoryGraph.from_bytes(msgpack.packb(envelope, use_bin_type=True))


def test_round_trip_through_a_file_keeps_every_field(tmp_path):
    g = hand_graph(partition_keys=["ATL", "BOS"], partition_by="origin")
    path = tmp_path / "h.history"
    assert g.save(path) == len(path.read_bytes())
    envelope = _envelope(path.read_bytes())
    assert list(envelope) == ["format", "version", "crc32", "payload"]
    assert (envelope["format"], envelope["version"]) == ("acep-history", 2)
    assert HistoryGraph.load(path).to_bytes() == g.to_bytes()


def _large_graph(reach_rows: int) -> HistoryGraph:
    """A valid history whose cell->bundle edges and bundles are most of its bytes (about 27
    per edge)."""
    rng = np.random.default_rng(7)
    n_states, k, edges = 4, 1, np.arange(1.0, 16.0)
    n, n_bundles = n_states * (k + 1) * 16 * 16, reach_rows // 4
    visits, first = rng.integers(1, 100, n), np.sort(rng.random(n_bundles) * 1e6)
    return HistoryGraph(
        "a b", k, 10.0, n_states, edges, edges.copy(), visits, visits // 2,
        np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.int64),
        np.zeros(n_bundles, np.int32), first, first + 1.0, np.ones(n_bundles, np.int64),
        np.sort(rng.integers(0, n, reach_rows)).astype(np.int32),
        rng.integers(0, n_bundles, reach_rows), np.ones(reach_rows, np.int64),
        partition_keys=["ATL"])


def _traced_peak(load) -> tuple[object, int]:
    """What ``load()`` returns and the most memory it held at once (tracemalloc)."""
    tracemalloc.start()
    try:
        return load(), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_loading_a_history_holds_no_extra_copy_of_it(tmp_path):
    """The payload is read where it lies in the file's bytes (it was copied out of the
    envelope first), each array's bytes are freed as the array is made (they were all kept
    until the last), and the file is read by its size (a read of up to the 1 GiB limit made
    a 1 GiB buffer first, whatever the file's size)."""
    g, path = _large_graph(200_000), tmp_path / "large.history"
    size = g.save(path)
    data = path.read_bytes()
    assert size == len(data) > 5_000_000
    loaded, peak = _traced_peak(lambda: HistoryGraph.from_bytes(data))
    assert loaded.to_bytes() == data and peak < 1.5 * size, peak / size  # was 2.2
    loaded, peak = _traced_peak(lambda: HistoryGraph.load(path))
    assert loaded.to_bytes() == data and peak < 2.5 * size, peak / size  # the file's bytes too


def test_a_history_read_from_a_pipe_loads(tmp_path):
    """A file that is not a regular one (``--history <(...)``) has no size to read by."""
    path, fifo = tmp_path / "h.history", tmp_path / "fifo"
    hand_graph().save(path)
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes(path.read_bytes()))
    writer.start()
    try:
        assert HistoryGraph.load(fifo).to_bytes() == path.read_bytes()
    finally:
        writer.join()


def _through_a_pipe(fifo: Path, data: bytes, load):
    """What ``load(fifo)`` returns while a thread writes ``data`` into the FIFO ``fifo``."""
    def write():
        with contextlib.suppress(BrokenPipeError):  # a reader that stopped at its limit
            fifo.write_bytes(data)

    os.mkfifo(fifo)
    writer = threading.Thread(target=write)
    writer.start()
    try:
        return load(fifo)
    finally:
        writer.join()


def test_a_history_from_a_pipe_is_read_in_pieces_not_into_a_buffer_of_the_limit(tmp_path):
    """A pipe has no size to read by: it was read with one read of the limit and a byte,
    which made a 1 GiB buffer first for a history of any size."""
    data = _large_graph(100_000).to_bytes()
    loaded, peak = _through_a_pipe(
        tmp_path / "fifo", data, lambda fifo: _traced_peak(lambda: HistoryGraph.load(fifo)))
    assert loaded.to_bytes() == data and peak < 2.5 * len(data), peak / len(data)


def test_a_history_from_a_pipe_over_the_limit_is_refused_by_what_came(tmp_path):
    data = hand_graph().to_bytes()
    with pytest.raises(HistoryFormatError, match=f": history is {len(data) - 9} bytes, above "
                                                  f"the limit of {len(data) - 10} bytes$"):
        _through_a_pipe(tmp_path / "fifo", data,
                        lambda fifo: HistoryGraph.load(fifo, max_bytes=len(data) - 10))


def test_a_version_1_history_file_still_loads(tmp_path):
    """V1_FILE was written by the version 1 writer: ``acep history build -p "late verylate
    late" -w 1h -k 1 --spec flights --partition origin tests/data/flights-2000.parquet``."""
    assert _envelope(V1_FILE.read_bytes())["version"] == 1
    old = HistoryGraph.load(V1_FILE)
    assert (old.n_cells, old.n_bundles, old.partition_by) == (160, 55, "origin")
    assert (int(old.visits.sum()), int(old.successes.sum())) == (694, 548)
    path = tmp_path / "again.history"
    old.save(path)  # rewritten in this version
    assert _envelope(path.read_bytes())["version"] == 2
    assert HistoryGraph.load(path).to_bytes() == old.to_bytes()


@pytest.mark.parametrize("over", [0, 1])
def test_a_history_file_over_the_limit_is_refused_by_its_size(tmp_path, over):
    path = tmp_path / "h.history"
    size = hand_graph().save(path)
    if over:
        with pytest.raises(HistoryFormatError, match=f"^{re.escape(str(path))}: history is "
                                                     f"{size} bytes, above the limit of "
                                                     f"{size - 1} bytes$"):
            HistoryGraph.load(path, max_bytes=size - 1)
    else:
        assert HistoryGraph.load(path, max_bytes=size).to_bytes() == path.read_bytes()


_SCALAR_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-(1 << 63), (1 << 64) - 1),
                           st.floats(allow_nan=False), st.text(max_size=400),
                           st.binary(max_size=40))


@settings(max_examples=300, deadline=None)
@given(fields=st.dictionaries(st.text(max_size=12).filter(lambda k: k != "payload"),
                              _SCALAR_VALUES, max_size=8),
       payload=st.binary(max_size=70_000), flip=st.integers(0, 1 << 20))
def test_an_envelope_read_in_place_is_what_msgpack_reads(fields, payload, flip):
    """The in-place envelope reader (the payload a view of the file's bytes) reads what
    msgpack reads, and refuses what it refuses, with the same message: on whole envelopes
    of any scalars (lengths of 1 and 2 bytes; the payload, of 4 too), read in place, and on each
    with one byte changed (a damaged file)."""
    data = msgpack.packb({**fields, "payload": payload}, use_bin_type=True)
    damaged = bytearray(data)
    damaged[flip % len(damaged)] ^= 1 + flip % 255
    for blob in (data, bytes(damaged)):
        try:
            expected = _format.loads(blob, _format.FormatError, "history", 1 << 20)
        except _format.FormatError as exc:
            with pytest.raises(_format.FormatError) as refused:
                _format.loads_envelope(blob, _format.FormatError, "history", 1 << 20)
            assert str(refused.value) == str(exc)
            continue
        got = _format.loads_envelope(blob, _format.FormatError, "history", 1 << 20)
        if blob is data:  # read in place, not by the fallback
            assert isinstance(got["payload"], memoryview)
        if isinstance(got.get("payload"), memoryview):
            got["payload"] = bytes(got["payload"])
        pack = msgpack.Packer(use_bin_type=True).pack  # a damaged float may read as NaN
        assert pack(got) == pack(expected)
