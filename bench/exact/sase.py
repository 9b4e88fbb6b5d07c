"""SASE side by side: the SASE jar's engine and our compiled core on the same events.

``python -m bench.exact --sase-jar PATH`` runs it with the rest of the benchmark
(README, "SASE side by side"). The bench writes each query's events to a file and the
query as a SASE ``.nfa`` file; ``java/Driver.java`` (ours, compiled against the jar at run
time) feeds them to the jar's ``Engine``, records the matches of a first run, warms up and
times repeats; our engine runs the same events. The match sets are compared and every
difference is put in one of SASE's known deviations or counted as unexplained.
"""

from __future__ import annotations

import gc
import hashlib
import json
import shutil
import statistics
import subprocess
import tempfile
import time
import zipfile
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from acep.events import Event, EventBatch
from acep.nfab.engine import Engine

from .core import QUERIES as CORE_QUERIES
from .core import STREAMS, three_types
from .stock import stock_ticker

TARGET = 3.0  # ours / SASE, warm events/s, per query
DRIVER = Path(__file__).with_name("java") / "Driver.java"
ENGINE_CLASS = "edu/umass/cs/sase/engine/Engine.class"
EVENTS_HEADER = "# bench/exact events for the SASE driver: id timestamp type symbol price volume"
FIELDS = ("symbol", "price", "volume")  # the attributes of the jar's StockEvent
NOT_MEASURED = {"measured": False, "why": "no --sase-jar given"}


class SaseError(Exception):
    """The jar, Java or the driver cannot run; the message names the problem."""


# --------------------------------------------------------------------------- queries


@dataclass(frozen=True)
class State:
    """One state of a SASE ``.nfa`` file: its event type and the predicates of its edges."""

    kleene: bool
    type: str
    begin: str = ""  # the begin edge's predicate, "" for none
    take: str = ""   # the take edge's predicate (Kleene states), "" for none


@dataclass(frozen=True)
class Nfa:
    """A SASE ``.nfa`` file: strategy (SASE's spelling), time window, partition, states."""

    strategy: str
    window: int
    partition: str
    states: tuple[State, ...]

    @property
    def kleene(self) -> bool:
        return any(s.kleene for s in self.states)


@dataclass(frozen=True)
class SaseQuery:
    """One row: our query text, the same query for SASE, its stream and its sizes."""

    name: str
    text: str
    nfa: Nfa
    stream: str    # a key of core.STREAMS
    events: int    # full run
    quick: int     # --quick
    warmups: int   # SASE runs after the recording run, before the timed ones
    repeats: int   # SASE timed runs (the median counts)


RISE = "price > $previous.price"
BANDS = (State(False, "Stock", "volume < 100"), State(True, "Stock", take=RISE),
         State(False, "Stock", "volume > 900"))
NEXT_TEXT = CORE_QUERIES["next-match, 10 symbols"][0]
QUERIES = (
    SaseQuery("Q1", CORE_QUERIES["Q1"][0],
              Nfa("partition-contiguity", 500, "symbol",
                  (State(True, "Stock", take=RISE),
                   State(False, "Stock", "price < $previous.price"))),
              "ticker", 100_000, 10_000, 5, 15),
    SaseQuery("Q2", CORE_QUERIES["Q2"][0],
              Nfa("skip-till-next-match", 10000, "price",
                  tuple(State(False, f"stock{k}") for k in (1, 2, 3))),
              "three types", 100_000, 10_000, 5, 15),
    SaseQuery("any-match, 10 symbols",
              NEXT_TEXT.replace("skip_till_next_match", "skip_till_any_match"),
              Nfa("skip-till-any-match", 100, "symbol", BANDS), "ticker", 5_000, 2_000, 2, 5),
    SaseQuery("next-match, 10 symbols", NEXT_TEXT,
              Nfa("skip-till-next-match", 100, "symbol", BANDS), "ticker", 300_000, 30_000,
              5, 15),
)


def stream(kind: str, n: int) -> list[Event]:
    """The ``n`` events of a stream of :data:`core.STREAMS`."""
    return stock_ticker(n, 10, 0.7, 2008) if kind == "ticker" else three_types(n)


