"""Every example and hand case of the oracle's tests, run again with the run engine in the
oracle's place. Their expectations were worked out from docs/EXACT.md (section 4 and the
rules of 3), independently of both implementations."""

import pytest
import test_exact_oracle
from test_exact_oracle import *  # noqa: F403 - re-collect those tests here

from acep.nfab.runs import match_runs


def _engine(query, events, inclusive=True):
    if not inclusive:
        pytest.skip("the engine's window is inclusive (EXACT.md 3.3)")
    return match_runs(query, events)


@pytest.fixture(autouse=True)
def engine_in_place_of_the_oracle(monkeypatch):
    monkeypatch.setattr(test_exact_oracle, "oracle", _engine)
