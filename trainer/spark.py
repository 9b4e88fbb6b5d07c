"""The Spark session the trainer's jobs run in, and their progress on stderr.

A local session (``local[N]``) is the default; ``master`` takes any Spark master URL, and
under ``spark-submit`` the session it made is reused. Arrow moves the data between the JVM
and the Python workers (``mapInArrow``); the executors import ``acep`` and run its
compiled kernel.
"""

from __future__ import annotations

import os
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

from acep.storage import redact_text
from acep.utils import Terminated, terminate_on_sigterm


def local_master(cores: int | None = None) -> str:
    """The master of a local session on ``cores`` cores, by default all this process may use."""
    return f"local[{cores or machine_cores()}]"


def machine_cores() -> int:
    """The cores this process may run on: its CPU affinity (a container or ``taskset``
    limit), not every core of the machine, which would oversubscribe a local session."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1

_LOG4J = Path(__file__).with_name("log4j2.properties").as_uri()

__all__ = ["SparkUnavailable", "Terminated", "check_installed", "session", "progress",
           "run_command", "terminate_on_sigterm", "stop_broken_jobs"]


class SparkUnavailable(RuntimeError):
    """PySpark or Java is missing; the message says what to install."""


def check_installed() -> None:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise SparkUnavailable("the trainer needs PySpark: pip install 'acep[spark]' "
                               "(and Java 17 or newer on the PATH or in JAVA_HOME)") from None
    java_home = os.environ.get("JAVA_HOME")
    if java_home:  # Spark's launcher runs JAVA_HOME's java whatever the PATH holds
        if not os.path.isfile(os.path.join(java_home, "bin", "java")):
            raise SparkUnavailable(f"JAVA_HOME is {java_home}, which has no bin/java: point "
                                   "it at a Java 17 or newer, or unset it to use the PATH's")
        return
    from shutil import which

    if which("java") is None:
        raise SparkUnavailable("Spark needs Java 17 or newer: none found on the PATH "
                               "or in JAVA_HOME")


def session(master: str | None = None, cores: int | None = None, *, app: str = "acep-train",
            memory: str = "2g", shuffle_partitions: int | None = None):
    """A SparkSession: the active one (spark-submit), else a new one on ``master``.

    ``master`` defaults to ``local[cores]`` (``cores`` defaults to the cores the
    process may use, :func:`machine_cores`). The driver
    memory applies only when this call starts the JVM.
    """
    check_installed()
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None and master is None:
        return active
    if master is None:
        master = local_master(cores)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    parallel = shuffle_partitions or max(2, 2 * (cores or machine_cores()))
    builder = (SparkSession.builder.master(master).appName(app)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.memory", memory)
               .config("spark.sql.shuffle.partitions", str(parallel))
               .config("spark.sql.adaptive.enabled", "false")
               .config("spark.sql.execution.arrow.pyspark.enabled", "true")
               .config("spark.sql.execution.arrow.maxRecordsPerBatch", "65536")
               .config("spark.python.worker.reuse", "true")
               .config("spark.driver.extraJavaOptions",
                       f"-Dlog4j.configurationFile={_LOG4J} -Dlog4j2.configurationFile={_LOG4J}"))
    started = _children(os.getpid())
    try:
        spark = builder.getOrCreate()
    except BaseException:
        # interrupted before the JVM reads its stdin (its way to die with this process):
        # it ignores SIGINT and would live on, orphaned
        for pid in _children(os.getpid()) - started:
            _terminate_tree(pid)
        raise
    spark.sparkContext.setLogLevel("ERROR")
    _quiet_updates(spark.sparkContext)
    return spark


def _quiet_updates(sc) -> None:
    """No traceback on stderr when the JVM goes first (SIGTERM to the process group, as
    systemd stops a service): PySpark's accumulator server would print one for the
    connection the JVM dropped. The jobs use no accumulators."""
    server = getattr(sc, "_accumulatorServer", None)
    if server is not None:
        server.handle_error = lambda request, client_address: None


def _children(pid: int) -> set[int]:
    """The child processes of ``pid`` (Linux's /proc; none known elsewhere)."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            found.update(int(c) for c in task.read_text().split())
        except (OSError, ValueError):
            continue
    return found


def _terminate_tree(pid: int) -> None:
    """SIGTERM to ``pid`` and its descendants (spark-submit's launcher, then the JVM)."""
    import signal

    todo, seen = [pid], []
    while todo:
        seen.append(todo.pop())
        todo += _children(seen[-1])
    for each in seen:
        try:
            os.kill(each, signal.SIGTERM)
        except OSError:
            pass


@contextmanager
def progress(spark, label: str, enabled: bool = True):
    """While the block runs, show the finished tasks of the running Spark stage(s) on stderr.

    Uses ``SparkContext.statusTracker`` (polled twice a second), with a tqdm bar when tqdm
    is installed, else a line per change.
    """
    if not enabled:
        yield
        return
    stop = threading.Event()
    thread = threading.Thread(target=_poll, args=(spark.sparkContext, label, stop), daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _poll(sc, label: str, stop: threading.Event) -> None:
    tracker = sc.statusTracker()
    bar = _Bar(label)
    while not stop.wait(0.5):
        infos = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
        infos = [i for i in infos if i is not None]
        if infos:  # the running stages only: a bar per step that never goes back
            bar.show(sum(i.numCompletedTasks for i in infos), sum(i.numTasks for i in infos))
    bar.close()


class _Bar:
    """On a terminal a tqdm bar (when installed; else a line whenever the count changes);
    elsewhere (a log file, CI) one line when the step ends, not a redraw per update."""

    def __init__(self, label: str):
        self.label, self.last, self.tqdm = label, None, None
        self.live = sys.stderr.isatty()
        try:
            from tqdm import tqdm

            if self.live:
                self.tqdm = tqdm(desc=label, unit=" tasks", file=sys.stderr, leave=False,
                                 delay=1.0)
        except ImportError:
            pass

    def show(self, done: int, total: int) -> None:
        if (done, total) == self.last:
            return
        self.last = (done, total)
        if self.tqdm is not None:
            self.tqdm.total = total
            self.tqdm.n = done
            self.tqdm.refresh()
        elif self.live:
            print(f"{self.label}: {done}/{total} tasks", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.tqdm is not None:
            self.tqdm.close()
        elif not self.live and self.last is not None:
            print(f"{self.label}: {self.last[1]} tasks", file=sys.stderr, flush=True)


def run_command(prog: str, run, args, usage_errors: tuple) -> int:
    """A job's command line around ``run(args)``: bad input (``usage_errors``, a missing
    Spark or Java) is one line and exit 2, Ctrl-C one line and exit 130 (a
    :class:`Terminated` one line and 143), other failures (Spark's too) one line and exit
    1."""
    import logging

    if not logging.getLogger().handlers:
        # py4j logs a traceback to the root logger for each call an interrupt breaks
        logging.getLogger().addHandler(logging.NullHandler())
    try:
        with terminate_on_sigterm():
            return run(args)
    except (KeyboardInterrupt, Exception) as exc:
        cause = _interrupted(exc)  # Spark's cancelled jobs fail while the interrupt unwinds
        if cause is not None:
            term = isinstance(cause, Terminated)
            stop_broken_jobs()
            print(f"{prog}: {'terminated' if term else 'interrupted'}", file=sys.stderr)
            return 143 if term else 130
        if isinstance(exc, (*usage_errors, SparkUnavailable)):
            print(f"{prog}: {redact_text(str(exc))}", file=sys.stderr)
            return 2
        if not isinstance(exc, (ValueError, OSError, RuntimeError)) and not _is_py4j(exc):
            raise
        print(f"{prog}: error: {redact_text(_summary(exc))}", file=sys.stderr)
        return 1


def stop_broken_jobs() -> None:
    """After an interrupt: when it broke off Spark jobs (or a write of theirs), stop the
    session, its logging off first, so that no cancelled task writes on or prints a Java
    stack after the command's last line; then remove the staging directories of the broken
    writes (:func:`trainer.outputs.remove_abandoned`). Another Ctrl-C or SIGTERM meanwhile
    is ignored: it would break this off in turn."""
    import signal

    from .outputs import abandoned, remove_abandoned

    main = threading.current_thread() is threading.main_thread()
    held = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)} \
        if main else {}
    try:
        sc = _active_context()
        if sc is not None and (_busy(sc) or abandoned()):
            for step in (lambda: sc.setLogLevel("OFF"), sc.stop):
                try:
                    step()
                except Exception:  # noqa: BLE001 - a JVM already gone (SIGTERM to the group)
                    pass
        remove_abandoned()
    finally:
        for signum, handler in held.items():
            signal.signal(signum, handler)


def _active_context():
    """This process's SparkContext, if PySpark is loaded and one runs."""
    if "pyspark" not in sys.modules:
        return None
    from pyspark import SparkContext

    return SparkContext._active_spark_context


def _busy(sc) -> bool:
    try:
        return bool(sc.statusTracker().getActiveJobIds())
    except Exception:  # noqa: BLE001 - its JVM is gone
        return False


def _interrupted(exc: BaseException | None) -> KeyboardInterrupt | None:
    seen = 0
    while exc is not None and seen < 20:
        if isinstance(exc, KeyboardInterrupt):
            return exc
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def _is_py4j(exc: BaseException) -> bool:
    return type(exc).__module__.startswith("py4j")


def _summary(exc: BaseException) -> str:
    """The message without a Java stack: Py4J's first line names only the call, the
    Java exception's own message follows on a line starting with ': '."""
    if not _is_py4j(exc):
        return str(exc)
    lines = str(exc).splitlines() or [type(exc).__name__]
    java = [line[2:] for line in lines if line.startswith(": ")]
    return java[0] if java else lines[0]
