"""One exit-code rule for every acep subcommand (README, Exit codes): 0 success; 2 the
command line or a file it names cannot be used, before any work; 1 the work failed; 130
Ctrl-C; 143 SIGTERM. Each situation runs the real command line, ``python -m acep.cli``.

No Spark starts here: ``JAVA_HOME`` names a directory without Java, so a case of ``acep
train`` or ``exact-batch`` that got past its checks would say so instead of its own line
(the ``valid options`` rows show it)."""

import json
import os
import select
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from support.cli import run_acep
from support.links import free_port
from support.sketches import key_fingerprint

ROOT = Path(__file__).resolve().parents[1]
NO_JAVA = "/nonexistent-java-home"
# the commands run without Java and with the kernel they pick themselves
ENV = {"JAVA_HOME": NO_JAVA, "ACEP_KERNEL": None}

EVENTS = "".join(json.dumps({"type": t, "t": i, "v": i}) + "\n" for i, t in enumerate("abcabcabc"))
AGENT = """[device]
id = "pi-01"
token_file = "{d}/token"
[collector]
url = "http://127.0.0.1:{port}"
drain_timeout = 1
[pattern]
id = "abc"
text = "a b c"
window = 5.0
[source]
kind = "file"
path = "{d}/gone.jsonl"
follow = false
[budget]
mode = "fixed"
ops_per_event = 4.0
[outbox]
path = "{d}/agent-outbox.db"
"""


@pytest.fixture(scope="module")
def d(tmp_path_factory) -> Path:
    """The files the cases name: good ones, bad ones, and a history with its sketch."""
    from acep.cli import main

    d = tmp_path_factory.mktemp("exit-codes")
    files = {
        "ev.jsonl": EVENTS,
        "bad.jsonl": '{"type": "a", "t": 5}\n{"type": "b", "t": 1}\n',
        "empty.jsonl": "",
        "deep.jsonl": '{"type": "a", "t": 1}\n{"type": "b", "t": 2, "v": ' + "[" * 1500
        + "]" * 1500 + '}\n{"type": "b", "t": 3}\n',
        "long.jsonl": "".join(json.dumps({"type": "a", "t": i}) + "\n" for i in range(40))
        + '{"type": "b", "t": 40}\n',
        "any.sase": "PATTERN SEQ(a+ x[], b y) WHERE skip_till_any_match(x, y) { } WITHIN 100\n",
        "next.sase": "PATTERN SEQ(a x, b y) WHERE skip_till_next_match(x, y) { } WITHIN 5\n",
        "broken.sase": "PATTERN SEQ(a x, b y WITHIN 5\n",
        "deep.sase": "PATTERN SEQ(a x, b y) WHERE skip_till_next_match(x, y) { y.v > "
                     + "(" * 200 + "1" + ")" * 200 + " } WITHIN 5\n",
        "reads-zz.sase": "PATTERN SEQ(a x, b y) WHERE skip_till_next_match(x, y) "
                         "{ y.zz > 1 } WITHIN 5\n",
        "broken-spec.json": "{not json",
        "fleet.key": "3" * 64 + "\n",
        "other.key": "4" * 64 + "\n",
        "token": "t0k3n\n",
        "not.history": "hello",
        "corrupt.parquet": "PAR1 not a parquet file",
        "bad-config.toml": '[device]\nid = 1\n',
        "agent.toml": AGENT.format(d=d, port=free_port()),
    }
    for name, text in files.items():
        (d / name).write_text(text)
    assert main(["history", "build", str(d / "ev.jsonl"), "-p", "a b", "-w", "3", "-o",
                 str(d / "h.history"), "--sketch", str(d / "h.sketch"), "--key-file",
                 str(d / "fleet.key")]) == 0
    assert main(["serve", "--db", str(d / "c.db"), "--add-device", "pi-01"]) == 0
    stray = d / "archive" / "date=2024-01-01" / "device=pi-01" / "part-00000000000000000001.parquet"
    stray.parent.mkdir(parents=True)
    stray.write_text("a file no batch of the database is in")
    _corrupt_parquet_files(d)
    from edge.agent.outbox import Outbox

    Outbox(d / "outbox.db").close()
    return d


