"""The device agent: events in, matches under a budget, batches into the outbox, uploads.

``acep agent --config agent.toml [--once]``. Per chunk of events from the source
(:mod:`edge.agent.sources`), an :class:`acep.Matcher` matches under the budget; its matches
become an upload batch (:func:`edge.wire.batch_from_matches`), put into the outbox in the
same transaction as the agent's progress. An :class:`edge.agent.uploader.Uploader` thread
sends due batches to the collector. The loop, the restart and the sketch's use are in
docs/WIRE.md, "Agent" (Loop, Restart, Sketch).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable

from acep import Matcher
from acep.events import EventBatch, EventError
from acep.matcher import MatchBatch
from acep.shedding import Budget, OldestFirstPolicy, RandomPolicy
from history.policies import HistoryPolicy
from history.sketch import Sketch

from ..logs import Crashes, Failing, LogLimiter
from ..wire import (
    Condenser,
    PatternRef,
)
from .batches import Batches
from .budgeting import WallClockBudget
from .commits import Commits
from .config import AgentConfig, ConfigError
from .metrics import Metrics
from .outbox import Outbox, OutboxError
from .outbox_reader import Backoff
from .resume import Progress, copy_path, from_copy
from .retained import Retained
from .sketches import FALLBACK_POLICY, Sketches
from .sources import FileSource, IteratorSource, Source, StdinSource, chunk_batch, chunk_events
from .uplink import Uplink
from .uploader import Uploader

__all__ = ["Agent", "fresh_seq", "FALLBACK_POLICY"]

log = logging.getLogger("edge.agent")
DISK_FULL_RETRY = 5.0  # seconds between two tries of an outbox write refused for room


class Agent(Batches, Metrics):
    """One agent: the config, its outbox file and (optionally) an iterator of events.

    :meth:`run` matches the source under the budget, keeps the matches in the outbox and
    uploads them when the config names a collector; ``acep agent`` runs it.

    Parameters
    ----------
    config : AgentConfig
        The checked config (:func:`edge.load_config`).
    events : iterable of dict, optional
        The events of a ``source.kind = "iterator"``, each with ``type`` and ``t``.
    stdin : binary file, optional
        The stream of ``"stdin"`` (default ``sys.stdin.buffer``).

    Examples
    --------
    >>> import os, tempfile
    >>> work = tempfile.mkdtemp()
    >>> toml = ['[device]', 'id = "pi-01"', '[pattern]', 'id = "abc"', 'text = "a b c"',
    ...         'window = 5.0', 'k = 1', '[source]', 'kind = "iterator"', '[outbox]',
    ...         'path = "outbox.db"', '[metrics]', 'path = "metrics.jsonl"']
    >>> with open(os.path.join(work, "agent.toml"), "w") as f:
    ...     for line in toml:
    ...         print(line, file=f)
    >>> from edge import Agent, load_config
    >>> events = [{"type": "a", "t": 1}, {"type": "b", "t": 2}, {"type": "c", "t": 3}]
    >>> agent = Agent(load_config(os.path.join(work, "agent.toml")), events=events)
    >>> metrics = agent.run()     # no collector: the matches wait in the outbox
    >>> metrics["events_in"], metrics["matches"], metrics["outbox_pending"] > 0
    (3, 2, True)
    """

    def __init__(self, config: AgentConfig, events: Iterable[dict] | None = None,
                 stdin=None):
        self.cfg = config
        self.events_iterable, self.stdin = events, stdin
        ob = config.outbox
        try:
            self.outbox = Outbox(ob.path, max_rows=ob.max_rows, max_bytes=ob.max_bytes,
                                 policy=ob.policy, backoff=Backoff(base_delay=ob.backoff_base,
                                                                   max_delay=ob.backoff_max))
        except OutboxError as e:
            where = f"{config.config_path}: " if config.config_path else ""
            raise ConfigError(f"{where}outbox.path: {e}") from None
        self.copy = copy_path(ob.path)
        self.outbox.repair = self._rebuild
        self.source: Source | None = None
        self._copy_failing = False
        self._uncopied: dict | None = None  # progress committed, not in the copy yet
        self._copied_at = time.monotonic()
        st = self.outbox.load_state()
        adopted = from_copy(st, ob.path, fresh_seq())
        if adopted is not None:
            self.outbox.save_state(adopted)
            st = adopted
        self.consumed = int(st.get("consumed", 0))
        self.saved = st  # the progress as loaded (an MQTT source's committed messages)
        if "seq" in st:
            self.seq = int(st["seq"])
        else:
            self.seq = fresh_seq()
            self.outbox.save_state({"seq": self.seq})
        self.progress = Progress(config, st, self.consumed, self.seq)
        self.stop_event = threading.Event()
        # outbox transactions: in order, in a thread of their own (edge/agent/commits.py)
        self.commits = Commits(self.stop_event, self._write_group, DISK_FULL_RETRY)
        self.uploader: Uploader | None = None
        # when the last heartbeat was handed to the uploader (time.monotonic(): a clock set
        # back by NTP must not hold the heartbeats until it is where it was)
        self._beat_at: float | None = None
        self.started_at = time.time()  # in every metrics line: restarts show in the fleet
        self._metrics_lost = 0  # metrics lines not written in a row
        self._metrics_failing = Failing()  # why the last one was not written (or taken)
        self._metrics_crashes = Crashes(
            log, "metrics", "metrics lines and heartbeats are tried again every "
            f"{config.metrics.interval:g}s")
        self.uplink = None if config.collector_url is None else \
            Uplink(config.collector_url, config.token or "", config.timeout, config.ca_file,
                   config.expect_continue, config.compress, config.answer_timeout)
        self.sketches = Sketches(config, self.uplink)
        self.wallclock: WallClockBudget | None = None
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
                       "bytes_put": 0, "events_sampled": 0}
        self.lag = 0.0
        # held while a chunk is processed, so the metrics thread reads a consistent state
        self._loop_lock = threading.Lock()
        self._bad_log = LogLimiter(log)  # the source's, once there is one (one rate limit)
        self.sketches.watch(self.stop_event)

    @property
    def history(self) -> HistoryPolicy | None:
        """The running history policy (None without a sketch)."""
        return self.sketches.history

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
        sk = self.sketches
        sketch = sk.load() if self.cfg.sketch is not None else None
        if sketch is not None:
            try:
                matcher, policy = self._history_matcher(sketch, budget)
            except (ValueError, TypeError) as e:
                sk.refuse(f"does not fit the pattern: {e}")
                if self.cfg.sketch.download and sk.origin is not None:
                    sk.refused(sk.origin, f"the sketch published as {sk.origin[:16]} does not "
                                          f"fit the pattern: {e}")
            else:
                sk.policy_name, sk.history = "history", policy
                return matcher
        if b.policy == "random":
            sk.policy_name = "random"
            return self._matcher(budget, RandomPolicy())
        if self.cfg.sketch is None:
            sk.policy_name = b.policy if b.policy != "history" else FALLBACK_POLICY
            if b.policy == "history":
                sk.policy_error = "budget.policy = \"history\" needs a [sketch]"
                log.error("%s; using the fallback policy %s", sk.policy_error,
                          FALLBACK_POLICY)
        if budget is None and sk.policy_error is None:
            sk.policy_name = "none"  # nothing is ever shed
        return self._matcher(budget, OldestFirstPolicy() if budget else None)

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

    def _take_offered_sketch(self) -> None:
        """A new sketch the collector published (:meth:`Sketches.offer`), taken into use
        between chunks: a new matcher whose state is rebuilt from the kept events."""
        offered = self.sketches.take_offered()
        if offered is None:
            return
        sketch, etag, data = offered
        try:
            matcher, policy = self._history_matcher(sketch, self.matcher.budget)
        except (ValueError, TypeError) as e:
            self.sketches.refused(etag, f"the sketch published as {etag[:16]} does not fit "
                                        f"the pattern: {e}")
            log.error("%s; keeping the policy %s", self.sketches.error,
                      self.sketches.policy_name)
            return
        before = self.matcher.stats
        self.matcher = matcher
        kept = self.kept.view()
        if kept is not None:  # the windows' state; their matches were committed before
            self._match(kept)
        after = matcher.stats
        for name in self._stats_carry:
            self._stats_carry[name] += before[name] - after[name]
        self.sketches.adopt(policy, etag, data)

    def _make_source(self) -> Source:
        s = self.cfg.source
        kw = dict(batch_events=s.batch_events, batch_seconds=s.batch_seconds)
        pr = self.progress
        if s.kind == "file":
            before = pr.rotated_files()
            src = FileSource(s.path, follow=s.follow, start=int(pr.replay_offset or 0),
                             poll_seconds=s.poll_seconds, counted=int(pr.resume_offset or 0),
                             before=before, **kw)
        elif s.kind == "iterator":
            if self.events_iterable is None:
                raise ConfigError("source.kind: \"iterator\" needs events passed to Agent")
            src = IteratorSource(self.events_iterable, start=int(pr.replay_offset or 0), **kw)
        elif s.kind == "mqtt":
            src = self._mqtt_source(kw)
        else:
            src = StdinSource(self.stdin, **kw)
        self._bad_log = src.bad_log
        self.source = src
        if src.replayable:
            self.position, pr.resume_offset = pr.replay_position, pr.replay_offset
        else:  # nothing to replay: positions continue after the events consumed
            self.position = pr.replay_position = self.consumed
        return src

    def _mqtt_source(self, kw: dict) -> Source:
        from .mqtt import STATE_KEY, MqttSource  # paho-mqtt is an optional extra
        try:
            return MqttSource(self.cfg.source, self.saved.get(STATE_KEY), **kw)
        except ImportError as e:
            raise ConfigError(str(e)) from None

    # ------------------------------------------------------------------ the loop

    def stop(self, *_args) -> None:
        """Finish the current chunk, commit it, flush uploads and return (signal safe)."""
        self.stop_event.set()

    def run(self, once: bool = False) -> dict:
        """Process the source until it ends (``once`` or a non-followed file) or
        :meth:`stop`; returns the final metrics."""
        if self.progress.finished:
            log.info("the stream was already processed to its end; nothing to do")
        source = self._make_source()
        if once and isinstance(source, FileSource):
            source.follow = False
        elif once and self.cfg.source.kind == "mqtt":
            source.once = True  # what the broker holds now, then the end
        uploader = self.uploader = None if self.uplink is None else \
            Uploader(self.outbox, self.uplink, max_body=self.cfg.max_body)
        if uploader is not None:
            # before any batch: the collector lists the device at once, and its answer
            # tells whether it takes gzip before the first batch goes
            self._heartbeat(self.metrics(source))
            uploader.start()
        metrics_done = threading.Event()
        metrics_thread = threading.Thread(target=self._metrics_loop, args=(source, metrics_done),
                                          name="agent-metrics", daemon=True)
        metrics_thread.start()
        try:
            if not self.progress.finished:
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
            self.commits.wait()
            # the loop ends without a stop only when the run is finite (--once or an ended
            # source): deliver what it queued before exiting
            if uploader is not None and not self.stop_event.is_set():
                self._drain(uploader)
        finally:
            try:
                self.commits.close()
                self._flush_copy()
            finally:
                source.close()  # after the last commit: its acknowledgements go first
                if uploader is not None:
                    uploader.stop(self.cfg.timeout + 1)
                metrics_done.set()
                metrics_thread.join()
                self.sketches.save()
                final = self.metrics(source)
                self._last_heartbeat(final)
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
        while not self.stop_event.is_set() and uploader.is_alive():
            at = uploader.next_attempt_at()
            now = time.monotonic()
            if at is None or now >= deadline or now + (at - time.time()) > deadline:
                return
            uploader.wake.set()
            time.sleep(0.02)

    def _to_batch(self, chunk: list, position: int, starts: list, ends: list,
                  source: Source) -> tuple[EventBatch, list[int]]:
        """The good events of a chunk as a batch, and the indices of those kept; each bad
        one is counted and logged with where it is (``starts``/``ends``: its offsets), unless
        it comes before ``consumed`` (a replay: it was counted when first read)."""
        try:
            return chunk_batch(chunk, position, source.name), list(range(len(chunk)))
        except EventError:
            pass  # rare: find the bad events one at a time, from the dicts
        events = chunk_events(chunk)
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
        self.progress.next_file(source, self.position)
        self._take_offered_sketch()
        ends = [o for _, o in chunk]
        starts = [self.progress.resume_offset, *ends[:-1]]  # the offset before each event
        batch, kept = self._to_batch(chunk, self.position, starts, ends, source)
        if len(kept) < len(starts):
            starts, ends = [starts[i] for i in kept], [ends[i] for i in kept]
        self.progress.resume_offset = chunk[-1][1]
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
        self._commit(found, self.kept.view(), len(live), taken=len(chunk))
        self._trim()
        self.lag = time.monotonic() - started
        # the whole chunk's time, not the matcher's alone: decoding, encoding and the
        # commit are what the per-event base cost of the model absorbs
        self._adapt(len(live), stats0, time.perf_counter() - t0, source)
        self.sketches.learned(len(live))

    def _finish(self, source: Source) -> None:
        """End of a finite stream: the pending matches of every partition."""
        found = self.matcher.flush()
        self._commit(found, self.kept.view(), 0, finished=True)
        self.progress.finished = True

    def _retain(self, new: EventBatch, starts: list) -> None:
        """Add a chunk's events to the kept run (:class:`edge.agent.retained.Retained`); the run
        seen until :meth:`_trim` holds the windows of the chunk's matches."""
        self.kept.append(new, starts)

    def _trim(self) -> None:
        """Keep, per partition, the events within ``window`` of its last tag, as one
        contiguous run (see the module docstring); remember where a replay starts."""
        if not len(self.kept):
            return
        self.kept.trim()
        self.progress.trimmed(self.kept.position,
                              self.kept.first_offset(self.progress.resume_offset))

    def _adapt(self, n: int, stats0: dict | None, seconds: float, source: Source) -> None:
        if self.wallclock is None or n == 0:
            return
        s = self.matcher.stats
        ops = (s["candidates"] - stats0["candidates"]) - (s["shed"] - stats0["shed"])
        new = self.wallclock.update(n, ops, seconds, source.arrival_rate, self.lag,
                                    backlog=source.backlog_events)
        b = self.cfg.budget
        # set_budget refills the bucket, so only on a change that matters (a refill is at
        # most one burst of credit).
        if abs(new - self._ops_now()) > 0.1 * self._ops_now():
            self.matcher.set_budget(Budget(new, b.burst))

    def _ops_now(self) -> float:
        return self.matcher.budget.ops_per_event if self.matcher.budget else 0.0


def fresh_seq() -> int:
    """The first ``seq`` of a new outbox: the Unix time in microseconds. An earlier outbox
    of the same device id used one seq per batch from its own creation time, never one per
    microsecond, so a new one starts above every batch id it uploaded (unless the clock went
    back by more than that outbox's age) and the collector never sees a reused id."""
    return time.time_ns() // 1000
