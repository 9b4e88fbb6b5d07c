"""Sketch: scores, min-hash Jaccard estimates, proxy classes, signed bytes refused when bad."""


import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.history import hand_graph
from support.sketches import KEY, hand_sketch_bytes, key_fingerprint, old_writer, resigned

from history.sketch import (
    EMPTY,
    Sketch,
    SketchError,
    completion_need,
    minhash_signatures,
    proxy_classes,
)


def _sets_as_edges(sets):
    cells = [c for c, s in enumerate(sets) for _ in s]
    items = [x for s in sets for x in s]
    return np.array(cells, np.int64), np.array(items, np.int64)


def _jaccard(a, b):
    return len(a & b) / len(a | b) if a | b else 0.0


@settings(max_examples=80, deadline=None)
@given(st.sets(st.integers(0, 300), min_size=1, max_size=80),
       st.sets(st.integers(0, 300), min_size=1, max_size=80), st.integers(0, 2**32))
def test_minhash_estimate_is_close_to_exact_jaccard(a, b, seed):
    cells, items = _sets_as_edges([a, b])
    sig = minhash_signatures(cells, items, 2, hashes=512, seed=seed)
    est = float((sig[0] == sig[1]).mean())
    # standard deviation is at most 0.5 / sqrt(512) = 0.022
    assert abs(est - _jaccard(a, b)) < 0.12


def test_minhash_is_unbiased_over_seeds():
    a, b = set(range(0, 60)), set(range(30, 90))  # J = 30 / 90
    cells, items = _sets_as_edges([a, b])
    est = [float((s[0] == s[1]).mean())
           for s in (minhash_signatures(cells, items, 2, 16, seed) for seed in range(300))]
    assert np.mean(est) == pytest.approx(1 / 3, abs=0.03)


def test_minhash_of_empty_sets_and_proxy_classes():
    sets = [{1, 2, 3}, set(), {1, 2, 3}, {100, 200, 300}]
    cells, items = _sets_as_edges(sets)
    sig = minhash_signatures(cells, items, 4, 8, seed=1)
    assert (sig[1] == EMPTY).all() and not (sig[[0, 2, 3]] == EMPTY).any()
    classes = proxy_classes(sig, band=2)
    assert classes[1] == -1 and classes[0] == classes[2] != classes[3]
    assert (classes[[0, 2, 3]] >= 0).all()


def test_sketch_scores_are_smoothed_success_rates():
    g = hand_graph()
    s = Sketch.from_graph(g, hashes=8, band=2)
    p0 = 4 / 6  # successes / visits over the graph
    assert s.score.dtype == np.float32 and s.score.shape == (24,)
    assert s.score[5] == pytest.approx((2 + p0) / 3)
    assert s.score[9] == pytest.approx((2 + p0) / 4)
    assert s.score[23] == pytest.approx(p0 / 2)
    assert s.score[0] == pytest.approx(p0)  # never visited: the prior
    assert s.minhash.shape == (24, 8) and s.minhash.dtype == np.uint32
    assert s.proxy_class[23] == -1 and s.proxy_class[5] >= 0
    # cells 5 ({0, 2}) and 9 ({0, 1}) share bundle 0: estimate of J = 1/3 from 8 hashes
    assert 0.0 <= s.jaccard(5, 9) <= 1.0 and s.jaccard(5, 5) == 1.0 and s.jaccard(0, 1) == 0.0
    with pytest.raises(ValueError, match="band"):
        Sketch.from_graph(g, hashes=4, band=5)


def test_error_against_the_exact_graph():
    g = hand_graph()
    exact = Sketch.from_graph(g, hashes=4096, prior=0.0)
    err = exact.error_against(g, pairs=200)
    assert err["score_mae"] < 1e-6 and err["jaccard_mae"] < 0.05
    assert err["pairs"] == 200 and err["mapped_cells"] == 2 and err["bytes"] == exact.nbytes
    rough = Sketch.from_graph(g, hashes=1, band=1, prior=5.0).error_against(g, pairs=200)
    assert rough["score_mae"] > 0.05 and rough["jaccard_mae"] > err["jaccard_mae"]


