"""Validate buffers and normalize them into the arrays every layout algorithm works on.

Normalization does four things:
- rounds each size up to the buffer's alignment (a buffer occupies its padded size);
- places the persistent zones: zone buffers get fixed offsets, contiguously, zone after zone (in
  order of first appearance), from offset 0; the zones end at ``zone_top`` and that region is
  reserved for the whole step, so every other buffer lies at or above it;
- checks pre-placed offsets (aligned, above the zones, not overlapping each other);
- expresses every quantity in a common ``unit``: the largest power of two dividing every padded
  size, pre-placed offset and the zone top. Restricting offsets to multiples of the unit loses no
  solution: any layout can be pushed down until each buffer rests on a buffer below it, on the
  zone top or on an alignment boundary, and all of these are multiples of the unit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from planner.errors import InvalidInputError
from planner.layout.types import Buffer


def is_power_of_two(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0 and (
        value & (value - 1)
    ) == 0


def align_up(value: int, alignment: int) -> int:
    return -(-value // alignment) * alignment


def check_default_alignment(alignment: object) -> int:
    if not is_power_of_two(alignment):
        raise InvalidInputError(
            f"alignment {alignment!r} is not a positive power of two (use e.g. 64)"
        )
    return int(alignment)  # type: ignore[call-overload]


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def validate_buffer(buf: Buffer) -> None:
    """Raise InvalidInputError naming the buffer and the instance."""
    name = f"buffer {buf.id!r}"
    if not isinstance(buf.id, str) or not buf.id:
        raise InvalidInputError(f"buffer id {buf.id!r} must be a non-empty string")
    for field_name in ("lower", "upper", "size"):
        if not _is_int(getattr(buf, field_name)):
            raise InvalidInputError(f"{name}: {field_name} must be an integer")
    if buf.lower < 0:
        raise InvalidInputError(f"{name}: lower {buf.lower} is negative")
    if buf.lower >= buf.upper:
        raise InvalidInputError(
            f"{name}: lifetime [lower={buf.lower}, upper={buf.upper}) is empty; "
            "upper must be greater than lower (half-open lifetime)"
        )
    if buf.size <= 0:
        raise InvalidInputError(f"{name}: size {buf.size} must be positive")
    if buf.alignment is not None and not is_power_of_two(buf.alignment):
        raise InvalidInputError(
            f"{name}: alignment {buf.alignment!r} is not a positive power of two"
        )
    if buf.offset is not None:
        if not _is_int(buf.offset):
            raise InvalidInputError(f"{name}: offset must be an integer")
        if buf.offset < 0:
            raise InvalidInputError(f"{name}: offset {buf.offset} is negative")
    if buf.zone is not None:
        if not isinstance(buf.zone, str) or not buf.zone:
            raise InvalidInputError(f"{name}: zone must be a non-empty string")
        if buf.offset is not None:
            raise InvalidInputError(
                f"{name}: has both a zone and a pre-placed offset; zone buffers are placed "
                "by the planner, drop one of the two"
            )


def _plainly_valid(buf: Buffer) -> bool:
    """The common case, checked fast (traces of tens of thousands of buffers): plain ints, a
    non-empty lifetime and size, nothing else given; anything else goes through
    `validate_buffer`, which names what is wrong."""
    return (type(buf.lower) is int and type(buf.upper) is int and type(buf.size) is int
            and 0 <= buf.lower < buf.upper and buf.size > 0 and type(buf.id) is str
            and buf.id != "" and buf.alignment is None and buf.offset is None
            and buf.zone is None)


@dataclass(frozen=True)
class LayoutInstance:
    """Buffers as arrays, all addresses and sizes in units of ``unit`` bytes.

    ``fixed``: the offset is given (pre-placed or zone); ``fixed_off`` holds it (-1 if free).
    ``in_zone``: zone buffers (fixed, below ``zone_top``). ``step``: alignment in units (>= 1).
    """

    ids: tuple[str, ...]
    lower: np.ndarray
    upper: np.ndarray
    size: np.ndarray
    step: np.ndarray
    fixed: np.ndarray
    fixed_off: np.ndarray
    in_zone: np.ndarray
    zone_top: int
    unit: int

    @property
    def n(self) -> int:
        return len(self.ids)

    @property
    def free_idx(self) -> np.ndarray:
        return np.flatnonzero(~self.fixed)

    @property
    def obstacle_idx(self) -> np.ndarray:
        """Pre-placed buffers outside the zones: fixed rectangles the others must avoid."""
        return np.flatnonzero(self.fixed & ~self.in_zone)


def _place_zones(buffers: Sequence[Buffer], padded: list[int], aligns: list[int]) -> tuple[
    dict[int, int], int
]:
    zone_order: list[str] = []
    members: dict[str, list[int]] = {}
    for i, buf in enumerate(buffers):
        if buf.zone is not None:
            if buf.zone not in members:
                zone_order.append(buf.zone)
                members[buf.zone] = []
            members[buf.zone].append(i)
    offsets: dict[int, int] = {}
    top = 0
    for zone in zone_order:
        for i in members[zone]:
            top = align_up(top, aligns[i])
            offsets[i] = top
            top += padded[i]
    return offsets, top


def _check_fixed_overlaps(
    buffers: Sequence[Buffer], fixed_idx: list[int], offsets: list[int], padded: list[int]
) -> None:
    """Pre-placed buffers must not overlap each other (they cannot be moved to fix it)."""
    if len(fixed_idx) < 2:
        return
    idx = np.asarray(fixed_idx)
    lo = np.asarray([buffers[i].lower for i in fixed_idx], dtype=np.int64)
    hi = np.asarray([buffers[i].upper for i in fixed_idx], dtype=np.int64)
    off = np.asarray([offsets[i] for i in fixed_idx], dtype=np.int64)
    end = off + np.asarray([padded[i] for i in fixed_idx], dtype=np.int64)
    for k in range(len(idx) - 1):
        clash = (lo[k + 1 :] < hi[k]) & (hi[k + 1 :] > lo[k]) & (off[k + 1 :] < end[k]) & (
            end[k + 1 :] > off[k]
        )
        if clash.any():
            j = int(idx[k + 1 + int(np.argmax(clash))])
            i = int(idx[k])
            raise InvalidInputError(
                f"pre-placed buffers {buffers[i].id!r} and {buffers[j].id!r} overlap in both "
                "lifetime and address range (sizes rounded up to alignment); move one of them"
            )


def build_instance(buffers: Sequence[Buffer], alignment: int) -> LayoutInstance:
    """Validate ``buffers`` and return the normalized instance (raises InvalidInputError)."""
    alignment = check_default_alignment(alignment)
    seen: set[str] = set()
    for buf in buffers:
        if not isinstance(buf, Buffer):
            raise InvalidInputError(f"expected Buffer objects, got {type(buf).__name__}")
        if not _plainly_valid(buf):
            validate_buffer(buf)
        if buf.id in seen:
            raise InvalidInputError(f"duplicate buffer id {buf.id!r}; ids must be unique")
        seen.add(buf.id)

    aligns = [buf.alignment if buf.alignment is not None else alignment for buf in buffers]
    padded = [align_up(int(buf.size), a) for buf, a in zip(buffers, aligns, strict=True)]
    zone_offsets, zone_top = _place_zones(buffers, padded, aligns)

    offsets = [-1] * len(buffers)
    fixed_idx: list[int] = []
    for i, buf in enumerate(buffers):
        if i in zone_offsets:
            offsets[i] = zone_offsets[i]
            fixed_idx.append(i)
        elif buf.offset is not None:
            if buf.offset % aligns[i]:
                raise InvalidInputError(
                    f"buffer {buf.id!r}: pre-placed offset {buf.offset} is not a multiple of "
                    f"its alignment {aligns[i]}"
                )
            if buf.offset < zone_top:
                raise InvalidInputError(
                    f"buffer {buf.id!r}: pre-placed offset {buf.offset} lies inside the "
                    f"persistent zones [0, {zone_top}); place it at {zone_top} or above"
                )
            offsets[i] = int(buf.offset)
            fixed_idx.append(i)
    _check_fixed_overlaps(buffers, [i for i in fixed_idx if i not in zone_offsets], offsets,
                          padded)

    g = int(np.gcd.reduce(np.asarray([zone_top, *padded, *(offsets[i] for i in fixed_idx)],
                                     dtype=np.int64)))
    unit = (g & -g) if g > 0 else alignment

    n = len(buffers)
    fixed = np.zeros(n, dtype=bool)
    fixed[fixed_idx] = True
    in_zone = np.zeros(n, dtype=bool)
    in_zone[list(zone_offsets)] = True
    off = np.asarray(offsets, dtype=np.int64)
    off = np.where(fixed, off // unit, -1)
    return LayoutInstance(
        ids=tuple(buf.id for buf in buffers),
        lower=np.asarray([buf.lower for buf in buffers], dtype=np.int64),
        upper=np.asarray([buf.upper for buf in buffers], dtype=np.int64),
        size=np.asarray(padded, dtype=np.int64) // unit,
        step=np.maximum(np.asarray(aligns, dtype=np.int64) // unit, 1),
        fixed=fixed,
        fixed_off=off.astype(np.int64),
        in_zone=in_zone,
        zone_top=zone_top // unit,
        unit=unit,
    )


def arena_units(instance: LayoutInstance, offsets: np.ndarray) -> int:
    """Arena size in units of a full offset vector: the end of the highest buffer (or zones)."""
    if instance.n == 0:
        return instance.zone_top
    return int(max(instance.zone_top, int((offsets + instance.size).max())))


def select(instance: LayoutInstance, idx: np.ndarray) -> LayoutInstance:
    """The buffers ``idx`` alone (in that order), as an instance of their own: the zones and
    the unit stay, so offsets carry over unchanged; buffer ``k`` is ``idx[k]`` of ``instance``."""
    return replace(
        instance, ids=tuple(instance.ids[i] for i in idx.tolist()), lower=instance.lower[idx],
        upper=instance.upper[idx], size=instance.size[idx], step=instance.step[idx],
        fixed=instance.fixed[idx], fixed_off=instance.fixed_off[idx],
        in_zone=instance.in_zone[idx],
    )