def _corrupt_parquet_files(d: Path) -> None:
    """Events a b a b ... in row groups of 50: the first group's data corrupt, or the
    second's (the footers read)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from support.damaged import corrupt_parquet

    rows = pa.table({"type": ["a", "b"] * 50, "t": [float(i) for i in range(100)]})
    for name, group in (("corrupt-first.parquet", 0), ("corrupt-later.parquet", 1)):
        pq.write_table(rows, d / name, row_group_size=50)
        corrupt_parquet(d / name, group)


MATCH = ["match", "-p", "a b", "-w", "3"]
BUILD = ["history", "build", "{d}/ev.jsonl", "-p", "a b", "-w", "3", "-o", "{d}/new.history"]
EVALUATE = ["history", "evaluate", "{d}/h.sketch", "{d}/ev.jsonl", "--key-file",
            "{d}/fleet.key", "--budgets", "0.5"]
TRAIN = ["train", "{d}/ev.jsonl", "-p", "a b", "-w", "3", "-o", "{d}/t.history"]
ANOTHER_KEY = (f"signature check failed: the sketch was signed with another key, "
               f"{key_fingerprint(b'3' * 64)}; this key is {key_fingerprint(b'4' * 64)} "
               "(--key-file)")
BATCH = ["exact-batch", "{d}/next.sase", "{d}/ev.jsonl", "--out", "{d}/matches"]
SERVE = ["serve", "--db", "{d}/c.db"]

# (situation, arguments, exit code, what stderr says)
CASES = [
    ("no command", [], 2, "usage: acep"),
    ("acep backend", ["backend"], 0, ""),
    ("acep sample: --limit below 0", ["sample", "--limit", "-1"], 2, "must be >= 0"),
    ("acep demo: --budget above 1", ["demo", "--budget", "2"], 2, "argument --budget"),

    ("match", [*MATCH, "{d}/ev.jsonl"], 0, ""),
    ("match: a bad --window", ["match", "-p", "a b", "-w", "x", "{d}/ev.jsonl"], 2,
     "bad window 'x'"),
    ("match: a bad pattern", ["match", "-p", "a (b", "-w", "3", "{d}/ev.jsonl"], 2,
     "pattern error"),
    ("match: a bad --where", [*MATCH, "--where", "b.v >", "{d}/ev.jsonl"], 2, "^"),
    ("match: a pattern nested 300 deep",
     ["match", "-p", "(" * 300 + "a" + ")" * 300, "-w", "3", "{d}/ev.jsonl"], 2,
     "acep: pattern error at position 64: nested deeper than the limit of 64 levels"),
    ("match: a --where of 1,000 terms",
     [*MATCH, "--where", " or ".join(["b.v > 1"] * 1000), "{d}/ev.jsonl"], 2,
     "acep: predicate error at position 0: nested deeper than the limit of 64 levels"),
    ("match: no such events file", [*MATCH, "{d}/gone.jsonl"], 2,
     "acep match: {d}/gone.jsonl: no such file"),
    ("match: a directory", [*MATCH, "{d}"], 2, "a directory, not a file of events"),
    ("match: an unknown file type", [*MATCH, "{d}/fleet.key"], 2, "unknown file type"),
    ("match: a Parquet file without its footer", [*MATCH, "{d}/corrupt.parquet"], 2,
     "acep match: {d}/corrupt.parquet: not a readable Parquet file"),
    ("match: no such --spec", [*MATCH, "--spec", "{d}/gone.json", "{d}/ev.jsonl"], 2,
     "acep match: --spec: event spec '{d}/gone.json' is neither a file nor a preset"),
    ("match: a --spec that does not load", [*MATCH, "--spec", "{d}/broken-spec.json",
                                            "{d}/ev.jsonl"], 2, "acep match: --spec: event spec"),
    ("match: --where over a column the spec leaves out",
     [*MATCH, "--spec", "flights", "--where", "b.type > 1", "{d}/ev.jsonl"], 2,
     "acep match: --where: 'type' is not among"),
    ("match: a bad event", [*MATCH, "{d}/bad.jsonl"], 1,
     "acep: error: {d}/bad.jsonl, line 2, field 't'"),
    # corrupt data: exit 1 where reading the events is the work (README, Exit codes)
    ("match: corrupt Parquet data after matches", [*MATCH, "{d}/corrupt-later.parquet"], 1,
     "acep: error: {d}/corrupt-later.parquet: unreadable Parquet data ("),
    ("match: corrupt Parquet data in the first events", [*MATCH, "{d}/corrupt-first.parquet"],
     1, "acep: error: {d}/corrupt-first.parquet: unreadable Parquet data ("),
    ("match: --max-entries reached", ["match", "-p", "a+ b", "-w", "100", "--all-trajectories",
                                      "--max-entries", "1024", "{d}/long.jsonl"], 1,
     "above the limit of 1,024"),
    ("match: a line nested 1,500 deep", [*MATCH, "{d}/deep.jsonl"], 1,
     "acep: error: {d}/deep.jsonl, line 2: nested deeper than the limit of 64 levels"),
    ("match: a line nested 1,500 deep, skipped",
     [*MATCH, "--on-bad-event", "skip", "{d}/deep.jsonl"], 0, "1 bad event skipped"),

    ("exact", ["exact", "{d}/next.sase", "{d}/ev.jsonl"], 0, ""),
    ("exact: no such query file", ["exact", "{d}/gone.sase", "{d}/ev.jsonl"], 2,
     "acep exact: query file {d}/gone.sase: No such file or directory"),
    ("exact: a bad query", ["exact", "{d}/broken.sase", "{d}/ev.jsonl"], 2, "^"),
    ("exact: a WHERE nested 200 deep", ["exact", "{d}/deep.sase", "{d}/ev.jsonl"], 2,
     "WHERE: nested deeper than the limit of 64 levels"),
    ("exact: no such events file", ["exact", "{d}/next.sase", "{d}/gone.jsonl"], 2,
     "acep exact: {d}/gone.jsonl: no such file"),
    ("exact: no such --spec", ["exact", "{d}/next.sase", "{d}/ev.jsonl", "--spec", "nope"], 2,
     "acep exact: --spec: event spec 'nope'"),
    ("exact: the query reads what the spec leaves out",
     ["exact", "{d}/reads-zz.sase", "{d}/ev.jsonl", "--spec", "flights"], 2,
     "acep exact: the query reads y.zz"),
    ("exact: an --engine the strategy refuses",
     ["exact", "{d}/next.sase", "{d}/ev.jsonl", "--engine", "postpone"], 2,
     "acep exact: --engine postpone"),
    ("exact: a bad event", ["exact", "{d}/next.sase", "{d}/bad.jsonl"], 1,
     "{d}/bad.jsonl, line 2, field 't'"),
    ("exact: a line nested 1,500 deep", ["exact", "{d}/next.sase", "{d}/deep.jsonl"], 1,
     "{d}/deep.jsonl, line 2: nested deeper than the limit of 64 levels"),
    ("exact: --max-entries reached", ["exact", "{d}/any.sase", "{d}/long.jsonl",
                                      "--max-entries", "5"], 1, "(--max-entries)"),

    ("history build", BUILD, 0, ""),
    ("history build: no such --spec", [*BUILD, "--spec", "nope"], 2,
     "acep history build: --spec: event spec 'nope'"),
    ("history build: no such events file", [*BUILD[:2], "{d}/gone.jsonl", *BUILD[3:]], 2,
     "acep history build: {d}/gone.jsonl: no such file"),
    ("history build: no events", [*BUILD[:2], "{d}/empty.jsonl", *BUILD[3:]], 2,
     "{d}/empty.jsonl: no events to build a history from"),
    ("history build: --sketch without --key-file", [*BUILD, "--sketch", "{d}/n.sketch"], 2,
     "--sketch needs --key-file"),
    ("history build: no such --key-file",
     [*BUILD, "--sketch", "{d}/n.sketch", "--key-file", "{d}/gone.key"], 2,
     "acep history build: --key-file {d}/gone.key: cannot read the signing key file"),
    ("history build: -o in no directory", [*BUILD[:-1], "{d}/gone/h.history"], 2,
     "no such directory"),
    ("history build: --bins 0", [*BUILD, "--bins", "0"], 2, "argument --bins"),
    ("history build: --where over a column the spec leaves out",
     [*BUILD, "--spec", "flights", "--where", "b.type > 1"], 2,
     "acep history build: --where: 'type' is not among"),
    ("history build: a bucket that holds no operation",
     [*BUILD, "--sketch", "{d}/n.sketch", "--key-file", "{d}/fleet.key", "--fit", "0.01",
      "--burst", "1"], 2, "the bucket holds"),
    ("history build: corrupt Parquet data",
     [*BUILD[:2], "{d}/corrupt-first.parquet", *BUILD[3:]], 1,
     "acep: error: {d}/corrupt-first.parquet: unreadable Parquet data ("),
    ("history build: a bad event", [*BUILD[:2], "{d}/bad.jsonl", *BUILD[3:]], 1,
     "{d}/bad.jsonl, line 2, field 't'"),

    ("history inspect", ["history", "inspect", "{d}/h.history"], 0, ""),
    ("history inspect: no such file", ["history", "inspect", "{d}/gone.history"], 2,
     "acep history inspect: {d}/gone.history: no such file"),
    ("history inspect: not a history", ["history", "inspect", "{d}/not.history"], 2,
     "is neither a history graph nor a sketch"),
    ("history inspect: a sketch without --key-file", ["history", "inspect", "{d}/h.sketch"], 2,
     "pass --key-file"),
    ("history inspect: a sketch and another key",
     ["history", "inspect", "{d}/h.sketch", "--key-file", "{d}/other.key"], 2,
     "{d}/h.sketch: " + ANOTHER_KEY),
    ("history inspect: a --plot type matplotlib does not write",
     ["history", "inspect", "{d}/h.history", "--plot", "{d}/p.txt"], 2,
     "does not write .txt files"),

    ("history evaluate", EVALUATE, 0, ""),
    ("history evaluate: no such sketch", [*EVALUATE[:2], "{d}/gone.sketch", *EVALUATE[3:]], 2,
     "acep history evaluate: {d}/gone.sketch: no such file"),
    ("history evaluate: another key", [*EVALUATE[:5], "{d}/other.key", *EVALUATE[6:]], 2,
     ANOTHER_KEY),
    ("history evaluate: no such --key-file", [*EVALUATE[:5], "{d}/gone.key", *EVALUATE[6:]], 2,
     "acep history evaluate: --key-file {d}/gone.key"),
    ("history evaluate: no such events file", [*EVALUATE[:3], "{d}/gone.jsonl", *EVALUATE[4:]],
     2, "acep history evaluate: {d}/gone.jsonl: no such file"),
    ("history evaluate: no events", [*EVALUATE[:3], "{d}/empty.jsonl", *EVALUATE[4:]], 2,
     "no events to evaluate the sketch on"),
    ("history evaluate: an unknown policy", [*EVALUATE, "--policies", "nope"], 2,
     "--policies 'nope'"),
    ("history evaluate: no such --spec", [*EVALUATE, "--spec", "nope"], 2,
     "acep history evaluate: --spec: event spec 'nope'"),
    ("history evaluate: a bad event", [*EVALUATE[:3], "{d}/bad.jsonl", *EVALUATE[4:]], 1,
     "{d}/bad.jsonl, line 2, field 't'"),

    ("train: valid options, no Java", TRAIN, 2, f"JAVA_HOME is {NO_JAVA}"),
    ("train: nothing to write", TRAIN[:-2], 2, "nothing to write"),
    ("train: no such --spec", [*TRAIN, "--spec", "nope"], 2,
     "acep train: --spec: event spec 'nope'"),
    ("train: a --spec that does not load", [*TRAIN, "--spec", "{d}/broken-spec.json"], 2,
     "acep train: --spec: event spec"),
    ("train: --chunk 0", [*TRAIN, "--chunk", "0"], 2, "argument --chunk"),
    ("train: a bad pattern", ["train", "{d}/ev.jsonl", "-p", "a (b", "-w", "3", "-o",
                              "{d}/t.history"], 2, "pattern error"),
    # corrupt data: exit 2 where a check finds it before the work (README, Exit codes);
    # those found by Spark's read of every file: tests/test_trainer*.py
    ("train: corrupt Parquet data, found before Spark starts",
     ["train", "{d}/corrupt-later.parquet", *TRAIN[2:]], 2,
     "acep train: {d}/corrupt-later.parquet: unreadable Parquet data ("),
    ("train: no such input", ["train", "{d}/gone.jsonl", *TRAIN[2:]], 2,
     "{d}/gone.jsonl: no such file or directory"),
    ("train: no such --key-file", [*TRAIN, "--sketch", "{d}/t.sketch", "--key-file",
                                   "{d}/gone.key"], 2, "cannot read the key file"),
    ("train: no such --bins-from", [*TRAIN, "--bins-from", "{d}/gone.history"], 2,
     "acep train: --bins-from {d}/gone.history: No such file or directory"),
    ("train: a --bins-from that is no history", [*TRAIN, "--bins-from", "{d}/not.history"], 2,
     "acep train: --bins-from {d}/not.history"),
    ("train: a bad --since", ["train", "--archive", "{d}/archive", "--since", "yesterday",
                              "-o", "{d}/t.history"], 2, "is not a day"),
    ("train: no such --archive", ["train", "--archive", "{d}/gone", "-o", "{d}/t.history"], 2,
     "{d}/gone: no such directory"),
    ("train: a --pattern-id the collector refuses, with --publish",
     [*TRAIN, "--key-file", "{d}/fleet.key", "--publish", "http://127.0.0.1:{port}",
      "--token-file", "{d}/token", "--pattern-id", "rising edge"], 2,
     "acep train: error: argument --pattern-id: 'rising edge' must match "
     "[A-Za-z0-9._-]{{1,64}} (the ids the collector and the agents take)"),
    ("train: a --pattern-id no archive holds, without --publish",
     ["train", "--archive", "{d}/archive", "-o", "{d}/t.history", "--pattern-id", "a/b"], 2,
     "acep train: error: argument --pattern-id: 'a/b' must match"),

    ("exact-batch: valid options, no Java", BATCH, 2, f"JAVA_HOME is {NO_JAVA}"),
    ("exact-batch: no such query file", ["exact-batch", "{d}/gone.sase", *BATCH[2:]], 2,
     "query file {d}/gone.sase: No such file or directory"),
    ("exact-batch: a bad query", ["exact-batch", "{d}/broken.sase", *BATCH[2:]], 2, "^"),
    ("exact-batch: no such --spec", [*BATCH, "--spec", "nope"], 2,
     "acep exact-batch: --spec: event spec 'nope'"),
    ("exact-batch: --cores 0", [*BATCH, "--cores", "0"], 2, "argument --cores"),
    ("exact-batch: --out is a file", [*BATCH[:-1], "{d}/ev.jsonl"], 2, "an existing file"),
    ("exact-batch: a --pattern-id no archive holds",
     ["exact-batch", "{d}/next.sase", "--archive", "{d}/archive", "--out", "{d}/matches",
      "--pattern-id", "rising edge"], 2,
     "acep exact-batch: error: argument --pattern-id: 'rising edge' must match"),
    ("exact-batch: corrupt Parquet data, found before Spark starts",
     [*BATCH[:2], "{d}/corrupt-first.parquet", *BATCH[3:]], 2,
     "acep exact-batch: {d}/corrupt-first.parquet: unreadable Parquet data ("),
    ("exact-batch: no such input", [*BATCH[:2], "{d}/gone.jsonl", *BATCH[3:]], 2,
     "{d}/gone.jsonl: no such file or directory"),

    ("agent: no such --config", ["agent", "--config", "{d}/gone.toml"], 2,
     "acep agent: config error: {d}/gone.toml: no such config file"),
    ("agent: a config mistake", ["agent", "--config", "{d}/bad-config.toml"], 2,
     "device.id: must be str"),
    ("agent --check: a config mistake", ["agent", "--check", "--config", "{d}/bad-config.toml"],
     2, "device.id: must be str"),
    ("agent --check: a check fails", ["agent", "--check", "--config", "{d}/agent.toml"], 1, ""),
    ("agent: a --log-level it does not know", ["agent", "--config", "{d}/agent.toml",
                                               "--log-level", "loud"], 2, "invalid choice"),
    ("agent --once: a source file not followed that is not there",
     ["agent", "--once", "--config", "{d}/agent.toml"], 2,
     "acep agent: source.path {d}/gone.jsonl: no such file"),

    ("outbox status", ["outbox", "{d}/outbox.db", "status"], 0, ""),
    ("outbox: no such outbox", ["outbox", "{d}/gone.db", "status"], 2, "no such outbox"),
    ("outbox: not an outbox", ["outbox", "{d}/ev.jsonl", "list"], 2, "not an outbox"),
    ("outbox: an action it does not know", ["outbox", "{d}/outbox.db", "frob"], 2,
     "invalid choice"),
    ("outbox export: into a file", ["outbox", "{d}/outbox.db", "export", "{d}/ev.jsonl"], 2,
     "acep outbox export: {d}/ev.jsonl: File exists"),
    ("outbox discard: no ids", ["outbox", "{d}/outbox.db", "discard"], 2, "name the ids"),
    ("outbox requeue: an id that is no dead letter", ["outbox", "{d}/outbox.db", "requeue",
                                                      "pi-01/9"], 1, "not dead letters"),

    ("serve --list-devices", [*SERVE, "--list-devices"], 0, ""),
    ("serve: no --archive", SERVE, 2, "--archive DIR is needed"),
    ("serve --add-device: an id the rule refuses", [*SERVE, "--add-device", "a b"], 2,
     "must match [A-Za-z0-9._-]{{1,64}}"),
    ("serve --rotate-token: no such device", [*SERVE, "--rotate-token", "ghost"], 2,
     "no device 'ghost' is registered"),
    ("serve --revoke-device: no such device", [*SERVE, "--revoke-device", "ghost"], 2,
     "no device 'ghost' is registered"),
    ("serve --prune-before: not a day", [*SERVE, "--prune-before", "x"], 2, "is not a day"),
    ("serve --check-archive without --archive", [*SERVE, "--check-archive"], 2,
     "--check-archive needs --archive"),
    ("serve --check-archive: they disagree",
     [*SERVE, "--archive", "{d}/archive", "--check-archive"], 1, ""),
    ("serve: a --db that is no database", ["serve", "--db", "{d}/ev.jsonl", "--list-devices"], 2,
     "cannot open it as a SQLite database"),
    ("serve: no such --db", ["serve", "--db", "{d}/gone.db", "--list-devices"], 2,
     "no collector database there"),
    ("serve: no such --sketch-key-file",
     [*SERVE, "--archive", "{d}/served", "--sketch-key-file", "{d}/gone.key"], 2,
     "--sketch-key-file {d}/gone.key: cannot read"),
    ("serve: a bad --port", [*SERVE, "--archive", "{d}/served", "--port", "x"], 2,
     "is not a port"),
    ("serve: a bad --auth-failures",
     [*SERVE, "--archive", "{d}/served", "--auth-failures", "-3"], 2,
     "acep serve: --auth-failures must be 0 or more"),
    ("serve: a bad --auth-window", [*SERVE, "--archive", "{d}/served", "--auth-window", "0"],
     2, "acep serve: --auth-window must be above 0"),
]


# (command, arguments with one path given empty, the option argparse names): an unset shell
# variable ("--spec "$SPEC"") was taken as no spec, no history, no key, a temporary work
# directory, an open /metrics, or the current directory
EMPTY = [
    ("match", [*MATCH, "--spec", "", "{d}/ev.jsonl"], "--spec"),
    ("match", [*MATCH, ""], "file"),
    ("exact", ["exact", "{d}/next.sase", "{d}/ev.jsonl", "--spec", ""], "--spec"),
    ("exact", ["exact", "", "{d}/ev.jsonl"], "query"),
    ("history build", [*BUILD, "--spec", ""], "--spec"),
    ("history build", [*BUILD, "--sketch", "{d}/n.sketch", "--key-file", ""], "--key-file"),
    ("history build", [*BUILD[:-1], ""], "--output/-o"),
    ("history evaluate", [*EVALUATE, "--history", ""], "--history"),
    ("history evaluate", [*EVALUATE, "--spec", ""], "--spec"),
    ("history evaluate", [*EVALUATE, "--json", ""], "--json"),
    ("history inspect", ["history", "inspect", "{d}/h.history", "--plot", ""], "--plot"),
    ("train", [*TRAIN, "--spec", ""], "--spec"),
    ("train", [*TRAIN, "--bins-from", ""], "--bins-from"),
    ("train", [*TRAIN, "--archive", ""], "--archive"),
    ("train", [*TRAIN[:-1], ""], "--output/-o"),
    ("train", [*TRAIN, "--sketch", "", "--key-file", "{d}/fleet.key"], "--sketch"),
    ("train", [*TRAIN, "--quarantine", ""], "--quarantine"),
    ("train", [*TRAIN, "--key-file", "{d}/fleet.key", "--publish", "", "--token-file",
               "{d}/token", "--pattern-id", "abc"], "--publish"),
    ("train", [*TRAIN, "--key-file", "{d}/fleet.key", "--publish", "https://127.0.0.1:{port}",
               "--token-file", "{d}/token", "--pattern-id", "abc", "--ca-file", ""],
     "--ca-file"),
    ("exact-batch", [*BATCH, "--spec", ""], "--spec"),
    ("exact-batch", [*BATCH[:-1], ""], "--out/-o"),
    ("demo", ["demo", "--workdir", "", "--budget", "2"], "--workdir"),
    ("demo", ["demo", "--data", "", "--budget", "2"], "--data"),
    ("agent", ["agent", "--config", ""], "--config"),
    ("outbox", ["outbox", "", "status"], "path"),
    ("serve", ["serve", "--db", "", "--add-device", "pi-02"], "--db"),
    ("serve", [*SERVE, "--archive", "", "--prune-before", "2020-01-01"], "--archive"),
    ("serve", [*SERVE, "--backup", ""], "--backup"),
    # --max-body 0: a collector that got past the option would refuse it, not serve
    ("serve", [*SERVE, "--archive", "{d}/served", "--metrics-token-file", "", "--max-body",
               "0"], "--metrics-token-file"),
    ("serve", [*SERVE, "--archive", "{d}/served", "--sketch-key-file", "", "--max-body", "0"],
     "--sketch-key-file"),
    ("serve", [*SERVE, "--archive", "{d}/served", "--mirror", "", "--max-body", "0"],
     "--mirror"),
]


@pytest.mark.parametrize("situation, argv, code, says", CASES, ids=[c[0] for c in CASES])
def test_exit_code(d, situation, argv, code, says):
    fill = {"d": d, "port": free_port()}
    done = run_acep(*(a.format(**fill) for a in argv), cwd=ROOT, env=ENV)
    assert done.returncode == code, done.stderr
    assert says.format(**fill) in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr


def _snapshot(root: Path) -> dict:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


# (command, arguments with one other value given empty or blank, the option argparse
# names, that value): it was taken as the option not given (the archive's only pattern or
# definition, the local Spark master, the default policies, every interface for --host),
# refused under another name (--pattern, the id rule after a new --db was made, no
# device ''), or refused after the work began (--partition exit 1, outbox ids exit 1)
ARCHIVE_TRAIN = ["train", "--archive", "{d}/archive", "-o", "{d}/t.history"]
ARCHIVE_BATCH = ["exact-batch", "{d}/next.sase", "--archive", "{d}/archive", "--out",
                 "{d}/matches"]
EMPTY_TEXT = [
    ("match", ["match", "-p", "", "-w", "3", "{d}/ev.jsonl"], "--pattern/-p", ""),
    ("match", [*MATCH, "--partition", "", "{d}/ev.jsonl"], "--partition", ""),
    ("match", [*MATCH, "--where", " ", "{d}/ev.jsonl"], "--where", " "),
    ("history build", [*BUILD, "--partition", ""], "--partition", ""),
    ("history evaluate", [*EVALUATE, "--policies", ""], "--policies", ""),
    ("history evaluate", [*EVALUATE, "--partition", ""], "--partition", ""),
    ("train", [*TRAIN, "--pattern-id", ""], "--pattern-id", ""),
    ("train", [*ARCHIVE_TRAIN, "--pattern-id", ""], "--pattern-id", ""),
    ("train", [*ARCHIVE_TRAIN, "--pattern-hash", ""], "--pattern-hash", ""),
    ("train", [*ARCHIVE_TRAIN, "--since", ""], "--since", ""),
    ("train", [*ARCHIVE_TRAIN, "--before", " "], "--before", " "),
    ("train", ["train", "{d}/ev.jsonl", "-p", "", "-w", "3", "-o", "{d}/t.history"],
     "--pattern/-p", ""),
    ("train", [*TRAIN, "--where", ""], "--where", ""),
    ("train", [*TRAIN, "--partition", ""], "--partition", ""),
    ("train", [*TRAIN, "--master", ""], "--master", ""),
    ("exact-batch", [*BATCH, "--master", ""], "--master", ""),
    ("exact-batch", [*ARCHIVE_BATCH, "--pattern-id", ""], "--pattern-id", ""),
    ("exact-batch", [*ARCHIVE_BATCH, "--pattern-hash", ""], "--pattern-hash", ""),
    ("outbox PATH requeue", ["outbox", "{d}/outbox.db", "requeue", ""], "ids", ""),
    ("outbox PATH discard", ["outbox", "{d}/outbox.db", "discard", "pi-01/9", " "], "ids",
     " "),
    ("serve", ["serve", "--db", "{d}/new.db", "--add-device", ""], "--add-device", ""),
    ("serve", ["serve", "--db", "{d}/new.db", "--add-admin", " "], "--add-admin", " "),
    ("serve", [*SERVE, "--rotate-token", ""], "--rotate-token", ""),
    ("serve", [*SERVE, "--revoke-device", ""], "--revoke-device", ""),
    ("serve", [*SERVE, "--prune-before", ""], "--prune-before", ""),
    # --max-body 0: a collector that got past the option would refuse it, not serve
    ("serve", [*SERVE, "--archive", "{d}/served", "--host", "", "--max-body", "0"], "--host",
     ""),
]


@pytest.mark.parametrize("command, argv, option, value", EMPTY_TEXT,
                         ids=[f"{c[0]} {c[2]} {c[3]!r}" for c in EMPTY_TEXT])
def test_an_empty_value_is_refused_by_its_option_s_name(d, command, argv, option, value):
    fill = {"d": d, "port": free_port()}
    before = _snapshot(d)
    done = run_acep(*(a.format(**fill) for a in argv), cwd=ROOT, env=ENV)
    said = "an empty value (an unset shell variable?)" if not value else \
        f"a blank value ({value!r})"
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert done.stderr.splitlines()[-1] == f"acep {command}: error: argument {option}: {said}", \
        done.stderr
    assert _snapshot(d) == before


@pytest.mark.parametrize("command, argv, option", EMPTY,
                         ids=[f"{c[0]} {c[2]}" for c in EMPTY])
def test_an_empty_path_is_refused_by_its_option_s_name(d, command, argv, option):
    fill = {"d": d, "port": free_port()}
    before = _snapshot(d)
    done = run_acep(*(a.format(**fill) for a in argv), cwd=ROOT, env=ENV)
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert done.stderr.splitlines()[-1] == (f"acep {command}: error: argument {option}: an "
                                            "empty path (an unset shell variable?)"), done.stderr
    assert _snapshot(d) == before


def test_a_port_another_process_holds_is_one_line_exit_2(d):
    """It was the OSError of aiohttp's bind, exit 1."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        done = run_acep("serve", "--db", d / "c.db", "--archive", d / "served", "--port", port,
                        cwd=ROOT, env=ENV)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.splitlines()[-1].startswith(  # after the start's INFO line
        f"acep serve: --host 127.0.0.1 --port {port}: cannot listen there ("), done.stderr


@pytest.mark.parametrize("signum, code, said", [(signal.SIGINT, 130, "interrupted"),
                                                (signal.SIGTERM, 143, "terminated")])
def test_ctrl_c_and_sigterm_are_one_line_and_130_or_143(signum, code, said):
    """SIGTERM killed acep match at once (-15 to its parent, no line, no finally blocks)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # SIGINT at its default: a job started in the background by a shell without job control
    # inherits it ignored, and Python then never raises KeyboardInterrupt (as test_cli does)
    proc = subprocess.Popen([sys.executable, "-m", "acep.cli", "match", "-p", "a b", "-w", "3",
                             "-"], cwd=ROOT, env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        proc.stdin.write("".join(json.dumps({"type": t, "t": i}) + "\n"
                                 for i, t in enumerate("aba")))
        proc.stdin.flush()
        # its first match, printed while stdin stays open: the command runs
        assert select.select([proc.stdout], [], [], 60)[0], "no match while stdin is open"
        assert json.loads(proc.stdout.readline())["positions"] == [0, 1]
        proc.send_signal(signum)
    except BaseException:
        proc.kill()
        raise
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, err) == (code, f"acep match: {said}\n")
