"""CSV interchange with the common buffer-placement format (MiniMalloc and others).

Input: a header row, then one buffer per row: ``id,lower,upper,size`` with a half-open lifetime
``[lower, upper)``, optional ``alignment`` and ``offset`` (a pre-placed offset) columns, and
arenaplan's optional ``zone`` column. Empty optional cells mean "not given". Output: the same
columns, with ``offset`` holding the planned offsets. Every instance in the input raises
InvalidInputError naming the line and what to change.

The format's convention for a buffer without an alignment value is 1 (sizes and offsets are
exact bytes): ``CSV_DEFAULT_ALIGNMENT``, what `arenaplan layout --csv` lays such buffers out
with unless told otherwise; the planner's own plans use ``DEFAULT_ALIGNMENT`` (64).
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from planner.errors import InvalidInputError
from planner.layout.instance import is_power_of_two
from planner.layout.types import Buffer, Layout

CSV_DEFAULT_ALIGNMENT = 1
REQUIRED_COLUMNS = ("id", "lower", "upper", "size")
OPTIONAL_COLUMNS = ("alignment", "offset", "zone")


def _integer(text: str, column: str, where: str) -> int:
    value = text.strip()
    digits = value[1:] if value[:1] in "+-" else value
    if not digits.isdigit() or not digits.isascii():
        raise InvalidInputError(f"{where}: column {column!r} must be an integer, got {text!r}")
    return int(value)


def _parse_row(row: dict[str, str], line: int, default_alignment: int | None) -> Buffer:
    where = f"line {line}"
    bid = (row.get("id") or "").strip()
    if not bid:
        raise InvalidInputError(f"{where}: empty id")
    where = f"line {line} (id {bid!r})"
    for column in REQUIRED_COLUMNS[1:]:
        if (row.get(column) or "").strip() == "":
            raise InvalidInputError(f"{where}: missing value in column {column!r}")
    lower = _integer(row["lower"], "lower", where)
    upper = _integer(row["upper"], "upper", where)
    size = _integer(row["size"], "size", where)
    if lower < 0:
        raise InvalidInputError(f"{where}: lower {lower} is negative")
    if lower >= upper:
        raise InvalidInputError(
            f"{where}: lower {lower} must be less than upper {upper} (half-open lifetime)"
        )
    if size <= 0:
        raise InvalidInputError(f"{where}: size {size} must be positive")
    alignment = None
    if (row.get("alignment") or "").strip():
        alignment = _integer(row["alignment"], "alignment", where)
        if not is_power_of_two(alignment):
            raise InvalidInputError(
                f"{where}: alignment {alignment} is not a positive power of two"
            )
    offset = None
    if (row.get("offset") or "").strip():
        offset = _integer(row["offset"], "offset", where)
        if offset < 0:
            raise InvalidInputError(f"{where}: offset {offset} is negative")
        align = alignment if alignment is not None else default_alignment
        if align is not None and offset % align:
            raise InvalidInputError(
                f"{where}: offset {offset} is not a multiple of the alignment {align}"
            )
    zone = (row.get("zone") or "").strip() or None
    if zone is not None and offset is not None:
        raise InvalidInputError(f"{where}: a zone buffer cannot also have a pre-placed offset")
    return Buffer(bid, lower, upper, size, alignment=alignment, offset=offset, zone=zone)


def parse_buffers_csv(
    text: str, *, default_alignment: int | None = None, source: str = "CSV"
) -> list[Buffer]:
    """Buffers from CSV text. ``default_alignment`` (if given) checks offsets without their
    own alignment column value."""
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader)
    except StopIteration:
        raise InvalidInputError(
            f"{source} is empty; expected a header row {','.join(REQUIRED_COLUMNS)}"
        ) from None
    columns = [c.strip().lower() for c in header]
    unknown = [c for c in columns if c not in REQUIRED_COLUMNS + OPTIONAL_COLUMNS]
    if unknown:
        raise InvalidInputError(
            f"{source} line 1: unknown column(s) {', '.join(map(repr, unknown))}; allowed: "
            f"{', '.join(REQUIRED_COLUMNS + OPTIONAL_COLUMNS)}"
        )
    missing = [c for c in REQUIRED_COLUMNS if c not in columns]
    if missing:
        raise InvalidInputError(
            f"{source} line 1: missing column(s) {', '.join(map(repr, missing))}; the header "
            f"must name at least {','.join(REQUIRED_COLUMNS)}"
        )
    duplicated = sorted({c for c in columns if columns.count(c) > 1})
    if duplicated:
        raise InvalidInputError(f"{source} line 1: column(s) {duplicated} appear twice")
    buffers: list[Buffer] = []
    seen: dict[str, int] = {}
    for values in reader:
        line = reader.line_num
        if not values or all(not v.strip() for v in values):
            continue
        if len(values) != len(columns):
            raise InvalidInputError(
                f"{source} line {line}: {len(values)} values for {len(columns)} columns"
            )
        buf = _parse_row(dict(zip(columns, values, strict=True)), line, default_alignment)
        if buf.id in seen:
            raise InvalidInputError(
                f"{source} line {line}: duplicate id {buf.id!r} (first on line {seen[buf.id]})"
            )
        seen[buf.id] = line
        buffers.append(buf)
    return buffers


def read_buffers_csv(
    path: str | os.PathLike[str], *, default_alignment: int | None = None
) -> list[Buffer]:
    """Buffers from a CSV file (see module docstring)."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"cannot read buffer CSV {str(path)!r}: {exc}") from None
    return parse_buffers_csv(text, default_alignment=default_alignment, source=str(path))


def format_layout_csv(buffers: Sequence[Buffer], layout: Layout | Mapping[str, int]) -> str:
    """The buffers as CSV with their planned offsets (input columns plus ``offset``)."""
    offsets = layout.offsets if isinstance(layout, Layout) else layout
    columns = list(REQUIRED_COLUMNS)
    if any(b.alignment is not None for b in buffers):
        columns.append("alignment")
    columns.append("offset")
    if any(b.zone is not None for b in buffers):
        columns.append("zone")
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for b in buffers:
        row = {"id": b.id, "lower": b.lower, "upper": b.upper, "size": b.size,
               "alignment": "" if b.alignment is None else b.alignment,
               "offset": offsets[b.id], "zone": b.zone or ""}
        writer.writerow([row[c] for c in columns])
    return out.getvalue()


def write_layout_csv(
    path: str | os.PathLike[str], buffers: Sequence[Buffer], layout: Layout | Mapping[str, int]
) -> None:
    Path(path).write_text(format_layout_csv(buffers, layout), encoding="utf-8")
