"""Signed sketches for the tests: the documented key fingerprint, the envelope of older
versions, a re-signed bad sketch and one built by ``acep history build``."""

from __future__ import annotations

import hashlib
import hmac

import msgpack

from history.sketch import Sketch, _mac
from support.cli import FIXTURE, run_acep
from support.history import hand_graph

KEY = b"device-fleet-key"


def hand_sketch_bytes():
    return Sketch.from_graph(hand_graph(), hashes=8).to_bytes(KEY)


def key_fingerprint(key: bytes) -> str:
    """The key id the docs define: the first 8 bytes of HMAC-SHA256(key, "acep-sketch key id")."""
    return hmac.new(key, b"acep-sketch key id", hashlib.sha256).digest()[:8].hex()


def old_writer(sketch: Sketch, key: bytes) -> bytes:
    """The envelope as acep wrote it before sketches recorded their key's fingerprint."""
    payload = sketch._payload()
    return msgpack.packb({"format": "acep-sketch", "version": 2, "signature": "HMAC-SHA256",
                          "payload": payload, "mac": _mac(key, payload)}, use_bin_type=True)


def resigned(change):
    """A validly signed sketch whose payload was changed: the signer made a bad sketch."""
    outer = msgpack.unpackb(hand_sketch_bytes(), raw=False)
    doc = msgpack.unpackb(outer["payload"], raw=False)
    change(doc)
    outer["payload"] = msgpack.packb(doc, use_bin_type=True)
    outer["mac"] = _mac(KEY, outer["payload"])
    return msgpack.packb(outer, use_bin_type=True)


def built_sketch(tmp_path):
    key = tmp_path / "fleet.key"
    key.write_bytes(KEY)
    sketch = tmp_path / "h.sketch"
    r = run_acep("history", "build", FIXTURE, "--spec", "flights", "-p", "late verylate late",
                 "-w", "1h", "-k", "1", "--partition", "origin", "-o", tmp_path / "h.history",
                 "--sketch", sketch, "--key-file", key, "--fit", "0.1,0.5", "--burst", "32")
    assert r.returncode == 0, r.stderr
    return sketch, key
