"""Random chain-shaped training graphs in node-link JSON (the `--graph-json` input): a forward
chain f0..fn and its backward b(n+1)..b0, where b_i reads f_i, the shape the exact chain DP
(Butt 2019) solves, so remat results on them have a known optimum."""

from __future__ import annotations

import random


def chain_json(rng: random.Random, n: int, sizes=None) -> dict:
    """f0 (input) -> f1..fn; b(n+1) (input) -> bn..b0, b_i reading f_i and b_(i+1)."""

    def size() -> int:
        return sizes if sizes is not None else rng.randint(1, 8)

    nodes = [{"id": "f0", "input": True, "cost_ram": size()}]
    links = []
    for layer in range(1, n + 1):
        nodes.append({"id": f"f{layer}", "cost_cpu": rng.randint(1, 9), "cost_ram": size()})
        links.append({"source": f"f{layer - 1}", "target": f"f{layer}"})
    nodes.append({"id": f"b{n + 1}", "input": True, "backward": True, "cost_ram": size()})
    for i in range(n, -1, -1):
        nodes.append({"id": f"b{i}", "cost_cpu": rng.randint(1, 9), "cost_ram": size(),
                      "backward": True})
        links += [{"source": f"f{i}", "target": f"b{i}"},
                  {"source": f"b{i + 1}", "target": f"b{i}"}]
    return {"nodes": nodes, "links": links}
