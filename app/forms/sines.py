"""Every ``Sin`` of an OpenVINO model as a polynomial in element-wise operations OpenVINO compiles.

The CPU plugin has no compiled kernel for ``Sin`` (openvino 2026.4.1: ``ref_any_f32``, one scalar call per element,
with a reorder to f32 and back around it under the bf16 hint): on the dequantized form in bf16 on one thread of
the Intel Xeon with AMX, the generator's 48 Snake activations (``x + sin(a x)^2 / a``) and three other ``Sin``
took 27 % of the nodes' time, more than its convolutions. Multiplications, additions and ``Round`` run in its
JIT element-wise kernels, fused where a chain allows.

So ``sin(x)`` becomes, with ``k = round(x / pi)`` and ``r = x - k pi`` in [-pi/2, pi/2] (``pi`` split in two
constants, Cody and Waite, so that ``k pi`` keeps f32's precision up to ``|x|`` of about 10^4):
``sin(x) = (-1)^k r P(r^2)``, with ``P`` a cubic (`POLYNOMIAL`): within 1.2e-6 of ``sin``, far below the bf16
rounding of every activation around it, in three multiply-adds (the Taylor series to ``r^11`` took five, for
7 % more time per inference and no audible or measurable difference). A ``Sin`` whose only consumer squares it
(Snake's ``Pow(sin(u), 2)``) becomes ``(r P(r^2))^2`` with no sign, since ``sin^2`` has period pi.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from app.forms.ovgraph import constant_value

POLYNOMIAL = (0.9999992456055031, -0.16665682729337752, 0.008313258712494019, -0.0001852435730243616)
"""sin(r) / r as a polynomial in r^2 on [-pi/2, pi/2], lowest order first: near-minimax (Lawson's iteration on
Chebyshev nodes), sin(r) within 1.2e-6, a three-thousandth of bf16's rounding."""
PI_HIGH = float(np.float32(math.pi))
PI_LOW = math.pi - PI_HIGH


def rewrite(model: Any) -> dict[str, int]:
    """Replace every ``Sin`` of ``model`` (an ``openvino.Model``, in place); returns how many, by kind."""
    counts = {"sin": 0, "sin squared": 0}
    for node in model.get_ordered_ops():
        if node.get_type_name() != "Sin":
            continue
        x = node.input_value(0)
        square = _only_square(node)
        if square is not None:
            _, s = _reduced(x)
            square.output(0).replace(_ops().multiply(s, s).output(0))
            counts["sin squared"] += 1
        else:
            node.output(0).replace(sin(x).output(0))
            counts["sin"] += 1
    model.validate_nodes_and_infer_types()
    return counts


def sin(x: Any) -> Any:
    """``sin(x)`` for an OpenVINO output ``x``, as element-wise operations."""
    ops = _ops()
    k, s = _reduced(x)
    # (-1)^k = 1 - 2 (k - 2 floor(k / 2))
    odd = ops.subtract(k, ops.multiply(ops.floor(ops.multiply(k, _scalar(0.5))), _scalar(2.0)))
    return ops.multiply(s, ops.subtract(_scalar(1.0), ops.multiply(odd, _scalar(2.0))))


def _reduced(x: Any) -> tuple[Any, Any]:
    """``k = round(x / pi)`` and ``sin(x - k pi)``."""
    ops = _ops()
    k = ops.round(ops.multiply(x, _scalar(1 / math.pi)), "half_to_even")
    r = ops.subtract(ops.subtract(x, ops.multiply(k, _scalar(PI_HIGH))), ops.multiply(k, _scalar(PI_LOW)))
    r2 = ops.multiply(r, r)
    p = _scalar(POLYNOMIAL[-1])
    for coefficient in reversed(POLYNOMIAL[:-1]):
        p = ops.add(ops.multiply(r2, p), _scalar(coefficient))
    return k, ops.multiply(r, p)


def _only_square(node: Any) -> Any | None:
    """The ``Power(node, 2)`` that is ``node``'s only consumer, or None."""
    targets = list(node.output(0).get_target_inputs())
    if len(targets) != 1:
        return None
    power = targets[0].get_node()
    if power.get_type_name() != "Power" or targets[0].get_index() != 0:
        return None
    exponent = constant_value(power.input_value(1))
    return power if exponent is not None and exponent.size == 1 and exponent.reshape(-1)[0] == 2.0 else None


def _scalar(value: float) -> Any:
    return _ops().constant(np.float32(value))


def _ops() -> Any:
    import openvino.opset13 as ops

    return ops
