"""The ``fused`` form: the ``convgemm`` form with its decoder rewritten for the CPU, for ONNX Runtime.

Where the ``convgemm`` form's time went on one thread of the Intel Xeon with AMX (docs/performance.md): the GEMMs
14 %, the moves around them (Transpose 14 %, Concat 13 %, Slice 4 %), and the element-wise chains between
convolutions (Sin 11 %, Mul 10 %, Add 8 %, Pow, Sub, Div, ReduceMean 4-2 % each), which ONNX Runtime runs one
pass over the activations per node. Four rewrites, after the convolutions become GEMMs (`app.forms.convgemm`):

1. **AdaIN then Snake in fewer passes** (`fuse_adain_snake`). Each generator block normalizes its input with the
   style (AdaIN: ``y = (1 + g) (x - mean) / std + b``) and then applies Snake (``y + sin(a y)^2 / a``), in ten
   passes. With ``k = a (1 + g) / std`` and ``a b`` computed on the per-channel vectors, ``u = a y = (x - mean) k +
   a b``, and Snake is ``(u + sin(u)^2) / a``: eight passes, and ``sin(u)^2`` as a product instead of ``Pow``.
   A Snake without AdaIN before it only loses its ``Pow``; so does every other ``Pow(x, 2)``.
2. **Channels last** between the convolutions (`app.forms.channels_last`): no transposes around each GEMM.
3. **The harmonic source's STFT as a strided convolution** (`stft_as_conv`): ONNX Runtime's ``STFT`` took 4 % of the
   run for a 20-point transform every 5 samples; a ``Conv`` whose 22 filters are the window times the DFT's cosines
   and sines computes the same frames about 20 x faster.
4. **Each im2col as one Gather** (`im2col_as_gather`): channels last, a convolution's k taps are k ``Slice``s of its
   padded input along T and a ``Concat`` that interleaves them row by row (a fifth of the run after 1-3); one
   ``Gather`` of rows ``t + j x dilation`` makes the same [T, k x C] columns in one pass, bit for bit.

All four compute the same function of the input up to float rounding, which the next convolution's dynamic quantization
amplifies; the output check decides, as for every form, and the tuner measures it beside ``convgemm``.
"""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import numpy as np

from app.forms import channels_last, convgemm
from app.forms.dequantize import Graph, NoMatch, rebuild

PROBE_PHONEMES = "ðə kwˈɪk bɹˈWn fˈɑks."
"""What the graph runs once to learn its tensors' ranks (`app.forms.channels_last.probe_shapes`)."""


def rewrite(source: Path, target: Path) -> dict[str, int]:
    """Write ``source`` as the ``fused`` form to ``target``; returns what was rewritten, by kind."""
    import onnx

    model = onnx.load(str(source))
    counts = convgemm.rewrite_model(model)
    if not counts.get("ConvInteger"):
        return counts
    counts.update(fuse_adain_snake(model))
    counts.update(stft_as_conv(model))
    counts.update({f"channels last: {k}": n for k, n in
                   channels_last.channels_last(model, channels_last.probe_shapes(model, _probe_feeds())).items()})
    counts.update(im2col_as_gather(model))
    onnx.save(model, str(target))
    return counts


def _probe_feeds() -> dict[str, np.ndarray]:
    from app.text.vocab import Vocab
    from app.voices import VoiceBank

    ids = Vocab.embedded().ids(PROBE_PHONEMES)
    style = VoiceBank.load(None).resolve("af_heart").style_for(len(ids))
    return {"tokens": np.array([[0, *ids, 0]], np.int64), "style": np.asarray(style, np.float32).reshape(1, -1),
            "speed": np.array([1.0], np.float32)}


def fuse_adain_snake(model: Any) -> dict[str, int]:
    """Rewrite ``model`` in place as the module says (1.); returns how many Snakes were fused with their AdaIN
    (``adain+snake``), alone (``snake``), and other ``Pow(x, 2)`` (``square``)."""
    from onnx import helper

    g = Graph(model.graph)
    counts: collections.Counter[str] = collections.Counter()
    added: list[Any] = []
    gone: set[int] = set()
    for sin in [n for n in model.graph.node if n.op_type == "Sin"]:
        try:
            snake = _snake(g, sin)
        except NoMatch:
            continue
        scale_in, y, alpha, inverse, replaced, output = snake
        name = sin.name or sin.output[0]
        try:
            d, std, gain, beta, adain = _adain(g, y)
        except NoMatch:
            u = scale_in.output[0]
            counts["snake"] += 1
        else:
            u = f"{name}_u"
            added += [helper.make_node("Mul", [gain, alpha], [f"{name}_ga"]),
                      helper.make_node("Div", [f"{name}_ga", std], [f"{name}_k"]),
                      helper.make_node("Mul", [beta, alpha], [f"{name}_ab"]),
                      helper.make_node("Mul", [d, f"{name}_k"], [f"{name}_dk"]),
                      helper.make_node("Add", [f"{name}_dk", f"{name}_ab"], [u])]
            gone.update(id(n) for n in (*adain, scale_in))
            counts["adain+snake"] += 1
        added += [helper.make_node("Sin", [u], [f"{name}_s"]),
                  helper.make_node("Mul", [f"{name}_s", f"{name}_s"], [f"{name}_s2"]),
                  helper.make_node("Add", [u, f"{name}_s2"], [f"{name}_v"]),
                  helper.make_node("Mul", [f"{name}_v", inverse], [output])]
        gone.update(id(n) for n in replaced)
    for node in model.graph.node:
        if node.op_type == "Pow" and id(node) not in gone and _is_constant(g, node.input[1], 2.0):
            added.append(helper.make_node("Mul", [node.input[0], node.input[0]], list(node.output)))
            gone.add(id(node))
            counts["square"] += 1
    rebuild(model, g, added, gone)
    return dict(counts)


