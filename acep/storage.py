"""Where input files live: local paths, or URIs of the filesystems pyarrow reads; and
where the collector's archive is mirrored to (:func:`put_file`, :func:`delete_file`).

A source that looks like ``scheme://...`` is opened with ``pyarrow.fs`` (``s3://`` and
Hadoop's ``s3a://``, ``gs://``, ``hdfs://``, ``file://``); anything else is a local path
read with ``open``, so the device side never imports pyarrow. Listing and opening keep the
caller's spelling, so an error names what the user typed. The schemes and credentials are
in docs/TRAINING.md, "Train histories on Spark", Object storage.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import io
import os
import re
import threading
from collections.abc import Iterator
from urllib.parse import parse_qsl, urlencode, urlsplit

__all__ = ["StorageError", "is_uri", "kind", "open_binary", "open_arrow", "arrow_file",
           "list_files",
           "suffix", "parts", "absolute", "join", "sizes", "put_file", "delete_file",
           "check_scheme", "redact", "redact_text", "durably", "write_durably", "unwritable"]

_SCHEME = r"[A-Za-z][A-Za-z0-9+.-]*://"
_URI = re.compile("^" + _SCHEME)
_URI_IN_TEXT = re.compile(r"(?<![A-Za-z0-9+.-])" + _SCHEME + r"[^\s'\"<>()\[\]{},]+")
_ALIASES = {"s3a": "s3", "s3n": "s3"}  # Hadoop's names for S3, as Spark jobs spell them
_PLAIN = ("s3", "gs", "gcs", "hdfs", "viewfs", "file")
_WHOLE = ("s3", "gs", "gcs")  # an object shows once its upload completes: no rename needed
_HINTS = {"hdfs": "; pyarrow reads HDFS through Hadoop's libhdfs: set JAVA_HOME, HADOOP_HOME "
                  "and CLASSPATH (hadoop classpath --glob), or ARROW_LIBHDFS_DIR"}
_HINTS["viewfs"] = _HINTS["hdfs"]
# google-cloud-cpp retries for 15 minutes by default: without credentials a read looked hung
_GCS_RETRY_SECONDS = 30
_GCS_STATUS = re.compile(r"google::cloud::Status\((\w+): (.*?)(?: error_info=|\)?$)", re.S)
_GCS_NO_CREDENTIALS = ("no usable Google Cloud credentials: set GOOGLE_APPLICATION_CREDENTIALS "
                       "to a service-account key file or run `gcloud auth application-default "
                       "login`; a public bucket reads with anonymous@ before its name")
_SECRET = re.compile(r"(?i)(secret|token|password|credential|(^|_)key)")


class StorageError(OSError):
    """A source that cannot be reached: no pyarrow, an unknown scheme, a refused request.
    ``reason`` says why, ``source`` names it."""

    def __init__(self, source: str, reason: str):
        super().__init__(f"{redact(source)}: {reason}")
        self.source, self.reason = source, reason


def redact(source: str | os.PathLike) -> str:
    """``source`` as messages and logs show it: a URI's user part (S3 takes
    ``s3://KEY:SECRET@bucket``) and the values of query keys that look secret masked."""
    source = os.fspath(source)
    if not is_uri(source):
        return source
    try:
        split = urlsplit(source)
    except ValueError:  # e.g. an unbalanced [ in the host: show the scheme alone
        return source.partition("://")[0] + "://***"
    netloc = split.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rpartition("@")[2]
    query = "&".join(f"{k}=***" if _SECRET.search(k) and sep else k + sep + v
                     for k, sep, v in (p.partition("=") for p in split.query.split("&") if p))
    return split._replace(netloc=netloc, query=query).geturl()


def redact_text(text: str) -> str:
    """``text`` (an error message, a line of a log) with every URI in it redacted: the one
    place a command's last line passes, whatever library wrote the message."""
    return _URI_IN_TEXT.sub(lambda m: redact(m.group(0)), text)


