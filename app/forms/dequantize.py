"""The shipped dynamic-int8 export with its weights dequantized, once, to plain f32 MatMul, Conv and LSTM.

The export quantizes every weight to int8 and every activation at run time (``DynamicQuantizeLinear`` then
``MatMulInteger``/``ConvInteger``, and ``DynamicQuantizeLSTM``). ONNX Runtime has kernels for that; OpenVINO
turns each into a dozen element-wise ops (Round, Clamp, Convert, ReduceMin/Max, …: 971 Eltwise, 764 Reorder
and 749 Convert nodes in its compiled graph), which is where it lost to ONNX Runtime. Here each quantized
operation becomes its float original with the weights ``(w_q - zero_point) * scale``: the activation's
quantization round trip goes away, so the audio differs from the shipped model's about as much as another
runtime's does (the output check decides; `app.forms.store` keeps the form only where it passes).

Patterns, as the ONNX Runtime quantizer writes them (anything else is left as it is):

- ``x -> DynamicQuantizeLinear -> MatMulInteger(x_q, w_q, x_zp, w_zp) -> Cast -> Mul(x_scale * w_scale)``
  becomes ``MatMul(x, w)``;
- the same with ``ConvInteger`` and an optional ``Add`` of the int32 bias (``Floor(b / (x_scale * w_scale))``
  cast and reshaped) becomes ``Conv(x, w, b)`` with the float bias and the ConvInteger's attributes;
- ``DynamicQuantizeLSTM(X, W_q, R_q, B, …, W_scale, W_zp, R_scale, R_zp)`` becomes ``LSTM`` with W and R
  dequantized and transposed to ONNX's ``[directions, 4 x hidden, input]`` layout.

Nodes left without a consumer are removed. The harmonic source's running phase is then rewritten in fixed point
(`app.forms.phase`), so that the form also keeps the voice under OpenVINO's bf16 hint.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from app.forms import phase

log = logging.getLogger(__name__)

FloatArray = npt.NDArray[np.float32]


class Graph:
    """Look-ups over one ONNX graph while it is rewritten."""

    def __init__(self, graph: Any) -> None:
        from onnx import numpy_helper

        self.graph = graph
        self.initializers = {t.name: t for t in graph.initializer}
        self.producer = {name: node for node in graph.node for name in node.output}
        self.consumers: dict[str, list[Any]] = collections.defaultdict(list)
        for node in graph.node:
            for name in node.input:
                self.consumers[name].append(node)
        self._to_array = numpy_helper.to_array
        self.added: dict[str, npt.NDArray[Any]] = {}

    def array(self, name: str) -> FloatArray:
        return np.asarray(self._to_array(self.initializers[name]), dtype=np.float32)

    def only_consumer(self, name: str, op_type: str) -> Any:
        found = self.consumers[name]
        if len(found) != 1 or found[0].op_type != op_type:
            raise NoMatch(f"{name} feeds {[n.op_type for n in found]}, expected one {op_type}")
        return found[0]

    def weight_scale(self, mul: Any, cast_output: str, x_scale: str) -> FloatArray:
        """The weight's scale: the initializer multiplied with the activation's scale into ``mul``'s factor."""
        factor = next(name for name in mul.input if name != cast_output)
        scales = self.producer.get(factor)
        if scales is None or scales.op_type != "Mul" or x_scale not in scales.input:
            raise NoMatch(f"{factor} is not x_scale * w_scale")
        return self.array(next(name for name in scales.input if name != x_scale))

    def constant(self, name: str, value: FloatArray) -> str:
        return self.tensor(name, value.astype(np.float32))

    def tensor(self, name: str, value: npt.NDArray[Any]) -> str:
        """An initializer added to the graph, of ``value``'s own type."""
        self.added.setdefault(name, value)
        return name


class NoMatch(Exception):
    """A quantized node whose neighbourhood is not the pattern expected: it is left as it is."""


