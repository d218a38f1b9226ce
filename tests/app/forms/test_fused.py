"""The fused form: AdaIN and Snake in fewer passes, channels last between the convolutions, STFT as a convolution.

Each rewrite on a graph written here in the export's own pattern (the same numbers through both graphs in ONNX
Runtime), and the form made from the embedded model against ONNX Runtime on the model, by the output check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.forms import channels_last, convgemm, fused, modelfile, store
from app.settings import Settings
from app.tune import candidates

C = 6


def _run(model: Any, feeds: dict[str, np.ndarray]) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, feeds)[0])


def _model(nodes: list[Any], inits: list[Any], inputs: list[Any]) -> Any:
    from onnx import TensorProto, helper

    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model


def _block(rng: np.random.Generator, x: str, tag: str) -> tuple[list[Any], list[Any], str]:
    """AdaIN with a style-made gain and bias, then Snake, on [1, C, T] ``x``, as the export writes them."""
    from onnx import helper, numpy_helper

    alpha = rng.uniform(0.5, 2.0, (1, C, 1)).astype(np.float32)
    inits = [numpy_helper.from_array(v, f"{tag}_{k}") for k, v in (
        ("axes", np.array([2], np.int64)), ("eps", np.array(1e-5, np.float32)), ("one", np.array(1.0, np.float32)),
        ("two", np.array(2.0, np.float32)), ("alpha", alpha), ("inv", (1 / alpha).astype(np.float32)),
        ("gamma", rng.normal(0, 0.3, (1, C, 1)).astype(np.float32)),
        ("beta", rng.normal(0, 0.3, (1, C, 1)).astype(np.float32)))]
    n = [("ReduceMean", [x, "axes"], "mean"), ("Sub", [x, "mean"], "d"), ("Mul", ["d", "d"], "d2"),
         ("ReduceMean", ["d2", "axes"], "var"), ("Add", ["var", "eps"], "ve"), ("Sqrt", ["ve"], "std"),
         ("Div", ["d", "std"], "norm"), ("Add", ["gamma", "one"], "gain"), ("Mul", ["gain", "norm"], "scaled"),
         ("Add", ["scaled", "beta"], "y0"), ("Mul", ["alpha", "y0"], "ay"), ("Sin", ["ay"], "s"),
         ("Pow", ["s", "two"], "s2"), ("Mul", ["inv", "s2"], "s2a"), ("Add", ["y0", "s2a"], "out")]
    nodes = [helper.make_node(op, [i if i == x else f"{tag}_{i}" for i in ins], [f"{tag}_{o}"]) for op, ins, o in n]
    return nodes, inits, f"{tag}_out"


def test_adain_then_snake_in_fewer_passes_computes_the_same(tmp_path: Path) -> None:
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    nodes, inits, out = _block(rng, "x", "b")
    nodes.append(helper.make_node("Identity", [out], ["y"]))
    model = _model(nodes, inits, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, "T"])])
    x = {"x": rng.normal(0, 1, (1, C, 300)).astype(np.float32)}
    expected = _run(model, x)
    assert fused.fuse_adain_snake(model) == {"adain+snake": 1}
    ops = [node.op_type for node in model.graph.node]
    assert "Pow" not in ops and ops.count("Div") == 1  # 1 / std only on the per-channel vector
    np.testing.assert_allclose(_run(model, x), expected, rtol=1e-4, atol=1e-5)


def _conv_graph(rng: np.random.Generator) -> Any:
    """Two quantized 1-D convolutions (k 3 and 5) with AdaIN + Snake before each, the second block's input added
    to its output, as in the generator's resblocks: DynamicQuantizeLinear -> ConvInteger -> Cast ->
    Mul(x_scale * w_scale)."""
    from onnx import TensorProto, helper, numpy_helper

    nodes: list[Any] = []
    inits: list[Any] = []
    current = "x"
    for i, k in enumerate((3, 5)):
        block, more, current = _block(rng, current, f"b{i}")
        nodes += block
        inits += more
        trained = rng.normal(0.0, 0.1, (C, C, k))
        low, high = trained.min(), trained.max()
        scale = np.array((high - low) / 255, np.float32)
        zero = np.array(round(-low / float(scale)), np.uint8)
        weight = np.clip(np.round(trained / scale) + zero, 0, 255).astype(np.uint8)
        inits += [numpy_helper.from_array(weight, f"w{i}"), numpy_helper.from_array(zero, f"wz{i}"),
                  numpy_helper.from_array(scale, f"ws{i}")]
        nodes += [helper.make_node("DynamicQuantizeLinear", [current], [f"q{i}", f"qs{i}", f"qz{i}"]),
                  helper.make_node("Mul", [f"qs{i}", f"ws{i}"], [f"sc{i}"]),
                  helper.make_node("ConvInteger", [f"q{i}", f"w{i}", f"qz{i}", f"wz{i}"], [f"acc{i}"],
                                   kernel_shape=[k], pads=[k // 2, k // 2], name=f"conv{i}"),
                  helper.make_node("Cast", [f"acc{i}"], [f"accf{i}"], to=TensorProto.FLOAT),
                  helper.make_node("Mul", [f"accf{i}", f"sc{i}"], [f"c{i}"])]
        current = f"c{i}"
    nodes.append(helper.make_node("Add", ["c0", current], ["y"]))  # the residual: the block's input plus its output
    return _model(nodes, inits, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, "T"])])


def test_channels_last_drops_the_transposes_around_each_gemm_and_computes_the_same() -> None:
    rng = np.random.default_rng(1)
    model = _conv_graph(rng)
    assert convgemm.rewrite_model(model) == {"ConvInteger": 2}
    x = {"x": rng.normal(0, 1, (1, C, 400)).astype(np.float32)}
    expected = _run(model, x)
    before = [node.op_type for node in model.graph.node].count("Transpose")
    done = channels_last.channels_last(model, channels_last.probe_shapes(model, x))
    after = {node.input[0] for node in model.graph.node if node.op_type == "Transpose"}
    # Left: the first convolution's input (x comes in as [1, C, T]), the output's way back, and the gain vector
    # (a [1, C, 1] the style makes, so transposed where it enters).
    assert before == 4 and after == {"q0", "y__tc", "b1_gain"}, after
    assert (done["transposes dropped"], done["transposes back"]) == (1, 1), done
    assert done["ReduceMean"] == 2  # the second block's means over T, as products with ones
    got = _run(model, x)
    assert got.shape == expected.shape
    # The same function up to the order of float additions, which the second convolution's dynamic quantization
    # may move by a step of its input.
    assert np.abs(got - expected).max() <= 0.02 * np.abs(expected).max()


def test_each_im2col_as_one_gather_makes_the_same_columns() -> None:
    """Channels last, the k taps' Slices and their Concat become one Gather: bit for bit the same output."""
    rng = np.random.default_rng(3)
    model = _conv_graph(rng)
    convgemm.rewrite_model(model)
    x = {"x": rng.normal(0, 1, (1, C, 250)).astype(np.float32)}
    channels_last.channels_last(model, channels_last.probe_shapes(model, x))
    expected = _run(model, x)
    assert fused.im2col_as_gather(model) == {"im2col as gather": 2}
    ops = [node.op_type for node in model.graph.node]
    assert "Slice" not in ops and ops.count("Gather") == 2
    assert np.array_equal(_run(model, x), expected)
    short = {"x": rng.normal(0, 1, (1, C, 2)).astype(np.float32)}  # shorter than the kernel's reach
    assert _run(model, short).shape == (1, C, 2)


