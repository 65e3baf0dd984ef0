"""Check an exported training step against torch: same loss, same updated tensors.

The reference is an ordinary eager training step: the (prepared) module in training mode,
`loss_fn(model(*inputs), *labels).backward()` and the matching `torch.optim` optimizer
(single-tensor code path) with its state set from the same feeds. Dropout stays on: the graph's
random draws of this very run are read back and torch's dropout masks are made from them
(planner.export.randomness), so both sides apply the same masks.

Adam moves each parameter by about `lr * g / (|g| + eps)`: where the true gradient is ~0 two
correct implementations can differ by up to 2*lr, so the raw parameter difference says little.
For Adam/AdamW we compare instead (a) the loss, the first and second moments and the step counter
with the independent torch step, and (b) each updated parameter with `torch.optim`'s update
applied to the gradient recovered from the exported first moment,
`g = (m_new - beta1 * m_old) / (1 - beta1)` (minus the L2 term for Adam with weight decay),
which checks the exported update rule itself. The raw difference is reported apart.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from planner.export._deps import require_torch
from planner.export.randomness import ReplayDraws, expose_draws
from planner.export.spec import OptimizerSpec
from planner.export.trace import StepLayout

torch = require_torch()


@dataclass
class Comparison:
    reference_loss: float
    max_abs_diff_loss: float
    update_diffs: dict[str, float] = field(default_factory=dict)
    adam_raw_parameter_diff: float | None = None

    @property
    def max_abs_diff_updates(self) -> float:
        return max(self.update_diffs.values(), default=0.0)


def run_onnx(model: onnx.ModelProto | bytes, feeds: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Run the graph once with plain onnxruntime on the CPU; outputs by name."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    data = model if isinstance(model, bytes) else model.SerializeToString()
    session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    values = session.run(names, dict(feeds))
    return dict(zip(names, values, strict=True))


def make_torch_optimizer(spec: OptimizerSpec, params: list[Any]) -> Any:
    wd = spec.effective_weight_decay
    if spec.name == "sgd":
        return torch.optim.SGD(params, lr=spec.lr, weight_decay=wd, foreach=False)
    if spec.name == "momentum":
        return torch.optim.SGD(params, lr=spec.lr, momentum=spec.momentum,
                               dampening=spec.dampening, nesterov=spec.nesterov,
                               weight_decay=wd, foreach=False)
    cls = torch.optim.AdamW if spec.name == "adamw" else torch.optim.Adam
    return cls(params, lr=spec.lr, betas=spec.betas, eps=spec.eps, weight_decay=wd,
               foreach=False, fused=False, capturable=False)


def _load_state(
    opt: Any, spec: OptimizerSpec, layout: StepLayout, params: dict[str, Any],
    feeds: Mapping[str, np.ndarray],
) -> None:
    for name in layout.params:
        p = params[name]
        state = {s: torch.tensor(feeds[f"{name}.{s}"]).clone() for s in spec.state_suffixes()}
        if spec.is_adam:
            assert layout.step is not None
            state["step"] = torch.tensor(float(feeds[layout.step]), dtype=torch.float32)
        if state:
            opt.state[p] = state


def torch_step(
    model: Any, loss_fn: Callable[..., Any], spec: OptimizerSpec, layout: StepLayout,
    feeds: Mapping[str, np.ndarray], grads: Mapping[str, Any] | None = None,
    draws: Sequence[np.ndarray] = (),
) -> tuple[float, dict[str, np.ndarray]]:
    """One eager torch training step from `feeds`; returns (loss, updated values by input name).

    With `grads` given, the backward pass is replaced by these gradients (the loss is still
    computed by a forward pass). `draws` are the graph's random draws (dropout masks are made
    from them, see planner.export.randomness).
    """
    net = copy.deepcopy(model)
    net.train()
    params = dict(net.named_parameters())
    buffers = dict(net.named_buffers())
    with torch.no_grad():
        for name, tensor in {**params, **buffers}.items():
            tensor.copy_(torch.from_numpy(np.asarray(feeds[name])))
    trainable = [params[name] for name in layout.params]
    opt = make_torch_optimizer(spec, trainable)
    _load_state(opt, spec, layout, params, feeds)
    data = [torch.from_numpy(np.asarray(feeds[n])) for n in layout.data]
    labels = [torch.from_numpy(np.asarray(feeds[n])) for n in layout.labels]
    opt.zero_grad(set_to_none=True)
    replay = ReplayDraws(draws)
    with replay.draws_context(), replay.mode():
        loss = loss_fn(net(*data), *labels)
    if grads is None:
        loss.backward()
    else:
        for name in layout.params:
            params[name].grad = grads[name].clone()
    opt.step()
    updated: dict[str, np.ndarray] = {}
    with torch.no_grad():
        for name in layout.params:
            updated[name] = params[name].detach().numpy().copy()
            for suffix in spec.state_suffixes():
                updated[f"{name}.{suffix}"] = opt.state[params[name]][suffix].numpy().copy()
        for name in layout.mutated_buffers:
            updated[name] = buffers[name].numpy().copy()
        if layout.step is not None:
            updated[layout.step] = opt.state[trainable[0]]["step"].numpy().copy()
    return float(loss.detach()), updated


def _max_abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return float("inf")
    if a.size == 0:
        return 0.0
    diff = np.abs(a - b)
    if np.isnan(diff).any():
        return float("nan")
    return float(diff.max())


def compare_with_torch(
    onnx_model: onnx.ModelProto, model: Any, loss_fn: Callable[..., Any], spec: OptimizerSpec,
    layout: StepLayout, feeds: Mapping[str, np.ndarray],
) -> Comparison:
    """Run the ONNX step and the torch step on the same feeds (and the same random draws) and
    measure the differences."""
    exposed, draw_names = expose_draws(onnx_model)
    got = run_onnx(exposed, feeds)
    draws = [got[name] for name in draw_names]
    loss, expected = torch_step(model, loss_fn, spec, layout, feeds, draws=draws)
    updates = layout.updates()
    result = Comparison(
        reference_loss=loss,
        max_abs_diff_loss=_max_abs_diff(got[layout.output_names()[0]], np.float32(loss)),
    )
    for name, out_name in updates.items():
        result.update_diffs[name] = _max_abs_diff(got[out_name], expected[name])
    if spec.is_adam and layout.params:
        raw = [result.update_diffs[name] for name in layout.params]
        result.adam_raw_parameter_diff = max(raw)
        beta1 = spec.betas[0]
        recovered = {}
        for name in layout.params:
            m_old = np.asarray(feeds[f"{name}.exp_avg"], dtype=np.float64)
            m_new = np.asarray(got[updates[f"{name}.exp_avg"]], dtype=np.float64)
            g = (m_new - beta1 * m_old) / (1.0 - beta1)
            if spec.name == "adam" and spec.effective_weight_decay:
                g = g - spec.effective_weight_decay * np.asarray(feeds[name], dtype=np.float64)
            recovered[name] = torch.from_numpy(g.astype(np.float32))
        _, from_moment = torch_step(model, loss_fn, spec, layout, feeds, grads=recovered,
                                    draws=draws)
        for name in layout.params:
            result.update_diffs[name] = _max_abs_diff(got[updates[name]], from_moment[name])
    return result
