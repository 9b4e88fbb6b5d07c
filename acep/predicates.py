"""Compile parameterized predicates into flat arrays for the matcher kernel.

[L16] Section 3.1 (after Example 3) records the attribute values of a predicate's variables
in the match node and checks the predicate when the last of them is matched. Here a
variable is an event type of the pattern and names the latest event of that type on the
trajectory. The kernel gets, per type, the (slot, column) pairs to copy and the predicates
to check, and per predicate a postfix program. The rules are in docs/DESIGN.md, "As built:
the ACEP engine", Predicates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .pattern import Attr, BinOp, Call, Const, UnaryOp, Where, variables

OPS = {name: code for code, name in enumerate(
    ["slot", "const", "+", "-", "*", "/", "neg", "<", "<=", ">", ">=", "==", "!=",
     "and", "or", "not", "abs", "min", "max"])}
MAX_STACK = 32
MAX_VARIABLES = 30


@dataclass
class CompiledPredicates:
    """Flat arrays the kernel reads; see module docstring. CSR layout: ``x_ptr[i]..x_ptr[i+1]``."""

    columns: list[str]            # attribute columns the kernel needs, in slot-column order
    slot_names: list[str]         # "var.attr" per slot
    var_bit: np.ndarray           # int64 per type id: the variable's bit (0: not a variable)
    bind_ptr: np.ndarray          # int32 per type id + 1
    bind_slot: np.ndarray         # int32
    bind_col: np.ndarray          # int32
    check_ptr: np.ndarray         # int32 per type id + 1
    check_pred: np.ndarray        # int32
    pred_mask: np.ndarray         # int64 per predicate: bits of its variables
    code_ptr: np.ndarray          # int32 per predicate + 1
    code_op: np.ndarray           # int32
    code_arg: np.ndarray          # int32 (slot index or constant index)
    consts: np.ndarray            # float64
    texts: list[str]

    @property
    def n_slots(self) -> int:
        return len(self.slot_names)


def compile_predicates(where: Where, types: list[str]) -> CompiledPredicates:
    """Compile ``where.predicates`` against the pattern's ``types`` (type id = list index)."""
    preds = list(where.predicates)
    for p in preds:
        for v in variables(p):
            if v not in types:
                raise ValueError(f"predicate {_text(p)}: variable {v!r} is not an event type "
                                 f"of the pattern (types: {', '.join(types)})")
    used_vars = [t for t in types if any(t in variables(p) for p in preds)]
    if len(used_vars) > MAX_VARIABLES:
        raise ValueError(f"predicates use {len(used_vars)} variables; at most {MAX_VARIABLES}")
    var_index = {v: i for i, v in enumerate(used_vars)}
    slots: dict[tuple[str, str], int] = {}
    columns: dict[str, int] = {}
    consts: list[float] = []
    programs = [_emit(p, slots, columns, consts) for p in preds]
    n_types = len(types)
    var_bit = np.zeros(n_types, dtype=np.int64)
    for v, i in var_index.items():
        var_bit[types.index(v)] = 1 << i
    bind = [[(s, columns[attr]) for (var, attr), s in slots.items() if var == t] for t in types]
    checks = [[j for j, p in enumerate(preds) if t in variables(p)] for t in types]
    masks = [sum(1 << var_index[v] for v in variables(p)) for p in preds]
    return CompiledPredicates(
        columns=list(columns),
        slot_names=[f"{v}.{a}" for (v, a) in slots],
        var_bit=var_bit,
        bind_ptr=_ptr([len(b) for b in bind]),
        bind_slot=np.array([s for b in bind for s, _ in b], dtype=np.int32),
        bind_col=np.array([c for b in bind for _, c in b], dtype=np.int32),
        check_ptr=_ptr([len(c) for c in checks]),
        check_pred=np.array([j for c in checks for j in c], dtype=np.int32),
        pred_mask=np.array(masks, dtype=np.int64),
        code_ptr=_ptr([len(prog) for prog in programs]),
        code_op=np.array([op for prog in programs for op, _ in prog], dtype=np.int32),
        code_arg=np.array([arg for prog in programs for _, arg in prog], dtype=np.int32),
        consts=np.array(consts, dtype=np.float64),
        texts=[_text(p) for p in preds],
    )


def _ptr(lengths: list[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int32)


def _emit(expr, slots, columns, consts) -> list[tuple[int, int]]:
    program: list[tuple[int, int]] = []

    def walk(e, depth):
        if depth > MAX_STACK:
            raise ValueError(f"predicate {_text(expr)!r} is nested too deeply")
        if isinstance(e, Attr):
            columns.setdefault(e.attr, len(columns))
            program.append((OPS["slot"], slots.setdefault((e.var, e.attr), len(slots))))
        elif isinstance(e, Const):
            if isinstance(e.value, str):
                raise ValueError(f"string constant {e.value!r} in {_text(expr)!r}: the ACEP "
                                 "engine compares numeric attributes only")
            consts.append(float(e.value))
            program.append((OPS["const"], len(consts) - 1))
        elif isinstance(e, BinOp):
            walk(e.left, depth + 1)
            walk(e.right, depth + 2)
            program.append((OPS[e.op], 0))
        elif isinstance(e, UnaryOp):
            walk(e.operand, depth + 1)
            program.append((OPS["neg" if e.op == "-" else "not"], 0))
        elif isinstance(e, Call):
            for i, a in enumerate(e.args):
                walk(a, depth + 1 + i)
            program.append((OPS[e.func], 0))

    walk(expr, 1)
    return program


def _text(e) -> str:
    if isinstance(e, Attr):
        return f"{e.var}.{e.attr}"
    if isinstance(e, Const):
        return repr(e.value) if isinstance(e.value, str) else f"{e.value:g}"
    if isinstance(e, BinOp):
        return f"({_text(e.left)} {e.op} {_text(e.right)})"
    if isinstance(e, UnaryOp):
        return f"{e.op} {_text(e.operand)}" if e.op == "not" else f"-{_text(e.operand)}"
    return f"{e.func}({', '.join(_text(a) for a in e.args)})"

