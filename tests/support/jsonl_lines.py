"""Random JSON Lines lines, good and bad, and what a batch holds, for the tests that
compare the compiled JSON Lines reader with the Python one (``read_events`` and the agent's
file and stdin sources)."""

from __future__ import annotations

import json
import math

from hypothesis import strategies as st

from acep.events import PRESETS, EventBatch, EventSpec, TypeClasses

KEYS = ["t", "type", "kind", "x", "y", "é", "", "date", "delay", "origin"]
NUMBER_TEXTS = ["0", "-0", "-0.0", "1", "12", "1.5", "1e3", "1E400", "-1e400", "1e-400",
                "123456789012345678", "1234567890123456789", "-9007199254740993",
                "9007199254740992", "9007199254740993", "18446744073709551616", "0.1e+5",
                "2.5E-3", "01", "1.", ".5", "+1", "-", "2e", "1e+", "-01", "0x1", "1_0",
                "NaN", "Infinity", "-Infinity", "tru", "nul", "True"]
ISO = ["2001-01-01T00:01:00", "2001-01-01 00:01:00Z", "2001-01-01T00:01:00.5+02:00",
       "2001-13-01", "1e3", " 7 ", "x", "2000-02-29T23:59:59", "2001-02-29T00:00:00",
       "1900-02-29T00:00:00", "2001-04-31T00:00:00", "2001-01-01T24:00:00",
       "2001-01-01T23:60:00", "2001-01-01T00:00:60", "0000-01-01T00:00:00",
       "0001-01-01T00:00:00", "9999-12-31T23:59:59", "2001-00-10T00:00:00",
       "2001-01-0aT00:00:00", "2001-01-01t00:00:00", "\ud800001-01-01T00:00:00",
       "2001-01-01T00:00:00\u0660"]
STAMPS = st.datetimes().map(lambda d: d.isoformat(timespec="seconds"))
BAD_LINES = [b"{", b"}", b"[1]", b'"x"', b"7", b"null", b'{"a":}', b'{"a" 1}', b'{"a":1,}',
             b'{,"a":1}', b'{"a":1}}', b'{"a":1} x', b'{"a":[1,{"b":2}]}', b'{"a":{}}',
             b'\xef\xbb\xbf{"type":"a","t":1}', b'{"type":"\xff","t":1}',
             b'{"type":"\xed\xa0\x80","t":1}', b'{"ty\xc3\xa9pe":"a"}', b'{"\xff":1}',
             b'{"type":"a\tb","t":1}', b'{"type":"a\\u00e9","t":1}', b'{"a\\"b":1}',
             b'{"t":1,"type":"a","deep":' + b"[" * 70 + b"]" * 70 + b"}", b"\x00",
             b'{"type":"a","t":1}\r', b'\x0c{"type":"a","t":2}', b"\x0b \t",
             b'{"type":"a","t":"2001-01-01T00:00:00"}\x00']

# specs the readers are compared under: every kind of type, tag and attribute list
SPECS = [
    EventSpec(),
    PRESETS["flights"],
    EventSpec(tag=None, type="kind"),
    EventSpec(tag="t", type=TypeClasses("x", (-math.inf, 0, 10, math.inf), ("lo", "mid", "hi"))),
    EventSpec(tag="t", type="type", attributes=("x", "é", "t", "")),
    EventSpec(tag="t", type=TypeClasses("x", (0, 5), ("in",)), attributes=("x", "y")),
]


def values():
    """JSON values a record may hold: every kind, numbers near and beyond 2**53."""
    big = st.integers(-2**70, 2**70)
    near = st.integers(-3, 3).map(lambda d: 2**53 + d) | st.integers(-3, 3).map(
        lambda d: -2**53 + d)
    floats = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([0.5, -0.0, 1e300])
    text = st.text(max_size=6) | st.sampled_from(ISO + ["lo", "hi", "", "a", "b"]) | STAMPS
    scalars = (st.none() | st.booleans() | st.integers(-1000, 1000) | near | big | floats
               | text)
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=2)
                        | st.dictionaries(st.sampled_from(KEYS), inner, max_size=2), max_leaves=3)


