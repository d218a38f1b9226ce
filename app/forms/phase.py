"""Kokoro's harmonic source with its running phase in fixed point, so that bf16 inference keeps the voice.

The generator's SineGen (``m_source/l_sin_gen``) turns the predicted pitch into per-sample cycles, averages them
down to frame rate (``Resize``, 1/300), sums them over time (``CumSum``), scales the sum to radians x 300 and
upsamples it back linearly (``Resize``, x 300) into a ``Sin``. The running phase reaches thousands of radians.
Under OpenVINO's bf16 hint the CPU plugin runs that chain in bf16 (openvino 2026.4.1: the ``CumSum`` too), whose
8-bit mantissa cannot hold such a phase: bf16 on the dequantized form ran well ahead of ONNX Runtime but failed
the output check on its longest chunk.

`rewrite` replaces the chain between the frame-rate cycles and the ``Sin`` with integer arithmetic, which no
float precision hint touches: the cycles in fixed point (``Round`` x 2^20 to int32), the ``CumSum`` on int32,
the phase wrapped to whole cycles (``BitwiseAnd``) before the x 300, and the linear upsampling done by hand on
the wrapped values (a frame's wrapped start plus the fraction of its increment, ONNX ``Resize``'s half-pixel
coordinates clamped at both ends as ``linear`` mode does), so that only the final phase, in [0, 2 pi), is float.
In exact arithmetic it is the same function (``sin`` is 2 pi-periodic); in practice it trades f32's rounding of
a large running sum for a 2^-20-cycle rounding of each frame's increment: on ONNX Runtime the log-mel distance
against the shipped model is unchanged, and OpenVINO bf16 on the dequantized form passes the check where it
failed (docs/performance.md). Every intermediate stays below 2^31: the running sum is at most 2^20 x the
frames' cycles (about 180 for 30 s of speech), the products below 600 x 2^20.
"""

from __future__ import annotations

import math
from typing import Any

SINE_GEN = "/decoder/decoder/generator/m_source/l_sin_gen/"
"""Where the kokoro-onnx v1.0 exports keep the harmonic source's phase (int8, fp16 and fp32 name it alike)."""
UPSAMPLE = 300
"""Samples per frame: the chain's down- and upsampling factor (the export's own constants; checked below)."""
FRACTION_BITS = 20


