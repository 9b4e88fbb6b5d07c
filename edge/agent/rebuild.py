"""A damaged batch rebuilt from the events it was made from, when they are still there.

When the agent puts a batch of matches read from a file it records, beside it, where its
events are (the file's identity as :class:`edge.agent.sources.FileSource` keeps it, the byte range
of the kept events, their first position) and its matches (partition, point, start, errors,
trajectory): :func:`recipe`. A batch whose body no longer has its CRC-32 is rebuilt from
that (:func:`rebuild`): the lines read again (the file found by its identity, also when log
rotation renamed it), parsed and checked as the agent did, the batch built again for the
recorded matches under the same id and creation time (and the sample of the chunk's
events drawn again, for a batch that carries one). The rebuilt body must have the CRC-32
the batch was put with: anything else (the file gone, the lines changed) raises
:class:`Lost`, saying what is lost, and the batch stays a dead letter.
"""

from __future__ import annotations

import os

import numpy as np

from acep.events import EventBatch, EventError
from acep.matcher import MatchBatch
from acep.windows import sample_mask

from ..wire import PatternRef, batch_from_matches, encode_batch, plain_list
from .outbox_reader import checksum
from .sources import FileSource, find_file, parse_lines

__all__ = ["Lost", "recipe", "rebuild", "chunk_sample"]

VERSION = 1


class Lost(Exception):
    """The batch cannot be rebuilt; the message says why, in words."""


def recipe(source: FileSource, start: int | None, end: int, events: EventBatch,
           found: MatchBatch, created_at: float, sample: dict | None = None) -> dict | None:
    """What :func:`rebuild` needs to make a batch again: the kept ``events`` (read from
    ``source`` between the byte offsets ``start`` and ``end``), the matches ``found`` and,
    for a batch with a sample, how to draw it again (``sample``: its ``share``, ``seed``
    and ``first``, the position of the first event it was drawn over); None when the
    bytes are not known (``start`` None)."""
    if start is None or source.identity is None or events is None:
        return None
    ident = {k: source.identity[k] for k in ("dev", "ino", "fp", "fp_bytes")}
    made = {"v": VERSION, "file": os.path.abspath(source.path), "identity": ident,
            "start": int(start), "end": int(end), "position": int(events.position),
            "events": len(events), "created_at": float(created_at),
            "types": list(events.type_names),
            "matches": {"partition": plain_list(found.partition),
                        "point": np.asarray(found.point, dtype=float).tolist(),
                        "start": np.asarray(found.start, dtype=float).tolist(),
                        "errors": np.asarray(found.errors).astype(int).tolist(),
                        "ptr": np.asarray(found.trajectory_ptr).astype(int).tolist(),
                        "trajectory": np.asarray(found.trajectory).astype(int).tolist()}}
    if sample is not None:
        made["sample"] = {"share": float(sample["share"]), "seed": int(sample["seed"]),
                          "first": int(sample["first"])}
    return made


def rebuild(r: dict, crc: int, *, device: str, seq: int, pattern: PatternRef) -> bytes:
    """The body of the batch ``r`` (a :func:`recipe`) describes, made again; raises
    :class:`Lost` when it cannot be, or when the result's CRC-32 is not ``crc``."""
    if r.get("v") != VERSION:
        raise Lost("recorded by another version of the agent")
    where = f"bytes {r['start']}..{r['end']} of {r['file']}"
    events = _events(r, where)
    if len(events) != r["events"]:
        raise Lost(f"{where} now hold {len(events)} events, not the {r['events']} the batch "
                   "was made from: the lines changed")
    found = _matches(r["matches"], events, where)
    sample = _sample(r.get("sample"), events, pattern, where)
    body = encode_batch(batch_from_matches(found, events, device=device, seq=seq,
                                           pattern=pattern, created_at=r["created_at"],
                                           sample=sample))
    if checksum(body) != crc:
        raise Lost(f"the batch made again from {where} is not the one put (CRC-32 "
                   f"{checksum(body):08x}, not {crc:08x}): the lines changed")
    return body


