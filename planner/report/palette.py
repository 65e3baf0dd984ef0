"""Colours and legend names shared by the HTML figures and the PNG export.

A buffer is drawn in the colour of its *layer*: its tensor role (planner.ir.graph.TensorRole
values), except buffers made by a recomputation (`recomputed`) or by a copy from another
device (`copied in`), which are what a rematerialization / placement plan adds.
"""

from __future__ import annotations

# Layer -> (legend text, colour). Order is the stacking order of the memory curves, bottom up:
# what lives for the whole step first, then inputs, then what the step makes.
LAYERS: dict[str, tuple[str, str]] = {
    "parameter": ("parameters", "#4e79a7"),
    "optimizer_state": ("optimizer state", "#a0cbe8"),
    "buffer": ("buffers (running stats)", "#76b7b2"),
    "constant": ("constants", "#bab0ac"),
    "data": ("data", "#b07aa1"),
    "label": ("labels", "#d4a6c8"),
    "output": ("outputs (updated state, loss)", "#edc948"),
    "activation": ("activations", "#f28e2b"),
    "gradient": ("gradients", "#59a14f"),
    "optimizer_temp": ("optimizer temporaries", "#8cd17d"),
    "other": ("other", "#79706e"),
    "copied": ("copied in from another device", "#9c755f"),
    "recomputed": ("recomputed values", "#e15759"),
}
RECOMPUTED = "recomputed"
COPIED = "copied"
OTHER = "other"


def layer_of_role(role: str) -> str:
    return role if role in LAYERS else OTHER


def layer_colour(layer: str) -> str:
    return LAYERS.get(layer, LAYERS[OTHER])[1]


def layer_name(layer: str) -> str:
    return LAYERS.get(layer, LAYERS[OTHER])[0]


# Compute/keep matrix cell states, weakest first: when one displayed cell covers several ops or
# steps it shows the strongest state among them, so a recomputation is never hidden by binning.
EMPTY, KEPT, HELD_COPY, COPY, COMPUTED, RECOMPUTE = range(6)
STATES: dict[int, tuple[str, str]] = {
    KEPT: ("output kept in memory", "#b9d3ea"),
    HELD_COPY: ("copy from another device kept", "#dcc7ad"),
    COPY: ("copied to / from another device", "#9c755f"),
    COMPUTED: ("computed", "#1f4e79"),
    RECOMPUTE: ("recomputed", "#e15759"),
}

REGIONS: dict[str, str] = {
    "forward": "#9ecae1",
    "backward": "#fdae6b",
    "optimizer": "#a1d99b",
}

BUDGET_COLOUR = "#c0392b"
ARENA_COLOUR = "#333333"
BOUND_COLOUR = "#7f7f7f"
REFERENCE_COLOUR = "#8e44ad"
