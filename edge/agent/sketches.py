"""The agent's history sketch: where it comes from, whether it may be used, and where the
learned one goes.

:class:`Sketches` loads or downloads the sketch, verifies it (HMAC, size, pattern) and,
when it is refused or missing, names the fallback policy ``oldest-first`` and why.
:class:`_SketchWatch` retries a failed download and asks for a newer sketch; the agent
takes a new one between chunks (:meth:`Sketches.take_offered`, :meth:`Sketches.adopt`). The
agent owns the matcher and builds it with the sketch this gives it. The rules are in
docs/WIRE.md, "Agent", Sketch.
"""

from __future__ import annotations

import logging
import os
import threading

from acep import storage
from acep.pattern import partition_attribute
from history.policies import HistoryPolicy
from history.sketch import Sketch, SketchError

from ..logs import Crashes, Failing
from ..wire import sketch_etag
from .config import AgentConfig, KeyFileError, PatternConfig, SketchConfig, read_key_file
from .outbox_reader import Backoff
from .uplink import Uplink, download_sketch

__all__ = ["Sketches", "FALLBACK_POLICY", "fitting", "KeyFileError"]

log = logging.getLogger("edge.agent")
FALLBACK_POLICY = "oldest-first"


class Sketches:
    """The sketch side of one agent (``cfg.sketch`` may be None: no sketch).

    ``policy_name``/``policy_error`` are what the metrics show; ``history`` is the running
    :class:`HistoryPolicy` (None without one), ``origin`` the ETag of the sketch it was
    learned from and ``published`` the last published ETag seen (``If-None-Match``).
    ``error`` is why the sketch checks fail (a download, an unexpected error, the published
    sketch refused), None once a check gets an answer and the sketch published is not one
    refused."""

    def __init__(self, cfg: AgentConfig, uplink: Uplink | None):
        self.cfg, self.uplink = cfg, uplink
        self.policy_name, self.policy_error = FALLBACK_POLICY, None
        self.history: HistoryPolicy | None = None
        self.origin: str | None = None
        self.published: str | None = None
        self.download_failed = False
        self.keys_unread = False  # the key files could not be read at start
        self._failing = Failing()  # the metrics' sketch_error and sketch_failing_since
        self._refused: tuple[str, str] | None = None  # (ETag, why) of a published one refused
        self.counts = {"sketch_saves": 0, "sketch_updates": 0}
        self._since_save = 0
        self._offered: tuple | None = None  # a new verified sketch from _SketchWatch
        self._offer_lock = threading.Lock()

    @property
    def error(self) -> str | None:
        """Why the sketch checks fail (the metrics' ``sketch_error``), or None."""
        return self._failing.why

    @error.setter
    def error(self, why: str | None) -> None:
        self._failing.set(why)

    @property
    def failing_since(self) -> float | None:
        """When the sketch checks began to fail (Unix time), or None."""
        return self._failing.since

    def keys(self) -> tuple[bytes, bytes]:
        """``(key, device_key)``: ``sketch.key_file`` verifies published sketches,
        ``sketch.device_key_file`` (default the same) the learned one. Raises
        :class:`KeyFileError` naming the file and why it cannot be read."""
        sk = self.cfg.sketch
        key = read_key_file(sk.key_file, "sketch.key_file")
        device_key = read_key_file(sk.device_key_file, "sketch.device_key_file") \
            if sk.device_key_file else key
        return key, device_key

    def refuse(self, why: str) -> None:
        self.policy_error = f"sketch refused: {why}"
        log.error("%s; using the fallback policy %s", self.policy_error, FALLBACK_POLICY)

    def watch(self, stop: threading.Event) -> None:
        """Start the thread that retries a failed download and asks for new sketches
        (only with ``sketch.download`` and a collector)."""
        if self.cfg.sketch is not None and self.cfg.sketch.download and self.uplink is not None:
            _SketchWatch(self, stop).start()

    def load(self) -> Sketch | None:
        """The verified sketch to start with, or None (logged) when it is missing, tampered
        or oversized. The learned sketch saved by this device (``save_path``) is used when
        it derives from the sketch published now (or, while a download fails, the last one
        kept at ``sketch.path``)."""
        sk = self.cfg.sketch
        try:
            key, device_key = self.keys()
        except KeyFileError as e:
            self.policy_error = f"sketch refused: {e}"
            if not (sk.download and self.uplink is not None):
                log.error("%s; using the fallback policy %s", self.policy_error,
                          FALLBACK_POLICY)
                return None
            self.keys_unread, self.error = True, f"cannot verify sketches: {e}"
            log.error("%s; using the fallback policy %s, and the sketch checks try again "
                      "with backoff (up to %gs apart) until it can be read",
                      self.policy_error, FALLBACK_POLICY, self.cfg.outbox.backoff_max)
            return None
        learned = self._learned(device_key)
        try:
            data = self._original()
        except OSError as e:
            if sk.download:  # _SketchWatch retries; a kept copy or a learned sketch serves
                self.download_failed = True
                self.error = f"sketch download failed: {e}"
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
                self.refuse(str(e))
            return None
        etag = self.published = sketch_etag(data)
        if learned is not None:
            if learned[1] == etag:
                log.info("loaded the learned sketch %s", sk.save_path)
                self.origin = etag
                return learned[0]
            log.info("the learned sketch %s derives from sketch %s, not from the sketch "
                     "now published (%s): starting from the published one", sk.save_path,
                     (learned[1] or "unrecorded")[:16], etag[:16])
        try:
            sketch = self.fitting(Sketch.from_bytes(data, key, sk.max_bytes,
                                                    key_from="sketch.key_file"))
        except SketchError as e:
            self.refuse(f"{self._source(etag)}: {e}")
            if sk.download:  # as a check would say it, until another one is published
                self.refused(etag, f"the sketch published as {etag[:16]} is refused: {e}")
            return None
        self.origin = etag
        return sketch

    def _source(self, etag: str) -> str:
        """Where the sketch :meth:`_original` returned came from, for a refusal."""
        sk = self.cfg.sketch
        if not sk.download:
            return f"sketch.path {sk.path}"
        return f"the sketch published as {etag[:16]}" + (f" (kept at {sk.path})"
                                                          if sk.path else "")

    def _original(self) -> bytes:
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
            data = self.fetch(None if kept is None else sketch_etag(kept))
        except OSError as e:
            if kept is None:
                raise
            self.download_failed = True
            self.error = f"sketch download failed: {e}"
            log.warning("sketch download failed; using the copy kept at %s until it "
                        "succeeds", sk.path)
            return kept
        if data is None:
            return kept
        if sk.path:
            storage.write_durably(sk.path, data)
        return data

    def _learned(self, key: bytes) -> tuple[Sketch, str | None] | None:
        """The learned sketch at ``save_path`` and the ETag of the sketch it was learned
        from (None when not recorded), or None."""
        sk = self.cfg.sketch
        if not sk.save_path or not os.path.exists(sk.save_path):
            return None
        try:
            sketch = self.fitting(Sketch.load(sk.save_path, key, sk.max_bytes,
                                              key_from=device_key_option(sk)))
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

    def fetch(self, etag: str | None) -> bytes | None:
        """``GET /v1/sketches/{pattern.id}``, with ``If-None-Match: etag`` when given:
        the bytes (not verified), or None when the published sketch is still ``etag``.
        Raises OSError naming the problem."""
        return download_sketch(self.uplink, self.cfg.pattern.id, self.cfg.sketch.max_bytes,
                               etag)

    def offer(self, data: bytes, keys: tuple[bytes, bytes]) -> None:
        """A newly published sketch (from :class:`_SketchWatch`'s thread): verified here
        with ``keys`` (:meth:`keys`), taken into use by the agent's loop between chunks
        (:meth:`take_offered`). An agent without a history policy since its start (its key
        files could not be read then) resumes its learned sketch when that derives from
        this one, as a start would."""
        sk, etag = self.cfg.sketch, sketch_etag(data)
        try:
            sketch = self.fitting(Sketch.from_bytes(data, keys[0], sk.max_bytes,
                                                    key_from="sketch.key_file"))
        except SketchError as e:
            self.published = etag  # not asked for again until another one is published
            self.refused(etag, f"the sketch published as {etag[:16]} is refused: {e}")
            log.error("%s; keeping the policy %s", self.error, self.policy_name)
            return
        # only now: after an unexpected error the next check downloads it again (no 304)
        self.published = etag
        learned = self._learned(keys[1]) if self.history is None else None
        if learned is not None and learned[1] == etag:
            log.info("the learned sketch %s derives from the sketch published as %s: "
                     "resuming it", sk.save_path, etag[:16])
            sketch = learned[0]
        with self._offer_lock:
            self._offered = (sketch, etag, data)

    def refused(self, etag: str, why: str) -> None:
        """The sketch published as ``etag`` cannot be used: the checks say ``why`` until
        another one is published."""
        self._refused, self.error = (etag, why), why

    def checked(self) -> None:
        """A check got an answer: no error, unless the sketch published is one refused."""
        refused = self._refused
        self.error = refused[1] if refused and refused[0] == self.published else None

    def take_offered(self) -> tuple[Sketch, str, bytes] | None:
        """The sketch offered since the last call (sketch, ETag, bytes), or None."""
        with self._offer_lock:
            offered, self._offered = self._offered, None
        return offered

    def adopt(self, policy: HistoryPolicy, etag: str, data: bytes) -> None:
        """The agent runs ``policy`` now, made of the sketch published as ``etag``: keep
        its bytes at ``sketch.path`` and save the learned sketch with its new origin."""
        was = self.policy_name
        self.history, self.policy_name, self.policy_error = policy, "history", None
        self.origin, self.download_failed, self.error = etag, False, None
        self.counts["sketch_updates"] += 1
        log.info("using the sketch published as %s (policy was %s)", etag[:16], was)
        if self.cfg.sketch.path:
            try:
                storage.write_durably(self.cfg.sketch.path, data)
            except OSError as e:
                log.error("could not keep the sketch at %s: %s", self.cfg.sketch.path, e)
        self.save()

    def fitting(self, sketch: Sketch) -> Sketch:
        return fitting(sketch, self.cfg.pattern)

    def learned(self, n: int) -> None:
        """``n`` more events were matched: save the learned sketch every
        ``sketch.save_every`` events."""
        self._since_save += n
        if self.cfg.sketch and self._since_save >= self.cfg.sketch.save_every:
            self.save()

    def save(self) -> None:
        """Save the learned sketch (signed, atomically) and then its origin beside it."""
        self._since_save = 0
        sk = self.cfg.sketch
        if sk is None or self.history is None or not sk.save_path \
                or self.history.learning_rate == 0:
            return
        try:
            key = read_key_file(sk.device_key_file or sk.key_file, device_key_option(sk))
            storage.write_durably(sk.save_path, self.history.learned_sketch().to_bytes(key))
            if self.origin is not None:  # after the sketch: a crash between keeps the old
                storage.write_durably(sk.save_path + ".origin", self.origin.encode())  # origin
            self.counts["sketch_saves"] += 1
        except (OSError, SketchError) as e:
            log.error("could not save the learned sketch to %s: %s", sk.save_path, e)


