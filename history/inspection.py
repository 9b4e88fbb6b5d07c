"""``acep history inspect``: what a saved history (or a signed sketch) holds, and a plot."""

from __future__ import annotations

import io
from os import PathLike
from pathlib import Path

import msgpack
import numpy as np

from acep import storage

from . import graph as _graph
from . import sketch as _sketch

__all__ = ["file_kind", "expect_kind", "describe_history", "describe_sketch", "plot_history",
           "load", "show", "run"]

KINDS = {"history": "a history graph", "sketch": "a signed sketch"}
WRITERS = {"history": "acep history build -o", "sketch": "acep history build --sketch"}


def file_kind(path: str | PathLike) -> str:
    """``"history"``, ``"sketch"`` or ``"unknown"`` from the file's ``format`` field."""
    with open(path, "rb") as f:
        head = f.read(256)
    try:
        unpacker = msgpack.Unpacker(max_buffer_size=1 << 10, raw=False)
        unpacker.feed(head)
        n = unpacker.read_map_header()
        for _ in range(n):
            if unpacker.unpack() == "format":
                fmt = unpacker.unpack()
                return {_graph.FORMAT: "history", _sketch.FORMAT: "sketch"}.get(fmt, "unknown")
            unpacker.skip()
    except Exception:  # not msgpack, or the format field is not near the start
        return "unknown"
    return "unknown"


def expect_kind(path: str | PathLike, kind: str) -> str:
    """The kind of the file ``path`` (:func:`file_kind`), once it is ``kind`` (``"history"``
    or ``"sketch"``, or ``"any"`` of the two); otherwise a ``ValueError`` (``OSError``:
    a file that cannot be read) saying what the file is, in one line."""
    try:
        found, size = file_kind(path), Path(path).stat().st_size
    except OSError as exc:
        raise OSError(f"{path}: {_unreadable(exc, KINDS.get(kind, 'a history or sketch'))}") \
            from None
    if found == kind or (kind == "any" and found in KINDS):
        return found
    if found in KINDS:
        raise ValueError(f"{path} is {KINDS[found]}, not {KINDS[kind]} ({WRITERS[kind]} "
                         "writes one)")
    why = "an empty file" if size == 0 else "no 'format' field acep-history or acep-sketch"
    raise ValueError(f"{path} is neither a history graph nor a sketch ({why})")


def _unreadable(exc: OSError, what: str) -> str:
    if isinstance(exc, FileNotFoundError):
        return "no such file"
    if isinstance(exc, IsADirectoryError):
        return f"a directory, not {what} file"
    return f"cannot be read ({exc.strerror or exc})"


def _table(rows: list[dict]) -> list[str]:
    head = f"  {'cell':>6} {'state':>5} {'err':>3} {'remaining window':>19} " \
           f"{'gap':>19} {'visits':>9} {'successes':>9} {'rate':>6} {'bundles':>7}"
    lines = [head]
    for r in rows:
        rem, gap = _interval(*r["rem"]), _interval(*r["gap"])
        lines.append(f"  {r['cell']:>6} {r['state']:>5} {r['err']:>3} {rem:>19} {gap:>19} "
                     f"{r['visits']:>9} {r['successes']:>9} {r['rate']:>6.3f} {r['bundles']:>7}")
    return lines


def describe_history(g: _graph.HistoryGraph, file_bytes: int | None = None,
                     top: int = 10, hashes: int = 16) -> str:
    """Size (cells, bundles, edges, bytes on disk and as a sketch) and the top vectors."""
    sk = _sketch.Sketch.from_graph(g, hashes=hashes)
    visited = int((g.visits > 0).sum())
    mapped = int((g.map_sizes() > 0).sum())
    parts = len(np.unique(g.bundle_partition))
    total, succ = int(g.visits.sum()), int(g.successes.sum())
    where = f" where {' and '.join(g.where)}" if g.where else ""
    lines = [
        f"history of {g.pattern!r}{where}, k = {g.k}, window = {g.window:g}, "
        f"{g.n_states} automaton states, {_partitioned(g)}",
        f"bins: remaining window {g.n_rem} (edges {_edges(g.rem_edges)}), "
        f"gap {g.n_gap} (edges {_edges(g.gap_edges)})", *_context_lines(g.context),
        f"cells: {g.n_cells} ({visited} visited, {mapped} with a non-empty match map)",
        f"bundles: {g.n_bundles} in {parts} partitions",
        f"edges: {len(g.edge_src)} cell->cell, {len(g.reach_cell)} cell->bundle",
        f"nodes: {total} visits, {succ} successes ({succ / total if total else 0:.1%})",
        f"bytes: {'?' if file_bytes is None else f'{file_bytes:,}'} on disk, "
        f"{sk.nbytes:,} as a signed sketch (H = {hashes})",
        "", f"top {top} vectors by visits:", *_table(g.top_vectors(top, by="visits")),
        "", f"top {top} vectors by success rate:", *_table(g.top_vectors(top, by="rate")),
    ]
    return "\n".join(lines)


