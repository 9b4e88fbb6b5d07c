"""Damaged input files for the tests of the commands that must name them."""

from pathlib import Path

import pyarrow.parquet as pq


def corrupt_parquet(path: Path, row_group: int = 0) -> Path:
    """Flip the bytes of the first column chunk of a Parquet file's ``row_group``: its
    footer still reads, and so do the row groups before it."""
    column = pq.read_metadata(path).row_group(row_group).column(0)
    start = column.dictionary_page_offset if column.has_dictionary_page else \
        column.data_page_offset
    data = bytearray(path.read_bytes())
    for i in range(start, start + column.total_compressed_size):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))
    return path
