"""A minimal SVG writer: elements as escaped strings, linear scales and readable axis ticks.

The report draws its figures with this instead of a plotting library, so the HTML page needs
nothing beyond the standard library and numpy, and loads nothing from the network.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

from schemas.units import BYTE_UNITS
from schemas.units import format_bytes as format_units


def num(value: float) -> str:
    """A coordinate with at most two decimals and no trailing zeros."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def attrs(**values: object) -> str:
    parts = []
    for key, value in values.items():
        if value is None:
            continue
        name = key.rstrip("_").replace("_", "-")
        text = num(value) if isinstance(value, float) else str(value)
        parts.append(f' {name}="{escape(text, quote=True)}"')
    return "".join(parts)


class Svg:
    """Collects elements; `render()` returns the `<svg>` element (inline in HTML, no xmlns)."""

    def __init__(self, width: float, height: float, **attributes: object) -> None:
        self.width = width
        self.height = height
        self.attributes = attributes
        self.parts: list[str] = []

    def add(self, markup: str) -> None:
        self.parts.append(markup)

    def rect(self, x: float, y: float, w: float, h: float, title: str | None = None,
             **a: object) -> None:
        body = f"<title>{escape(title)}</title>" if title else ""
        tail = f">{body}</rect>" if body else "/>"
        box = attrs(x=float(x), y=float(y), width=float(max(w, 0)), height=float(max(h, 0)))
        self.add(f"<rect{box}{attrs(**a)}{tail}")

    def line(self, x1: float, y1: float, x2: float, y2: float, **a: object) -> None:
        self.add(f"<line{attrs(x1=float(x1), y1=float(y1), x2=float(x2), y2=float(y2), **a)}/>")

    def path(self, d: str, **a: object) -> None:
        self.add(f"<path{attrs(d=d, **a)}/>")

    def text(self, x: float, y: float, content: str, **a: object) -> None:
        self.add(f"<text{attrs(x=float(x), y=float(y), **a)}>{escape(content)}</text>")

    def open_group(self, title: str | None = None, **a: object) -> None:
        self.add(f"<g{attrs(**a)}>" + (f"<title>{escape(title)}</title>" if title else ""))

    def close_group(self) -> None:
        self.add("</g>")

    def render(self) -> str:
        head = attrs(viewBox=f"0 0 {num(self.width)} {num(self.height)}",
                     width=float(self.width), height=float(self.height), **self.attributes)
        return f"<svg{head}>" + "".join(self.parts) + "</svg>"


@dataclass(frozen=True)
class Scale:
    """Linear map from data [lo, hi] to pixels [a, b] (b < a for a y axis growing upwards)."""

    lo: float
    hi: float
    a: float
    b: float

    def __call__(self, value: float) -> float:
        span = self.hi - self.lo or 1.0
        return self.a + (value - self.lo) * (self.b - self.a) / span


def nice_step(span: float, target: int) -> float:
    """A 1-2-5 step giving about `target` intervals over `span`."""
    if span <= 0:
        return 1.0
    raw = span / max(target, 1)
    power = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5, 10):
        if factor * power >= raw:
            return factor * power
    return 10 * power


def ticks(lo: float, hi: float, target: int = 6, integer: bool = False) -> list[float]:
    step = nice_step(hi - lo, target)
    if integer:
        step = max(1.0, round(step))
    first = math.ceil(lo / step) * step
    values = []
    k = 0
    while first + k * step <= hi + step * 1e-9:
        values.append(first + k * step)
        k += 1
    return values


def byte_unit(max_bytes: float) -> tuple[str, int]:
    """The unit an axis up to `max_bytes` reads best in."""
    for name, size in BYTE_UNITS:
        if max_bytes >= size:
            return name, size
    return "B", 1


def byte_ticks(max_bytes: float, target: int = 5) -> tuple[list[float], str, int]:
    """Ticks for a byte axis from 0 to max_bytes, in the unit that reads best."""
    unit, size = byte_unit(max_bytes)
    values = [v * size for v in ticks(0, max_bytes / size, target)]
    return values, unit, size


def format_tick(value: float, size: int) -> str:
    scaled = value / size
    return f"{scaled:.0f}" if abs(scaled - round(scaled)) < 1e-9 else f"{scaled:.3g}"


def format_bytes(n: float) -> str:
    """Bytes with a binary unit and two decimals, as every figure and table shows them."""
    return format_units(n, digits=2)
