"""``python -m app`` with faults injected into the runtimes' ``infer`` (OpenVINO's and ONNX Runtime's, so
whichever serves), chosen by the request's speed.

- speed 1.5: every inference fails (the first chunk fails: the error comes before the response starts);
- speed 1.25: inferences of more than 40 tokens fail (the short first chunk streams, a later one fails);
- speed 1.75: inferences hang for 3 s first (a slow stream, for SIGTERM and slow-reader tests).
Any other speed runs normally. A load (first load or restore) fails once each time the file named by
``FAULT_LOAD_FAILS_FILE`` exists (the load deletes it), for the recovery tests; it lasts 5 s longer once each time
the file named by ``FAULT_LOAD_SLOW_FILE`` exists (deleted too), so that a restore on ONNX Runtime (some milliseconds
as shipped) lasts long enough for a test to act in the middle of it.
The tests start it as ``python -m tests.reliability.faulty_app``.
The model runs in the inference process (`app.runtime.proxy`), so the faults are injected
there: the server starts ``tests.reliability.faulty_inference`` instead, which imports this
module for the patch. In process (`app.runtime.spec.Options.in_process`) the patch here applies.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from app.runtime.backends.base import Resolved
from app.runtime.backends.onnxruntime import OnnxRuntimeBackend
from app.runtime.backends.openvino import OpenVinoBackend
from app.runtime.local import LocalRuntime
from app.runtime.proxy import ProcessRuntime


def _faulty(infer: Any) -> Any:
    def faulty_infer(self: Any, slot: int, tokens: Any, style: Any, speed: float) -> Any:
        if speed == 1.5 or (speed == 1.25 and tokens.shape[1] > 40):
            raise RuntimeError(f"injected fault on slot {slot}")
        if speed == 1.75:
            time.sleep(3)
        return infer(self, slot, tokens, style, speed)

    return faulty_infer


def _failing_once(load: Any) -> Any:
    def faulty_load(self: LocalRuntime, *args: Any, **kwargs: Any) -> Resolved:
        marker = os.environ.get("FAULT_LOAD_FAILS_FILE")
        if marker and Path(marker).exists():
            Path(marker).unlink()
            raise RuntimeError("injected load fault")
        slow = os.environ.get("FAULT_LOAD_SLOW_FILE")
        if slow and Path(slow).exists():
            Path(slow).unlink()
            time.sleep(5)
        result: Resolved = load(self, *args, **kwargs)
        return result

    return faulty_load


# The served path calls infer_timed (infer goes through it too): the faults go there.
OpenVinoBackend.infer_timed = _faulty(OpenVinoBackend.infer_timed)  # type: ignore[method-assign]
OnnxRuntimeBackend.infer_timed = _faulty(OnnxRuntimeBackend.infer_timed)  # type: ignore[method-assign]
LocalRuntime.load = _failing_once(LocalRuntime.load)  # type: ignore[method-assign]
ProcessRuntime.child_module = "tests.reliability.faulty_inference"

if __name__ == "__main__":
    from app.__main__ import main

    sys.exit(main())