Rewrite = Callable[[Graph, Any], tuple[list[Any], list[Any]]]
"""A node's replacement: the nodes that take its place, and the nodes it replaces (itself among them)."""


def _per_channel(value: FloatArray, ndim: int) -> FloatArray:
    """A per-output-channel vector shaped to broadcast over a weight of ``ndim`` dimensions (axis 0)."""
    return value.reshape((-1,) + (1,) * (ndim - 1)) if value.ndim == 1 else value


def _matmul(g: Graph, node: Any) -> tuple[list[Any], list[Any]]:
    from onnx import helper

    quantize = g.producer.get(node.input[0])
    if quantize is None or quantize.op_type != "DynamicQuantizeLinear":
        raise NoMatch("the activation is not dynamically quantized")
    cast = g.only_consumer(node.output[0], "Cast")
    mul = g.only_consumer(cast.output[0], "Mul")
    weight = (g.array(node.input[1]) - g.array(node.input[3])) * g.weight_scale(mul, cast.output[0],
                                                                               quantize.output[1])
    name = g.constant(f"{node.input[1]}_f32", weight)
    return [helper.make_node("MatMul", [quantize.input[0], name], [mul.output[0]], name=f"{node.name}_f32")], \
        [node, cast, mul]


def conv_bias(g: Graph, node: Any) -> tuple[str | None, list[Any], str]:
    """A ``ConvInteger``'s float bias, when the quantizer added one (``Add`` of ``Floor(b / scale)`` cast and
    reshaped), the nodes that apply it, and the tensor the ``Cast`` to float then reads."""
    after = node.output[0]
    following = g.consumers[after]
    if len(following) != 1 or following[0].op_type != "Add":
        return None, [], after
    add = following[0]
    chain = [g.producer.get(next(i for i in add.input if i != after))]
    for _ in range(3):  # Reshape <- Cast <- Floor <- Div(bias, scales)
        chain.append(g.producer.get(chain[-1].input[0]) if chain[-1] is not None else None)
    division = chain[-1]
    if division is None or [n.op_type if n is not None else None for n in chain] != [
            "Reshape", "Cast", "Floor", "Div"]:
        raise NoMatch("the bias is not Floor(b / scale) cast and reshaped")
    return division.input[0], [add], add.output[0]


def _conv(g: Graph, node: Any) -> tuple[list[Any], list[Any]]:
    from onnx import helper

    quantize = g.producer.get(node.input[0])
    if quantize is None or quantize.op_type != "DynamicQuantizeLinear":
        raise NoMatch("the activation is not dynamically quantized")
    bias, applied, after = conv_bias(g, node)
    cast = g.only_consumer(after, "Cast")
    mul = g.only_consumer(cast.output[0], "Mul")
    raw = g.array(node.input[1])
    zero = _per_channel(g.array(node.input[3]), raw.ndim)
    scale = _per_channel(g.weight_scale(mul, cast.output[0], quantize.output[1]), raw.ndim)
    name = g.constant(f"{node.input[1]}_f32", (raw - zero) * scale)
    attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    conv = helper.make_node("Conv", [quantize.input[0], name, *([bias] if bias else [])], [mul.output[0]],
                            name=f"{node.name}_f32", **attributes)
    return [conv], [node, *applied, cast, mul]


def _lstm(g: Graph, node: Any) -> tuple[list[Any], list[Any]]:
    from onnx import helper

    inputs = list(node.input) + [""] * (12 - len(node.input))

    def weight(quantized: str, scale: str, zero: str) -> str:
        raw = g.array(quantized)
        value = (raw - _per_channel(g.array(zero), raw.ndim)) * _per_channel(g.array(scale), raw.ndim)
        # DynamicQuantizeLSTM keeps W as [directions, input, 4 x hidden]; LSTM wants [directions, 4 x hidden, input].
        return g.constant(f"{quantized}_f32", np.ascontiguousarray(np.transpose(value, (0, 2, 1))))

    if not all(inputs[i] in g.initializers for i in (1, 2, 8, 9, 10, 11)):
        raise NoMatch("the LSTM's weights or their scales are not constants")
    ordered = [inputs[0], weight(inputs[1], inputs[8], inputs[9]), weight(inputs[2], inputs[10], inputs[11]),
               *inputs[3:8]]
    while ordered[-1] == "":
        ordered.pop()
    attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    return [helper.make_node("LSTM", ordered, list(node.output), name=f"{node.name}_f32", **attributes)], [node]