# --------------------------------------------------------------------------- files


def nfa_text(nfa: Nfa) -> str:
    """The ``.nfa`` file of a query, in the jar's format (examples/Q1/Q1.nfa)."""
    lines = [f"SelectionStrategy = {nfa.strategy} | TimeWindow = {nfa.window} | "
             f"partitionAttribute = {nfa.partition}"]
    for i, s in enumerate(nfa.states, 1):
        kind = "kleeneClosure" if s.kleene else "normal"
        edges = [_edge("begin", s.begin)]
        if s.kleene:
            edges += [_edge("take", s.take), "edgetype = proceed"]
        lines.append(f"State={i} & type = {kind} & eventtype = {s.type} | " + " | ".join(edges))
    return "\n".join([*lines, "end"]) + "\n"


def _edge(kind: str, predicate: str) -> str:
    return f"edgetype = {kind}" + (f" & {predicate}" if predicate else "")


def parse_nfa(text: str) -> Nfa:
    """The :class:`Nfa` of a ``.nfa`` file that :func:`nfa_text` wrote."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    config = dict(_pair(part) for part in lines[0].split("|"))
    states = []
    for line in lines[1:lines.index("end")]:
        head, *edges = (part.strip() for part in line.split("|"))
        fields = dict(_pair(f) for f in head.split("&"))
        preds = {}
        for edge in edges:
            kind, _, predicate = edge.partition("&")
            preds[_pair(kind)[1]] = predicate.strip()
        states.append(State(fields["type"] == "kleeneClosure", fields["eventtype"],
                            preds.get("begin", ""), preds.get("take", "")))
    return Nfa(config["SelectionStrategy"], int(config["TimeWindow"]),
               config["partitionAttribute"], tuple(states))


def _pair(text: str) -> tuple[str, str]:
    key, _, value = text.partition("=")
    return key.strip(), value.strip()


def write_events(events: Sequence[Event], path: Path) -> None:
    """One line per event, ``id timestamp type symbol price volume``; the id is the index.

    The jar's events hold whole numbers: a missing attribute is written as 0, a tag or
    value that is not a whole number is a ``ValueError`` naming the event and the field.
    """
    with open(path, "w") as f:
        f.write(EVENTS_HEADER + "\n")
        for i, e in enumerate(events):
            if not e.type or any(c.isspace() for c in e.type):
                raise ValueError(f"event {i}: type {e.type!r} is empty or holds a space")
            values = [_whole(i, "tag", e.t)] + [_whole(i, k, e.attrs.get(k, 0)) for k in FIELDS]
            f.write(f"{i} {values[0]} {e.type} {values[1]} {values[2]} {values[3]}\n")


def _whole(i: int, field: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value) \
            or not -2 ** 31 <= value < 2 ** 31:
        raise ValueError(f"event {i}: {field} {value!r} is not a 32-bit whole number")
    return int(value)


def read_events(path: Path) -> list[Event]:
    """The events of a file that :func:`write_events` wrote (every attribute present)."""
    events = []
    for line in Path(path).read_text().splitlines():
        if line.startswith("#"):
            continue
        i, t, kind, *values = line.split(" ")
        if int(i) != len(events):
            raise ValueError(f"{path}: event {len(events)} has id {i}")
        events.append(Event(kind, float(t), dict(zip(FIELDS, map(int, values)))))
    return events


def read_matches(path: Path) -> list[tuple[int, ...]]:
    """The matches the driver recorded: event ids, one match per line."""
    with open(path) as f:
        return [tuple(map(int, line.split())) for line in f]


# --------------------------------------------------------------------------- running


def check(jar: Path) -> None:
    """Raise :class:`SaseError` unless ``jar`` is a SASE jar and a JDK is on the PATH."""
    if not jar.is_file():
        raise SaseError(f"--sase-jar {jar}: no such file")
    if not zipfile.is_zipfile(jar):
        raise SaseError(f"--sase-jar {jar}: not a jar (zip) file")
    with zipfile.ZipFile(jar) as z:
        if ENGINE_CLASS not in z.namelist():
            raise SaseError(f"--sase-jar {jar}: has no {ENGINE_CLASS}, not the SASE jar")
    for tool in ("javac", "java"):
        if shutil.which(tool) is None:
            raise SaseError(f"{tool} not found on the PATH: the SASE side by side needs a "
                            "JDK (javac and java)")


def compile_driver(jar: Path, folder: Path) -> None:
    """``javac -cp JAR -d FOLDER Driver.java``, or a :class:`SaseError` naming the failure."""
    done = subprocess.run(["javac", "-nowarn", "-cp", str(jar), "-d", str(folder),
                           str(DRIVER)], capture_output=True, text=True)
    if done.returncode != 0:
        first = (done.stderr.strip().splitlines() or ["no message"])[0]
        raise SaseError(f"javac could not compile {DRIVER.name} against {jar}: {first}")


def run_driver(jar: Path, folder: Path, warmups: int, repeats: int,
               timeout: float = 3600) -> dict:
    """The driver's JSON for ``folder``'s query.nfa and events.txt (matches.txt written)."""
    command = ["java", "-Xmx6g", "-cp", f"{jar}:{folder}", "Driver", str(folder / "query.nfa"),
               str(folder / "events.txt"), str(folder / "matches.txt"), str(warmups),
               str(repeats)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise SaseError(f"the SASE driver failed (exit {done.returncode}): {last}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_ours(text: str, events: list[Event], runs: int) -> tuple[dict, list[tuple]]:
    """Our engine's compiled core, verbose output, median of ``runs`` after an untimed run
    that plans the query, three ways: on the events as an ``EventBatch`` made once before
    the timer (the headline: SASE's events are in memory as its objects too), the matches
    made when read; the same with every ``ExactMatch`` made (``list``) inside the timer;
    and on the ``Event`` list (each run turns it into columns; matches made when read).
    The matches of all three must be the same."""
    engine = Engine(text, engine="shared", core="compiled")
    engine.run(events[:1000])  # plans the query and loads the core
    batch = EventBatch.from_events(events)
    rates, found = {}, {}
    for name, data, make in (("batch", batch, False), ("objects", batch, True),
                             ("rows", events, False)):
        rates[name], found[name] = _timed(engine, data, make, runs)
        if engine.core != "compiled":
            raise RuntimeError(f"the compiled core did not run on the {name} ({engine.core})")
    ids = [tuple(p for block in m.positions for p in block) for m in found["batch"]]
    if not found["batch"] == found["objects"] == found["rows"]:
        raise RuntimeError("the batch and the Event list gave different matches")
    n = len(events)
    row = {"events_per_s": n / statistics.median(rates["batch"]),
           "events_per_s_objects": n / statistics.median(rates["objects"]),
           "events_per_s_rows": n / statistics.median(rates["rows"]),
           "seconds": rates["batch"], "seconds_objects": rates["objects"],
           "seconds_rows": rates["rows"], "engine": engine.engine, "core": engine.core,
           "matches": len(ids)}
    return row, ids


def _timed(engine: Engine, data, make: bool, runs: int) -> tuple[list[float], list]:
    """Seconds of each run (garbage collector off) and the last run's matches."""
    seconds, found = [], None
    for _ in range(runs):
        found = None
        gc.collect()
        gc.disable()
        try:
            start = time.perf_counter()
            found = engine.run(data)
            if make:
                found = list(found)
            seconds.append(time.perf_counter() - start)
        finally:
            gc.enable()
    return seconds, list(found)


# --------------------------------------------------------------------------- comparing


CLASSES = {
    "take_proceed_fork":
        "partition contiguity: SASE does not fork a run at an event that both extends the "
        "Kleene component and closes the match, so one of the two matches is missing (ours "
        "only; SASE has the other: same events up to that event)",
    "kleene_close_outside_window":
        "SASE does not window-check the closing event of a match with a Kleene component: "
        "its match spans more than W while all but its last event fit (SASE only)",
    "first_close_ends_run":
        "skip-till-next-match (seen under any-match too): a SASE run ends at its first "
        "closing event, so the matches from the same events that close later are missing "
        "(ours only; SASE has the one that closed first)",
}


def classify(ours: Iterable[tuple], sase: Sequence[tuple], times: Sequence[float],
             nfa: Nfa) -> dict:
    """Identical matches, and every difference in a class of :data:`CLASSES` or unexplained.

    ``ours`` and ``sase`` are matches as tuples of event ids (positions in ``times``).
    """
    ours_set, sase_set = set(ours), set(sase)
    counts = Counter({name: 0 for name in CLASSES})
    unexplained = []
    for m in sorted(sase_set - ours_set):
        if _close_outside_window(m, times, nfa):
            counts["kleene_close_outside_window"] += 1
        else:
            unexplained.append({"only": "sase", "match": list(m)})
    closed_first = _closed_first(sase_set)
    prefixes = _prefixes(sase_set) if nfa.strategy == "partition-contiguity" else set()
    for m in sorted(ours_set - sase_set):
        name = _ours_only_class(m, closed_first, prefixes, nfa)
        if name:
            counts[name] += 1
        else:
            unexplained.append({"only": "ours", "match": list(m)})
    return {"ours": len(ours_set), "sase": len(sase_set), "identical": len(ours_set & sase_set),
            "ours_only": len(ours_set - sase_set), "sase_only": len(sase_set - ours_set),
            "sase_duplicates": len(sase) - len(sase_set), "deviations": dict(counts),
            "unexplained": len(unexplained), "unexplained_examples": unexplained[:5]}


def _close_outside_window(m: tuple, times: Sequence[float], nfa: Nfa) -> bool:
    span = times[m[-1]] - times[m[0]]
    return nfa.kleene and len(m) > 1 and span > nfa.window >= times[m[-2]] - times[m[0]]


def _closed_first(sase: set[tuple]) -> dict[tuple, int]:
    """SASE's matches by their events before the closing one -> the earliest closing id."""
    out: dict[tuple, int] = {}
    for m in sase:
        body = m[:-1]
        out[body] = min(out.get(body, m[-1]), m[-1])
    return out


def _prefixes(sase: set[tuple]) -> set[tuple]:
    return {m[:k] for m in sase for k in range(1, len(m))}


def _ours_only_class(m: tuple, closed_first: dict, prefixes: set, nfa: Nfa) -> str | None:
    """The deviation that explains a match SASE misses, or None."""
    if not nfa.kleene:
        return None
    contiguity = nfa.strategy == "partition-contiguity"
    for k in range(1, len(m)):
        if closed_first.get(m[:k], m[-1]) < m[-1]:
            # SASE closed a run with these first k events earlier and did not go on
            return "take_proceed_fork" if contiguity else "first_close_ends_run"
    if contiguity and m in prefixes:  # SASE took m's closing event into the Kleene part
        return "take_proceed_fork"
    return None


# --------------------------------------------------------------------------- the section


def measure(jar: Path | None, quick: bool, runs: int) -> dict:
    """The ``sase`` section of ``exact.json``: every query side by side, or why not."""
    if jar is None:
        return dict(NOT_MEASURED)
    check(jar)
    with tempfile.TemporaryDirectory(prefix="acep-sase-") as tmp:
        folder = Path(tmp)
        compile_driver(jar, folder)
        rows = [_measure_query(q, jar, folder, quick, runs) for q in QUERIES]
    return {"measured": True, "jar": str(jar), "jar_sha256": _sha256(jar),
            "java": rows[0]["sase"]["java"], "driver": "bench/exact/java/Driver.java",
            "timer": "SASE's own (Profiling.totalRunTime: System.nanoTime around each event's "
                     "step of Engine.runEngine); wall: System.nanoTime around runEngine",
            "ours": "Engine(text, engine='shared', core='compiled').run(batch), verbose "
                    "output made when read, on an EventBatch made before the timer "
                    "(events_per_s); with list() of every ExactMatch in the timer "
                    "(events_per_s_objects); .run(events) on the Event list "
                    "(events_per_s_rows); garbage collector off, median of the runs",
            "our_runs": runs, "target": TARGET, "classes": CLASSES, "rows": rows}


def _measure_query(q: SaseQuery, jar: Path, folder: Path, quick: bool, runs: int) -> dict:
    n = q.quick if quick else q.events
    warmups, repeats = (min(q.warmups, 1), min(q.repeats, 3)) if quick else \
        (q.warmups, q.repeats)
    events = stream(q.stream, n)
    write_events(events, folder / "events.txt")
    (folder / "query.nfa").write_text(nfa_text(q.nfa))
    raw = run_driver(jar, folder, warmups, repeats)
    sase_matches = read_matches(folder / "matches.txt")
    ours, our_matches = run_ours(q.text, events, runs)
    comparison = classify(our_matches, sase_matches, [e.t for e in events], q.nfa)
    sase = _sase_rates(raw, n)
    ratio = ours["events_per_s"] / sase["events_per_s"]
    return {"query": q.name, "text": q.text, "nfa": nfa_text(q.nfa),
            "stream": STREAMS[q.stream], "events": n, "sase": sase, "ours": ours,
            "ratio": ratio, "target": TARGET, "pass": ratio >= TARGET,
            "comparison": comparison}


def _sase_rates(raw: dict, n: int) -> dict:
    timer = statistics.median(r["sase_timer_ns"] for r in raw["repeats"]) / 1e9
    wall = statistics.median(r["wall_ns"] for r in raw["repeats"]) / 1e9
    return {"events_per_s": n / timer, "events_per_s_wall": n / wall,
            "seconds": [r["sase_timer_ns"] / 1e9 for r in raw["repeats"]],
            "warmups": raw["warmups"], "matches": raw["matches"],
            "runs_created": raw["repeats"][0]["runs"], "java": raw["java"]}


def _also(row: dict, name: str) -> str:
    """Our other rate (``objects``, ``rows``) and its ratio to SASE's, "-" if not kept."""
    rate = row["ours"].get(f"events_per_s_{name}")
    if rate is None:
        return "-"
    return f"{rate:,.0f} ({rate / row['sase']['events_per_s']:.1f}x)"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --------------------------------------------------------------------------- reporting


def summary_lines(section: dict) -> list[str]:
    """The terminal's lines: one per query, or why SASE was not measured."""
    if not section.get("measured"):
        return [f"SASE side by side: not measured ({section.get('why', 'no section')})"]
    lines = []
    for r in section["rows"]:
        c = r["comparison"]
        verdict = "PASS" if r["pass"] else "FAIL"
        lines.append(f"{verdict}  SASE side by side, {r['query']}: ours "
                     f"{r['ours']['events_per_s']:,.0f} events/s ({r['ours']['core']}), SASE "
                     f"{r['sase']['events_per_s']:,.0f}: {r['ratio']:.1f}x (target "
                     f"{r['target']:g}x; every ExactMatch made {_also(r, 'objects')}, "
                     f"Event list {_also(r, 'rows')}); {c['identical']:,} identical matches, "
                     f"{sum(c['deviations'].values()):,} known deviations, "
                     f"{c['unexplained']:,} unexplained")
    return lines


def sase_table(results: dict) -> list[str]:
    """The README's table of the ``sase`` section."""
    section = results.get("sase") or NOT_MEASURED
    if not section["measured"]:
        return [f"(not measured in this run: {section['why']})"]
    lines = ["| query | events | SASE events/s | ours events/s (Engine.core) | ours / SASE | "
             "target 3x | ours, every ExactMatch made | ours on the Event list | "
             "matches SASE / ours | identical | fork | close outside W | first close | "
             "unexplained |",
             "|---|---:|---:|---:|---:|:---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in section["rows"]:
        c, d = r["comparison"], r["comparison"]["deviations"]
        lines.append(
            f"| {r['query']} | {r['events']:,} | {r['sase']['events_per_s']:,.0f} | "
            f"{r['ours']['events_per_s']:,.0f} ({r['ours']['core']}) | {r['ratio']:.1f}x | "
            f"{'yes' if r['pass'] else '**no**'} | {_also(r, 'objects')} | "
            f"{_also(r, 'rows')} | {c['sase']:,} / {c['ours']:,} | "
            f"{c['identical']:,} | {d['take_proceed_fork']:,} | "
            f"{d['kleene_close_outside_window']:,} | {d['first_close_ends_run']:,} | "
            f"{c['unexplained']:,} |")
    return lines