def _sample(s: dict | None, events: EventBatch, pattern: PatternRef, where: str
            ) -> np.ndarray | None:
    """The batch's sample drawn again (None for a batch without one): ``sample_mask`` over
    the events from position ``first`` on, as the agent drew it over its chunk's."""
    if s is None:
        return None
    first = int(s["first"]) - events.position
    if not 0 <= first <= len(events):
        raise Lost(f"{where}: the sample's events are not there any more")
    return chunk_sample(events, first, pattern, s["share"], s["seed"])


def chunk_sample(events: EventBatch, first: int, pattern: PatternRef, share: float,
                 seed: int) -> np.ndarray:
    """The agent's sample of a chunk, a boolean per event of ``events``: ``sample_mask``
    over its new events, from index ``first`` on (the kept events before them were drawn
    with their own chunk)."""
    mask = np.zeros(len(events), dtype=bool)
    mask[first:] = sample_mask(events.slice(first, len(events)), pattern.partition_by,
                               pattern.window, share, seed=seed)
    return mask


def _events(r: dict, where: str) -> EventBatch:
    """The good events of the recorded byte range, as the agent read them."""
    ident = {**r["identity"], "end": r["end"]}
    path = find_file(os.path.dirname(r["file"]) or ".", ident)
    if path is None:
        raise Lost(f"{where}: the file is gone (deleted, truncated, or rotated away and "
                   "compressed)")
    try:
        with open(path, "rb") as fh:
            fh.seek(r["start"])
            data = fh.read(r["end"] - r["start"])
    except OSError as e:
        raise Lost(f"{where}: cannot be read ({e.strerror or e})") from None
    # lines end at "\n" alone, as the agent reads them (a "\r" is JSON whitespace)
    lines = [line + b"\n" for line in data.split(b"\n") if line.strip()]
    docs = [d for d in parse_lines(lines) if d is not None]
    return _coded(_good(docs, r["position"], path), r["types"], where)


def _good(docs: list[dict], position: int, name: str) -> EventBatch:
    """``docs`` as an event batch without the events it refuses (as the agent skips them)."""
    while True:
        try:
            return EventBatch.from_events(docs, position, name)
        except EventError as e:
            bad = (e.position if e.position is not None else position) - position
            if not 0 <= bad < len(docs):
                raise Lost(f"an event is refused: {e}") from None
            del docs[bad]


def _coded(events: EventBatch, names: list[str], where: str) -> EventBatch:
    """``events`` with the type codes of the agent's run (``names``, in its order): the
    body lists the types by code."""
    code = {name: i for i, name in enumerate(names)}
    try:
        remap = np.array([code[name] for name in events.type_names], dtype=np.int64)
    except KeyError as e:
        raise Lost(f"{where}: holds an event of type {e.args[0]!r}, which the batch's events "
                   "had not: the lines changed") from None
    types = remap[np.asarray(events.type_codes, dtype=np.int64)] if len(remap) else \
        np.asarray(events.type_codes)
    return EventBatch(types.astype(np.asarray(events.type_codes).dtype), list(names),
                      events.tags, events.columns, events.position, events.source, None,
                      events.tag_is_time)


def _matches(m: dict, events: EventBatch, where: str) -> MatchBatch:
    """The recorded matches, their trajectories' tags from ``events``."""
    traj = np.asarray(m["trajectory"], dtype=np.int64)
    local = traj - events.position
    if len(local) and (local.min() < 0 or local.max() >= len(events)):
        raise Lost(f"{where}: the matches' events are not there any more")
    tags = np.asarray(events.tags, dtype=float)[local]
    return MatchBatch(np.asarray(m["partition"], dtype=object), np.asarray(m["point"], float),
                      np.asarray(m["start"], float), np.asarray(m["errors"], np.int32),
                      np.asarray(m["ptr"], np.int64), traj, tags, events.tag_is_time)