def test_signed_round_trip(tmp_path):
    s = Sketch.from_graph(hand_graph(where=["b.x > a.x"]), hashes=8, band=3, seed=7)
    data = s.to_bytes(KEY)
    assert len(data) == s.nbytes
    t = Sketch.from_bytes(data, KEY)
    assert (t.pattern, t.where, t.k, t.window, t.band, t.seed) == \
        ("a b", ("b.x > a.x",), 1, 10.0, 3, 7)
    assert np.array_equal(t.score, s.score) and np.array_equal(t.minhash, s.minhash)
    assert np.array_equal(t.proxy_class, s.proxy_class)
    assert t.need.dtype == np.float32 and np.array_equal(t.need, s.need)
    assert t.bundle_span == s.bundle_span == pytest.approx((2.0 + 0.0 + 0.0) / 3 / 10.0)
    assert t.bins().rem_edges == (5.0,) and t.bins().gap_edges == (2.0,)
    path = tmp_path / "s.sketch"
    assert s.save(path, KEY) == path.stat().st_size
    assert np.array_equal(Sketch.load(path, KEY).score, s.score)


def test_the_partition_attribute_travels_with_the_sketch():
    s = Sketch.from_graph(hand_graph(partition_by="origin"), hashes=8)
    t = Sketch.from_bytes(s.to_bytes(KEY), KEY)
    assert (t.partition_by, t.partition_recorded) == ("origin", True)
    assert t.mismatch("a b", 1, 10.0, (), "origin") is None
    assert "partitioned by 'origin', and this run is without a partition" in \
        t.mismatch("a b", 1, 10.0, (), None)
    assert "partitioned by 'dest'" in t.mismatch("a b", 1, 10.0, (), "dest")
    assert "not 'a c'" in t.mismatch("a c", 1, 10.0, (), "origin")
    assert "where=['b.x > a.x']" in t.mismatch("a b", 1, 10.0, ["b.x > a.x"], "origin")
    assert "k=0" in t.mismatch("a b", 0, 10.0, (), "origin")
    old = Sketch.from_bytes(resigned(lambda d: d.pop("partition_by")), KEY)
    assert (old.partition_by, old.partition_recorded) == (None, False)
    assert old.mismatch("a b", 1, 10.0, (), "anything") is None  # unknown: not checked
    assert "partition_by" not in msgpack.unpackb(
        msgpack.unpackb(old.to_bytes(KEY), raw=False)["payload"], raw=False)


def test_a_sketch_signed_with_another_key_names_both_fingerprints():
    data = hand_sketch_bytes()
    outer = msgpack.unpackb(data, raw=False)
    assert (outer["version"], outer["key_id"].hex()) == (2, key_fingerprint(KEY))
    assert next(iter(outer)) == "format"  # acep history inspect finds the kind in the head
    other = b"another key"
    with pytest.raises(SketchError) as refused:
        Sketch.from_bytes(data, other, key_from="sketch.key_file")
    assert str(refused.value) == (
        f"signature check failed: the sketch was signed with another key, {key_fingerprint(KEY)};"
        f" this key is {key_fingerprint(other)} (sketch.key_file)")
    assert KEY.hex() not in str(refused.value) and KEY.decode() not in str(refused.value)
    assert Sketch.from_bytes(data, KEY).signed_with == key_fingerprint(KEY)


def test_key_id_is_the_documented_fingerprint():
    from history.sketch import key_id

    assert key_id(KEY) == key_fingerprint(KEY) and len(key_id(KEY)) == 16
    with pytest.raises(SketchError, match="key must be non-empty"):
        key_id(b"")


