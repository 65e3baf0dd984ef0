"""Synthetic layout instances for the benchmark.

- ``tight_instance``: a time x address rectangle cut recursively (guillotine cuts) into ``n``
  pieces; each piece is a buffer (lifetime = its time side, size = its address side). Every step
  is covered exactly, so the live bytes equal the capacity at every step and the optimum arena
  equals the lower bound, by construction. The buffers are shuffled and their offsets dropped.
- ``training_trace``: a training-step-like trace: parameters and optimizer state (persistent,
  whole step), forward activations kept until their backward step, short-lived temporaries and
  workspaces, gradients alive from their backward step to the optimizer update.
"""

from __future__ import annotations

import random

from planner.layout import Buffer


def tight_instance(
    n: int, seed: int, *, capacity_units: int = 4096, horizon: int = 400, unit: int = 64
) -> tuple[list[Buffer], int]:
    """``n`` buffers packing ``capacity_units * unit`` bytes at 100% at every step.

    Returns (buffers, capacity in bytes).
    """
    rng = random.Random(seed)
    rects = [(0, horizon, 0, capacity_units)]  # (t0, t1, a0, a1)
    while len(rects) < n:
        areas = [(r[1] - r[0]) * (r[3] - r[2]) for r in rects]
        k = rng.choices(range(len(rects)), weights=areas)[0]
        t0, t1, a0, a1 = rects[k]
        can_time, can_addr = t1 - t0 >= 2, a1 - a0 >= 2
        if not (can_time or can_addr):
            continue
        # cut the longer side more often (relative to the whole rectangle), so pieces stay varied
        w_time = (t1 - t0) / horizon
        w_addr = (a1 - a0) / capacity_units
        cut_time = can_time and (not can_addr or rng.random() < w_time / (w_time + w_addr))
        rects.pop(k)
        if cut_time:
            c = rng.randint(t0 + 1, t1 - 1)
            rects += [(t0, c, a0, a1), (c, t1, a0, a1)]
        else:
            c = rng.randint(a0 + 1, a1 - 1)
            rects += [(t0, t1, a0, c), (t0, t1, c, a1)]
    rng.shuffle(rects)
    buffers = [
        Buffer(id=f"b{i}", lower=t0, upper=t1, size=(a1 - a0) * unit)
        for i, (t0, t1, a0, a1) in enumerate(rects)
    ]
    return buffers, capacity_units * unit


def training_trace(n_buffers: int, seed: int, *, persistent_zone: bool = False) -> list[Buffer]:
    """About ``n_buffers`` buffers shaped like one training step of a deep network."""
    rng = random.Random(seed)
    layers = max(2, n_buffers // 8)
    steps = 4 * layers + 4  # forward, backward, optimizer, slack
    buffers: list[Buffer] = []

    def add(kind: str, lower: int, upper: int, size: int, zone: str | None = None) -> None:
        buffers.append(Buffer(f"{kind}{len(buffers)}", lower, max(upper, lower + 1), size,
                              zone=zone))

    kib = 1024
    width = [rng.choice([64, 128, 256, 512]) * kib for _ in range(layers)]
    for layer in range(layers):
        t_fwd = 2 * layer
        t_bwd = 2 * (2 * layers - layer)
        t_opt = 4 * layers + 1 + (layer % 3)
        param = width[layer] * rng.choice([1, 2, 4])
        zone = "persistent" if persistent_zone else None
        add("param", 0, steps, param, zone)
        add("adam_m", 0, steps, param, zone)
        add("adam_v", 0, steps, param, zone)
        add("act", t_fwd, t_bwd + 1, width[layer] * rng.choice([2, 4, 8]))  # kept for backward
        add("tmp", t_fwd, t_fwd + 1, width[layer] * rng.choice([1, 2, 4]))  # fused temporary
        add("grad_in", t_bwd, t_bwd + 2, width[layer] * rng.choice([2, 4, 8]))  # backprop signal
        add("wgrad", t_bwd + 1, t_opt + 1, param)  # weight gradient until the update
        add("ws", t_bwd, t_bwd + 1, rng.choice([16, 32, 64, 256]) * kib + rng.randrange(0, 999))
    return buffers[:n_buffers] if len(buffers) > n_buffers else buffers