def stft_as_conv(model: Any) -> dict[str, int]:
    """Rewrite ``model`` in place as the module says (3.): each one-sided ``STFT`` of a real signal ([B, L, 1] or
    [B, L]) with a constant step and window becomes Reshape -> [B, 1, L], ``Conv`` with the 2 x (N/2 + 1) filters
    ``window[n] cos(2 pi k n / N)`` and ``-window[n] sin(2 pi k n / N)`` at that stride, and a Reshape and
    Transpose to STFT's [B, frames, N/2 + 1, 2]."""
    from onnx import helper

    g = Graph(model.graph)
    added: list[Any] = []
    gone: set[int] = set()
    for node in model.graph.node:
        attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if (node.op_type != "STFT" or attributes.get("onesided", 1) != 1 or len(node.input) < 3
                or node.input[1] not in g.initializers or node.input[2] not in g.initializers):
            continue
        step = int(g.array(node.input[1]).reshape(-1)[0])
        window = g.array(node.input[2]).reshape(-1)
        size = window.size
        if len(node.input) > 3 and node.input[3] and (node.input[3] not in g.initializers or
                                                       int(g.array(node.input[3]).reshape(-1)[0]) != size):
            continue
        k = np.arange(size // 2 + 1)[:, None]
        n = np.arange(size)[None, :]
        filters = np.concatenate([window * np.cos(2 * np.pi * k * n / size),
                                  -window * np.sin(2 * np.pi * k * n / size)])
        # sin(pi n) is 1e-16 n, not 0, in floating point: the DC and Nyquist bins' imaginary parts must be exactly
        # 0, as STFT's are, or their phase (atan2 of a tiny number) flips between -pi and pi.
        filters = np.where(np.abs(filters) < 1e-9, 0.0, filters).astype(np.float32)[:, None, :]
        name = node.name or node.output[0]
        weights = g.tensor(f"{name}_dft", filters)
        shape = g.tensor(f"{name}_shape", np.array([0, 2, size // 2 + 1, -1], np.int64))
        signal = g.tensor(f"{name}_signal_shape", np.array([0, 1, -1], np.int64))
        added += [helper.make_node("Reshape", [node.input[0], signal], [f"{name}_signal"]),
                  helper.make_node("Conv", [f"{name}_signal", weights], [f"{name}_frames"], strides=[step],
                                   kernel_shape=[size]),
                  helper.make_node("Reshape", [f"{name}_frames", shape], [f"{name}_bins"]),
                  helper.make_node("Transpose", [f"{name}_bins"], list(node.output), perm=[0, 3, 2, 1])]
        gone.add(id(node))
    rebuild(model, g, added, gone)
    return {"stft": len(gone)} if gone else {}


def im2col_as_gather(model: Any) -> dict[str, int]:
    """Rewrite ``model`` in place as the module says (4.): each ``Concat`` along the last axis of ``Slice``s along
    axis 1 of one ``Pad`` (by p on both ends of axis 1 only), the im2col `app.forms.convgemm` writes once channels
    last, becomes ``Gather(padded, Range(T) [T, 1] + starts [1, k], axis=1)`` reshaped to [1, T, k x C]."""
    from onnx import helper, numpy_helper

    g = Graph(model.graph)
    added: list[Any] = []
    gone: set[int] = set()

    def constant(name: str) -> np.ndarray:
        return np.asarray(numpy_helper.to_array(g.initializers[name])).reshape(-1)

    zero, one = g.tensor("im2col_zero", np.array(0, np.int64)), g.tensor("im2col_one", np.array(1, np.int64))
    column, flat = g.tensor("im2col_column", np.array([-1, 1], np.int64)), g.tensor("im2col_flat",
                                                                                    np.array([0, 0, -1], np.int64))
    for concat in model.graph.node:
        if concat.op_type != "Concat" or not concat.input or any(
                getattr(g.producer.get(name), "op_type", "") != "Slice" for name in concat.input):
            continue
        slices = [g.producer[name] for name in concat.input]
        sources = {s.input[0] for s in slices}
        pad = g.producer.get(next(iter(sources)))
        if len(sources) != 1 or pad is None or pad.op_type != "Pad" or pad.input[1] not in g.initializers:
            continue
        widths = constant(pad.input[1])
        if (len(widths) != 6 or widths[1] != widths[4] or widths[[0, 2, 3, 5]].any() or
                any(len(s.input) < 4 or s.input[3] not in g.initializers or int(constant(s.input[3])[0]) % 3 != 1
                    or len(g.consumers[s.output[0]]) != 1 for s in slices)):
            continue
        padded, name = pad.output[0], concat.name or concat.output[0]
        starts = g.tensor(f"{name}_starts", np.array([[int(constant(s.input[1])[0]) for s in slices]], np.int64))
        both_ends = g.tensor(f"{name}_both_ends", np.array([2 * int(widths[1])], np.int64))
        added += [helper.make_node("Shape", [padded], [f"{name}_padded_t"], start=1, end=2),
                  helper.make_node("Sub", [f"{name}_padded_t", both_ends], [f"{name}_t1"]),
                  helper.make_node("Squeeze", [f"{name}_t1"], [f"{name}_t"]),
                  helper.make_node("Range", [zero, f"{name}_t", one], [f"{name}_range"]),
                  helper.make_node("Reshape", [f"{name}_range", column], [f"{name}_rows"]),
                  helper.make_node("Add", [f"{name}_rows", starts], [f"{name}_taps"]),
                  helper.make_node("Gather", [padded, f"{name}_taps"], [f"{name}_windows"], axis=1),
                  helper.make_node("Reshape", [f"{name}_windows", flat], list(concat.output))]
        gone.update(id(n) for n in (*slices, concat))
    rebuild(model, g, added, gone)
    gathers = sum(1 for node in added if node.op_type == "Gather")
    return {"im2col as gather": gathers} if gathers else {}


def _snake(g: Graph, sin: Any) -> tuple[Any, str, str, str, list[Any], str]:
    """``y + Mul(1/a, Pow(Sin(Mul(a, y)), 2))`` around ``sin``: the ``Mul(a, y)``, ``y``, ``a`` and ``1/a`` (both
    constants), the nodes from ``Sin`` on, and the Snake's output."""
    scale_in = g.producer.get(sin.input[0])
    if scale_in is None or scale_in.op_type != "Mul":
        raise NoMatch("Sin of no Mul")
    alpha = next((name for name in scale_in.input if name in g.initializers), None)
    if alpha is None:
        raise NoMatch("no constant alpha")
    y = next(name for name in scale_in.input if name != alpha)
    square = g.only_consumer(sin.output[0], "Pow")
    if not _is_constant(g, square.input[1], 2.0):
        raise NoMatch("not a square")
    scale_out = g.only_consumer(square.output[0], "Mul")
    inverse = next((name for name in scale_out.input if name in g.initializers), None)
    add = g.only_consumer(scale_out.output[0], "Add")
    if inverse is None or y not in add.input or not np.allclose(g.array(alpha) * g.array(inverse), 1.0, rtol=1e-5):
        raise NoMatch("not y + sin(a y)^2 / a")
    if {id(n) for n in g.consumers[y]} != {id(scale_in), id(add)}:
        raise NoMatch("y is read elsewhere too")
    return scale_in, y, alpha, inverse, [sin, square, scale_out, add], add.output[0]


def _adain(g: Graph, y: str) -> tuple[str, str, str, str, list[Any]]:
    """``y = Add(Mul(gain, Div(d, std)), beta)`` with ``d`` a ``Sub`` and ``std`` a ``Sqrt``: ``d``, ``std``,
    ``gain``, ``beta`` and the three nodes that become the fused ones."""
    add = g.producer.get(y)
    if add is None or add.op_type != "Add":
        raise NoMatch("no AdaIN")
    for scaled in add.input:
        mul = g.producer.get(scaled)
        if mul is None or mul.op_type != "Mul":
            continue
        for normalized in mul.input:
            div = g.producer.get(normalized)
            if div is None or div.op_type != "Div":
                continue
            d, std = div.input
            if (getattr(g.producer.get(d), "op_type", "") != "Sub" or
                    getattr(g.producer.get(std), "op_type", "") != "Sqrt"):
                continue
            if len(g.consumers[normalized]) != 1 or len(g.consumers[scaled]) != 1:
                continue
            gain = next(name for name in mul.input if name != normalized)
            beta = next(name for name in add.input if name != scaled)
            return d, std, gain, beta, [add, mul, div]
    raise NoMatch("no AdaIN")


def _is_constant(g: Graph, name: str, value: float) -> bool:
    return name in g.initializers and g.array(name).size == 1 and float(g.array(name).reshape(-1)[0]) == value
