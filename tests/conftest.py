"""Fixtures shared by test modules, and the Hypothesis profile of long fuzzing campaigns."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

# HYPOTHESIS_PROFILE=campaign runs every property of the selected test files with at least
# ACEP_CAMPAIGN_EXAMPLES examples (default 2000) and no deadline, whatever its own
# @settings say; CI, without the variable, keeps each test's own counts.
settings.register_profile(
    "campaign", deadline=None, print_blob=True,
    max_examples=int(os.environ.get("ACEP_CAMPAIGN_EXAMPLES", "2000")),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.filter_too_much])
if os.environ.get("HYPOTHESIS_PROFILE"):
    settings.load_profile(os.environ["HYPOTHESIS_PROFILE"])


def pytest_collection_modifyitems(items):
    """Under the campaign profile, raise each property's own max_examples to the profile's."""
    if os.environ.get("HYPOTHESIS_PROFILE") != "campaign":
        return
    floor = settings.get_profile("campaign").max_examples
    for item in items:
        test = getattr(item, "obj", None)
        own = getattr(test, "_hypothesis_internal_use_settings", None)
        if own is None or not hasattr(test, "hypothesis"):
            continue
        test._hypothesis_internal_use_settings = settings(
            own, max_examples=max(own.max_examples, floor), deadline=None,
            suppress_health_check=settings.get_profile("campaign").suppress_health_check)


@pytest.fixture(scope="module")
def s3():
    """A bucket on moto's S3 server on loopback for a test module (tests/support/s3_server.py); the
    module skips itself first when pyarrow or moto is missing."""
    from support.s3_server import S3, credentials

    with credentials():
        server = S3()
        yield server
        server.stop()


@pytest.fixture(scope="module")
def spark(request):
    """A local Spark session on 2 cores for a test module, with the module's
    ``SHUFFLE_PARTITIONS`` (default 2) while it runs; the module skips without PySpark."""
    pytest.importorskip("pyspark", reason="the trainer needs PySpark (pip install 'acep[spark]')")
    from trainer.spark import session

    partitions = getattr(request.module, "SHUFFLE_PARTITIONS", 2)
    s = session(cores=2, shuffle_partitions=partitions)
    # the JVM's session outlives a module: set the count this module asks for, then restore
    before = s.conf.get("spark.sql.shuffle.partitions")
    s.conf.set("spark.sql.shuffle.partitions", str(partitions))
    yield s
    s.conf.set("spark.sql.shuffle.partitions", before)