def test_a_damaged_sketch_read_with_its_key_says_damaged():
    data = bytearray(hand_sketch_bytes())
    data[len(data) // 2] ^= 0x01  # inside the payload's arrays
    with pytest.raises(SketchError) as refused:
        Sketch.from_bytes(bytes(data), KEY, key_from="--key-file")
    assert str(refused.value) == ("signature check failed: the sketch is damaged or was changed "
                                  f"after signing (it was signed with this key, "
                                  f"{key_fingerprint(KEY)})")


def test_a_sketch_written_before_key_ids_loads_and_a_refused_one_says_either():
    sketch = Sketch.from_graph(hand_graph(), hashes=8)
    old = old_writer(sketch, KEY)
    loaded = Sketch.from_bytes(old, KEY)
    assert np.array_equal(loaded.score, sketch.score) and loaded.signed_with == key_fingerprint(KEY)
    assert not loaded.key_recorded and Sketch.from_bytes(sketch.to_bytes(KEY), KEY).key_recorded
    damaged = bytearray(old)
    damaged[len(old) // 2] ^= 0x01
    for data, key in ((old, b"another key"), (bytes(damaged), KEY)):
        with pytest.raises(SketchError) as refused:
            Sketch.from_bytes(data, key, key_from="--key-file")
        assert str(refused.value) == (
            "signature check failed: the sketch is damaged or was changed after signing, or "
            "it was signed with another key (it records no key fingerprint: written before "
            f"acep recorded them); this key is {key_fingerprint(key)} (--key-file)")


@pytest.mark.parametrize("key_id, found", [
    ("0123456789abcdef", "str"), (b"1234567", "7 bytes"), (b"123456789", "9 bytes"),
    (None, "nil"), (12345678, "int"), (b"x" * 5000, "5000 bytes")])
def test_a_key_id_of_another_type_or_size_is_refused(key_id, found):
    outer = msgpack.unpackb(hand_sketch_bytes(), raw=False)
    outer["key_id"] = key_id  # the MAC still verifies: only the fingerprint is wrong
    with pytest.raises(SketchError) as refused:
        Sketch.from_bytes(msgpack.packb(outer, use_bin_type=True), KEY)
    assert str(refused.value) == (f"field 'key_id': {found} where the signing key's "
                                  "fingerprint (8 bytes) is expected")


def test_tampered_and_wrong_key_sketches_are_refused():
    with pytest.raises(SketchError, match="key must be non-empty"):
        Sketch.from_bytes(hand_sketch_bytes(), b"")
    outer = msgpack.unpackb(hand_sketch_bytes(), raw=False)
    outer["mac"] = outer["mac"][:-1]
    with pytest.raises(SketchError, match="signature check failed"):
        Sketch.from_bytes(msgpack.packb(outer, use_bin_type=True), KEY)


def test_oversized_wrong_version_and_garbage_are_refused():
    data = hand_sketch_bytes()
    with pytest.raises(SketchError, match=f"{len(data)} bytes, above the limit of 100"):
        Sketch.from_bytes(data, KEY, max_bytes=100)
    outer = msgpack.unpackb(data, raw=False)
    for change, message in ((dict(version=1), "unsupported version 1"),
                            (dict(version=3), "unsupported version 3"),
                            (dict(format="acep-history"), "'format'"),
                            (dict(signature="none"), "'signature'"),
                            (dict(payload="text"), "'payload', 'mac': not bytes")):
        bad = {**outer, **change}
        with pytest.raises(SketchError, match=message):
            Sketch.from_bytes(msgpack.packb(bad, use_bin_type=True), KEY)
    with pytest.raises(SketchError, match="not valid msgpack"):
        Sketch.from_bytes(data[:40], KEY)
    with pytest.raises(SketchError, match="not a map"):
        Sketch.from_bytes(msgpack.packb("sketch"), KEY)
    with pytest.raises(SketchError, match="expected bytes"):
        Sketch.from_bytes("sketch", KEY)


@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(version=3), "unsupported version 3"),
    (lambda d: d["score"].update(shape=[23], data=d["score"]["data"][:-4]),
     "'score': 23 entries for 24 cells"),
    (lambda d: d["score"].update(dtype="<f8"), "'score': dtype"),
    (lambda d: d["minhash"].update(shape=[24, 4]), r"'minhash': 768 bytes .* \[24, 4\]"),
    (lambda d: d["minhash"].update(shape=[12, 16]), "'minhash': shape"),
    (lambda d: d["rem_edges"].update(data=np.array([np.inf]).tobytes()), "'rem_edges'"),
    (lambda d: d["score"].update(data=np.full(24, np.nan, np.float32).tobytes()),
     "'score': not finite"),
    (lambda d: d.update(band=99), "'band': 99"),
    (lambda d: d.update(k=None), "'k'"),
    (lambda d: d.pop("minhash"), "'minhash': not an array"),
    (lambda d: d.pop("need"), "'need': not an array"),
    (lambda d: d.pop("bundle_span"), "'bundle_span'"),
    (lambda d: d.update(bundle_span=float("nan")), "'bundle_span': not finite"),
    (lambda d: d.update(bundle_span=-1.0), "'bundle_span': not finite or outside"),
    (lambda d: d["need"].update(shape=[23], data=d["need"]["data"][:-4]),
     "'need': 23 entries for 24 cells"),
    (lambda d: d["need"].update(data=np.full(24, -1.0, np.float32).tobytes()),
     "'need': not finite or outside"),
    (lambda d: d["need"].update(data=np.full(24, 11.0, np.float32).tobytes()),
     "'need': not finite or outside"),
    (lambda d: d.update(partition_by=["origin"]), "'partition_by'"),
    (lambda d: d.update(partition_by="x" * 300), "'partition_by'"),
    # not a SketchError before: a TypeError (unhashable dtype), a ValueError (a shape whose
    # int64 product wrapped to 0 bytes), which ended the agent's sketch watch
    (lambda d: d["score"].update(dtype=["<f4"]), r"'score': dtype \['<f4'\]"),
    (lambda d: d["minhash"].update(shape=[2**62, 4], data=b""), "'minhash': 0 bytes of data"),
])
def test_malformed_signed_payload_names_the_field(change, message):
    with pytest.raises(SketchError, match=message):
        Sketch.from_bytes(resigned(change), KEY)


