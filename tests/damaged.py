"""Damaged input files for the tests of the commands that must name them."""

from pathlib import Path

import pyarrow.parquet as pq


def corrupt_parquet(path: Path) -> Path:
    """Flip the bytes of a Parquet file's first column chunk: its footer still reads."""
    data = bytearray(path.read_bytes())
    for i in range(4, 4 + pq.read_metadata(path).row_group(0).column(0).total_compressed_size):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))
    return path
