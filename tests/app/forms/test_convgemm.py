"""The convgemm form: each stride-1 ConvInteger as im2col and MatMulIntegerToFloat on int8 weights.

On graphs written here in the quantizer's own pattern (the same numbers through both graphs in ONNX Runtime), and
on the embedded model (the form made for real, against ONNX Runtime on the model, by the output check)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.forms import convgemm, modelfile, store
from app.settings import Settings
from app.tune import candidates


def _quantized_conv(path: Path, k: int, dilation: int, stride: int = 1, *, bias: bool = True, seed: int = 0,
                    channels: tuple[int, int] = (6, 5)) -> None:
    """x -> DynamicQuantizeLinear -> ConvInteger (uint8 weights and their zero point) [-> Add of the int32
    bias Floor(b / (x_scale * w_scale)) cast and reshaped] -> Cast -> Mul(x_scale * w_scale): what ONNX
    Runtime's dynamic quantizer writes for a Conv, and the kokoro-onnx int8 export holds 87 of."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    c_in, c_out = channels
    pad = dilation * (k - 1) // 2
    # Trained weights, quantized as the quantizer does (per tensor, min and max at 0 and 255): most near the zero
    # point, the extremes on both ends.
    trained = rng.normal(0.0, 0.05, (c_out, c_in, k))
    low, high = min(trained.min(), 0.0), max(trained.max(), 0.0)
    w_scale = np.array((high - low) / 255, dtype=np.float32)
    zero = np.array(round(-low / float(w_scale)), dtype=np.uint8)
    weight = np.clip(np.round(trained / w_scale) + zero, 0, 255).astype(np.uint8)
    inits = [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(zero, "wz"),
             numpy_helper.from_array(w_scale, "ws"),
             numpy_helper.from_array(rng.normal(0, 0.5, (c_out,)).astype(np.float32), "b"),
             numpy_helper.from_array(np.array([1, c_out, 1], np.int64), "shape")]
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("Mul", ["xs", "ws"], ["scale"]),
             helper.make_node("ConvInteger", ["xq", "w", "xz", "wz"], ["acc"], name="conv", kernel_shape=[k],
                              pads=[pad, pad], dilations=[dilation], strides=[stride], group=1)]
    if bias:
        nodes += [helper.make_node("Div", ["b", "scale"], ["bq"]), helper.make_node("Floor", ["bq"], ["bf"]),
                  helper.make_node("Cast", ["bf"], ["bi"], to=TensorProto.INT32),
                  helper.make_node("Reshape", ["bi", "shape"], ["br"]),
                  helper.make_node("Add", ["acc", "br"], ["acc_b"])]
    nodes += [helper.make_node("Cast", ["acc_b" if bias else "acc"], ["accf"], to=TensorProto.FLOAT),
              helper.make_node("Mul", ["accf", "scale"], ["y"])]
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c_in, "T"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


def _run(path: Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, {"x": x})[0])


@pytest.mark.parametrize(("k", "dilation", "bias"), [(1, 1, False), (3, 1, True), (7, 3, True), (11, 5, True),
                                                     (5, 1, False)])
def test_the_rewrite_computes_the_same_convolution(tmp_path: Path, k: int, dilation: int, bias: bool) -> None:
    _quantized_conv(tmp_path / "conv.onnx", k, dilation, bias=bias)
    counts = convgemm.rewrite(tmp_path / "conv.onnx", tmp_path / "gemm.onnx")
    assert counts == {"ConvInteger": 1}
    import onnx

    ops = [n.op_type for n in onnx.load(str(tmp_path / "gemm.onnx")).graph.node]
    assert "ConvInteger" not in ops and "MatMulIntegerToFloat" in ops
    assert ops.count("Slice") == (k if k > 1 else 0)
    for length in (1, 9, 240):  # shorter than the kernel's reach too: the padding is the quantized zero
        x = np.random.default_rng(length).normal(0, 1, (1, 6, length)).astype(np.float32)
        expected, got = _run(tmp_path / "conv.onnx", x), _run(tmp_path / "gemm.onnx", x)
        assert got.shape == expected.shape == (1, 5, length)
        # The same integer products; the bias is added unrounded (at most one output step, scale = x_s * w_s),
        # and without VNNI MLAS's u8s8 kernel may saturate a pair of products in int16: a small relative error.
        assert np.abs(got - expected).max() <= 0.02 * np.abs(expected).max() + 1e-6


def test_a_strided_convolution_is_left_as_it_is(tmp_path: Path) -> None:
    _quantized_conv(tmp_path / "conv.onnx", 3, 1, stride=2)
    assert convgemm.rewrite(tmp_path / "conv.onnx", tmp_path / "gemm.onnx") == {"skipped": 1}
    x = np.random.default_rng(1).normal(0, 1, (1, 6, 50)).astype(np.float32)
    assert np.array_equal(_run(tmp_path / "conv.onnx", x), _run(tmp_path / "gemm.onnx", x))


def test_a_model_without_quantized_convolutions_makes_no_form(tmp_path: Path) -> None:
    """A float export: nothing to rewrite, so no form (the tuner records the candidate as failed and goes on)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.ones((2, 2, 3), np.float32), "w")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1])], "float",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, "T"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [weight])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "float.onnx"))
    with pytest.raises(ValueError, match="no dynamically quantized convolution"):
        store._make(store.CONVGEMM, store._MAKERS[store.CONVGEMM], tmp_path / "float.onnx", "ab" * 32,
                    tmp_path / "form")
    assert not (tmp_path / "form").exists() and not list(tmp_path.glob(".form*"))  # nothing half made is left


def test_the_tuner_measures_onnxruntime_on_the_convgemm_form_at_every_shape() -> None:
    found = {c.name for c in candidates.candidates(2, frozenset({"avx2"})) if c.form == store.CONVGEMM}
    assert found == {"onnxruntime-convgemm-f32-2x1", "onnxruntime-convgemm-f32-1x2"}
    assert store.CONVGEMM in store.ONNXRUNTIME_ONLY and store.CONVGEMM not in store.OPENVINO_ONLY


@pytest.fixture(scope="module")
def baked_form(cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """A baked cache directory holding the convgemm form made for real from the model the server serves (its timed
    copy, `app.forms.timed`), as the tuner and the image build make it; the form's file; the served model's
    sha256 (the tuning key's)."""
    from app.served import served_model

    model, digest = served_model(Settings(cache_dir=cache_dir), cache_dir)
    baked = tmp_path_factory.mktemp("baked")
    return baked, store.path(store.CONVGEMM, model, baked, digest), digest


def test_the_form_made_from_the_model_passes_the_output_check(cache_dir: Path, tmp_path: Path,
                                                              baked_form: tuple[Path, Path, str]) -> None:
    """The real rewrite of the embedded model, served by ONNX Runtime as the pool opens it, against
    ONNX Runtime on the model: two lengths (the tuning corpus's longest chunk among them)."""
    from tests.conftest import form_check

    model = modelfile.resolve(None, [cache_dir / "models"])
    made = baked_form[1]
    assert made.name == store.ONNX_MODEL and store.digest(made) is not None
    verdict = form_check(model, made, tmp_path / "onnxruntime")
    assert verdict["passed"], verdict