def is_uri(source: str | os.PathLike) -> bool:
    """True for ``scheme://...`` (read with pyarrow.fs), False for a local path."""
    return bool(_URI.match(os.fspath(source)))


def absolute(source: str | os.PathLike) -> str:
    """A local path made absolute (an executor opens it in a directory of its own); a URI
    as it is."""
    source = os.fspath(source)
    return source if is_uri(source) else os.path.abspath(source)


def kind(source: str | os.PathLike) -> str | None:
    """``"file"``, ``"dir"`` or None (nothing there)."""
    source = os.fspath(source)
    if not is_uri(source):
        return "file" if os.path.isfile(source) else "dir" if os.path.isdir(source) else None
    fs, path = _resolve(source)  # first: it says so when pyarrow is missing
    import pyarrow.fs as pafs

    info = _call(source, fs.get_file_info, path)
    return {pafs.FileType.File: "file", pafs.FileType.Directory: "dir"}.get(info.type)


def list_files(root: str | os.PathLike) -> Iterator[tuple[str, str]]:
    """Every file under the directory ``root``: ``(source, path relative to root)``, with
    ``/`` between the relative path's parts, in no set order."""
    for source, rel, _ in _entries(os.fspath(root)):
        yield source, rel


def sizes(root: str | os.PathLike) -> dict[str, int]:
    """Every file under the directory ``root`` (none when there is none): its size by its
    path relative to ``root`` (``/`` between parts)."""
    return {rel: size for _, rel, size in _entries(os.fspath(root))}


def _entries(root: str) -> Iterator[tuple[str, str, int]]:
    if not is_uri(root):
        for folder, _, names in os.walk(root, followlinks=True):  # as glob does
            for name in names:
                full = os.path.join(folder, name)
                yield (full, os.path.relpath(full, root).replace(os.sep, "/"),
                       os.path.getsize(full))
        return
    fs, path = _resolve(root)
    import pyarrow.fs as pafs

    prefix, query = _spelling(root, path)
    selector = pafs.FileSelector(path, recursive=True, allow_not_found=True)
    for info in _call(root, fs.get_file_info, selector):
        if info.type == pafs.FileType.File:
            yield prefix + info.path + query, info.path[len(path):].lstrip("/"), info.size


def join(root: str | os.PathLike, rel: str) -> str:
    """The file at ``rel`` (``/`` between parts) under the directory ``root``: a URI keeps
    its query at the end."""
    root = os.fspath(root)
    if not is_uri(root):
        return os.path.join(root, *rel.split("/"))
    base, sep, query = root.partition("?")
    return f"{base.rstrip('/')}/{rel}{sep}{query}"


def put_file(local: str | os.PathLike, dest: str | os.PathLike) -> int:
    """Copy the local file to ``dest`` (a path or URI), whole or not at all: S3 and GCS
    show an object once its upload completes; elsewhere it is written under a hidden name
    beside ``dest`` (``.name.tmp``, which readers skip; a local ``dest``: :func:`durably`)
    and renamed. Its size."""
    dest = os.fspath(dest)
    if not is_uri(dest):
        return _put_local(os.fspath(local), dest)
    fs, path = _resolve(dest)
    scheme = urlsplit(dest).scheme.lower()
    whole = _ALIASES.get(scheme, scheme) in _WHOLE
    folder, _, name = path.rpartition("/")
    target = path if whole else f"{folder}/.{name}.tmp"
    if not whole:
        _call(dest, fs.create_dir, folder, recursive=True)
    with open(local, "rb") as src:
        def copy() -> int:
            with fs.open_output_stream(target) as out:
                return _copy(src, out)
        size = _call(dest, copy)
    if not whole:
        _call(dest, fs.move, target, path)
    return size


def _put_local(local: str, dest: str) -> int:
    os.makedirs(os.path.dirname(os.path.abspath(dest)), exist_ok=True)
    with durably(dest) as tmp, open(local, "rb") as src, open(tmp, "wb") as out:
        return _copy(src, out)