def test_stft_as_a_strided_convolution_computes_the_same_frames() -> None:
    from onnx import TensorProto, helper, numpy_helper

    window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(20) / 20)).astype(np.float32)
    inits = [numpy_helper.from_array(np.array(5, np.int64), "step"), numpy_helper.from_array(window, "window"),
             numpy_helper.from_array(np.array(20, np.int64), "length")]
    stft = helper.make_node("STFT", ["x", "step", "window", "length"], ["y"], onesided=1)
    model = _model([stft], inits, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "L", 1])])
    model.opset_import[0].version = 17
    x = {"x": np.random.default_rng(2).normal(0, 1, (1, 1003, 1)).astype(np.float32)}
    expected = _run(model, x)
    assert fused.stft_as_conv(model) == {"stft": 1}
    assert "STFT" not in [node.op_type for node in model.graph.node]
    got = _run(model, x)
    assert got.shape == expected.shape == (1, 197, 11, 2)
    np.testing.assert_allclose(got, expected, atol=1e-4)
    assert not got[..., 0, 1].any() and not got[..., 10, 1].any()  # DC and Nyquist: no imaginary part at all


def test_the_tuner_measures_onnxruntime_on_the_fused_form_at_every_shape() -> None:
    found = {c.name for c in candidates.candidates(2, frozenset({"avx2"})) if c.form == store.FUSED}
    assert found == {"onnxruntime-fused-f32-2x1", "onnxruntime-fused-f32-1x2"}
    assert store.FUSED in store.ONNXRUNTIME_ONLY and store.FUSED not in store.OPENVINO_ONLY


def test_the_form_made_from_the_model_passes_the_output_check(cache_dir: Path, tmp_path: Path) -> None:
    """The real rewrite of the model the server serves (its timed copy), run by ONNX Runtime as the pool opens it,
    against ONNX Runtime on the model as shipped: two lengths. The form the run's servers serve, in their cache:
    made here, or by the first of them to start on it (`app.tune.portable`), by the same maker."""
    from app.served import served_model
    from tests.conftest import form_check

    model, digest = served_model(Settings(cache_dir=cache_dir), cache_dir)
    made = store.path(store.FUSED, model, cache_dir, digest)
    assert made.is_relative_to(cache_dir / "forms")
    ops, transposed = _ops(made)
    # Of the 84 convolutions made GEMMs, each with a transpose in and out in the convgemm form, a few still take
    # their input from a transpose (where [1, C, T] comes in from a node left as it is) and fewer give theirs to one.
    assert "STFT" not in ops and "Pow" not in ops and transposed["in"] < 25 and transposed["out"] < 5, transposed
    verdict = form_check(modelfile.resolve(None, [cache_dir / "models"]), made, tmp_path / "onnxruntime")
    assert verdict["passed"], verdict


def _ops(path: Path) -> tuple[list[str], dict[str, int]]:
    """The graph's op types, and how many GEMMs of the convolutions read a transpose (``in``, through their im2col's
    Pad for those of a kernel over 1) or feed one (``out``)."""
    import onnx

    nodes = onnx.load(str(path), load_external_data=False).graph.node
    producer = {name: node for node in nodes for name in node.output}

    def made_by(name: str, op_type: str) -> bool:
        return name in producer and producer[name].op_type == op_type

    return [node.op_type for node in nodes], {
        "in": sum(1 for n in nodes if n.op_type in ("Pad", "MatMulIntegerToFloat")
                  and made_by(n.input[0], "Transpose")),
        "out": sum(1 for n in nodes if n.op_type == "Transpose" and made_by(n.input[0], "MatMulIntegerToFloat"))}


@pytest.fixture(autouse=True)
def _quiet_onnxruntime() -> None:
    import onnxruntime as ort

    ort.set_default_logger_severity(3)  # the made graphs leave unused initializers ONNX Runtime warns about
