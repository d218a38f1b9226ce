"""The portable default: what ``TTS_BACKEND=auto`` serves with on a CPU that no tuning manifest covers.

ONNX Runtime on the ``fused`` form (`app.forms.fused`), one session of one thread per usable CPU: ONNX Runtime on one
of the project's own forms led the tuning on every CPU class on record (`app.tune.manifest.SHIPPED`,
docs/performance.md), and the form is plain ONNX that any x86-64 ONNX Runtime runs. The untuned alternative, OpenVINO
on the shipped file, ran at a third of its speed with five times the memory.

The form is made once (at the image build, or at the first start into the writable cache) and checked once against
ONNX Runtime on the model it was made from (`check`, the tuner's output check on two lengths), in a process of its
own so that the server keeps none of the check's memory. A form that cannot be made (a model without the dynamically
quantized convolutions it rewrites) or fails the check is not served: the model file itself is, on the same shape.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from app.forms import store
from app.tune.manifest import Candidate

log = logging.getLogger(__name__)

FORM = store.FUSED

CHECK_PHONEMES = ("hˈɛlO.", "ɹˈAn ɪz lˈIkli ðɪs ˌæftəɹnˈun, sˌO tˈAk ɐn ˌʌmbɹˈɛlə ɪf ju ɑɹ hˈɛdɪŋ ˈWt ˈæftəɹ lˈʌnʧ.")
"""What the check synthesizes: a word alone and the tuning corpus's longest sentence (a first chunk and a full one)."""


def candidate(cpus: int) -> Candidate:
    """The portable default's shape for ``cpus`` usable CPUs: one single-threaded session each."""
    return Candidate("onnxruntime", "f32", max(1, cpus), 1, form=FORM)


def form_path(model_path: Path, writable: Path, digest: str, read_only: Sequence[Path | None],
              form: str = FORM, *, check: bool = True) -> tuple[Path, str]:
    """The file to serve ``form`` (one ONNX Runtime runs) from, checked, and why; the model itself where the form cannot
    be made (a model without what it rewrites; a container whose memory limit the making exceeds) or fails the check.
    Also how a form that a manifest made on another CPU of this class names is served: the tuner checked it there,
    not here. ``check``: False for a form the tuner checked on this very CPU."""
    try:
        made = store.path(form, model_path, writable, digest, read_only=read_only)
    except (RuntimeError, ValueError) as exc:
        log.warning("engine: the %s form could not be made (%s); serving the model file itself", form, exc)
        return model_path, f"the {form} form could not be made ({exc}), so the model file itself"
    if not check:
        return made, f"the {form} form"
    verdict = store.checked(made, writable) or _check_isolated(model_path, made, writable)
    if not verdict.get("passed"):
        log.warning("engine: the %s form failed the output check (%s); serving the model file itself", form, verdict)
        return model_path, f"the {form} form failed the output check, so the model file itself"
    return made, f"the {form} form (output check passed, worst log-mel {verdict.get('max_mel_distance', 0):.2f})"


def _check_isolated(model_path: Path, made: Path, writable: Path) -> dict[str, Any]:
    """`check` in a process of its own, its verdict recorded (`app.forms.store.record_check`)."""
    ran = subprocess.run([sys.executable, "-m", "app.tune.portable", str(model_path), str(made)],
                         capture_output=True, text=True)
    try:
        verdict: dict[str, Any] = json.loads(ran.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        last = (ran.stderr.strip().splitlines() or [f"exit status {ran.returncode}"])[-1][:300]
        return {"passed": False, "error": last}  # not recorded: a crash may be the machine's, not the form's
    store.record_check(made, writable, verdict)
    return verdict


def check(model_path: Path, made: Path, optimized_dir: Path | None = None) -> dict[str, Any]:
    """The output check's verdict on ``made`` (a form ONNX Runtime runs), served as the pool opens it, against ONNX
    Runtime on ``model_path`` at one thread."""
    import numpy as np

    from app.runtime.backends.onnxruntime import OnnxRuntimeBackend
    from app.sizing import PoolShape
    from app.text.vocab import Vocab
    from app.tune import outputcheck
    from app.voices import VoiceBank

    reference = OnnxRuntimeBackend(model_path, PoolShape(1, 1), runtime_defaults=False)
    served = OnnxRuntimeBackend(made, PoolShape(1, 1), runtime_defaults=False, optimized_dir=optimized_dir)
    reference.load()
    served.load()
    vocab, voice = Vocab.embedded(), VoiceBank.load(None).resolve("af_heart")
    expected, got = {}, {}
    for text in CHECK_PHONEMES:
        ids = vocab.ids(text)
        tokens = np.array([[0, *ids, 0]], dtype=np.int64)
        expected[text] = reference.infer(0, tokens, voice.style_for(len(ids)), 1.0)
        got[text] = served.infer(0, tokens, voice.style_for(len(ids)), 1.0)
    verdict, _ = outputcheck.compare(made.parent.name, "onnxruntime", expected, got)
    return asdict(verdict)


if __name__ == "__main__":  # python -m app.tune.portable MODEL FORM: the verdict as one JSON line (`_check_isolated`)
    sys.stdout.write(json.dumps(check(Path(sys.argv[1]), Path(sys.argv[2]))) + "\n")
