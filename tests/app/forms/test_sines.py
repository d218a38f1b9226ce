"""Every ``Sin`` as a polynomial OpenVINO compiles (`app.forms.sines`): the same values as ``sin``."""

from __future__ import annotations

from typing import Any

import numpy as np

from app.forms import sines


def _model(square: bool) -> Any:
    import openvino as ov
    import openvino.opset13 as ops

    x = ops.parameter([-1], np.float32, name="x")
    y = ops.sin(x)
    if square:
        y = ops.power(y, ops.convert(ops.constant(np.float16(2.0)), "f32"))  # as an f16-stored form has it
    return ov.Model([y], [x])


def _run(model: Any, values: np.ndarray) -> np.ndarray:
    import openvino as ov

    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return np.asarray(compiled({"x": values})[0])


def test_sin_and_its_square_become_polynomials_with_the_same_values() -> None:
    rng = np.random.default_rng(0)
    # Snake's arguments and the phases the generator feeds Sin: small, near multiples of pi/2, and large.
    values = np.concatenate([rng.uniform(-10, 10, 10_000), rng.uniform(-2_000, 2_000, 10_000),
                             np.arange(-40, 41) * np.pi / 2, [0.0, 1e-6, -1e-6]]).astype(np.float32)
    exact = np.sin(values.astype(np.float64))
    for square in (False, True):
        model = _model(square)
        counts = sines.rewrite(model)
        assert counts == ({"sin": 0, "sin squared": 1} if square else {"sin": 1, "sin squared": 0})
        assert "Sin" not in {n.get_type_name() for n in model.get_ops()}
        got = _run(model, values).astype(np.float64)
        want = exact ** 2 if square else exact
        # The cubic's own error (1.2e-6 for sin, 2.4e-6 for its square), plus f32's rounding of x itself (|x| up to
        # 2,000: 1.2e-4), which bounds what any f32 sin can match.
        tolerance = 2.5e-6 + 1.5 * np.abs(values) * np.finfo(np.float32).eps
        assert np.all(np.abs(got - want) <= tolerance), np.max(np.abs(got - want) - tolerance)


def test_a_sin_with_other_consumers_keeps_its_sign() -> None:
    import openvino as ov
    import openvino.opset13 as ops

    x = ops.parameter([-1], np.float32, name="x")
    s = ops.sin(x)
    model = ov.Model([ops.power(s, ops.constant(np.float32(2.0))), ops.add(s, s)], [x])
    assert sines.rewrite(model) == {"sin": 1, "sin squared": 0}
    values = np.linspace(-7, 7, 1001, dtype=np.float32)
    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    outputs = compiled({"x": values})
    np.testing.assert_allclose(outputs[1], 2 * np.sin(values), atol=3e-6)
