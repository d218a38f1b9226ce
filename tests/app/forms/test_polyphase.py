"""The upsampling ``ConvTranspose`` as an ordinary convolution (`app.forms.polyphase`): the same values."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest


def _model(stride: int, kernel: int, pad: int, rng: np.random.Generator) -> Any:
    import openvino as ov
    import openvino.opset13 as ops

    x = ops.parameter([1, 6, -1], np.float32, name="x")
    weights = ops.convert(ops.constant(rng.standard_normal((6, 4, kernel)).astype(np.float16)), "f32")
    y = ops.convolution_backprop_data(x, weights, [stride], pads_begin=[pad], pads_end=[pad], dilations=[1])
    return ov.Model([ops.relu(y)], [x])


def _run(model: Any, x: np.ndarray) -> np.ndarray:
    import openvino as ov

    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return np.asarray(compiled({"x": x})[0])


@pytest.mark.parametrize(("stride", "pad"), [(10, 5), (6, 3), (3, 0)])
def test_a_transposed_convolution_becomes_a_convolution_with_the_same_output(stride: int, pad: int) -> None:
    from app.forms import polyphase

    rng = np.random.default_rng(stride)
    for length in (2, 7, 50):  # one graph, several input lengths
        x = rng.standard_normal((1, 6, length)).astype(np.float32)
        before = _run(_model(stride, 2 * stride, pad, np.random.default_rng(0)), x)
        model = _model(stride, 2 * stride, pad, np.random.default_rng(0))
        assert polyphase.rewrite(model) == {"ConvTranspose as Conv": 1}
        assert "ConvolutionBackpropData" not in {n.get_type_name() for n in model.get_ops()}
        after = _run(model, x)
        assert after.shape == before.shape == (1, 4, (length + 1) * stride - 2 * pad)
        np.testing.assert_allclose(after, before, atol=1e-4, rtol=1e-5)


def test_other_transposed_convolutions_are_left_alone() -> None:
    from app.forms import polyphase

    model = _model(5, 20, 0, np.random.default_rng(0))  # the iSTFT's: kernel 4 x the stride
    assert polyphase.rewrite(model) == {"ConvTranspose as Conv": 0}
    assert "ConvolutionBackpropData" in {n.get_type_name() for n in model.get_ops()}