def test_completion_need_by_hand():
    """Cells 0/2 in remaining-window bin [0, 5), 1/3 in [5, 10]; no gap bins. Cell 1 leads to
    0 (3 times, always succeeds) and 2 (never succeeds): its successful trajectories end with
    about 2.5 left, from a middle of 7.5, so they need 5. Cell 3 leads to both equally (score
    0.5 each): also 2.5 left. Cells without children need nothing."""
    from types import SimpleNamespace

    g = SimpleNamespace(n_cells=4, rem_edges=np.array([5.0]), gap_edges=np.zeros(0),
                        window=10.0, edge_src=np.array([1, 1, 3, 3]),
                        edge_dst=np.array([0, 2, 0, 2]), edge_count=np.array([3, 1, 2, 2]))
    need = completion_need(g, np.array([1.0, 0.3, 0.0, 0.5]))
    assert need.dtype == np.float32
    assert need.tolist() == [0.0, 5.0, 0.0, 5.0]
    need = completion_need(g, np.array([1.0, 0.3, 1.0, 0.5]))
    assert need.tolist() == [0.0, 5.0, 0.0, 5.0]  # both children in the same bin
    g.edge_dst = np.array([0, 1, 0, 1])  # 3 -> 1 (needs 5 more from its 7.5, ends at 2.5)
    need = completion_need(g, np.array([1.0, 0.5, 1.0, 0.5]))
    assert need.tolist() == [0.0, 5.0, 0.0, 5.0]


def test_sketch_from_graph_is_deterministic_and_has_a_need_per_cell():
    g = hand_graph()
    a, b = Sketch.from_graph(g, hashes=8), Sketch.from_graph(g, hashes=8)
    assert a.to_bytes(KEY) == b.to_bytes(KEY)
    assert a.need.shape == (24,) and (a.need >= 0).all() and (a.need <= g.window).all()