def _partitioned(h) -> str:
    """The partition attribute a history or sketch records."""
    return partition_text(h.partition_by) if h.partition_recorded else \
        "partition attribute not recorded"


def partition_text(attribute: str | None) -> str:
    """How a run's partition attribute reads in a report ("one partition": none)."""
    return "one partition" if attribute is None else f"partitioned by {attribute}"


def describe_sketch(s: _sketch.Sketch, file_bytes: int, top: int = 10) -> str:
    mapped = s.proxy_class >= 0
    order = np.argsort(-s.score, kind="stable")[:top]
    state, err, rem, gap = _graph.decode_cells(order, s.k, len(s.rem_edges) + 1,
                                               len(s.gap_edges) + 1, s.n_ctx)
    where = f" where {' and '.join(s.where)}" if s.where else ""
    lines = [f"sketch of {s.pattern!r}{where}, k = {s.k}, window = {s.window:g}, "
             f"{_partitioned(s)}", *_context_lines(s.context),
             f"cells: {s.n_cells}, {int(mapped.sum())} with a match map, "
             f"{len(np.unique(s.proxy_class[mapped]))} proxy classes (band {s.band})",
             f"bytes: {file_bytes:,} (H = {s.hashes} min-hash values per cell)",
             *([_signed_line(s)] if s.signed_with else []),
             _fitted_line(s), "", f"top {top} cells by score:",
             f"  {'cell':>6} {'state':>5} {'err':>3} {'rem bin':>7} {'gap bin':>7} {'score':>6}"]
    for c, st, e, r, g in zip(order, state, err, rem, gap):
        lines.append(f"  {c:>6} {st:>5} {e:>3} {r:>7} {g:>7} {s.score[c]:>6.3f}")
    return "\n".join(lines)


def _context_lines(tree) -> list[str]:
    """The context tree's leaves (docs/SHEDDING.md 13), one line each; none without one."""
    if tree is None:
        return []
    return [f"context: every cell split in {tree.n_leaves} by the event's context",
            *(f"  {line}" for line in tree.describe())]


def _signed_line(s: _sketch.Sketch) -> str:
    """The key that verified the sketch; a sketch that records none says it predates them."""
    return f"signed with key {s.signed_with} (verified with --key-file{s.key_note})"


def _fitted_line(s: _sketch.Sketch) -> str:
    if not len(s.fitted_ratios):
        return "reserves: from the scores (not fitted to a budget)"
    ratios = ", ".join(f"{r:g}" for r in s.fitted_ratios)
    slacks = ", ".join(f"{v:g}" for v in s.fitted_slack)
    return (f"reserves fitted to budgets of {ratios} x {s.ops_per_event:.4g} operations per "
            f"event, cover slack {slacks} windows")


def _edges(edges: np.ndarray) -> str:
    return "[" + ", ".join(f"{e:g}" for e in edges) + "]"


