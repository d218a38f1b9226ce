"""The ``convgemm`` graph with its activations kept channels last, [1, T, C], between the convolutions.

Each convolution of the ``convgemm`` form multiplies [T, k x C] columns by its weights, so it transposes its
quantized input from [1, C, T] to [1, T, C] and its float output back, and everything between two convolutions
(AdaIN, Snake, the residual adds, the quantization of the next input) runs on [1, C, T]. On the Intel Xeon with AMX
those transposes took as long as the GEMMs themselves (docs/performance.md). ONNX Runtime's own transpose optimizer
does not remove them: it stops at ``DynamicQuantizeLinear`` and at ``MatMulIntegerToFloat``.

So every rank-3 tensor ``t`` gets a twin, ``t`` with its last two axes swapped, computed instead of ``t`` wherever
that costs no more:

- ``Transpose(t, perm=[0, 2, 1])`` *is* the twin of ``t``, and ``t`` the twin of its output: a transpose of a
  tensor whose twin is already made is dropped and its readers read the twin;
- an element-wise node (`UNARY`, `BINARY`) or ``DynamicQuantizeLinear`` (its scale and zero point are per tensor)
  that reads a twin made here runs on the twins of its inputs instead: a constant is transposed once, a tensor of
  one element broadcasts either way, any other input is transposed where it enters;
- ``ReduceMean`` over T with ``keepdims`` (AdaIN's mean and variance) becomes a product with a row of ones divided
  by T: ONNX Runtime reduces the middle axis of [1, T, C] about 40 x slower than the last axis of [1, C, T], while
  the product runs as fast.

A tensor still read as it was (by a node left as it is, or as a graph output) is made back from its twin by one
transpose. The result is the same function of the input up to the order of float additions in the means, which
dynamic quantization then amplifies at the next convolution (the output check decides, as for every form).
The ranks come from one run of the graph (`probe_shapes`), since ONNX's shape inference knows none of ONNX
Runtime's contrib operators.
"""

from __future__ import annotations

import collections
from typing import Any

import numpy as np

from app.forms.dequantize import Graph, rebuild

UNARY = frozenset({"Sin", "Cos", "Sqrt", "LeakyRelu", "Tanh", "Exp", "Neg", "Abs", "Relu", "Sigmoid", "Reciprocal"})
BINARY = frozenset({"Add", "Sub", "Mul", "Div", "Pow"})
SWAP = [0, 2, 1]

Shapes = dict[str, tuple[int, ...]]


