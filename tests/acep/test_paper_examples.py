"""Examples 2, 3 and 4 of the ACEP paper (Li & Ge, PVLDB 2016)."""

import pytest

from acep import backend
from acep.matcher import Matcher, bundles
from acep.reference import acep_match

BACKENDS = ["compiled", "python"] if backend() == "compiled" else ["python"]
PATTERN = "a (b|c) d b"


def _stream(text):
    return [{"type": tok[0], "t": float(tok[1:])} for tok in text.split()]


EXAMPLE_2 = _stream("a1 e2 e3 b4 c5 e6 a7 e8 e9 c10 d11 a12 e13 b14 d15")
EXAMPLE_3 = _stream("c1 d2 a3 e4 b5")


@pytest.mark.parametrize("name", BACKENDS)
def test_example_2_matches(name):
    """a1 b4 matches with error 2 (insert "d b"); c10 d11 b14 with error 1 (insert "a")."""
    found = Matcher(PATTERN, 5, 2, all_trajectories=True, backend=name).match(EXAMPLE_2)
    by_tags = {m.tags: m.errors for m in found}
    assert by_tags[(1.0, 4.0)] == 2
    assert by_tags[(10.0, 11.0, 14.0)] == 1
    assert all(m.point - m.start <= 5 for m in found)
    assert (1.0, 10.0) not in by_tags  # outside the window


@pytest.mark.parametrize("name", BACKENDS)
def test_example_3_red_and_blue_trajectories(name):
    """At time 5: the red trajectory c1 d2 b5 (error 1) and the blue a3 b5 (error 2)."""
    found = Matcher(PATTERN, 5, 2, all_trajectories=True, backend=name).match(EXAMPLE_3)
    by_tags = {m.tags: m.errors for m in found}
    assert by_tags[(1.0, 2.0, 5.0)] == 1
    assert by_tags[(3.0, 5.0)] == 2
    best = Matcher(PATTERN, 5, 2, backend=name).match(EXAMPLE_3).to_matches()
    point_5 = [m for m in best if m.point == 5.0]
    assert [(m.errors, m.start, m.tags) for m in point_5] == [(1, 1.0, (1.0, 2.0, 5.0))]


def test_example_3_reference_algorithm_1():
    found = {(m.events, m.errors) for m in acep_match(PATTERN, EXAMPLE_3, 5, 2)}
    assert ((0, 1, 4), 1) in found  # c1 d2 b5
    assert ((2, 4), 2) in found     # a3 b5


def test_example_4_both_trajectories_are_in_one_bundle():
    # Match points: 2 (c1 d2, inserting a and b: 2 errors) and 5; nothing ends at 3 or 4.
    found = Matcher(PATTERN, 5, 2).match(EXAMPLE_3)
    assert [(b.first, b.last) for b in bundles(found, 5)] == [(2.0, 5.0)]
