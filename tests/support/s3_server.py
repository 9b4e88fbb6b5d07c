"""A real S3 API on loopback for the tests: moto's server (HTTP, signed requests, listing
by prefix), a bucket in it, and URIs into it as a user writes them, the endpoint in the
query (``?endpoint_override=...``) so that every reader (a Spark task too) reaches it."""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

import pyarrow.fs as pafs

BUCKET = "fleet"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
               "AWS_EC2_METADATA_DISABLED": "true"}


class S3:
    """A bucket on a moto server on loopback (``port`` 0: a free one)."""

    def __init__(self, port: int = 0):
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        self.server.start()
        host, port = self.server.get_host_and_port()
        self.endpoint = f"{host}:{port}"
        self.fs = pafs.S3FileSystem(endpoint_override=self.endpoint, scheme="http",
                                    region="us-east-1", access_key="test", secret_key="test",
                                    allow_bucket_creation=True)
        self.fs.create_dir(BUCKET)

    def uri(self, key: str, scheme: str = "s3", user: str = "") -> str:
        return uri(self.endpoint, key, scheme, user)

    def put(self, local: Path, key: str) -> str:
        """Copy a local file or directory tree to ``key``; its URI."""
        if local.is_dir():
            pafs.copy_files(str(local), f"{BUCKET}/{key}",
                            source_filesystem=pafs.LocalFileSystem(),
                            destination_filesystem=self.fs)
        else:
            with self.fs.open_output_stream(f"{BUCKET}/{key}") as out:
                out.write(local.read_bytes())
        return self.uri(key)

    def files(self, key: str) -> dict[str, bytes]:
        """Every object under ``key``: its bytes by its path below ``key``."""
        out = {}
        selector = pafs.FileSelector(f"{BUCKET}/{key}", recursive=True, allow_not_found=True)
        for info in self.fs.get_file_info(selector):
            if info.type == pafs.FileType.File:
                with self.fs.open_input_stream(info.path) as f:
                    out[info.path[len(f"{BUCKET}/{key}/"):]] = f.read()
        return out

    def stop(self) -> None:
        self.server.stop()


def uri(endpoint: str, key: str, scheme: str = "s3", user: str = "") -> str:
    """A URI into the bucket (``user``: ``KEY:SECRET@``, credentials in the URI)."""
    return (f"{scheme}://{user}{BUCKET}/{key}?endpoint_override={endpoint}&scheme=http"
            f"&region=us-east-1")


@contextlib.contextmanager
def credentials():
    """The AWS_* variables the S3 clients read (moto takes any key), restored after."""
    saved = {k: os.environ.get(k) for k in CREDENTIALS}
    os.environ.update(CREDENTIALS)
    try:
        yield
    finally:
        from acep import storage

        storage._filesystem.cache_clear()
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