@st.composite
def json_line(draw) -> bytes:
    """A record as json.dumps writes it, ASCII or UTF-8, spaced or compact."""
    record = draw(st.dictionaries(st.sampled_from(KEYS), values(), max_size=6))
    if draw(st.booleans()):
        record["t"] = draw(st.sampled_from(ISO) | STAMPS | st.integers(-5, 5)
                           | st.floats(-10, 10))
    seps = draw(st.sampled_from([(",", ":"), (", ", ": "), (" ,\t", " :\r ")]))
    text = json.dumps(record, ensure_ascii=draw(st.booleans()), separators=seps)
    return text.encode("utf-8", "surrogatepass")


@st.composite
def hand_line(draw) -> bytes:
    """A flat object written by hand: raw number texts, repeated keys, odd spacing."""
    ws = st.sampled_from(["", " ", "\t", "\r", "  "])
    pairs = []
    for _ in range(draw(st.integers(0, 5))):
        key = draw(st.sampled_from(KEYS))
        value = draw(st.sampled_from(NUMBER_TEXTS) | st.sampled_from(
            ['"a"', '"b"', '""', "true", "false", "null", '"2001-01-01T00:01:00"', '"é"'])
            | st.sampled_from(ISO).map(json.dumps))
        pairs.append(f'"{key}"{draw(ws)}:{draw(ws)}{value}')
    return f"{draw(ws)}{{{draw(ws)}{','.join(pairs)}{draw(ws)}}}{draw(ws)}".encode()


@st.composite
def line(draw) -> bytes:
    """A good or bad line, or one byte of a good one changed."""
    kind = draw(st.sampled_from(["json", "json", "hand", "hand", "bad", "blank", "mutant"]))
    if kind == "json":
        return draw(json_line())
    if kind == "hand":
        return draw(hand_line())
    if kind == "bad":
        return draw(st.sampled_from(BAD_LINES))
    if kind == "blank":
        return draw(st.sampled_from([b"", b" ", b"\t\r", b"\x0b\x0c "]))
    good = draw(json_line() | hand_line())
    i = draw(st.integers(0, len(good)))
    return good[:i] + bytes([draw(st.integers(0, 255))]) + good[i + 1:]


def shown(batch: EventBatch) -> tuple:
    """Everything a batch holds, its columns' dtypes and values' types included."""
    columns = [(k, str(c.dtype), [(type(v).__name__, _same_nan(v)) for v in c.tolist()])
               for k, c in batch.columns.items()]
    return (batch.type_codes.dtype.str, batch.type_codes.tolist(), batch.type_names,
            batch.tags.dtype.str, [_same_nan(t) for t in batch.tags.tolist()],
            None if batch.lines is None else (batch.lines.dtype.str, batch.lines.tolist()),
            columns, batch.position, batch.source, batch.tag_is_time, batch.tag_field)


def _same_nan(v):
    return "nan" if isinstance(v, float) and v != v else v


@st.composite
def event_line(draw) -> bytes:
    """A good agent event: a type, a whole-number tag and attributes, keys in any order."""
    attrs = draw(st.dictionaries(st.sampled_from(["x", "y", "é", "", "date", "kind"]),
                                 values(), max_size=4))
    items = [("type", draw(st.sampled_from(["a", "b", "é"]))), ("t", draw(st.integers(0, 9))),
             *attrs.items()]
    text = json.dumps(dict(draw(st.permutations(items))), ensure_ascii=draw(st.booleans()))
    return text.encode("utf-8", "surrogatepass")


class Recorder:
    """Stands for the source's LogLimiter: keeps every message."""

    def __init__(self):
        self.messages = []

    def warning(self, msg, *args):
        self.messages.append(msg % args)


def file_of(lines: list[bytes], newline_at_end: bool) -> bytes:
    """The lines joined into a file's bytes, ending with a newline or not."""
    return b"\n".join(lines) + (b"\n" if newline_at_end and lines else b"")