@contextlib.contextmanager
def durably(path: str | os.PathLike) -> Iterator[str]:
    """Write the local file ``path`` whole or not at all, even across a power cut: the block
    writes the temporary file it is given (``.NAME.PID.THREAD.tmp`` beside ``path``: a
    dotted name, which every reader here skips); then it is fsynced, renamed to ``path``
    and the rename made durable (the directory fsynced). A block that raises leaves
    neither, and an older ``path`` as it was."""
    folder, name = os.path.split(os.path.abspath(path))
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    _fsync_dir(folder)


def write_durably(path: str | os.PathLike, data: bytes) -> int:
    """Write ``data`` to the local file ``path`` with :func:`durably`; its size."""
    with durably(path) as tmp, open(tmp, "wb") as f:
        f.write(data)
    return len(data)


def unwritable(folder: str | os.PathLike) -> str | None:
    """Why no file can be made in the local directory ``folder`` (the system's reason, such
    as "Permission denied"), or None. A hidden probe file is written and removed:
    ``os.access`` says yes to root where the kernel says no, as in /proc."""
    probe = os.path.join(folder, f".acep-probe-{os.getpid()}-{threading.get_ident()}")
    try:
        with open(probe, "xb"):
            pass
        os.unlink(probe)
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def _fsync_dir(path: str) -> None:
    """Make a rename durable (POSIX); a no-op where directories cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _copy(src, out) -> int:
    size = 0
    while chunk := src.read(1 << 20):
        out.write(chunk)
        size += len(chunk)
    return size


def delete_file(dest: str | os.PathLike) -> bool:
    """Delete the file ``dest`` (a path or URI); False when there was none."""
    dest = os.fspath(dest)
    if not is_uri(dest):
        try:
            os.unlink(dest)
        except FileNotFoundError:
            return False
        return True
    fs, path = _resolve(dest)
    try:
        _call(dest, fs.delete_file, path)
    except FileNotFoundError:
        return False
    return True


def check_scheme(root: str | os.PathLike) -> None:
    """Raise :class:`StorageError` when ``root`` names no filesystem this process can use
    (an unknown scheme, no pyarrow); reaching it is not tried."""
    root = os.fspath(root)
    if is_uri(root):
        _resolve(root)


def open_binary(source: str | os.PathLike):
    """A buffered binary reader of the file (iterates by lines, as ``open(..., "rb")``)."""
    source = os.fspath(source)
    if not is_uri(source):
        return open(source, "rb")
    fs, path = _resolve(source)
    return io.BufferedReader(_call(source, fs.open_input_stream, path, compression=None))


def open_arrow(source: str | os.PathLike):
    """What pyarrow's readers take: the local path itself, or a random-access file opened
    on the source's filesystem (the caller closes it)."""
    source = os.fspath(source)
    if not is_uri(source):
        return source
    fs, path = _resolve(source)
    return _call(source, fs.open_input_file, path)


@contextlib.contextmanager
def arrow_file(source: str | os.PathLike):
    """:func:`open_arrow` for the block, the file it opened (if any) closed after."""
    opened = open_arrow(source)
    try:
        yield opened
    finally:
        if not isinstance(opened, str):
            opened.close()


def suffix(source: str | os.PathLike) -> str:
    """The file name's extension, lower case (a URI's query left out)."""
    return os.path.splitext(_path_part(os.fspath(source)))[1].lower()


def parts(source: str | os.PathLike) -> list[str]:
    """The path's components (a URI's query left out), for ``date=``/``device=`` folders."""
    return [p for p in re.split(r"[\\/]", _path_part(os.fspath(source))) if p]


def _path_part(source: str) -> str:
    return urlsplit(source).path if is_uri(source) else source


