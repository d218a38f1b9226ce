"""The convgemm form: each stride-1 ConvInteger as im2col and MatMulIntegerToFloat on int8 weights.

On graphs written here in the quantizer's own pattern (the same numbers through both graphs in ONNX Runtime), and
on the embedded model (the form made for real, against ONNX Runtime on the model, by the output check)."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import numpy as np
import pytest

from app.forms import convgemm, modelfile, store
from app.runtime.backends.onnxruntime import graph_prefix
from app.settings import Settings
from app.sizing import PoolShape
from app.tune import candidates, manifest
from app.tune.choice import EngineChoice, resolve_engine


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
    """The real rewrite of the embedded model, served by ONNX Runtime as the pool and the bridge open it, against
    ONNX Runtime on the model: two lengths (the tuning corpus's longest chunk among them)."""
    from tests.conftest import form_check

    model = modelfile.resolve(None, [cache_dir / "models"])
    made = baked_form[1]
    assert made.name == store.ONNX_MODEL and store.digest(made) is not None
    verdict = form_check(model, made, tmp_path / "onnxruntime")
    assert verdict["passed"], verdict


def test_a_bridge_form_measured_faster_is_found_where_it_was_made_else_the_bridge_runs_the_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """`app.served` gives the bridge the form `app.tune.choice.bridge_choice` picked where it is made (never makes it at
    start), else the file it ran before."""
    from app import served

    monkeypatch.setitem(store._MAKERS, store.CONVGEMM, lambda source, directory: (directory / store.ONNX_MODEL)
                        .write_bytes(b"graph"))
    monkeypatch.setattr(store, "_make_isolated", lambda form, source, digest, directory: store._make(
        form, store._MAKERS[form], source, digest, directory))
    source = tmp_path / "model.onnx"
    source.write_bytes(b"model")
    settings = Settings(cache_dir=tmp_path / "cache", baked_cache_dir=tmp_path / "baked")
    choice = EngineChoice("tuned", "openvino", "f32", "ov", store.DEQUANT, bridge_form=store.CONVGEMM)
    ir = tmp_path / "ir.xml"
    with caplog.at_level(logging.WARNING, logger="app.served"):
        assert served._bridge_path(settings, choice, ir, source, tmp_path / "w", "ab" * 32) == source
        assert served._bridge_path(settings, choice, source, source, tmp_path / "w", "ab" * 32) is None
    assert "the bridge's convgemm form is not made here" in caplog.text and not (tmp_path / "w").exists()
    made = store.path(store.CONVGEMM, source, tmp_path / "baked", "ab" * 32)
    assert served._bridge_path(settings, choice, ir, source, tmp_path / "w", "ab" * 32) == made
    assert served._bridge_path(settings, choice, source, source, tmp_path / "w", "ab" * 32) == made
    # Under the convgemm form itself the bridge runs the served file; under the shipped file's choice, that file.
    own = dataclasses.replace(choice, backend="onnxruntime", form=store.CONVGEMM)
    assert served._bridge_path(settings, own, made, source, tmp_path / "w", "ab" * 32) is None
    shipped = dataclasses.replace(choice, bridge_form=store.ONNX)
    assert served._bridge_path(settings, shipped, ir, source, tmp_path / "w", "ab" * 32) == source


def test_a_server_whose_tuning_run_found_the_form_faster_on_all_threads_bridges_with_it(
        cache_dir: Path, tmp_path: Path, baked_form: tuple[Path, Path, str]) -> None:
    """Served by OpenVINO on the file as shipped (2 x 1), whose tuning run measured ONNX Runtime on the convgemm form
    faster as one session on both threads: the bridge opens the form (made and baked) and serves the first requests
    while OpenVINO loads."""
    import httpx

    from app.sizing import read_budget
    from tests.conftest import live_server

    baked, made, digest = baked_form
    ov_2x1 = manifest.Candidate("openvino", "f32", 2, 1)
    table = [{"backend": backend, "form": form, "precision": "f32", "streams": streams,
              "threads_per_stream": threads, "throughput": throughput, "error": ""}
             for backend, form, streams, threads, throughput in (
                 ("openvino", "onnx", 2, 1, 5.0), ("onnxruntime", "onnx", 1, 2, 2.0),
                 ("onnxruntime", "convgemm", 1, 2, 3.0))]
    here = manifest.TuneKey.here(read_budget().cpus, digest)
    manifest.write(baked, manifest.Manifest(key=here, choice=ov_2x1, why="ov 2 x 1", table=table))
    with live_server(cache_dir, tmp_path, baked_cache_dir=str(baked), quiet_window_s="0") as server:
        response = httpx.post(f"{server.url}/v1/audio/speech", timeout=120,
                              json={"input": "The bridge runs the faster form.", "voice": "af_heart",
                                    "response_format": "pcm"})
        info = httpx.get(f"{server.url}/v1/info").json()
    assert response.status_code == 200 and len(response.content) > 2 * 24000
    assert info["engine"]["bridge_form"] == "convgemm" and "convgemm 3.00" in info["engine"]["bridge"]
    # The bridge opened the baked form: ONNX Runtime saved its optimized graph of that very file (named for it:
    # `app.runtime.backends.onnxruntime.graph_prefix`) into the server's writable cache.
    assert list((cache_dir / "onnxruntime").glob(f"{graph_prefix(made)}*.onnx"))
    assert info["active_backend"] == "openvino" and not info["bridge_serving"]


def test_an_onnx_runtime_primary_has_no_bridge_whatever_its_tuning_run_measured(tmp_path: Path) -> None:
    """Its first requests after a start or a restore are made by the same form as every later one."""
    from app.runtime.spec import Options, Spec

    table = [{"backend": "onnxruntime", "form": form, "precision": "f32", "streams": streams, "threads_per_stream":
              threads, "throughput": throughput, "error": ""}
             for form, streams, threads, throughput in (("onnx", 2, 1, 5.0), ("onnx", 1, 2, 2.0),
                                                         ("convgemm", 1, 2, 3.0))]
    here = manifest.TuneKey.here(2, "ab" * 32)
    for backend, bridged in (("onnxruntime", False), ("openvino", True)):
        manifest.write(tmp_path, manifest.Manifest(key=here, choice=manifest.Candidate(backend, "f32", 2, 1), why="",
                                               table=table))
        choice = resolve_engine(Settings(), 2, "ab" * 32, tmp_path)
        settings = dataclasses.replace(Settings(), backend=choice.backend)
        assert (choice.bridge_form == "convgemm") is bridged
        spec = Spec(settings, Path("m.onnx"), PoolShape(2, 1), tmp_path)
        assert spec.has_bridge is bridged
        assert not dataclasses.replace(spec, options=Options(bridge=False)).has_bridge