_REWRITES: dict[str, Rewrite] = {"MatMulInteger": _matmul, "ConvInteger": _conv, "DynamicQuantizeLSTM": _lstm}


def dequantize(source: Path, target: Path) -> dict[str, int]:
    """Write ``source`` with its dynamically quantized operations as float ones to ``target``; returns how
    many of each kind were rewritten (and ``skipped``: quantized nodes that matched no pattern)."""
    import onnx

    model = onnx.load(str(source))
    counts = replace(model, _REWRITES, "dequantize")
    if phase.rewrite(model):  # the harmonic source's running phase in fixed point: bf16 keeps the voice
        counts["SineGen phase"] = 1
    onnx.save(model, str(target))
    return counts


def replace(model: Any, rewrites: dict[str, Rewrite], what: str) -> dict[str, int]:
    """Apply ``rewrites`` (by op type) to every node of ``model`` they match, in place; returns how many of each op
    type were rewritten and how many were ``skipped`` (no match, logged under ``what``)."""
    g = Graph(model.graph)
    counts: collections.Counter[str] = collections.Counter()
    gone: set[int] = set()
    added: list[Any] = []
    for node in list(model.graph.node):
        rewrite = rewrites.get(node.op_type)
        if rewrite is None:
            continue
        try:
            replacement, replaced = rewrite(g, node)
        except NoMatch as exc:
            log.info("%s: %s left as it is: %s", what, node.name, exc)
            counts["skipped"] += 1
            continue
        added.extend(replacement)
        gone.update(id(n) for n in replaced)
        counts[node.op_type] += 1
    rebuild(model, g, added, gone)
    return dict(counts)


def rebuild(model: Any, g: Graph, added: list[Any], gone: set[int]) -> None:
    """``model``'s graph with the nodes whose ids are in ``gone`` replaced by ``added`` and ``g``'s new
    initializers: only what the outputs depend on is kept, in an order ONNX accepts."""
    from onnx import numpy_helper

    nodes = live([n for n in model.graph.node if id(n) not in gone] + added, {o.name for o in model.graph.output})
    initializers = list(model.graph.initializer) + [numpy_helper.from_array(v, k) for k, v in g.added.items()]
    used = {name for node in nodes for name in node.input}
    del model.graph.node[:]
    model.graph.node.extend(topological(nodes, {i.name for i in model.graph.input} | set(g.initializers) |
                                        set(g.added)))
    kept = [t for t in initializers if t.name in used]
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)


def live(nodes: list[Any], outputs: set[str]) -> list[Any]:
    """The nodes the graph outputs depend on, in their order."""
    producer = {name: node for node in nodes for name in node.output}
    live: set[int] = set()
    todo = list(outputs)
    while todo:
        node = producer.get(todo.pop())
        if node is not None and id(node) not in live:
            live.add(id(node))
            todo.extend(name for name in node.input if name)
    return [n for n in nodes if id(n) in live]


def topological(nodes: list[Any], available: set[str]) -> list[Any]:
    """Order ``nodes`` so that each comes after the producers of its inputs (ONNX requires it)."""
    ready = set(available) | {""}
    ordered: list[Any] = []
    todo = nodes
    while todo:
        waiting = []
        for node in todo:
            if all(name in ready for name in node.input):
                ordered.append(node)
                ready.update(node.output)
            else:
                waiting.append(node)
        if len(waiting) == len(todo):
            raise ValueError(f"the rewritten graph has {len(waiting)} nodes whose inputs nothing produces")
        todo = waiting
    return ordered
