"""One training step of one model in this fresh process, for its peak resident memory, as JSON.

    MALLOC_MMAP_THRESHOLD_=131072 python -m bench.memory.step_worker torch|ort NAME MODEL INPUTS

- torch: a PyTorch eager step the way people write it: the case's module in training mode (its
  in-place ReLUs as written), `loss_fn(model(x), y).backward()` and the torch.optim optimizer
  (SGD, momentum, Adam; foreach left at its default) stepping the parameters in place, one
  thread. A first step at learning rate 0 creates the optimizer state (momentum buffers, Adam
  moments) and pays torch's lazy start-up; the second step is measured.
- ort: ONNX Runtime's default InferenceSession (default SessionOptions, CPU EP) built from the
  exported training graph and run on the exported inputs (NAME.inputs.npz). A first session is
  built, run and dropped (ONNX Runtime's start-up, kernel code paged in); a second one is
  measured from before it is built to the end of its run, which is when it holds its arena.

Measured: the peak resident set growth (VmHWM, reset through /proc/self/clear_refs:
runtime.measure) over the measured step, above the resident set with everything loaded and
malloc's free pages given back (malloc_trim).
`loaded_bytes` are the exact bytes of the step's inputs (parameters, buffers, optimizer state,
data): the step's peak counting them, the figure comparable with an arena that holds them too,
is loaded_bytes + growth.
"""

from __future__ import annotations

import ctypes
import gc
import json
import sys

from runtime.measure import PeakGrowth, rss_bytes


def settle() -> int:
    """Collect garbage and give the heap's free pages back to the OS (glibc malloc_trim), so
    that the measured step cannot reuse what the warm-up step left in malloc's free lists; the
    resident set afterwards."""
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    return rss_bytes()


def torch_step(name: str) -> dict:
    import torch

    torch.set_num_threads(1)
    from bench.memory.models import training_case
    from planner.export.losses import loss_by_name

    case = training_case(name)
    torch.manual_seed(case.seed)
    model, inputs, labels, loss = case.build(torch.Generator().manual_seed(case.seed))
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = _optimizer(torch, case.optimizer, params)
    loss_fn = loss_by_name(loss)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(*inputs), *labels).backward()
        optimizer.step()

    lr = optimizer.param_groups[0]["lr"]
    optimizer.param_groups[0]["lr"] = 0.0
    step()
    optimizer.zero_grad(set_to_none=True)
    optimizer.param_groups[0]["lr"] = lr
    tensors = [*params, *model.buffers(), *inputs, *labels,
               *(t for state in optimizer.state.values() for t in state.values())]
    loaded = sum(t.numel() * t.element_size() for t in tensors)
    rss_loaded = settle()
    span = PeakGrowth.start()
    step()
    span.sample()
    return {"loaded_bytes": loaded, "rss_loaded": rss_loaded, "growth": span.growth,
            "reset_ok": span.reset_ok}


def _optimizer(torch, spec, params: list) -> object:
    """torch.optim's optimizer for the export spec."""
    wd = spec.effective_weight_decay
    if spec.name in ("sgd", "momentum"):
        momentum = spec.momentum if spec.name == "momentum" else 0.0
        return torch.optim.SGD(params, lr=spec.lr, momentum=momentum,
                               dampening=spec.dampening if momentum else 0.0,
                               nesterov=spec.nesterov and bool(momentum), weight_decay=wd)
    cls = torch.optim.AdamW if spec.name == "adamw" else torch.optim.Adam
    return cls(params, lr=spec.lr, betas=spec.betas, eps=spec.eps, weight_decay=wd)


def ort_step(model_path: str, inputs_path: str) -> dict:
    import numpy as np
    import onnxruntime as ort

    values = dict(np.load(inputs_path))
    loaded = sum(v.nbytes for v in values.values())

    def session() -> ort.InferenceSession:
        return ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])

    session().run(None, values)
    rss_loaded = settle()
    span = PeakGrowth.start()
    measured = session()
    session_growth = span.sample()
    measured.run(None, values)
    span.sample()
    return {"loaded_bytes": loaded, "rss_loaded": rss_loaded, "growth": span.growth,
            "session_growth": session_growth, "reset_ok": span.reset_ok}


def main(argv: list[str]) -> int:
    mode, name, model_path, inputs_path = argv
    row = torch_step(name) if mode == "torch" else ort_step(model_path, inputs_path)
    print(json.dumps({"mode": mode, **row}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
