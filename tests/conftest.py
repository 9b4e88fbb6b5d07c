"""Fixtures shared by test modules."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def s3():
    """A bucket on moto's S3 server on loopback for a test module (tests/s3_server.py); the
    module skips itself first when pyarrow or moto is missing."""
    from s3_server import S3, credentials

    with credentials():
        server = S3()
        yield server
        server.stop()
