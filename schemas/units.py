"""Byte counts as people read them, the same in every message, table and report."""

from __future__ import annotations

BYTE_UNITS = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def format_bytes(n: float, digits: int = 1) -> str:
    """`n` bytes in the largest binary unit it reaches: 1536 -> '1.5 KiB' ('1.50 KiB' with
    digits=2); below 1 KiB a whole number of bytes: 512 -> '512 B'."""
    for name, size in BYTE_UNITS:
        if abs(n) >= size:
            return f"{n / size:.{digits}f} {name}"
    return f"{n:.0f} B"
