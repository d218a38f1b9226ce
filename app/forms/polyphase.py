"""The generator's upsampling ``ConvTranspose`` as an ordinary convolution, for OpenVINO.

Kokoro's generator upsamples twice with a transposed convolution whose kernel is twice its stride (stride 10,
kernel 20, then stride 6, kernel 12, pads of half the stride). The CPU plugin runs those in a plain AVX-512
kernel (openvino 2026.4.1: ``jit_avx512_bf16``, not AMX): 13 % of a bf16 inference on one thread of the Intel
Xeon with AMX, for two nodes.

With kernel ``K = 2 s``, output sample ``m s + r`` (``r`` < ``s``) of the unpadded transposed convolution is
``W[:, :, r]^T x[m] + W[:, :, r + s]^T x[m - 1]``: for each phase ``r``, a convolution of two taps over ``x``
padded by one sample on each side. So the node becomes one ``Convolution`` with ``s x C_out`` filters of two
taps (OpenVINO's AMX kernel), its ``[C_out, s, T + 1]`` output interleaved into ``[C_out, (T + 1) s]`` by a
``Transpose``, and the pads cut by a ``Slice``. The same sums in another order: in f32 the audio matches to
about 1e-6.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from app.forms.ovgraph import constant_value


def rewrite(model: Any) -> dict[str, int]:
    """Rewrite every 1-D ``ConvolutionBackpropData`` of the known shape in ``model`` (an ``openvino.Model``, in
    place); returns how many."""
    done = 0
    for node in model.get_ordered_ops():
        if node.get_type_name() == "ConvolutionBackpropData" and _rewrite(node):
            done += 1
    model.validate_nodes_and_infer_types()
    return {"ConvTranspose as Conv": done}


def _rewrite(node: Any) -> bool:
    import openvino.opset13 as ops

    if node.get_input_size() != 2:
        return False  # an explicit output shape
    attributes = node.get_attributes()
    weights = constant_value(node.input_value(1))
    if weights is None or weights.ndim != 3 or attributes.get("auto_pad", "explicit") != "explicit":
        return False
    stride, pad = attributes["strides"][0], attributes["pads_begin"][0]
    inputs, outputs, kernel = weights.shape
    if (kernel != 2 * stride or attributes["pads_end"][0] != pad or attributes["dilations"][0] != 1
            or attributes["output_padding"][0] != 0):
        return False
    # Filter (o, r) of two taps: tap 0 meets x[m - 1], tap 1 meets x[m].
    filters = np.empty((outputs, stride, inputs, 2), np.float32)
    filters[..., 0] = weights[:, :, stride:].transpose(1, 2, 0)
    filters[..., 1] = weights[:, :, :stride].transpose(1, 2, 0)
    y = ops.convolution(node.input_value(0), ops.constant(filters.reshape(outputs * stride, inputs, 2)),
                        [1], [1], [1], [1])
    y = ops.reshape(y, _ints(0, outputs, stride, -1), special_zero=True)
    y = ops.transpose(y, _ints(0, 1, 3, 2))
    y = ops.reshape(y, _ints(0, outputs, -1), special_zero=True)
    if pad:
        y = ops.slice(y, _ints(pad), _ints(-pad), _ints(1), _ints(2))
    node.output(0).replace(y.output(0))
    return True


def _ints(*values: int) -> Any:
    import openvino.opset13 as ops

    return ops.constant(np.array(values, np.int64))
