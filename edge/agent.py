"""The device agent: events in, matches under a budget, batches into the outbox, uploads.

``python -m edge.agent --config agent.toml [--once]``. The loop, per chunk of events from
the source (:mod:`edge.sources`): the events go through an :class:`acep.Matcher` under the
budget; its matches become an upload batch (:func:`edge.wire.batch_from_matches`, with the
events of their windows, or a per-slot summary in condensed mode); the batch is put into the
outbox **in the same transaction as the agent's progress** (events consumed, next seq, where
to resume). An :class:`edge.uplink.Uploader` thread sends due batches to the collector.

Restart (including after SIGKILL): the agent resumes from its last committed progress. The
matcher's state is rebuilt by replaying, without emitting, the events it kept for the
windows (every partition's last ``window`` of events, from ``replay_offset``), so a
replayable source (a file, a re-created iterator) yields after a restart exactly the
matches an uninterrupted run would, none twice. Standard input cannot be replayed: the agent
resumes with an empty matcher. Under a binding budget the replay starts with a full credit,
so shedding decisions after a restart may differ from an uninterrupted run's.

Sketch: loaded from ``sketch.path`` or downloaded from the collector, verified (HMAC, size,
pattern) before use; a refused sketch is logged and the agent runs with the fallback policy
``oldest-first`` (named in the log and the metrics). The learned sketch (RL update) is saved
signed, atomically, every ``sketch.save_every`` events and on exit, with the ETag (SHA-256)
of the sketch it was learned from beside it; it is used only while that sketch is the one
published. A download that fails is retried with backoff, and the collector is asked for a
newer sketch every ``sketch.check_interval`` seconds (``If-None-Match``); a new verified
sketch replaces the running one between chunks.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from acep import Matcher
from acep.events import EventBatch, EventError
from acep.matcher import MatchBatch
from acep.pattern import partition_attribute
from acep.shedding import Budget, OldestFirstPolicy, RandomPolicy
from history.policies import HistoryPolicy
from history.sketch import Sketch, SketchError, read_key

from .budgeting import WallClockBudget
from .config import AgentConfig, ConfigError, load_config
from .outbox import Backoff, Outbox, OutboxFull
from .retained import Retained
from .sources import (
    FileSource,
    IteratorSource,
    LogLimiter,
    Source,
    StdinSource,
    fingerprint,
    open_file,
)
from .uplink import Uplink, Uploader, download_sketch
from .wire import (
    Condenser,
    PatternRef,
    _plain_list,
    batch_from_matches,
    batch_id,
    encode_batch,
    encode_condensed,
    sketch_etag,
)

__all__ = ["Agent", "main", "fresh_seq", "FALLBACK_POLICY"]

log = logging.getLogger("edge.agent")
FALLBACK_POLICY = "oldest-first"


class Agent:
    """One agent: the config, its outbox file and (optionally) an iterator of events.

    ``events`` is the iterable for ``source.kind = "iterator"``; ``stdin`` a binary stream
    for ``"stdin"`` (default ``sys.stdin.buffer``).
    """

    def __init__(self, config: AgentConfig, events: Iterable[dict] | None = None,
                 stdin=None):
        self.cfg = config
        self.events_iterable, self.stdin = events, stdin
        ob = config.outbox
        self.outbox = Outbox(ob.path, max_rows=ob.max_rows, max_bytes=ob.max_bytes,
                             policy=ob.policy,
                             backoff=Backoff(base_delay=ob.backoff_base, max_delay=ob.backoff_max))
        st = self.outbox.load_state()
        self.consumed = int(st.get("consumed", 0))
        if "seq" in st:
            self.seq = int(st["seq"])
        else:
            self.seq = fresh_seq()
            self.outbox.save_state({"seq": self.seq})
        self.finished = bool(st.get("finished", False))
        self.resume_offset = st.get("offset", 0)
        self.replay_position = int(st.get("replay_position", 0))
        self.replay_offset = st.get("replay_offset", 0)
        self._check_progress(st)
        self.stop_event = threading.Event()
        # outbox transactions run in one writer thread, one at a time (see _write)
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agent-outbox")
        self._pending: Future | None = None
        self.uploader: Uploader | None = None
        self.uplink = None if config.collector_url is None else \
            Uplink(config.collector_url, config.token or "", config.timeout)
        self.policy_name, self.policy_error = FALLBACK_POLICY, None
        self.wallclock: WallClockBudget | None = None
        self.origin: str | None = None  # the ETag of the sketch the running one derives from
        self._published: str | None = None  # the last published ETag seen (If-None-Match)
        self._download_failed = False
        self._offered: tuple | None = None  # a new verified sketch from _SketchWatch
        self._offer_lock = threading.Lock()
        self._stats_carry = {"candidates": 0, "shed": 0, "decide_ns": 0}
        self.matcher = self._build_matcher()
        self.pattern_ref = PatternRef(
            config.pattern.id, config.pattern.text, config.pattern.window, config.pattern.k,
            tuple(config.pattern.where), self.matcher.partition)
        self.condenser = Condenser(config.condensed.slot, config.pattern.window) \
            if config.condensed.enabled else None
        # The events kept for windows: a contiguous run of positions (batch_from_matches
        # indexes events by position) with each event's resume offset before it.
        self.kept = Retained(self.matcher.partition, config.pattern.window,
                             config.outbox.max_retained_events)
        self.position = 0
        self.counts = {"events_in": 0, "events_bad": 0, "events_replayed": 0, "matches": 0,
                       "matches_orphaned": 0, "batches_put": 0, "batches_refused": 0,
                       "bytes_put": 0, "sketch_saves": 0, "sketch_updates": 0}
        self.lag = 0.0
        self._since_save = 0
        # held while a chunk is processed, so the metrics thread reads a consistent state
        self._loop_lock = threading.Lock()
        self._bad_log = LogLimiter(log)  # the source's, once there is one (one rate limit)
        if config.sketch is not None and config.sketch.download and self.uplink is not None:
            _SketchWatch(self).start()

    # ------------------------------------------------------------------ set-up

    def _build_matcher(self) -> Matcher:
        b = self.cfg.budget
        budget = None
        if b.mode == "fixed":
            budget = Budget(b.ops_per_event, b.burst)
        elif b.mode == "wall-clock":
            self.wallclock = WallClockBudget(b.ops_per_event or b.max_ops, b.target_utilization,
                                             b.max_lag, b.min_ops, b.max_ops,
                                             catch_up=b.catch_up)
            budget = Budget(self.wallclock.ops, b.burst)
        sketch = self._load_sketch() if self.cfg.sketch is not None else None
        if sketch is not None:
            try:
                matcher, policy = self._history_matcher(sketch, budget)
            except (ValueError, TypeError) as e:
                self._refuse_sketch(f"does not fit the pattern: {e}")
            else:
                self.policy_name, self.history = "history", policy
                return matcher
        self.history = None
        if b.policy == "random":
            self.policy_name = "random"
            return self._matcher(budget, RandomPolicy())
        if self.cfg.sketch is None:
            self.policy_name = b.policy if b.policy != "history" else FALLBACK_POLICY
            if b.policy == "history":
                self.policy_error = "budget.policy = \"history\" needs a [sketch]"
                log.error("%s; using the fallback policy %s", self.policy_error,
                          FALLBACK_POLICY)
        if budget is None and self.policy_error is None:
            self.policy_name = "none"  # nothing is ever shed
        return self._matcher(budget, OldestFirstPolicy() if budget else None)

    def _refuse_sketch(self, why: str) -> None:
        self.policy_error = f"sketch refused: {why}"
        log.error("%s; using the fallback policy %s", self.policy_error, FALLBACK_POLICY)

    def _history_matcher(self, sketch: Sketch, budget: Budget | None
                         ) -> tuple[Matcher, HistoryPolicy]:
        sk = self.cfg.sketch
        policy = HistoryPolicy(sketch, sk.learning_rate, sk.explore, defer=sk.defer,
                               budget=budget)
        return self._matcher(budget, policy, bins=policy.bins), policy

    def _matcher(self, budget: Budget | None, policy, **kw) -> Matcher:
        p = self.cfg.pattern
        # "error": the kernel stops at a bad event, so it can be named and logged (_match)
        return Matcher(p.text, window=p.window, k=p.k, where=list(p.where),
                       partition=p.partition, on_bad_event="error", budget=budget,
                       policy=policy, **kw)

    def _load_sketch(self) -> Sketch | None:
        """The verified sketch to start with, or None (logged) when it is missing, tampered
        or oversized. The learned sketch saved by this device (``save_path``) is used when
        it derives from the sketch published now (or, while a download fails, the last one
        kept at ``sketch.path``)."""
        sk = self.cfg.sketch
        try:
            key = _read_key(sk.key_file, "sketch.key_file")
            device_key = _read_key(sk.device_key_file, "sketch.device_key_file") \
                if sk.device_key_file else key
        except OSError as e:
            self._refuse_sketch(str(e))
            return None
        learned = self._learned_sketch(device_key)
        try:
            data = self._original_sketch()
        except OSError as e:
            if sk.download:  # _SketchWatch retries; a kept copy or a learned sketch serves
                self._download_failed = True
                log.warning("sketch download failed (%s); retrying with backoff", e)
            if learned is not None:
                log.info("using the learned sketch %s until the download succeeds",
                         sk.save_path)
                self.origin = learned[1]
                return learned[0]
            if sk.download:
                self.policy_error = f"sketch download failed: {e}"
                log.error("%s; using the fallback policy %s until it succeeds",
                          self.policy_error, FALLBACK_POLICY)
            else:
                self._refuse_sketch(str(e))
            return None
        etag = self._published = sketch_etag(data)
        if learned is not None:
            if learned[1] == etag:
                log.info("loaded the learned sketch %s", sk.save_path)
                self.origin = etag
                return learned[0]
            log.info("the learned sketch %s derives from sketch %s, not from the sketch "
                     "now published (%s): starting from the published one", sk.save_path,
                     (learned[1] or "unrecorded")[:16], etag[:16])
        try:
            sketch = self._fitting(Sketch.from_bytes(data, key, sk.max_bytes))
        except SketchError as e:
            self._refuse_sketch(str(e))
            return None
        self.origin = etag
        return sketch

    def _original_sketch(self) -> bytes:
        """The published sketch's bytes: downloaded (kept at ``sketch.path``, which a
        ``304`` confirms) or read from ``sketch.path``. Raises OSError."""
        sk = self.cfg.sketch
        kept = None
        if sk.path and os.path.exists(sk.path):
            with open(sk.path, "rb") as fh:
                kept = fh.read(sk.max_bytes + 1)
        if not sk.download:
            if kept is None:
                raise OSError(f"sketch.path: {sk.path}: no such file")
            return kept
        try:
            data = self._fetch_sketch(None if kept is None else sketch_etag(kept))
        except OSError:
            if kept is None:
                raise
            self._download_failed = True
            log.warning("sketch download failed; using the copy kept at %s until it "
                        "succeeds", sk.path)
            return kept
        if data is None:
            return kept
        if sk.path:
            _atomic_write(sk.path, data)
        return data

    def _learned_sketch(self, key: bytes) -> tuple[Sketch, str | None] | None:
        """The learned sketch at ``save_path`` and the ETag of the sketch it was learned
        from (None when not recorded), or None."""
        sk = self.cfg.sketch
        if not sk.save_path or not os.path.exists(sk.save_path):
            return None
        try:
            sketch = self._fitting(Sketch.load(sk.save_path, key, sk.max_bytes))
        except (SketchError, OSError) as e:
            log.warning("learned sketch %s not used (%s); trying the original",
                        sk.save_path, e)
            return None
        try:
            with open(sk.save_path + ".origin") as fh:
                origin = fh.read().strip() or None
        except OSError:
            origin = None
        return sketch, origin

    def _fetch_sketch(self, etag: str | None) -> bytes | None:
        """``GET /v1/sketches/{pattern.id}``, with ``If-None-Match: etag`` when given:
        the bytes (not verified), or None when the published sketch is still ``etag``.
        Raises OSError naming the problem."""
        return download_sketch(self.uplink, self.cfg.pattern.id, self.cfg.sketch.max_bytes,
                               etag)

    def _offer_sketch(self, data: bytes) -> None:
        """A newly published sketch (from :class:`_SketchWatch`'s thread): verified here,
        taken into use by the loop between chunks (:meth:`_take_offered_sketch`)."""
        sk, etag = self.cfg.sketch, sketch_etag(data)
        self._published = etag
        try:
            sketch = self._fitting(Sketch.from_bytes(
                data, _read_key(sk.key_file, "sketch.key_file"), sk.max_bytes))
        except (SketchError, OSError) as e:
            log.error("the sketch published as %s is refused: %s; keeping the policy %s",
                      etag[:16], e, self.policy_name)
            return
        with self._offer_lock:
            self._offered = (sketch, etag, data)

    def _take_offered_sketch(self) -> None:
        with self._offer_lock:
            offered, self._offered = self._offered, None
        if offered is None:
            return
        sketch, etag, data = offered
        try:
            matcher, policy = self._history_matcher(sketch, self.matcher.budget)
        except (ValueError, TypeError) as e:
            log.error("the sketch published as %s does not fit the pattern: %s; keeping the "
                      "policy %s", etag[:16], e, self.policy_name)
            return
        before, was = self.matcher.stats, self.policy_name
        self.matcher, self.history = matcher, policy
        kept = self.kept.view()
        if kept is not None:  # the windows' state; their matches were committed before
            self._match(kept)
        after = matcher.stats
        for name in self._stats_carry:
            self._stats_carry[name] += before[name] - after[name]
        self.policy_name, self.policy_error, self.origin = "history", None, etag
        self._download_failed = False
        self.counts["sketch_updates"] += 1
        log.info("using the sketch published as %s (policy was %s)", etag[:16], was)
        if self.cfg.sketch.path:
            try:
                _atomic_write(self.cfg.sketch.path, data)
            except OSError as e:
                log.error("could not keep the sketch at %s: %s", self.cfg.sketch.path, e)
        self._save_sketch()

    def _fitting(self, sketch: Sketch) -> Sketch:
        """``sketch`` if this agent's pattern can use it; else :class:`SketchError` naming
        what differs."""
        p = self.cfg.pattern
        try:
            partition = partition_attribute(p.where, p.partition)
        except ValueError:
            partition = p.partition  # the matcher will name what is wrong with the pattern
        problem = sketch.mismatch(p.text, p.k, p.window, p.where, partition)
        if problem is not None:
            raise SketchError(problem)
        return sketch

    def _stream(self) -> tuple[dict, dict]:
        """What the progress is progress of: the source (for a file its path, device and
        inode; the fingerprint of its first bytes joins them with the first chunk read) and
        the pattern definition, as JSON values."""
        p, s = self.cfg.pattern, self.cfg.source
        pattern = {"id": p.id, "text": p.text, "window": p.window, "k": p.k,
                   "where": list(p.where), "partition": p.partition}
        source: dict = {"kind": s.kind}
        if s.kind == "file":
            source["path"] = os.path.abspath(s.path)
            try:
                st = os.stat(s.path)
                source.update(dev=st.st_dev, ino=st.st_ino)
            except OSError:
                pass  # a followed file that does not exist yet
        return source, pattern

    def _check_progress(self, st: dict) -> None:
        """Resume the outbox's progress only on the stream it was made on; for another
        source or pattern, log why and read the new one from its start (``consumed`` and
        ``seq`` go on, so positions and batch ids stay unique)."""
        self.source_id, self.pattern_def = self._stream()
        # _file_start: the position where the current file's events start; _rotated: the
        # files renamed away before it that hold kept events, each from its "start"
        self._generation = 0
        self._file_start = int(st.get("file_start", self.replay_position))
        self._rotated: list[dict] = st.get("rotated", [])
        # where the progress' file is now when it was renamed away while the agent was
        # stopped (see _other_stream): a restart reads its rest before the file at the path
        self._renamed: io.BufferedReader | None = None
        why = self._other_stream(st.get("source"), st.get("pattern")) if st else None
        if why is None:
            if self.cfg.source.kind == "stdin":
                self.finished = False  # every run reads a new standard input
            return
        log.warning("the progress in %s (%d events consumed, next seq %d) is not of this "
                    "stream: %s; reading %s from its start", self.cfg.outbox.path,
                    self.consumed, self.seq, why, self.source_id.get("path", "the source"))
        self.finished = False
        self.resume_offset = self.replay_offset = 0
        self.replay_position = self._file_start = self.consumed
        self._rotated = []

    def _other_stream(self, source: dict | None, pattern: dict | None) -> str | None:
        """Why the progress of ``source``/``pattern`` is not this stream's (None: it is;
        progress written before it named its stream is taken as this stream's)."""
        if pattern is not None and pattern != self.pattern_def:
            keys = [k for k in self.pattern_def if pattern.get(k) != self.pattern_def[k]]
            return ", ".join(f"pattern.{k} was {pattern.get(k)!r}" for k in keys)
        if source is None:
            return None
        now = self.source_id
        if source.get("kind") != now["kind"]:
            return f"source.kind was {source.get('kind')!r}"
        if now["kind"] != "file":
            return None
        if source.get("path") != now["path"]:
            return f"source.path was {source.get('path')}"
        if "ino" in source and (source.get("dev"), source["ino"]) != (now.get("dev"),
                                                                      now.get("ino")):
            why = (f"{now['path']} is another file now (it was inode {source['ino']}): "
                   "rotated or replaced while the agent was stopped")
            if self.finished or "fp" not in source or "dev" not in source:
                return why  # read to its end / an older agent's progress: not looked for
            if self._find_renamed(source):
                return None
            return (f"{why}; the old file is not in {os.path.dirname(now['path'])} any more "
                    "(deleted, compressed or moved)" + self._lost())
        return self._other_bytes(source)

    def _lost(self) -> str:
        """For a log line: the old file's bytes never read (none for a finished stream)."""
        if self.finished:
            return ""
        return (f", so its unread rest, from byte {int(self.resume_offset or 0)} to its end, "
                "may be lost")

    def _find_renamed(self, source: dict) -> bool:
        """Whether the progress' file, renamed away while the agent was stopped, is in the
        directory of the path (by device, inode, fingerprint, and at least the resume
        offset's bytes): then a restart replays from it as usual, reads its rest (the
        events written before the rotation), then the file at the path from its start."""
        path = self.source_id["path"]
        offset = int(self.resume_offset or 0)
        fh = open_file(os.path.dirname(path), {**source, "end": offset})
        if fh is None or os.path.abspath(fh.name) == path:
            if fh is not None:
                fh.close()
            return False
        self._renamed, found = fh, fh.name
        log.info("%s was rotated while the agent was stopped; reading its rest from %s byte "
                 "%d first (after replaying the windows still open), then %s from its start",
                 path, found, offset, path)
        between = _changed_after(path, found, [f["ino"] for f in self._rotated])
        if between:
            log.warning("%s also holds %s, changed after %s was last written: a file rotated "
                        "in between (while the agent was stopped) is not known to the "
                        "progress and its events are not read", os.path.dirname(path),
                        ", ".join(between), found)
        # the progress is of that file until the source reaches the one at the path
        self.source_id = {**self.source_id, **{k: source[k] for k in
                                               ("dev", "ino", "fp", "fp_bytes") if k in source}}
        return True

    def _other_bytes(self, source: dict) -> str | None:
        """Why the file at the path, with the progress' inode, is still not the progress'
        file: its first bytes differ (progress without a fingerprint is taken as before)
        or it is shorter than the offset."""
        path = self.source_id["path"]
        try:
            if "fp" in source and fingerprint(path, source["fp_bytes"]) != source["fp"]:
                return (f"{path} is another file now (inode {source.get('ino')} again, but its "
                        f"first {source['fp_bytes']} bytes differ): re-created, or truncated "
                        "and written again, while the agent was stopped" + self._lost())
            if os.stat(path).st_size < int(self.resume_offset or 0):
                return (f"{path} is shorter than the progress' byte offset "
                        f"{self.resume_offset}: truncated" + self._lost())
        except OSError:
            pass
        return None

    def _next_file(self, source: Source) -> None:
        """A followed file was rotated or truncated: the chunk's events are a new file's,
        from its start. A file renamed away joins the ones a restart replays from while
        it holds kept events; a truncated file's bytes are gone, so a replay starts after
        them."""
        if not isinstance(source, FileSource) or source.identity is None:
            return
        for left in source.left[self._generation:]:
            if left is None:
                self._rotated = []
                self.replay_position, self.replay_offset = self.position, 0
            else:
                self._rotated = [*self._rotated, {**left, "start": self._file_start}]
            self._file_start, self.resume_offset = self.position, 0
        self._generation = source.generation
        self.source_id = {**self.source_id, **source.identity}

    def _rotated_files(self) -> list[tuple[io.BufferedReader, int | None]]:
        """The files renamed away that hold the replay's first events, found (in the
        directory of the path, by device, inode and fingerprint) and opened, each with the
        byte where it was left, then the progress' own file when it was renamed away while the
        agent was stopped (``_renamed``; end None: read to its end). When one of the
        rotated files is not found, the replay starts at the current file."""
        rotated, self._rotated = self._rotated, []  # the replay builds it again
        # the progress' own file, renamed away while the agent was stopped: to its end
        renamed = [(self._renamed, None)] if self._renamed else []
        if not rotated:
            return renamed
        path = self.source_id["path"]
        found = [open_file(os.path.dirname(path), f) for f in rotated]
        current = self._renamed.name if self._renamed else path
        if None in found:
            for fh in found:
                if fh is not None:
                    fh.close()
            gone = rotated[found.index(None)]
            log.warning("a file rotated away from %s holds events of windows still open "
                        "(inode %d, read to byte %d) and is not in its directory any more: "
                        "the replay starts at %s, so a match spanning the rotation may be "
                        "missed", path, gone["ino"], gone["end"], current)
            self.replay_position, self.replay_offset = self._file_start, 0
            return renamed
        log.info("replaying the events of windows still open from %s, byte %s, then %s",
                 ", ".join(fh.name for fh in found), self.replay_offset, current)
        self._file_start = self.replay_position
        return [(where, f["end"]) for where, f in zip(found, rotated)] + renamed

    def _make_source(self) -> Source:
        s = self.cfg.source
        kw = dict(batch_events=s.batch_events, batch_seconds=s.batch_seconds)
        if s.kind == "file":
            before = self._rotated_files()
            src = FileSource(s.path, follow=s.follow, start=int(self.replay_offset or 0),
                             poll_seconds=s.poll_seconds, counted=int(self.resume_offset or 0),
                             before=before, **kw)
        elif s.kind == "iterator":
            if self.events_iterable is None:
                raise ConfigError("source.kind: \"iterator\" needs events passed to Agent")
            src = IteratorSource(self.events_iterable, start=int(self.replay_offset or 0), **kw)
        else:
            src = StdinSource(self.stdin, **kw)
        self._bad_log = src.bad_log
        if src.replayable:
            self.position, self.resume_offset = self.replay_position, self.replay_offset
        else:  # nothing to replay: positions continue after the events consumed
            self.position = self.replay_position = self.consumed
        return src

    # ------------------------------------------------------------------ the loop

    def stop(self, *_args) -> None:
        """Finish the current chunk, commit it, flush uploads and return (signal safe)."""
        self.stop_event.set()

    def run(self, once: bool = False) -> dict:
        """Process the source until it ends (``once`` or a non-followed file) or
        :meth:`stop`; returns the final metrics."""
        if self.finished:
            log.info("the stream was already processed to its end; nothing to do")
        source = self._make_source()
        if once and isinstance(source, FileSource):
            source.follow = False
        uploader = None
        if self.uplink is not None:
            uploader = Uploader(self.outbox, self.uplink)
            uploader.start()
        self.uploader = uploader
        metrics_done = threading.Event()
        metrics_thread = threading.Thread(target=self._metrics_loop, args=(source, metrics_done),
                                          name="agent-metrics", daemon=True)
        metrics_thread.start()
        try:
            if not self.finished:
                for chunk in source.chunks(self.stop_event):
                    with self._loop_lock:
                        self._process(chunk, source)
                    if self.stop_event.is_set():
                        break
                # only a source that has ended for good flushes the pending matches: a
                # followed file read --once goes on next time, from the replay point
                if source.eof and not self.stop_event.is_set() and self._finite():
                    with self._loop_lock:
                        self._finish(source)
            self._wait_writes()
            # the loop ends without a stop only when the run is finite (--once or an ended
            # source): deliver what it queued before exiting
            if uploader is not None and not self.stop_event.is_set():
                self._drain(uploader)
        finally:
            try:
                self._wait_writes()
            finally:
                self._writer.shutdown(wait=True)
                if uploader is not None:
                    uploader.stop(self.cfg.timeout + 1)
                metrics_done.set()
                metrics_thread.join()
                self._save_sketch()
                final = self.metrics(source)
                if uploader is not None and final["outbox_pending"]:
                    log.warning("%d batches (%d bytes) are not acknowledged by the collector "
                                "(last error: %s); they stay in %s and the next run sends "
                                "them", final["outbox_pending"], final["outbox_pending_bytes"],
                                final["upload_error"], self.cfg.outbox.path)
                self._emit_metrics(final)
                self.outbox.close()
        return final

    def _finite(self) -> bool:
        return self.cfg.source.kind != "file" or not self.cfg.source.follow

    def _drain(self, uploader: Uploader) -> None:
        """A finite run: wait until the uploader has sent every pending batch, at most
        ``collector.drain_timeout`` seconds, and no longer than needed when the next retry
        falls after that deadline."""
        deadline = time.monotonic() + self.cfg.drain_timeout
        while not self.stop_event.is_set():
            at = uploader.next_attempt_at()
            if at is None or time.monotonic() + (at - time.time()) > deadline:
                return
            uploader.wake.set()
            time.sleep(0.02)

    def _to_batch(self, events: list[dict], position: int, starts: list, ends: list,
                  source: Source) -> tuple[EventBatch, list[int]]:
        """The good events as a batch, and the indices of those kept; each bad one is
        counted and logged with where it is (``starts``/``ends``: its offsets), unless it
        comes before ``consumed`` (a replay: it was counted when first read)."""
        warm = self.consumed - position
        keep = list(range(len(events)))
        while True:
            try:
                rows = events if len(keep) == len(events) else [events[i] for i in keep]
                return EventBatch.from_events(rows, position, source.name), keep
            except EventError as e:
                bad = (e.position if e.position is not None else position) - position
                if not 0 <= bad < len(keep):
                    raise
                i = keep[bad]
                if bad >= warm:  # the events before it in the chunk are good ones
                    self._bad_event(e, source.where(starts[i], ends[i], position + bad))
                del keep[bad]

    def _match(self, batch: EventBatch, source: Source | None = None,
               starts: list | None = None, ends: list | None = None) -> MatchBatch:
        """``match_batch`` past the events the kernel refuses (a tag going back, a missing
        partition or predicate attribute). With a ``source`` each is counted and logged;
        without (a replay) they were counted when first read."""
        found, base = [], batch.position
        while True:
            try:
                found.append(self.matcher.match_batch(batch))
                break
            except EventError as e:
                if e.position is None or not 0 <= e.position - batch.position < len(batch):
                    raise
                if getattr(e, "matches", None) is not None:
                    found.append(e.matches)
                if source is not None:
                    i = e.position - base
                    self._bad_event(e, source.where(starts[i], ends[i], e.position))
                batch = batch.slice(e.position - batch.position + 1, len(batch))
        return found[0] if len(found) == 1 else MatchBatch.concat(found)

    def _bad_event(self, e: EventError, where: str) -> None:
        field = f", field {e.field!r}" if e.field is not None else ""
        self._bad_log.warning("%s%s: bad event skipped: %s", where, field, e.message)
        self.counts["events_bad"] += 1

    def _process(self, chunk: list, source: Source) -> None:
        started = getattr(source, "chunk_started", time.monotonic())
        t0 = time.perf_counter()
        self._next_file(source)
        self._take_offered_sketch()
        events = [e for e, _ in chunk]
        ends = [o for _, o in chunk]
        starts = [self.resume_offset, *ends[:-1]]  # the offset before each event
        batch, kept = self._to_batch(events, self.position, starts, ends, source)
        if len(kept) < len(starts):
            starts, ends = [starts[i] for i in kept], [ends[i] for i in kept]
        self.resume_offset = chunk[-1][1]
        n_warm = min(max(self.consumed - self.position, 0), len(batch))
        if n_warm:  # replay after a restart: rebuild the state, the matches are committed
            self._match(batch.slice(0, n_warm))
            self.counts["events_replayed"] += n_warm
            self._retain(batch.slice(0, n_warm), starts[:n_warm])
            self._trim()
        live = batch.slice(n_warm, len(batch))
        self.position = batch.position + len(batch)
        if len(live) == 0 and n_warm:
            return
        stats0 = self.matcher.stats if self.wallclock is not None else None
        bad0 = self.counts["events_bad"]
        found = self._match(live, source, starts[n_warm:], ends[n_warm:])
        self.counts["events_in"] += len(live) - (self.counts["events_bad"] - bad0)
        self._retain(live, starts[n_warm:])
        self._commit(found, self.kept.view(), len(live))
        self._trim()
        self.lag = time.monotonic() - started
        # the whole chunk's time, not the matcher's alone: decoding, encoding and the
        # commit are what the per-event base cost of the model absorbs
        self._adapt(len(live), stats0, time.perf_counter() - t0, source)
        self._since_save += len(live)
        if self.cfg.sketch and self._since_save >= self.cfg.sketch.save_every:
            self._save_sketch()

    def _finish(self, source: Source) -> None:
        """End of a finite stream: the pending matches of every partition."""
        found = self.matcher.flush()
        self._commit(found, self.kept.view(), 0, finished=True)
        self.finished = True

    def _commit(self, found: MatchBatch, events: EventBatch | None, n_live: int,
                finished: bool = False) -> None:
        self.consumed += n_live
        state = {"consumed": self.consumed, "offset": self.resume_offset,
                 "replay_position": self.replay_position, "replay_offset": self.replay_offset,
                 "finished": finished, "source": self.source_id, "pattern": self.pattern_def,
                 "file_start": self._file_start, "rotated": self._rotated}
        if len(found) and self.condenser is None:
            found = self._inside(found, events)
        if not len(found):
            self._write(self.outbox.save_state, {**state, "seq": self.seq})
            return
        seq = self.seq
        if self.condenser is not None:
            body = encode_condensed(self.condenser.summarize(
                found, device=self.cfg.device_id, seq=seq, pattern=self.pattern_ref))
        else:
            groups = self.kept.groups(set(_plain_list(found.partition)))
            body = encode_batch(batch_from_matches(found, events, device=self.cfg.device_id,
                                                   seq=seq, pattern=self.pattern_ref,
                                                   groups=groups))
        self.seq += 1
        self.counts["matches"] += len(found)
        self._write(self._put, body, batch_id(self.cfg.device_id, seq),
                    {**state, "seq": self.seq})

    def _put(self, body: bytes, bid: str, state: dict) -> None:
        """The batch and the progress in one outbox transaction (writer thread)."""
        try:
            self.outbox.put(body, bid, state=state)
            self.counts["batches_put"] += 1
            self.counts["bytes_put"] += len(body)
        except OutboxFull as e:
            self.counts["batches_refused"] += 1
            log.error("%s", e)
        if self.uploader is not None:
            self.uploader.wake.set()

    def _write(self, fn, *args) -> None:
        """Run an outbox transaction in the writer thread once the one before it is
        committed. The transactions keep their order and each holds a chunk's batch with
        the progress after it, so a kill leaves a consistent outbox as before; the next
        chunk is decoded and matched while the commit (its fsync) is under way."""
        self._wait_writes()
        self._pending = self._writer.submit(fn, *args)

    def _wait_writes(self) -> None:
        """Until the last outbox transaction is committed (its error is raised here)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

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
        rows = np.array(ok, dtype=np.int64)
        pieces = [np.arange(ptr[i], ptr[i + 1]) for i in ok]
        idx = np.concatenate(pieces) if pieces else np.zeros(0, np.int64)
        lengths = np.diff(ptr)[rows] if len(rows) else np.zeros(0, np.int64)
        return MatchBatch(found.partition[rows], found.point[rows], found.start[rows],
                          found.errors[rows], np.concatenate([[0], np.cumsum(lengths)]),
                          found.trajectory[idx], found.trajectory_tags[idx], found.tag_is_time)

    def _retain(self, new: EventBatch, starts: list) -> None:
        """Add a chunk's events to the kept run (:class:`edge.retained.Retained`); the run
        seen until :meth:`_trim` holds the windows of the chunk's matches."""
        self.kept.append(new, starts)

    def _trim(self) -> None:
        """Keep, per partition, the events within ``window`` of its last tag, as one
        contiguous run (see the module docstring); remember where a replay starts."""
        if not len(self.kept):
            return
        self.kept.trim()
        self.replay_position = self.kept.position
        self.replay_offset = self.kept.first_offset(self.resume_offset)
        if self._rotated:  # keep the files renamed away that hold kept events
            ends = [f["start"] for f in self._rotated[1:]] + [self._file_start]
            self._rotated = [f for f, end in zip(self._rotated, ends)
                             if end > self.replay_position]
        floor = self._rotated[0]["start"] if self._rotated else self._file_start
        if self.replay_position < floor:  # kept events of a truncated file
            self.replay_position, self.replay_offset = floor, 0

    def _adapt(self, n: int, stats0: dict | None, seconds: float, source: Source) -> None:
        if self.wallclock is None or n == 0:
            return
        s = self.matcher.stats
        ops = (s["candidates"] - stats0["candidates"]) - (s["shed"] - stats0["shed"])
        new = self.wallclock.update(n, ops, seconds, source.arrival_rate, self.lag,
                                    backlog=source.backlog_events)
        b = self.cfg.budget
        # acep has no public setter yet; set_budget refills the bucket, so only on a change
        # that matters (a refill is at most one burst of credit).
        if abs(new - self._ops_now()) > 0.1 * self._ops_now():
            self.matcher._kernel.set_budget(float(new), float(new * b.burst))
            self.matcher.budget = Budget(new, b.burst)

    def _ops_now(self) -> float:
        return self.matcher.budget.ops_per_event if self.matcher.budget else 0.0

    # ------------------------------------------------------------------ sketch, metrics

    def _save_sketch(self) -> None:
        self._since_save = 0
        sk = self.cfg.sketch
        if sk is None or self.history is None or not sk.save_path \
                or self.history.learning_rate == 0:
            return
        try:
            key = _read_key(sk.device_key_file or sk.key_file, "sketch.device_key_file")
            _atomic_write(sk.save_path, self.history.learned_sketch().to_bytes(key))
            if self.origin is not None:  # after the sketch: a crash between keeps the old
                _atomic_write(sk.save_path + ".origin", self.origin.encode())  # origin
            self.counts["sketch_saves"] += 1
        except (OSError, SketchError) as e:
            log.error("could not save the learned sketch to %s: %s", sk.save_path, e)

    def metrics(self, source: Source | None = None) -> dict:
        """The current metrics (one JSON object)."""
        s = {**self.matcher.stats}
        for name, carried in self._stats_carry.items():  # from matchers before a new sketch
            s[name] += carried
        ob = self.outbox.metrics()
        out = {"time": time.time(), "device": self.cfg.device_id, **self.counts,
               "consumed": self.consumed, "seq": self.seq, "candidates": s["candidates"],
               "shed": s["shed"], "decide_ns": s["decide_ns"], "lag_s": round(self.lag, 4),
               "ops_per_event": self._ops_now(), "policy": self.policy_name,
               "policy_error": self.policy_error, "outbox_pending": ob["pending"],
               "outbox_pending_bytes": ob["pending_bytes"], "batches_sent": ob["sent"],
               "bytes_sent": ob["sent_bytes"], "batches_rejected": ob["rejected"],
               "batches_dropped": ob["dropped"], "outbox_dead": ob["dead"],
               "outbox_dead_bytes": ob["dead_bytes"], "retained_events": len(self.kept),
               "uploads_unauthorized": 0, "upload_error": None}
        if self.uploader is not None:
            out["uploads_unauthorized"] = self.uploader.counts["unauthorized"]
            out["upload_error"] = self.uploader.last_error
        if source is not None:
            out["bad_lines"] = source.bad_lines
            if isinstance(source, FileSource):
                out["backlog_bytes"] = source.backlog()
        if self.wallclock is not None:
            out.update(cost_per_op_ns=self.wallclock.op_cost * 1e9,
                       cost_per_event_ns=self.wallclock.base_cost * 1e9,
                       arrival_rate=self.wallclock.rate,
                       backlog_events=round(getattr(source, "backlog_events", 0.0)))
        return out

    def _metrics_loop(self, source: Source, done: threading.Event) -> None:
        """A metrics line every ``metrics.interval`` seconds, also while no event arrives."""
        while not done.wait(self.cfg.metrics.interval):
            with self._loop_lock:
                doc = self.metrics(source)
            self._emit_metrics(doc)

    def _emit_metrics(self, doc: dict) -> None:
        line = json.dumps(doc, sort_keys=True)
        if self.cfg.metrics.path is None:
            print(line, file=sys.stderr, flush=True)
            return
        with open(self.cfg.metrics.path, "a") as fh:
            fh.write(line + "\n")


def fresh_seq() -> int:
    """The first ``seq`` of a new outbox: the Unix time in microseconds. An earlier outbox
    of the same device id used one seq per batch from its own creation time, never one per
    microsecond, so a new one starts above every batch id it uploaded (unless the clock went
    back by more than that outbox's age) and the collector never sees a reused id."""
    return time.time_ns() // 1000


class _SketchWatch(threading.Thread):
    """Asks the collector for the published sketch: after a failed download again with
    the outbox's backoff, then every ``sketch.check_interval`` seconds (0: never) with
    ``If-None-Match``. A new one goes to :meth:`Agent._offer_sketch`."""

    def __init__(self, agent: Agent):
        super().__init__(name="acep-sketch", daemon=True)
        self.agent = agent

    def run(self) -> None:
        agent, ob = self.agent, self.agent.cfg.outbox
        backoff = Backoff(base_delay=ob.backoff_base, max_delay=ob.backoff_max)
        interval = agent.cfg.sketch.check_interval
        failures = 1 if agent._download_failed else 0
        while failures or interval > 0:
            delay = backoff.delay("sketch", failures) if failures else interval
            if agent.stop_event.wait(delay):
                return
            try:
                data = agent._fetch_sketch(agent._published)
            except OSError as e:
                failures += 1
                log.warning("sketch download failed (%s); retrying with backoff", e)
                continue
            failures = 0
            if data is not None:
                agent._offer_sketch(data)


def _changed_after(path: str, found: str, known: list[int]) -> list[str]:
    """The names of the files beside ``path`` whose names start with its name and that
    were changed after ``found`` (neither of them, nor a file of inode in ``known``): the
    files a rotation renamed away after ``found`` and before the file at ``path``, most
    likely. Sorted; empty when the directory cannot be read."""
    base = os.path.basename(path)
    try:
        since = os.stat(found).st_mtime_ns
        entries = list(os.scandir(os.path.dirname(path)))
    except OSError:
        return []
    out = []
    for entry in entries:
        if entry.name == base or not entry.name.startswith(base) \
                or os.path.abspath(entry.path) == os.path.abspath(found):
            continue
        try:
            if entry.is_file() and entry.inode() not in known \
                    and entry.stat().st_mtime_ns > since:
                out.append(entry.name)
        except OSError:
            continue
    return sorted(out)


def _read_key(path: str | None, name: str) -> bytes:
    if path is None:
        raise OSError(f"{name}: not set")
    try:
        return read_key(path)
    except OSError as e:
        raise OSError(f"{name}: {e}") from None


def _atomic_write(path: str, data: bytes) -> None:
    """Write to a temporary file beside ``path``, fsync, rename: never half a file."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def main(argv: list[str] | None = None) -> int:
    """``python -m edge.agent --config agent.toml [--once]``."""
    ap = argparse.ArgumentParser(prog="acep agent", description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="the agent.toml")
    ap.add_argument("--once", action="store_true",
                    help="process what the source holds now, upload what is due, exit")
    ap.add_argument("--log-level", default="INFO")
    args = ap.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        agent = Agent(load_config(args.config))
    except ConfigError as e:
        print(f"acep agent: config error: {e}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, agent.stop)
    signal.signal(signal.SIGINT, agent.stop)
    agent.run(once=args.once)
    return 0


if __name__ == "__main__":
    sys.exit(main())