def _spelling(source: str, path: str) -> tuple[str, str]:
    """What goes before and after a filesystem path to spell it as ``source`` does:
    ``s3://`` + ``bucket/key``, ``hdfs://host:8020`` + ``/dir/file``, then the query."""
    base, _, query = source.partition("?")
    base = base.rstrip("/")
    if not base.endswith(path.rstrip("/")):
        raise StorageError(source, "cannot tell the filesystem path from the URI")
    return base[:len(base) - len(path.rstrip("/"))], ("?" + query if query else "")


def _resolve(source: str):
    """``(filesystem, path)``. For the schemes whose paths are plain (S3, GCS, HDFS,
    local), one filesystem per scheme, host and query: S3 credentials are looked up once,
    not once per file. Others are pyarrow's to parse."""
    split = urlsplit(source)
    scheme = _ALIASES.get(split.scheme.lower(), split.scheme.lower())
    try:
        if scheme not in _PLAIN:
            return _call(source, _pafs(scheme).FileSystem.from_uri,
                         scheme + source[len(split.scheme):])
        fs = _filesystem(scheme, split.netloc, split.query)
    except StorageError as e:
        raise StorageError(source, e.reason) from None
    if scheme in ("s3", "gs", "gcs"):  # the bucket is the path's first part
        return fs, (split.netloc.rpartition("@")[2] + split.path).rstrip("/")
    return fs, split.path.rstrip("/") or "/"


def _pafs(scheme: str):
    try:
        import pyarrow.fs
    except ImportError:
        raise StorageError(f"{scheme}://", f"reading {scheme}:// needs pyarrow "
                                           "(pip install 'acep[files]')") from None
    return pyarrow.fs


@functools.lru_cache(maxsize=64)
def _filesystem(scheme: str, netloc: str, query: str):
    pafs = _pafs(scheme)
    if scheme in ("gs", "gcs"):
        query = _gcs_query(netloc, query)
    uri = f"{scheme}://{netloc}/" + (f"?{query}" if query else "")
    try:
        return pafs.FileSystem.from_uri(uri)[0]
    except Exception as e:  # noqa: BLE001 - pyarrow raises several kinds
        hint = _HINTS.get(scheme, "")
        raise StorageError(uri, f"cannot use this filesystem: {_reason(e)}{hint}") from None


def _gcs_query(netloc: str, query: str) -> str:
    """The query with a bounded retry time unless it sets one, and HTTPS for a public
    bucket's ``anonymous@`` (pyarrow would speak plain HTTP)."""
    given = dict(parse_qsl(query))
    extra = {"retry_limit_seconds": str(_GCS_RETRY_SECONDS)}
    if netloc.partition("@")[0] == "anonymous" and "@" in netloc:
        extra["scheme"] = "https"
    extra = {k: v for k, v in extra.items() if k not in given}
    return "&".join(filter(None, [query, urlencode(extra)]))


def _call(source: str, fn, *args, **kw):
    """``fn(*args)``, its failure said as a :class:`StorageError` naming ``source``."""
    try:
        return fn(*args, **kw)
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, "no such file or directory",
                                redact(source)) from None
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
        raise StorageError(source, _reason(e)) from None


def _reason(error: Exception) -> str:
    """pyarrow's message in one line: loading HDFS's JVM lists every path it tried, and
    Google's client wraps its reason in a status dump."""
    text = str(error).strip()
    gcs = _GCS_STATUS.search(text)
    if gcs:
        return _gcs_reason(gcs[1], gcs[2])
    lines = text.splitlines()
    more = " (and more)" if len(lines) > 1 else ""
    return (lines[0] if lines else type(error).__name__) + more


def _gcs_reason(code: str, message: str) -> str:
    if "OAuth2 access token" in message:
        return _GCS_NO_CREDENTIALS
    message = message.replace("Retry policy exhausted, with a last message of ", "")
    retried = (" (retried for the URI's retry_limit_seconds, "
               f"{_GCS_RETRY_SECONDS} s unless given)" if code == "UNAVAILABLE" else "")
    return f"Google Cloud Storage: {code}: {' '.join(message.split())}{retried}"