def probe_shapes(model: Any, feeds: dict[str, np.ndarray]) -> Shapes:
    """Every tensor's shape in one run of ``model`` on ``feeds`` (ONNX Runtime, graph optimizations off)."""
    import onnx
    import onnxruntime as ort

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    named = {o.name for o in probe.graph.output}
    for node in probe.graph.node:
        for name in node.output:
            if name and name not in named:
                probe.graph.output.append(onnx.ValueInfoProto(name=name))
                named.add(name)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(probe.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return {name: np.asarray(value).shape for name, value in zip(names, session.run(names, feeds), strict=True)}


def channels_last(model: Any, shapes: Shapes) -> dict[str, int]:
    """Rewrite ``model`` in place as the module says; returns what was done, by kind."""
    from onnx import helper, numpy_helper

    g = Graph(model.graph)
    counts: collections.Counter[str] = collections.Counter()

    def shape(name: str) -> tuple[int, ...] | None:
        if name in shapes:
            return shapes[name]
        return tuple(g.initializers[name].dims) if name in g.initializers else None

    def activation(name: str) -> bool:  # rank 3 and more than one element: its layout matters
        found = shape(name)
        return found is not None and len(found) == 3 and int(np.prod(found)) > 1

    twin: dict[str, str] = {}  # a tensor -> the tensor holding it with its last two axes swapped
    made: set[str] = set()  # tensors whose twin this pass computes, or gets for free
    renamed: dict[str, str] = {}  # a dropped transpose's output -> the twin it was
    added: list[Any] = []
    gone: set[int] = set()
    from_twin: dict[str, str] = {}  # a tensor no longer computed -> its twin, to transpose back where still read

    def twin_of(name: str) -> str:
        if name not in twin:
            twin[name] = f"{name}__tc"
            if name in g.initializers:
                g.tensor(twin[name], np.ascontiguousarray(numpy_helper.to_array(g.initializers[name]).transpose(SWAP)))
            else:
                added.append(helper.make_node("Transpose", [name], [twin[name]], perm=SWAP, name=f"{name}__tc"))
                counts["transposes in"] += 1
        return twin[name]

    def keep(node: Any) -> None:  # left as it is, reading a dropped transpose's twin where it read its output
        inputs = [renamed.get(name, name) for name in node.input]
        del node.input[:]
        node.input.extend(inputs)

    for node in list(model.graph.node):
        inputs = list(node.input)
        if node.op_type == "Transpose" and activation(inputs[0]) and _perm(node) == SWAP:
            if inputs[0] in made:
                renamed[node.output[0]] = twin[inputs[0]]
                gone.add(id(node))
                counts["transposes dropped"] += 1
            else:
                keep(node)
            twin[node.output[0]] = inputs[0]
            made.add(node.output[0])
            continue
        if not any(activation(name) and name in made for name in inputs) or not _convertible(node, inputs, shape, g):
            keep(node)
            continue
        outputs = []
        for name in node.output:
            if name and activation(name):
                twin[name] = f"{name}__tc"
                made.add(name)
                from_twin[name] = twin[name]
                outputs.append(twin[name])
            else:
                outputs.append(name)  # a per-tensor scale or zero point: the same either way
        sources = [twin_of(name) if name and activation(name) else name for name in inputs]
        label = f"{node.name or node.output[0]}__tc"
        if node.op_type == "ReduceMean":
            added.extend(_mean_over_time(g, sources[0], outputs[0], label))
        else:
            attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            added.append(helper.make_node(node.op_type, sources, outputs, name=label, domain=node.domain, **attributes))
        gone.add(id(node))
        counts[node.op_type] += 1
    read = {name for node in model.graph.node if id(node) not in gone for name in node.input}
    read |= {name for node in added for name in node.input} | {o.name for o in model.graph.output}
    for name, source in from_twin.items():
        if name in read:
            added.append(helper.make_node("Transpose", [source], [name], perm=SWAP, name=f"{name}__back"))
            counts["transposes back"] += 1
    for output in model.graph.output:
        if output.name in renamed:
            added.append(helper.make_node("Identity", [renamed[output.name]], [output.name]))
    rebuild(model, g, added, gone)
    return dict(counts)


def _perm(node: Any) -> list[int]:
    from onnx import helper

    return next((list(helper.get_attribute_value(a)) for a in node.attribute if a.name == "perm"), [])


def _convertible(node: Any, inputs: list[str], shape: Any, g: Graph) -> bool:
    if node.op_type in UNARY or node.op_type == "DynamicQuantizeLinear":
        return True
    if node.op_type in BINARY:
        # Every input rank 3 (twinned) or of one element (broadcasts the same in both layouts).
        return all(not name or _rank(shape(name)) == 3 or _size(shape(name)) == 1 for name in inputs)
    if node.op_type == "ReduceMean":
        from onnx import helper, numpy_helper

        attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if len(inputs) > 1:
            if inputs[1] not in g.initializers:
                return False
            axes = [int(a) for a in numpy_helper.to_array(g.initializers[inputs[1]]).reshape(-1)]
        else:
            axes = list(attributes.get("axes", []))
        return attributes.get("keepdims", 1) == 1 and [a % 3 for a in axes] == [2]
    return False


def _rank(found: tuple[int, ...] | None) -> int:
    return -1 if found is None else len(found)


def _size(found: tuple[int, ...] | None) -> int:
    return -1 if found is None else int(np.prod(found))


def _mean_over_time(g: Graph, source: str, output: str, label: str) -> list[Any]:
    """The mean over axis 1 of [1, T, C] ``source``, kept as [1, 1, C]: ones [1, T] times it, over T."""
    from onnx import helper, numpy_helper

    one = g.tensor("channels_last_one", np.array([1], np.int64))
    return [helper.make_node("Shape", [source], [f"{label}_t"], start=1, end=2),
            helper.make_node("Concat", [one, f"{label}_t"], [f"{label}_1t"], axis=0),
            helper.make_node("ConstantOfShape", [f"{label}_1t"], [f"{label}_ones"],
                             value=numpy_helper.from_array(np.array([1.0], np.float32))),
            helper.make_node("MatMul", [f"{label}_ones", source], [f"{label}_sum"]),
            helper.make_node("Cast", [f"{label}_t"], [f"{label}_tf"], to=1),
            helper.make_node("Div", [f"{label}_sum", f"{label}_tf"], [output])]