def rewrite(model: Any) -> bool:
    """Rewrite ``model`` (an ``onnx.ModelProto``, in place); False where it has no SineGen chain of the known shape."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    graph = model.graph
    nodes = {n.name: n for n in graph.node}
    cumsum, sin, scale = (nodes.get(SINE_GEN + name) for name in ("CumSum", "Sin", "Mul_4"))
    if cumsum is None or sin is None or scale is None or not _scales_by(graph, scale, UPSAMPLE):
        return False
    cycles = cumsum.input[0]  # [1, frames, harmonics]: each frame's mean cycles per sample
    prefix = SINE_GEN + "fixed/"
    added: list[Any] = []
    constants: list[Any] = []

    def const(name: str, value: object, dtype: Any) -> str:
        constants.append(numpy_helper.from_array(np.array(value, dtype=dtype), prefix + name))
        return prefix + name

    def op(kind: str, inputs: list[str], name: str, **attributes: Any) -> str:
        added.append(helper.make_node(kind, inputs, [prefix + name], name=prefix + name, **attributes))
        return prefix + name

    cycle = const("cycle", (1 << FRACTION_BITS) - 1, np.int32)  # masks to within a cycle, in 2^-20 cycles
    cycle_fine = const("cycle_fine", (1 << (FRACTION_BITS + 1)) - 1, np.int32)  # the same in 2^-21 cycles
    span = const("span", 2 * UPSAMPLE, np.int32)
    zero, one, two = (const(name, value, np.int32) for name, value in (("zero", 0), ("one", 1), ("two", 2)))
    # Fixed point: frame increments in 2^-20 cycles, their running sum, wrapped to a cycle.
    fixed = op("Cast", [op("Round", [op("Mul", [cycles, const("scale", float(1 << FRACTION_BITS), np.float32)],
                                        "scaled")], "rounded")], "increments", to=TensorProto.INT32)
    wrapped = op("BitwiseAnd", [op("CumSum", [fixed, const("time", 1, np.int32)], "sum"), cycle], "wrapped")
    # x 300 in units of 2^-21 cycles (600 x), wrapped again: each frame's phase at its centre.
    start = op("BitwiseAnd", [op("Mul", [wrapped, span], "start_x600"), cycle_fine], "start")
    # Output sample j sits at frame coordinate (2j + 1 - 300) / 600 (half-pixel), clamped to [0, frames - 1].
    count = op("Gather", [op("Shape", [cycles], "shape"), const("frame_axis", [1], np.int64)], "frames64", axis=0)
    frames = op("Squeeze", [op("Cast", [count], "frames1", to=TensorProto.INT32)], "frames")
    samples = op("Range", [zero, op("Mul", [frames, const("upsample", UPSAMPLE, np.int32)], "samples"), one], "j")
    position = op("Max", [op("Add", [op("Mul", [samples, two], "j2"), const("offset", 1 - UPSAMPLE, np.int32)],
                             "numerator"), zero], "position")
    left = op("Div", [position, span], "left")
    last = op("Sub", [frames, one], "last")
    beyond = op("GreaterOrEqual", [left, last], "beyond")
    weight = op("Where", [beyond, zero, op("Sub", [position, op("Mul", [left, span], "left_x600")], "fraction")],
                "weight")  # the fraction x 600; 0 past the last frame's centre
    left = op("Min", [left, last], "left_clamped")
    right = op("Min", [op("Add", [left, one], "next"), last], "right")
    # phase = start[left] + fraction x 300 x increment[right], in 2^-21 cycles, wrapped; then radians.
    phase = op("Add", [op("Gather", [start, left], "start_at", axis=1),
                       op("Mul", [op("Unsqueeze", [weight, const("axes", [0, 2], np.int64)], "weight3"),
                                  op("Gather", [fixed, right], "increment_at", axis=1)], "advance")], "phase_fixed")
    radians = op("Mul", [op("Cast", [op("BitwiseAnd", [phase, cycle_fine], "phase_wrapped")], "phase_float",
                            to=TensorProto.FLOAT), const("radian", 2 * math.pi / (1 << (FRACTION_BITS + 1)),
                                                        np.float32)], "radians")
    sin.input[0] = radians
    at = list(graph.node).index(sin)
    for offset, node in enumerate(added):
        graph.node.insert(at + offset, node)
    graph.initializer.extend(constants)
    _drop_unused(graph)
    return True


def _scales_by(graph: Any, node: Any, factor: int) -> bool:
    """Whether ``node`` multiplies by the constant ``factor`` (the chain's x 300 before its upsampling)."""
    from onnx import numpy_helper

    values = {t.name: t for t in graph.initializer}
    producers = {o: n for n in graph.node for o in n.output}
    for name in node.input:
        tensor = values.get(name)
        if tensor is None and name in producers and producers[name].op_type == "Constant":
            tensor = producers[name].attribute[0].t
        if tensor is not None and numpy_helper.to_array(tensor).size == 1:
            return float(numpy_helper.to_array(tensor).reshape(-1)[0]) == factor
    return False


def _drop_unused(graph: Any) -> None:
    """Remove the nodes nothing reads any more (the float chain from the ``CumSum`` to the old ``Sin`` input), and
    the constants only they read."""
    while True:
        read = {name for n in graph.node for name in n.input} | {o.name for o in graph.output}
        dead = [n for n in graph.node if not any(o in read for o in n.output)]
        if not dead:
            break
        for n in dead:
            graph.node.remove(n)
    read = {name for n in graph.node for name in n.input}
    unused = [t for t in graph.initializer if t.name not in read]
    for tensor in unused:
        graph.initializer.remove(tensor)
