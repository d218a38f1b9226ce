"""Reading an OpenVINO graph the rewrites of `app.forms.sines` and `app.forms.polyphase` share."""

from __future__ import annotations

from typing import Any

import numpy as np


def constant_value(output: Any) -> np.ndarray | None:
    """The value of ``output`` (an ``openvino`` node output) as f32 where it is a constant, else None; a constant
    stored in f16 is read through the ``Convert`` that decompresses it."""
    node = output.get_node()
    if node.get_type_name() == "Convert":
        node = node.input_value(0).get_node()
    return np.asarray(node.get_data(), dtype=np.float32) if node.get_type_name() == "Constant" else None
