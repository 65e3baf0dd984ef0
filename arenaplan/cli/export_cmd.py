"""`arenaplan export-torch MODULE:FACTORY ...`: write a torch model's training step as ONNX.

FACTORY is a zero-argument callable returning an nn.Module (see planner.export.factory). The
example inputs are random with the given shapes (seeded); integer labels are drawn below the
number of classes, read from the model's output unless --num-classes is given. The export is
verified against an eager torch step; the differences are printed. Needs the `export` extra:
without torch the command exits with code 2 and says what to install. A layer whose op has no
ONNX translation exits 2 too, naming the op, the module of the model that called it and what to
use instead (planner.export.unsupported).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from arenaplan.cli.common import EXIT_OK
from planner.errors import InvalidInputError
from planner.export.spec import LOSS_NAMES, OPTIMIZER_NAMES, OptimizerSpec

_DTYPES = ("float32", "float64", "float16", "int64", "int32", "bool")


def parse_shape(text: str) -> tuple[int, ...]:
    """`8,3,32,32` -> (8, 3, 32, 32); every dimension a positive integer."""
    parts = [p.strip() for p in text.split(",")]
    if not parts or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(
            f"expected a shape of comma-separated positive integers (e.g. 8,3,32,32), got {text!r}"
        )
    return tuple(int(p) for p in parts)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export-torch",
        help="export a torch model's training step (forward+backward+optimizer) to ONNX",
        description="Trace one training step of the nn.Module returned by MODULE:FACTORY and "
        "write it as a single ONNX graph that plain onnxruntime runs. Needs arenaplan[export].",
    )
    parser.add_argument("factory", metavar="MODULE:FACTORY",
                        help="zero-argument callable returning an nn.Module; MODULE is a dotted "
                        "module name or a path to a .py file")
    parser.add_argument("--input-shape", action="append", type=parse_shape, required=True,
                        metavar="D0,D1,...", help="shape of one model input (repeatable, in "
                        "the order of forward()'s arguments)")
    parser.add_argument("--input-dtype", action="append", choices=_DTYPES, default=None,
                        help="dtype of the inputs: once for all or once per --input-shape "
                        "(default float32)")
    parser.add_argument("--int-input-high", type=int, default=10, metavar="N",
                        help="integer inputs (e.g. token ids) are drawn from [0, N) (default 10)")
    parser.add_argument("--label-shape", action="append", type=parse_shape, default=None,
                        metavar="D0,D1,...", help="shape of one label (repeatable; default: "
                        "derived from the model output and the loss)")
    parser.add_argument("--label-dtype", choices=_DTYPES, default=None,
                        help="dtype of the labels (default int64 for the cross entropies, "
                        "float32 for mse)")
    parser.add_argument("--num-classes", type=int, default=None, metavar="N",
                        help="integer labels are drawn from [0, N) (default: from the output)")
    parser.add_argument("--loss", choices=LOSS_NAMES, default="cross_entropy",
                        help="loss on the model output (default cross_entropy)")
    parser.add_argument("--optimizer", choices=OPTIMIZER_NAMES, default="sgd",
                        help="optimizer update written into the graph (default sgd)")
    parser.add_argument("--lr", type=float, default=0.01, help="learning rate (default 0.01)")
    parser.add_argument("--momentum", type=float, default=0.9,
                        help="momentum for --optimizer momentum (default 0.9)")
    parser.add_argument("--weight-decay", type=float, default=None,
                        help="weight decay (default: torch's, 0.01 for adamw, else 0)")
    parser.add_argument("--eps", type=float, default=1e-8, help="Adam eps (default 1e-8)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the example inputs")
    parser.add_argument("--tolerance", type=float, default=1e-3,
                        help="fail when onnxruntime and torch differ by more (default 1e-3)")
    parser.add_argument("--sidecar", action="store_true",
                        help="also write NAME.json and NAME.inputs.npz next to the model "
                        "(graph input roles, updates, example values)")
    parser.add_argument("-o", "--output", required=True, type=Path, help="ONNX file to write")
    parser.set_defaults(handler=run)


def _torch_dtype(torch: Any, name: str) -> Any:
    return getattr(torch, name)


def _random(torch: Any, shape: tuple[int, ...], dtype: Any, high: int, gen: Any) -> Any:
    if dtype.is_floating_point:
        return torch.randn(shape, generator=gen).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    return torch.randint(0, high, shape, generator=gen).to(dtype)


def _example_inputs(torch: Any, args: argparse.Namespace, gen: Any) -> tuple[Any, ...]:
    dtypes = args.input_dtype or ["float32"]
    if len(dtypes) == 1:
        dtypes = dtypes * len(args.input_shape)
    if len(dtypes) != len(args.input_shape):
        raise InvalidInputError(
            f"{len(dtypes)} --input-dtype for {len(args.input_shape)} --input-shape: give one "
            "for all or one per input"
        )
    if args.int_input_high < 1:
        raise InvalidInputError("--int-input-high must be >= 1")
    return tuple(
        _random(torch, shape, _torch_dtype(torch, dtype), args.int_input_high, gen)
        for shape, dtype in zip(args.input_shape, dtypes, strict=True)
    )


def _example_labels(
    torch: Any, args: argparse.Namespace, model: Any, inputs: tuple[Any, ...], gen: Any
) -> tuple[Any, ...]:
    from planner.export.exporter import prepare_module

    with torch.no_grad():
        try:
            output = prepare_module(model)(*inputs)
        except Exception as exc:  # noqa: BLE001 - the user's model rejected the inputs
            raise InvalidInputError(
                f"the model failed on inputs of shape {args.input_shape}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
    if not isinstance(output, torch.Tensor):
        raise InvalidInputError("the model must return one tensor for the named losses")
    classification = args.loss != "mse"
    if args.label_shape:
        shapes = list(args.label_shape)
    elif args.loss == "cross_entropy":
        shapes = [tuple(output.shape[:1]) + tuple(output.shape[2:])]
    elif args.loss == "sequence_cross_entropy":
        shapes = [tuple(output.shape[:-1])]
    else:
        shapes = [tuple(output.shape)]
    dtype = _torch_dtype(torch, args.label_dtype or ("int64" if classification else "float32"))
    classes = args.num_classes
    if classes is None and output.dim() >= 2:
        classes = output.shape[-1] if args.loss == "sequence_cross_entropy" else output.shape[1]
    if classes is None or classes < 1:
        raise InvalidInputError("cannot tell the number of classes: pass --num-classes")
    return tuple(_random(torch, shape, dtype, classes, gen) for shape in shapes)


def run(args: argparse.Namespace) -> int:
    from planner.export._deps import require_torch

    torch = require_torch()
    from planner.export import export_training_graph
    from planner.export.factory import load_factory_model

    spec = OptimizerSpec(
        args.optimizer, lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay,
        eps=args.eps,
    )
    if not str(args.output).endswith(".onnx"):
        raise InvalidInputError(f"-o must name a .onnx file, got {str(args.output)!r}")
    if not args.output.parent.is_dir():
        raise InvalidInputError(f"output directory {str(args.output.parent)!r} does not exist")
    torch.manual_seed(args.seed)
    model = load_factory_model(args.factory)
    gen = torch.Generator().manual_seed(args.seed)
    inputs = _example_inputs(torch, args, gen)
    labels = _example_labels(torch, args, model, inputs, gen)
    result = export_training_graph(model, inputs, labels, args.loss, spec,
                                   tolerance=args.tolerance)
    if args.sidecar:
        name = args.output.name[: -len(".onnx")]
        paths = result.write_bundle(args.output, name, f"{args.factory} exported by arenaplan "
                                    "export-torch", seed=args.seed)
        written = ", ".join(str(p) for p in paths)
    else:
        result.save(args.output)
        written = str(args.output)
    print(
        f"wrote {written}: {result.op_count} ops, {len(result.input_kinds)} inputs, "
        f"{len(result.updates)} updated tensors; torch vs onnxruntime max abs diff: "
        f"loss {result.max_abs_diff_loss:.3g}, updates {result.max_abs_diff_updates:.3g}"
    )
    return EXIT_OK
