"""Random training-like DAGs in node-link JSON (the `--graph-json` input), for benches whose
optimum can be proven: a forward pass of layers with skip connections and its backward mirror.

Forward: an input, then `layers` layers of `width` nodes, each reading one or two nodes of the
previous layer and sometimes one of the layer before (a skip), and a loss reading the last
layer. Backward: for each forward node, last layer first, a gradient node reading the forward
node itself (the activation it needs) and the gradients of the nodes that read it (the loss
for the last layer). Integer costs 1-9 s and sizes 1-8 B, so exact models stay exact.
"""

from __future__ import annotations

import random


def layered_json(rng: random.Random, layers: int, width: int) -> dict:
    nodes = [{"id": "x", "input": True, "cost_ram": rng.randint(1, 8)}]
    links: list[dict] = []
    readers: dict[str, list[str]] = {"x": []}
    grid: list[list[str]] = [["x"]]

    def link(source: str, target: str) -> None:
        links.append({"source": source, "target": target})
        readers.setdefault(source, []).append(target)

    for layer in range(1, layers + 1):
        row = []
        for k in range(width):
            name = f"f{layer}_{k}"
            nodes.append({"id": name, "cost_cpu": rng.randint(1, 9),
                          "cost_ram": rng.randint(1, 8)})
            for source in rng.sample(grid[-1], min(len(grid[-1]), rng.randint(1, 2))):
                link(source, name)
            if layer >= 2 and rng.random() < 0.3:
                link(rng.choice(grid[-2]), name)
            row.append(name)
        grid.append(row)
    nodes.append({"id": "loss", "cost_cpu": 1, "cost_ram": 1})
    for source in grid[-1]:
        link(source, "loss")
    forward_readers = {name: list(targets) for name, targets in readers.items()}
    for layer in range(layers, 0, -1):
        for name in grid[layer]:
            grad = f"g{name[1:]}"
            nodes.append({"id": grad, "cost_cpu": rng.randint(1, 9),
                          "cost_ram": rng.randint(1, 8), "backward": True})
            link(name, grad)
            for reader in forward_readers.get(name, []):
                link("loss" if reader == "loss" else f"g{reader[1:]}", grad)
    return {"nodes": nodes, "links": links}