def plot_history(g: _graph.HistoryGraph, path: str | PathLike) -> Path:
    """Visits and success rate by (state, remaining-window bin), states that were visited."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    visits = g.visits.reshape(g.shape).sum(axis=(1, 3))
    successes = g.successes.reshape(g.shape).sum(axis=(1, 3))
    states = np.flatnonzero(visits.sum(axis=1) > 0)
    if len(states) == 0:
        states = np.arange(g.n_states)
    visits, successes = visits[states], successes[states]
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(visits > 0, successes / np.maximum(visits, 1), np.nan)
    labels = [_interval(*g.bin_range("rem", b)) for b in range(g.n_rem)]
    fig, axes = plt.subplots(1, 2, figsize=(11, 1.5 + 0.45 * len(states)), squeeze=False)
    for ax, data, title, cmap in ((axes[0, 0], np.log10(np.maximum(visits, 1)),
                                   "visits (log10)", "viridis"),
                                  (axes[0, 1], rate, "success rate", "magma")):
        im = ax.imshow(data, aspect="auto", cmap=cmap, origin="lower")
        ax.set_yticks(range(len(states)), [str(s) for s in states])
        ax.set_xticks(range(g.n_rem), labels, rotation=45, ha="right", fontsize=7)
        ax.set_xlabel("remaining window")
        ax.set_ylabel("automaton state")
        ax.set_title(title)
        fig.colorbar(im, ax=ax)
    fig.suptitle(f"history of {g.pattern!r}: {g.n_bundles} bundles, "
                 f"{int(g.visits.sum())} visits")
    fig.tight_layout()
    out = Path(path)
    if not out.suffix:  # what matplotlib writes then
        out = out.with_name(out.name + ".png")
    image = io.BytesIO()  # savefig opens the file before it draws: write it whole, or not
    fig.savefig(image, dpi=110, format=out.suffix[1:].lower())
    plt.close(fig)
    storage.write_durably(out, image.getvalue())
    return out


def plot_problem(path: str | PathLike) -> str | None:
    """Why :func:`plot_history` could not write ``path`` (matplotlib missing, a file type it
    does not write), or None: said before the history is read."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
    except ImportError:
        return f"{path}: plots need matplotlib (pip install matplotlib)"
    suffix = Path(path).suffix.lower().lstrip(".")
    types = FigureCanvasAgg.get_supported_filetypes()
    if suffix and suffix not in types:
        return (f"{path}: matplotlib does not write .{suffix} files (it writes "
                f"{', '.join('.' + t for t in sorted(types))})")
    if suffix == "pgf":  # its text is measured by a TeX run; without one, savefig raises
        import shutil

        from matplotlib import rcParams

        tex = rcParams["pgf.texsystem"]
        if shutil.which(tex) is None:
            return (f"{path}: matplotlib writes .pgf files with {tex}, which is not "
                    "installed (write .png, .svg or .pdf)")
    return None


def _interval(lo: float, hi: float) -> str:
    """A bin as text: [lo, hi), or the one value of a bin that holds only the window's end
    (a new window start has all of its window left)."""
    return f"= {lo:g}" if lo == hi else f"[{lo:g}, {hi:g})"


def load(path: str, plot: str | None = None, key_file: str | None = None) -> tuple:
    """What ``acep history inspect`` shows of ``path``: ``(graph or verified sketch, bytes
    on disk)``. A file that cannot be (a sketch without ``key_file``, a sketch to plot) is a
    ``ValueError`` or ``OSError`` naming it, before anything is written."""
    kind = expect_kind(path, "any")
    size = Path(path).stat().st_size
    if kind == "history":
        return _graph.HistoryGraph.load(path), size
    if key_file is None:
        raise ValueError(f"{path} is a signed sketch, not a history graph: pass --key-file "
                         "to verify and inspect it (plots need the history graph)")
    if plot:
        raise ValueError(f"{path} is a sketch: --plot needs the history graph file")
    key = _sketch.read_key(key_file)
    return _sketch.Sketch.load(path, key, max_bytes=None, key_from="--key-file"), size


def show(loaded, size: int, top: int = 10, plot: str | None = None) -> str:
    """The text ``acep history inspect`` prints of what :func:`load` gave; writes the plot
    of a history graph when asked."""
    if isinstance(loaded, _sketch.Sketch):
        return describe_sketch(loaded, size, top)
    text = describe_history(loaded, size, top)
    if plot:
        text += f"\n\nplot: {plot_history(loaded, plot)}"
    return text


def run(path: str, top: int = 10, plot: str | None = None, key_file: str | None = None) -> str:
    """The text ``acep history inspect`` prints; writes the plot when asked."""
    return show(*load(path, plot, key_file), top, plot)
