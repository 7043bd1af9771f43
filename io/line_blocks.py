"""A text file as blocks of whole lines, read `block_size` bytes at a time (memory: one block).

Block k holds the lines whose line break falls in bytes [k·size, (k+1)·size) of the file (an
unterminated last line goes with the block the file ends in): the rows pyarrow's streaming CSV reader puts in its
k-th batch. So a reader parsing these blocks delivers the same batches as that reader — and the
same rounds downstream — without its read-ahead, which buffers up to 32 blocks (the whole file
below 50 MB at the default block size) however slowly the batches are consumed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator


def _last_break(data: bytes | bytearray) -> int:
    """Index just past the last line break (LF, or CR as CSV readers also end rows with) in
    `data`; 0 when there is none."""
    return max(data.rfind(b"\n"), data.rfind(b"\r")) + 1


def line_blocks(path: str | os.PathLike[str], start: int, block_size: int) -> Iterator[bytes]:
    """Blocks of whole lines of the file from byte `start` on (see the module docstring); a line
    longer than a block waits for the block holding its end. No block is empty."""
    if block_size < 1:
        raise ValueError("block_size must be at least 1")
    with open(path, "rb") as f:  # buffered: read(n) returns n bytes unless the file ends
        f.seek(start)
        # blocks are aligned on the file's own multiples of block_size, as pyarrow reads them
        size = block_size - start % block_size
        data = f.read(size)
        carry = b""
        while data:
            nxt = f.read(block_size) if len(data) == size else b""
            if not nxt:  # the file ends in this block: its unterminated last line goes with it
                yield carry + data
                return
            size = block_size
            cut = _last_break(data)
            if cut:
                yield carry + data[:cut] if carry else data[:cut]
                carry = data[cut:]
            else:  # no line ends here: the pending line grows
                carry += data
            data = nxt


def line_of_row(path: str | os.PathLike[str], row: int) -> int:
    """File line (1-based) of data row `row` (0-based) of a source file: the first line is the
    type line and empty lines are not rows (the last line when the file has fewer rows)."""
    with open(path, "rb") as f:
        f.readline()
        lineno, k = 1, -1
        for raw in f:
            lineno += 1
            if raw.rstrip(b"\r\n"):
                k += 1
                if k == row:
                    return lineno
    return lineno


__all__ = ["line_blocks", "line_of_row"]