class _SketchWatch(threading.Thread):
    """Asks the collector for the published sketch: after a failed download again with
    the outbox's backoff, then every ``sketch.check_interval`` seconds (0: never) with
    ``If-None-Match``. A new one goes to :meth:`Sketches.offer`. A key file that cannot be
    read and an unexpected error are retried with the same backoff, each said once per
    streak: the thread never ends before the agent stops."""

    def __init__(self, sketches: Sketches, stop: threading.Event):
        super().__init__(name="acep-sketch", daemon=True)
        self.sketches, self.stop_event = sketches, stop
        ob = sketches.cfg.outbox
        self.backoff = Backoff(base_delay=ob.backoff_base, max_delay=ob.backoff_max)
        self.crashes = Crashes(log, "sketch checks", "the sketch is asked for again with "
                               f"backoff (up to {ob.backoff_max:g}s apart)")
        self.unread = 1 if sketches.keys_unread else 0  # checks in a row a key file failed

    def run(self) -> None:
        sketches = self.sketches
        interval = sketches.cfg.sketch.check_interval
        failures = 1 if sketches.download_failed or sketches.keys_unread else 0
        wait = self.backoff.delay("sketch", 1) if failures else interval
        while failures or interval > 0:
            if self.stop_event.wait(wait):
                return
            try:
                self._check()
            except KeyFileError as e:
                failures += 1
                wait = self.backoff.delay("sketch", failures)
                self._unreadable(e, wait)
            except OSError as e:
                failures += 1
                wait = self.backoff.delay("sketch", failures)
                sketches.error = f"sketch download failed: {e}"
                log.warning("sketch download failed (%s); retrying with backoff", e)
            except Exception as e:  # a bug must not end the checks: the next one may do
                failures += 1
                wait = self.backoff.delay("sketch", failures)
                sketches.error = self.crashes.failed(e, wait)
            else:
                failures, wait = 0, interval
                self.crashes.ended()

    def _check(self) -> None:
        """One check: a new sketch is offered. Raises :class:`KeyFileError` when a key file
        cannot be read (before any download: nothing could be verified), OSError when the
        download fails."""
        sketches = self.sketches
        keys = sketches.keys()
        if self.unread:
            log.info("the sketch key files can be read again (after %d failed attempts): "
                     "asking for the published sketch", self.unread)
            self.unread = 0
        data = sketches.fetch(sketches.published)
        if data is not None:
            sketches.offer(data, keys)
        sketches.checked()

    def _unreadable(self, e: KeyFileError, wait: float) -> None:
        """A key file cannot be read: said in ``sketch_error``, and logged once per streak
        (a new sketch could not be verified, nor a learned one saved)."""
        self.sketches.error = f"cannot verify sketches: {e}"
        self.unread += 1
        if self.unread == 1:
            log.error("%s; the sketch checks try again with backoff (up to %gs apart) until "
                      "it can be read", self.sketches.error, self.backoff.max_delay)
        else:
            log.debug("%s; next sketch check in %.1fs", self.sketches.error, wait)


def device_key_option(sk: SketchConfig) -> str:
    """The option whose key signs and verifies the learned sketch."""
    return "sketch.device_key_file" if sk.device_key_file else "sketch.key_file"


def fitting(sketch: Sketch, p: PatternConfig) -> Sketch:
    """``sketch`` if an agent of pattern ``p`` can use it; else :class:`SketchError` naming
    what differs."""
    try:
        partition = partition_attribute(p.where, p.partition)
    except ValueError:
        partition = p.partition  # the matcher will name what is wrong with the pattern
    problem = sketch.mismatch(p.text, p.k, p.window, p.where, partition)
    if problem is not None:
        raise SketchError(problem)
    return sketch

