"""Executes a plan's training step, again and again, inside one fixed arena per device.

Construction does all the allocating: it checks the plan (runtime.plan_check, plus an optional
injected validator), checks the devices exist, allocates each device's arena once, builds the
sessions and their bindings (every input and output bound to its planned arena slice), and writes
the model's constants into their preloaded buffers. After that a training step is:

1. feed back state: each state input's buffer takes its new value (plan.state_updates) from the
   previous step's output buffer; a new value written in place (a buffer of the state's storage
   at the state's address) is already there, anything else is copied arena to arena, ordered
   so no copy overwrites bytes another still has to read;
2. write this step's data inputs (and any constant whose bytes the plan reuses) into their
   preloaded buffers;
3. run the units in order: segments of compute steps (runtime.kernels) and copies.

Graph outputs stay readable in their buffers until the next step starts. Nothing is allocated
in steps 1-3 beyond what onnxruntime's kernels allocate for their own scratch, from memory
sized by the plan's `workspace_bytes`: on a GPU the arena's workspace zone (runtime.arena), on
the host one onnxruntime arena shared by the executor's host sessions (runtime.host_workspace).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from runtime.arena import Arena, HostArena, allocate_arena
from runtime.devices import require_device
from runtime.errors import InputValuesError, PlanCheckError, RuntimePlanError
from runtime.kernels import KernelOptions, KernelSessions, keeps_plan_order
from runtime.model import RuntimeModel, model_for_plan, read_model
from runtime.plan_check import PlanValidator, check_plan
from runtime.plan_io import parse_plan, read_plan
from runtime.segments import CopyUnit, Segment, Unit, group_steps
from runtime.transfer import Place, Transfers, host_place
from schemas.plan import BufferSpec, ComputeStep, CopyStep, Plan
from schemas.topology import CycleError, topological_order


@dataclass(frozen=True)
class ExecutorOptions:
    threads: int = 1  # intra-op threads of every kernel session
    optimization: str = "disable"  # onnxruntime graph optimization level of the kernel sessions
    fuse: bool = True  # run consecutive compute steps as one session (runtime.segments)
    max_segment: int | None = None  # most compute steps in one session (None: no cap)


class PlanExecutor:
    def __init__(
        self,
        model: RuntimeModel | str | Path | bytes,
        plan: Plan | str | Path | dict,
        *,
        validator: PlanValidator | None = None,
        options: ExecutorOptions = ExecutorOptions(),
    ):
        self.plan = _as_plan(plan)
        read = model if isinstance(model, RuntimeModel) else read_model(model)
        self.model = model_for_plan(read, self.plan)  # the graph the plan's op ids index
        self.options = options
        check_plan(self.model, self.plan, validator)
        self.devices = {d.device: require_device(d.device) for d in self.plan.devices}
        self.arenas: dict[str, Arena] = {
            d.device: allocate_arena(self.devices[d.device], d.arena_bytes, d.workspace_bytes)
            for d in self.plan.devices
        }
        self.buffers: dict[str, BufferSpec] = {b.id: b for b in self.plan.buffers}
        self._transfers = Transfers()
        kernel_options = KernelOptions(threads=options.threads, optimization=options.optimization)
        self._kernels = KernelSessions(self.model, kernel_options)
        self.units: list[Unit] = group_steps(
            self.plan.steps, self.buffers, fuse=options.fuse, max_segment=options.max_segment,
            order_kept={name for name, device in self.devices.items()
                        if keeps_plan_order(kernel_options, device)},
        )
        host_workspace = max((d.workspace_bytes for d in self.plan.devices
                              if not self.devices[d.device].is_cuda), default=0)
        with self._kernels.building(host_workspace):
            self._program: list[Callable[[], None]] = [self._compile(u) for u in self.units]
        self._feed = self._compile_state_feed()
        self.state_inputs = set(self.plan.state_updates)
        self.data_inputs = [n for n in self.plan.graph_inputs if n not in self.state_inputs]
        self._reload = self._constants_to_reload()
        for name in self.plan.constants:
            self.write_buffer(self.plan.constants[name], self.model.initializers[name])
        self._data: dict[str, np.ndarray] = {}
        self._writes: list[Callable[[], None]] | None = None
        self._state_loaded: set[str] = set()
        self._ran = False
        self.steps_run = 0
        self.last_step_seconds: float | None = None  # no per-step history: steps do not grow

    # ----------------------------------------------------------------------------- facts

    @property
    def arena_bytes(self) -> dict[str, int]:
        return {device: arena.size for device, arena in self.arenas.items()}

    @property
    def session_count(self) -> int:
        return self._kernels.session_count

    @property
    def segment_count(self) -> int:
        return sum(isinstance(u, Segment) for u in self.units)

    # ----------------------------------------------------------------------------- inputs

    def load_inputs(self, values: Mapping[str, np.ndarray]) -> None:
        """Give graph inputs: state values are written now (restarting training from them),
        data values are kept and written at the start of every following step."""
        unknown = sorted(set(values) - set(self.plan.graph_inputs))
        if unknown:
            raise InputValuesError(f"{', '.join(unknown[:5])} are not inputs of the model")
        states = {n: v for n, v in values.items() if n in self.state_inputs}
        if states and self._ran:
            self._feed_back()  # other states keep their trained values
            self._ran = False
        for name, value in values.items():
            b = self.buffers[self.plan.graph_inputs[name]]
            array = _checked(name, value, b)
            if name in self.state_inputs:
                self.write_buffer(b.id, array)
                self._state_loaded.add(name)
            else:
                self._data[name] = array

    def step(self, data: Mapping[str, np.ndarray] | None = None, *,
             after_unit: Callable[[Unit], None] | None = None) -> float:
        """Run one training step; returns its wall time in seconds.

        `after_unit` (for inspection, e.g. tests reading buffers before they are reused) is
        called after every unit of the program."""
        if data:
            self.load_inputs(data)
        if self._writes is None:
            self._writes = self._input_writes()
        started = time.perf_counter()
        if self._ran:
            self._feed_back()
        for write in self._writes:
            write()
        if after_unit is None:
            self._run_program()
        else:
            for index in range(len(self._program)):
                self._run_program(index, index + 1)
                after_unit(self.units[index])
        seconds = time.perf_counter() - started
        self._ran = True
        self.steps_run += 1
        self.last_step_seconds = seconds
        return seconds

    def _input_writes(self) -> list[Callable[[], None]]:
        """What starts every step: the data inputs (their latest values) and the constants whose
        bytes the plan reuses, written into their preloaded buffers (host views made once)."""
        missing = [n for n in self.state_inputs if n not in self._state_loaded]
        missing += [n for n in self.data_inputs if n not in self._data]
        if missing:
            raise InputValuesError(
                f"no value for graph input(s) {', '.join(sorted(missing)[:5])}"
                f"{' ...' if len(missing) > 5 else ''}; give every input (e.g. --inputs "
                "values.npz) before the first step"
            )
        data, constants = self._data, self.model.initializers
        writes = [self._writer(self.plan.graph_inputs[n], data, n) for n in self.data_inputs]
        writes += [self._writer(self.plan.constants[n], constants, n) for n in self._reload]
        return writes

    def _writer(self, b_id: str, values: Mapping[str, np.ndarray], name: str
                ) -> Callable[[], None]:
        b = self.buffers[b_id]
        arena = self.arenas[b.device]
        if isinstance(arena, HostArena):
            target = arena.array(b.offset, b.dtype, b.shape)
            return lambda: np.copyto(target, values[name])
        return lambda: self.write_buffer(b_id, values[name])

    def _run_program(self, start: int = 0, stop: int | None = None) -> None:
        index = start
        try:
            for index in range(start, len(self._program) if stop is None else stop):
                self._program[index]()
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises several unrelated types
            raise RuntimePlanError(
                f"step failed in {self._describe(self.units[index])}: {str(exc).strip()[:300]}"
            ) from None

    # ----------------------------------------------------------------------------- outputs

    def output(self, name: str) -> np.ndarray:
        """A copy of a graph output's value after the last step."""
        if name not in self.plan.graph_outputs:
            raise InputValuesError(f"{name} is not an output of the model")
        return self.read_buffer(self.plan.graph_outputs[name])

    def outputs(self) -> dict[str, np.ndarray]:
        return {name: self.read_buffer(b_id) for name, b_id in self.plan.graph_outputs.items()}

    def read_buffer(self, b_id: str) -> np.ndarray:
        """A host copy of the bytes of buffer `b_id` as its dtype and shape."""
        b = self.buffers[b_id]
        arena = self.arenas[b.device]
        if isinstance(arena, HostArena):
            return arena.array(b.offset, b.dtype, b.shape).copy()
        out = np.empty(b.shape, dtype=b.dtype)
        self._transfers.copier(self._place(b), host_place(out, arena.device))()
        return out

    def write_buffer(self, b_id: str, value: np.ndarray) -> None:
        b = self.buffers[b_id]
        arena = self.arenas[b.device]
        if isinstance(arena, HostArena):
            np.copyto(arena.array(b.offset, b.dtype, b.shape), value, casting="no")
            return
        array = np.ascontiguousarray(value, dtype=b.dtype)
        self._transfers.copier(host_place(array, arena.device), self._place(b))()

    def output_pointers(self) -> list[tuple[str, int, int]]:
        """(buffer id, planned address, address onnxruntime's output value has) for every
        kernel output: equal addresses mean the kernel wrote into the arena slice itself."""
        found = []
        for binding, buffer_ids in self._kernels.bindings:
            for b_id, value in zip(buffer_ids, binding.get_outputs(), strict=True):
                b = self.buffers[b_id]
                found.append((b_id, self.arenas[b.device].pointer(b.offset), value.data_ptr()))
        return found

    def host_view(self, b_id: str) -> np.ndarray:
        """The buffer's bytes in a host arena as a typed view (no copy)."""
        b = self.buffers[b_id]
        arena = self.arenas[b.device]
        if not isinstance(arena, HostArena):
            raise TypeError(f"{b.device} is not a host arena; use read_buffer")
        return arena.array(b.offset, b.dtype, b.shape)

    # ----------------------------------------------------------------------------- building

    def _place(self, b: BufferSpec) -> Place:
        arena = self.arenas[b.device]
        host = arena.bytes[b.offset:b.offset + b.size] if isinstance(arena, HostArena) else None
        return Place(arena.device, arena.pointer(b.offset), b.size, host)

    def _compile(self, unit: Unit) -> Callable[[], None]:
        if isinstance(unit, CopyUnit):
            step = self.plan.steps[unit.step]
            assert isinstance(step, CopyStep)
            return self._transfers.copier(self._place(self.buffers[step.src]),
                                          self._place(self.buffers[step.dst]))
        return self._kernels.runner(self.plan.steps, unit, self.buffers, self.arenas)

    def _compile_state_feed(self) -> list[Callable[[], None]]:
        """Copies that move each updated state into its state buffer, in a safe order."""
        moves: list[tuple[BufferSpec, BufferSpec]] = []
        for state, output in self.plan.state_updates.items():
            dst = self.buffers[self.plan.graph_inputs[state]]
            src = self.buffers[self.plan.graph_outputs[output]]
            if _same_place(src, dst):
                continue  # the update chain ran in place: the new value is in the state's bytes
            if _overlap(src, dst):
                raise PlanCheckError(f"state {state}: its new value {src.id} partly overlaps its "
                                     f"buffer {dst.id}; the plan cannot be fed back")
            moves.append((src, dst))
        # a runs before b when a reads bytes b overwrites
        must_wait = [[i for i, (src, _) in enumerate(moves) if i != j and _overlap(src, dst)]
                     for j, (_, dst) in enumerate(moves)]
        try:
            order = topological_order(must_wait)
        except CycleError:
            raise PlanCheckError(
                "the updated states' buffers and the state buffers overlap in a cycle; feeding "
                "them back would need a temporary buffer"
            ) from None
        return [self._transfers.copier(self._place(moves[i][0]), self._place(moves[i][1]))
                for i in order]

    @property
    def states_fed_by_copy(self) -> list[str]:
        """States whose new value is copied into the state's buffer between steps; the others'
        update chains ran in place, leaving the new value in the state's own bytes."""
        return [state for state, output in self.plan.state_updates.items()
                if not _same_place(self.buffers[self.plan.graph_outputs[output]],
                                   self.buffers[self.plan.graph_inputs[state]])]

    def _feed_back(self) -> None:
        for copy in self._feed:
            copy()

    def _constants_to_reload(self) -> list[str]:
        """Constants whose bytes another buffer of the plan may write: rewritten every step.

        A view of a constant (a buffer of its storage that shares it as a view) writes nothing;
        any other buffer over its bytes (reuse after the constant's last read, or a value
        written in place over it) leaves the bytes changed for the next step."""
        reload = []
        for name, b_id in self.plan.constants.items():
            b = self.buffers[b_id]
            if any(o.id != b.id and _overlap(b, o)
                   and not (o.storage == b.storage and o.shares == "view")
                   for o in self.plan.buffers):
                reload.append(name)
        return reload

    def _describe(self, unit: Unit) -> str:
        if isinstance(unit, CopyUnit):
            return f"copy step {unit.step}"
        first = self.plan.steps[unit.steps[0]]
        assert isinstance(first, ComputeStep)
        return (f"step {unit.steps[0]} ({first.op_name}, {first.op_type} on {unit.device}"
                f"{f', segment of {len(unit.steps)} ops' if len(unit.steps) > 1 else ''})")


def _as_plan(plan: Plan | str | Path | dict) -> Plan:
    if isinstance(plan, Plan):
        return plan
    if isinstance(plan, dict):
        return parse_plan(plan)
    return read_plan(plan)


def _same_place(a: BufferSpec, b: BufferSpec) -> bool:
    return (a.device, a.offset) == (b.device, b.offset)


def _overlap(a: BufferSpec, b: BufferSpec) -> bool:
    return a.device == b.device and a.offset < b.offset + b.size and b.offset < a.offset + a.size


def _checked(name: str, value: np.ndarray, b: BufferSpec) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype != np.dtype(b.dtype) or list(array.shape) != list(b.shape):
        raise InputValuesError(
            f"input {name} is {array.dtype}{list(array.shape)}; the plan holds it as "
            f"{b.dtype}{b.shape}"
        )
    return array
