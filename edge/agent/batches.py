"""How the agent turns a chunk's matches into upload batches and commits them.

:class:`Batches` is the part of :class:`~edge.agent.loop.Agent` that encodes the matches
(cut in halves when a batch would be too large), puts each batch into the outbox in the
same transaction as the progress, records how to make it again (:mod:`~edge.agent.rebuild`)
and keeps the copy of the progress beside the outbox (:mod:`~edge.agent.resume`).
"""

from __future__ import annotations

import logging
import time

import numpy as np

from acep.events import EventBatch
from acep.matcher import MatchBatch

from ..wire import (
    batch_from_matches,
    batch_id,
    encode_batch,
    encode_condensed,
)
from .outbox import OutboxFull
from .rebuild import chunk_sample, rebuild, recipe
from .resume import write_copy
from .sources import FileSource

__all__ = ["Batches", "COPY_EVERY"]

log = logging.getLogger("edge.agent")
COPY_EVERY = 5.0  # seconds between two copies of the progress of chunks without matches


class Batches:
    """The agent's batch writes (a part of :class:`~edge.agent.loop.Agent`)."""

    def _commit(self, found: MatchBatch, events: EventBatch | None, n_live: int,
                finished: bool = False, taken: int = 0) -> None:
        """Queue the transaction of a chunk (``taken``: its events, good and bad); the
        source hears when it is durable (an MQTT source acknowledges its messages then).
        The chunk's sample (``[sample]``) goes with its matches, or alone without any."""
        self.consumed += n_live
        state = {"consumed": self.consumed, **self.progress.state(), "finished": finished,
                 **self.source.taken(taken)}
        if len(found) and self.condenser is None:
            found = self._inside(found, events)
        sample = self._sample(events, n_live)
        if not len(found) and sample is None:
            self._submit(taken, self._save, {**state, "seq": self.seq})
            return
        now = time.time()
        if self.condenser is not None:
            body = encode_condensed(self.condenser.summarize(
                found, device=self.cfg.device_id, seq=self.seq, pattern=self.pattern_ref))
            pieces, groups = [(found, body)], None
        else:
            groups = self.kept.partitions()
            pieces = self._cut(found, events, groups, now, sample)
        self.counts["matches"] += len(found)
        if sample is not None:
            self.counts["events_sampled"] += int(sample.sum())
        for i, (piece, body) in enumerate(pieces):
            seq = self.seq
            if i:  # encoded under the first piece's seq while cut; the sample goes first
                body = self._encode(piece, events, groups, seq, now)
            self.seq += 1
            last = i == len(pieces) - 1
            made = self._recipe(piece, events, now, n_live if i == 0 and sample is not None
                                else None)
            # the progress goes with the last piece: a crash before it replays the chunk,
            # and the pieces put already come again under the same ids (duplicates)
            self._submit(taken if last else 0, self._put, body,
                         batch_id(self.cfg.device_id, seq),
                         {**state, "seq": self.seq} if last else None,
                         self._covers(len(piece), events, sample if i == 0 else None),
                         made)

    def _sample(self, events: EventBatch | None, n_live: int) -> np.ndarray | None:
        """Which of ``events`` the chunk's sample sends: ``sample_mask`` over its ``n_live``
        new events (the last ones; the kept events of earlier chunks were drawn with
        theirs); None without a sample (``sample.share`` 0, or no event drawn)."""
        cfg = self.cfg.sample
        if cfg.share <= 0 or events is None or n_live <= 0 or self.condenser is not None:
            return None
        mask = chunk_sample(events, len(events) - n_live, self.pattern_ref, cfg.share,
                            cfg.seed)
        return mask if mask.any() else None

    def _submit(self, taken: int, write, *args) -> None:
        """``write(*args)`` in the writer thread's next group (edge/agent/commits.py); once
        the group is committed the source hears that the ``taken`` events are durable."""
        self.commits.submit(taken, write, args)

    def _write_group(self, items: list) -> None:
        """A group of queued writes in one outbox transaction (writer thread). Once it is
        committed: the counts, the copy of the progress, the sources' acknowledgements."""
        with self.outbox.group():
            written = [write(*args) for _, write, args in items]
        urgent = False
        for counts, state in written:
            for name, value in counts.items():
                self.counts[name] += value
            if state is not None:
                self._uncopied = state
                urgent = urgent or bool(counts)
        if self._uncopied is not None and \
                (urgent or time.monotonic() - self._copied_at >= COPY_EVERY):
            self._copy_progress(self._uncopied)
        for taken, _, _ in items:
            if taken:
                self.source.durable(taken)
        if self.uploader is not None and any(counts for counts, _ in written):
            self.uploader.wake.set()

    def _encode(self, found: MatchBatch, events: EventBatch | None, groups, seq: int,
                created_at: float, sample: np.ndarray | None = None) -> bytes:
        return encode_batch(batch_from_matches(found, events, device=self.cfg.device_id,
                                               seq=seq, pattern=self.pattern_ref,
                                               groups=groups, created_at=created_at,
                                               sample=sample))

    def _cut(self, found: MatchBatch, events: EventBatch | None, groups, created_at: float,
             sample: np.ndarray | None = None) -> list[tuple[MatchBatch, bytes]]:
        """The matches in pieces whose bodies stay within ``collector.max_body`` (halves,
        in order), each with its body encoded under the current seq; a single match over
        it stays one piece (the collector refuses it alone: a dead letter). The
        ``sample`` goes with the first piece only: no event is sent twice for it."""
        body = self._encode(found, events, groups, self.seq, created_at, sample)
        if len(body) <= self.cfg.max_body or len(found) < 2:
            return [(found, body)]
        half = len(found) // 2
        log.info("a batch of %d matches is %d bytes, over collector.max_body (%d): cut in "
                 "two", len(found), len(body), self.cfg.max_body)
        return (self._cut(_rows(found, range(half)), events, groups, created_at, sample)
                + self._cut(_rows(found, range(half, len(found))), events, groups,
                            created_at))

    def _recipe(self, found: MatchBatch, events: EventBatch | None, created_at: float,
                n_live: int | None = None) -> dict | None:
        """How to make the batch again from the events file (edge/agent/rebuild.py), should its
        body be damaged in the outbox; None when its events are not all in the file being
        read (read from stdin, or before a rotation), and for a condensed summary (its
        counts go on from the batches before). ``n_live``: the batch carries the sample of
        the last ``n_live`` events (``[sample]``), drawn again by the rebuild."""
        if not isinstance(self.source, FileSource) or events is None or \
                self.condenser is not None or self.kept.position < self.progress.file_start:
            return None
        sample = None if n_live is None else {
            "share": self.cfg.sample.share, "seed": self.cfg.sample.seed,
            "first": events.position + len(events) - n_live}
        return recipe(self.source, self.kept.first_offset(None), self.progress.resume_offset,
                      events, found, created_at, sample)

    def _rebuild(self, bid: str, crc: int, made: dict) -> bytes:
        """The outbox's :attr:`~edge.agent.outbox.Outbox.repair`: a damaged batch made again."""
        seq = int(bid.rsplit("/", 1)[1])
        return rebuild(made, crc, device=self.cfg.device_id, seq=seq,
                       pattern=self.pattern_ref)

    def _covers(self, n: int, events: EventBatch | None,
                sample: np.ndarray | None = None) -> str:
        """What a batch holds, in words: kept with it for the reason of a dead letter,
        should its body be damaged on the disk."""
        text = f"{n} matches"
        if sample is not None:
            text += f" and {int(sample.sum())} sampled events"
        if events is not None and len(events):
            last = events.position + len(events) - 1
            text += f" of the events at positions {events.position}..{last}"
        if self.cfg.source.kind == "file":
            first = self.kept.first_offset(None)
            start = "?" if first is None else first
            text += f" (bytes {start}..{self.progress.resume_offset} of {self.cfg.source.path})"
        return text

    def _put(self, body: bytes, bid: str, state: dict | None, about: str | None = None,
             made: dict | None = None) -> tuple[dict, dict | None]:
        """The batch and the progress (if any) into the group's transaction: its counts
        and the progress. The copy follows the commit (a lost outbox must not make its
        uploaded matches again)."""
        try:
            self.outbox.put(body, bid, state=state, about=about, recipe=made)
            return {"batches_put": 1, "bytes_put": len(body)}, state
        except OutboxFull as e:
            log.error("%s", e)
            return {"batches_refused": 1}, state

    def _save(self, state: dict) -> tuple[dict, dict]:
        """The progress alone (a chunk without matches). Its copy waits up to COPY_EVERY
        seconds: a copy behind by chunks without matches makes a lost outbox match them
        again, which uploads nothing twice, and its fsyncs cost three times the commit's."""
        self.outbox.save_state(state)
        return {}, state

    def _flush_copy(self) -> None:
        """At exit: the last progress into the copy, if it is not there yet."""
        if self._uncopied is not None:
            self._copy_progress(self._uncopied)

    def _copy_progress(self, state: dict) -> None:
        """The progress just committed, copied beside the outbox (edge.agent.resume.write_copy).
        A copy that cannot be written only lags: the outbox holds the progress."""
        self._uncopied, self._copied_at = None, time.monotonic()
        try:
            write_copy(self.copy, state)
        except OSError as e:
            if not self._copy_failing:
                log.warning("cannot write the copy of the progress %s (%s); a lost outbox "
                            "would then have its matches since uploaded again", self.copy, e)
            self._copy_failing = True
            return
        if self._copy_failing:
            log.info("the copy of the progress %s is written again", self.copy)
        self._copy_failing = False

    def _inside(self, found: MatchBatch, events: EventBatch | None) -> MatchBatch:
        """Drop (and count) matches whose trajectory reaches before the kept events: only
        when ``outbox.max_retained_events`` cut an idle partition's window."""
        lo = events.position if events is not None else self.position
        hi = lo + (len(events) if events is not None else 0)
        ptr = np.asarray(found.trajectory_ptr, dtype=np.int64)
        traj = np.asarray(found.trajectory)
        outside = (traj < lo) | (traj >= hi)
        if not outside.any():
            return found
        # a match is kept when none of its trajectory entries is outside (each has >= 1)
        bad = np.add.reduceat(outside.astype(np.int64), ptr[:-1]) > 0
        ok = np.flatnonzero(~bad).tolist()
        self.counts["matches_orphaned"] += len(found) - len(ok)
        log.warning("%d matches reach before the kept events (outbox.max_retained_events); "
                    "not uploaded", len(found) - len(ok))
        return _rows(found, ok)


def _rows(found: MatchBatch, ok) -> MatchBatch:
    """The matches ``ok`` (indices, in order) of ``found``."""
    ok = list(ok)
    ptr = np.asarray(found.trajectory_ptr, dtype=np.int64)
    rows = np.array(ok, dtype=np.int64)
    pieces = [np.arange(ptr[i], ptr[i + 1]) for i in ok]
    idx = np.concatenate(pieces) if pieces else np.zeros(0, np.int64)
    lengths = np.diff(ptr)[rows] if len(rows) else np.zeros(0, np.int64)
    return MatchBatch(found.partition[rows], found.point[rows], found.start[rows],
                      found.errors[rows], np.concatenate([[0], np.cumsum(lengths)]),
                      found.trajectory[idx], found.trajectory_tags[idx], found.tag_is_time)
