"""Where the agent resumes: its progress, and the stream that progress belongs to.

:class:`Progress` holds what the outbox commits with each chunk besides the counters: where
reading and a replay resume, whether the stream was read to its end, and what stream it is.
:func:`open_file` finds a followed file that log rotation renamed away. A copy of the
progress beside the outbox (:func:`copy_path`, :func:`from_copy`) catches an outbox lost or
replaced by an older one. The rules are in docs/WIRE.md, "Agent", Restart and "A copy of
the progress".
"""

from __future__ import annotations

import io
import json
import logging
import os

from .config import AgentConfig
from .sources import FileSource, Source, fingerprint, open_file

__all__ = ["Progress", "copy_path", "write_copy", "read_copy", "from_copy"]

log = logging.getLogger("edge.agent")


class Progress:
    """The progress loaded from the outbox state ``st``, checked against this agent's
    stream (``consumed`` and ``seq`` only name it in a log line, and position a new stream
    after the events consumed)."""

    def __init__(self, cfg: AgentConfig, st: dict, consumed: int, seq: int):
        self.cfg = cfg
        self.finished = bool(st.get("finished", False))
        self.resume_offset = st.get("offset", 0)
        self.replay_position = int(st.get("replay_position", 0))
        self.replay_offset = st.get("replay_offset", 0)
        self._check(st, consumed, seq)

    def state(self) -> dict:
        """The progress as the outbox keeps it (with ``finished``)."""
        return {"offset": self.resume_offset, "replay_position": self.replay_position,
                "replay_offset": self.replay_offset, "finished": self.finished,
                "source": self.source_id, "pattern": self.pattern_def,
                "file_start": self.file_start, "rotated": self.rotated}

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

    def _check(self, st: dict, consumed: int, seq: int) -> None:
        """Resume the outbox's progress only on the stream it was made on; for another
        source or pattern, log why and read the new one from its start (``consumed`` and
        ``seq`` go on, so positions and batch ids stay unique)."""
        self.source_id, self.pattern_def = self._stream()
        # file_start: the position where the current file's events start; rotated: the
        # files renamed away before it that hold kept events, each from its "start"
        self.generation = 0
        self.file_start = int(st.get("file_start", self.replay_position))
        self.rotated: list[dict] = st.get("rotated", [])
        # the progress' file, open, when it was renamed away while the agent was stopped
        # (see _other_stream): a restart reads its rest before the file at the path
        self.renamed: io.BufferedReader | None = None
        why = self._other_stream(st.get("source"), st.get("pattern")) if st else None
        if why is None:
            if self.cfg.source.kind in ("stdin", "mqtt"):
                self.finished = False  # every run reads new events
            return
        log.warning("the progress in %s (%d events consumed, next seq %d) is not of this "
                    "stream: %s; reading %s from its start", self.cfg.outbox.path,
                    consumed, seq, why, self.source_id.get("path", "the source"))
        self.finished = False
        self.resume_offset = self.replay_offset = 0
        self.replay_position = self.file_start = consumed
        self.rotated = []

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
        offset's bytes): then it is opened, and a restart replays from it as usual, reads
        its rest (the events written before the rotation), then the file at the path from
        its start."""
        path = self.source_id["path"]
        offset = int(self.resume_offset or 0)
        fh = open_file(os.path.dirname(path), {**source, "end": offset})
        if fh is None or os.path.abspath(fh.name) == path:
            if fh is not None:
                fh.close()
            return False
        self.renamed, found = fh, fh.name
        log.info("%s was rotated while the agent was stopped; reading its rest from %s byte "
                 "%d first (after replaying the windows still open), then %s from its start",
                 path, found, offset, path)
        between = _changed_after(path, found, [f["ino"] for f in self.rotated])
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

    def next_file(self, source: Source, position: int) -> None:
        """A followed file was rotated or truncated: the chunk's events, from
        ``position``, are a new file's, from its start. A file renamed away joins the ones
        a restart replays from while it holds kept events; a truncated file's bytes are
        gone, so a replay starts after them."""
        if not isinstance(source, FileSource) or source.identity is None:
            return
        for left in source.left[self.generation:]:
            if left is None:
                self.rotated = []
                self.replay_position, self.replay_offset = position, 0
            else:
                self.rotated = [*self.rotated, {**left, "start": self.file_start}]
            self.file_start, self.resume_offset = position, 0
        self.generation = source.generation
        self.source_id = {**self.source_id, **source.identity}

    def rotated_files(self) -> list[tuple[io.BufferedReader, int | None]]:
        """The files renamed away that hold the replay's first events, found (in the
        directory of the path, by device, inode and fingerprint) and opened, each with the
        byte where it was left, then the progress' own file when it was renamed away while
        the agent was stopped (``renamed``; end None: read to its end). When one of the
        rotated files is not found, the replay starts at the current file."""
        rotated, self.rotated = self.rotated, []  # the replay builds it again
        # the progress' own file, renamed away while the agent was stopped: to its end
        renamed = [(self.renamed, None)] if self.renamed else []
        if not rotated:
            return renamed
        path = self.source_id["path"]
        found = [open_file(os.path.dirname(path), f) for f in rotated]
        current = self.renamed.name if self.renamed else path
        if None in found:
            for fh in found:
                if fh is not None:
                    fh.close()
            gone = rotated[found.index(None)]
            log.warning("a file rotated away from %s holds events of windows still open "
                        "(inode %d, read to byte %d) and is not in its directory any more: "
                        "the replay starts at %s, so a match spanning the rotation may be "
                        "missed", path, gone["ino"], gone["end"], current)
            self.replay_position, self.replay_offset = self.file_start, 0
            return renamed
        log.info("replaying the events of windows still open from %s, byte %s, then %s",
                 ", ".join(fh.name for fh in found), self.replay_offset, current)
        self.file_start = self.replay_position
        return [(fh, f["end"]) for fh, f in zip(found, rotated)] + renamed

    def trimmed(self, position: int, offset) -> None:
        """The kept events start at ``position`` (resume ``offset`` before it) now: a
        replay starts there, with the files renamed away that still hold kept events."""
        self.replay_position, self.replay_offset = position, offset
        if self.rotated:  # keep the files renamed away that hold kept events
            ends = [f["start"] for f in self.rotated[1:]] + [self.file_start]
            self.rotated = [f for f, end in zip(self.rotated, ends)
                            if end > self.replay_position]
        floor = self.rotated[0]["start"] if self.rotated else self.file_start
        if self.replay_position < floor:  # kept events of a truncated file
            self.replay_position, self.replay_offset = floor, 0


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


def copy_path(outbox_path: str) -> str:
    """Where the copy of the progress of the outbox at ``outbox_path`` is kept."""
    return os.fspath(outbox_path) + ".progress"


def write_copy(path: str, state: dict) -> None:
    """Write the progress ``state`` to ``path`` atomically: a whole old copy or a whole new
    one survives a kill or a power loss, never a torn one."""
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(state, fh, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    folder = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(folder)  # the rename itself
    finally:
        os.close(folder)


def read_copy(path: str) -> dict | None:
    """The copy of the progress at ``path``; None when there is none or it cannot be read
    (said in a warning)."""
    try:
        with open(path) as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        log.warning("%s: the copy of the progress cannot be read (%s); not used", path, e)
        return None
    return doc if isinstance(doc, dict) else None


def from_copy(st: dict, outbox_path: str, fresh_seq: int) -> dict | None:
    """The progress to resume when the outbox's ``st`` is behind its copy (the outbox was
    lost, emptied or replaced by an older one), else None. Its ``seq`` is at least
    ``fresh_seq``: a batch of the lost outbox put after the copy was written kept its id."""
    path = copy_path(outbox_path)
    copy = read_copy(path)
    if copy is None or int(copy.get("consumed", 0)) <= int(st.get("consumed", 0)):
        return None
    source = copy.get("source") or {}
    where = f" to byte {copy['offset']}" if copy.get("offset") is not None else ""
    log.warning("%s holds the progress of %d events, its copy %s of %d: the outbox was lost, "
                "emptied or replaced; %s was read before%s, so the agent resumes there and "
                "does not upload its matches again; batches that were pending in the lost "
                "outbox are lost", outbox_path, int(st.get("consumed", 0)), path,
                int(copy["consumed"]), source.get("path", "the source"), where)
    return {**copy, "seq": max(int(copy.get("seq", 0)), fresh_seq)}
