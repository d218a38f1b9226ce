"""The shipped dynamic-int8 export with its 1-D convolutions as matrix products on signed weights, for ONNX Runtime.

Where ONNX Runtime spends its time on Kokoro: ``ConvInteger`` took most of a 1-thread inference (the generator's
resblocks at 128 and 256 channels, kernels of 3 to 11; docs/performance.md). Its kernel multiplies unsigned
weights by unsigned activations (the export stores the weights as uint8 with a zero point) in a GEMM whose packed
operand is the activations, packed again at every call; given int8 weights the same kernel falls to a much slower
generic path. ``MatMulIntegerToFloat``
(com.microsoft) multiplies uint8 activations by int8 weights packed once when the session opens, in MLAS's u8s8
kernels, and scales the result to float itself.

So each stride-1 ``ConvInteger`` (with its ``DynamicQuantizeLinear`` input, its optional int32 bias ``Add`` and the
``Cast`` and ``Mul`` that scale it to float) becomes, on the same quantized activation ``x_q`` [1, C_in, T]::

    Transpose -> [1, T, C_in]; Pad by the conv's pads with x's zero point (the quantized 0.0, as ConvInteger pads);
    k Slices shifted by the dilation, Concat -> [1, T, k x C_in]   (im2col on uint8)
    MatMulIntegerToFloat(cols, W', x_scale, w_scale', x_zp, 0, bias) -> [1, T, C_out]; Transpose -> [1, C_out, T]

``W'`` holds each output channel's weights, less their zero point, requantized symmetrically to [-64, 64] with a
scale of its own (`LIMIT`). Why not the same integers shifted by 128 into int8: without VNNI, MLAS's u8s8 kernel
adds pairs of uint8 x int8 products in int16 with saturation (``vpmaddubsw``), and at 255 x 128 x 2 a pair
clips, and that shifted form drifted far from the shipped graph's audio, while at +-64 no pair can reach 2^15
and the per-channel scale gives back most of the bit, landing near the exact-integer uint8 form (as slow as
``ConvInteger``) at the same speed (docs/performance.md).
The bias is added in float after the scaling, not as ``Floor(b / scale)`` before it. The output check decides
whether the form keeps the voice (the tuner ranks it by measurement beside ONNX Runtime on the shipped file and
never chooses a form that fails it). Strided convolutions (3 in the export) are left as they are.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from app.forms.dequantize import Graph, NoMatch, conv_bias, replace

OPSET_DOMAIN = "com.microsoft"
LIMIT = 64
"""Weights requantized to [-LIMIT, LIMIT]: 255 x 64 x 2 = 32,640, so no pair of products saturates int16."""


def _rewrite(g: Graph, node: Any) -> tuple[list[Any], list[Any]]:
    from onnx import helper, numpy_helper

    attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if list(attributes.get("strides", [1])) != [1] or attributes.get("group", 1) != 1:
        raise NoMatch("strided or grouped")
    quantize = g.producer.get(node.input[0])
    if quantize is None or quantize.op_type != "DynamicQuantizeLinear":
        raise NoMatch("the activation is not dynamically quantized")
    if len(node.input) < 4 or node.input[1] not in g.initializers or node.input[3] not in g.initializers:
        raise NoMatch("the weight or its zero point is not a constant")
    weight = numpy_helper.to_array(g.initializers[node.input[1]])
    zero = numpy_helper.to_array(g.initializers[node.input[3]]).reshape(-1)
    if weight.dtype != np.uint8 or weight.ndim != 3 or zero.dtype != np.uint8:
        raise NoMatch("not a 1-D convolution with uint8 weights")
    outputs, inputs, k = weight.shape
    dilation = int(attributes.get("dilations", [1])[0])
    pads = [int(p) for p in attributes.get("pads", [0, 0])]
    if pads[0] != pads[1] or pads[0] != dilation * (k - 1) // 2 or attributes.get("auto_pad", b"NOTSET") != b"NOTSET":
        raise NoMatch("not a length-keeping convolution")
    bias, applied, after = conv_bias(g, node)
    cast = g.only_consumer(after, "Cast")
    mul = g.only_consumer(cast.output[0], "Mul")
    x_q, x_scale, x_zero = quantize.output
    scale = g.weight_scale(mul, cast.output[0], x_scale).reshape(-1).astype(np.float32)
    name = node.name or node.output[0]
    columns = np.ascontiguousarray(weight.transpose(2, 1, 0).reshape(k * inputs, outputs))
    centred = columns.astype(np.float64) - np.broadcast_to(zero, (outputs,)).astype(np.float64)
    reach = np.maximum(np.abs(centred).max(axis=0), 1.0)
    signed = np.clip(np.round(centred * (LIMIT / reach)), -LIMIT, LIMIT).astype(np.int8)
    zeros = np.zeros(outputs, np.int8)
    scale = (np.broadcast_to(scale, (outputs,)) * reach / LIMIT).astype(np.float32)
    nodes = [helper.make_node("Transpose", [x_q], [f"{name}_xt"], perm=[0, 2, 1])]
    current = f"{name}_xt"
    if k > 1:
        pad = pads[0]
        if pad:
            widths = g.tensor(f"{name}_pads", np.array([0, pad, 0, 0, pad, 0], np.int64))
            nodes.append(helper.make_node("Pad", [current, widths, x_zero], [f"{name}_xp"], mode="constant"))
            current = f"{name}_xp"
        axis = g.tensor(f"{name}_axis", np.array([1], np.int64))
        parts = []
        for j in range(k):
            rest = 2 * pad - j * dilation  # padded length T + 2 pad; this tap's window ends that far before it
            start = g.tensor(f"{name}_start{j}", np.array([j * dilation], np.int64))
            end = g.tensor(f"{name}_end{j}", np.array([-rest if rest else np.iinfo(np.int64).max], np.int64))
            nodes.append(helper.make_node("Slice", [current, start, end, axis], [f"{name}_tap{j}"]))
            parts.append(f"{name}_tap{j}")
        nodes.append(helper.make_node("Concat", parts, [f"{name}_cols"], axis=2))
        current = f"{name}_cols"
    inputs_mm = [current, g.tensor(f"{name}_w", signed), x_scale,
                 g.tensor(f"{name}_wscale", np.broadcast_to(scale, (outputs,)).copy()), x_zero,
                 g.tensor(f"{name}_wzero", zeros)]
    if bias is not None:
        inputs_mm.append(g.tensor(f"{name}_bias", g.array(bias).reshape(-1)))
    nodes.append(helper.make_node("MatMulIntegerToFloat", inputs_mm, [f"{name}_mm"], domain=OPSET_DOMAIN,
                                  name=f"{name}_gemm"))
    nodes.append(helper.make_node("Transpose", [f"{name}_mm"], [mul.output[0]], perm=[0, 2, 1]))
    return nodes, [node, *applied, cast, mul]


def rewrite(source: Path, target: Path) -> dict[str, int]:
    """Write ``source`` with its stride-1 ``ConvInteger`` nodes as im2col and ``MatMulIntegerToFloat`` on int8
    weights to ``target``; returns how many were rewritten (``ConvInteger``) and left (``skipped``)."""
    import onnx

    model = onnx.load(str(source))
    counts = rewrite_model(model)
    onnx.save(model, str(target))
    return counts


def rewrite_model(model: Any) -> dict[str, int]:
    """`rewrite` on a loaded model, in place."""
    from onnx import helper

    counts = replace(model, {"ConvInteger": _rewrite}, "convgemm")
    if not any(entry.domain == OPSET_DOMAIN for entry in model.opset_import):
        model.opset_import.append(helper.make_opsetid(OPSET_DOMAIN, 1))
    return counts
