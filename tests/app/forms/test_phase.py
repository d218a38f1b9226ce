"""The harmonic source's phase in fixed point (`app.forms.phase`): applied to the real export, the float running
sum is gone and ONNX Runtime's audio on the rewritten graph still passes the output check against the original.
That bf16 then keeps the voice is tested with the form (tests/app/forms/test_forms.py, where the CPU has bf16)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from app.forms import modelfile, phase
from app.text.vocab import Vocab
from app.tune import outputcheck
from app.voices import VoiceBank


def test_the_rewritten_phase_speaks_the_same(cache_dir: Path, tmp_path: Path) -> None:
    import onnx
    import onnxruntime as ort

    source = modelfile.resolve(None, [cache_dir / "models"])
    model = onnx.load(str(source))
    assert phase.rewrite(model)
    ops = {n.name: n.op_type for n in model.graph.node}
    assert phase.SINE_GEN + "CumSum" not in ops and ops[phase.SINE_GEN + "fixed/sum"] == "CumSum"
    assert not phase.rewrite(model)  # applied once: the float chain it looks for is gone
    rewritten = tmp_path / "rewritten.onnx"
    onnx.save(model, str(rewritten))

    ids = Vocab.embedded().ids("ðə stˈeɪʃən ɪz ˈɑn ðə lˈɛft, pˈæst ðə sˈɛkənd lˈaɪt.")
    feed = {"tokens": np.array([[0, *ids, 0]], dtype=np.int64),
            "style": VoiceBank.load(None).resolve("am_michael").style_for(len(ids)), "speed": np.ones(1, np.float32)}
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    audio = [np.asarray(ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
                        .run(None, feed)[0]).reshape(-1) for path in (source, rewritten)]
    check = outputcheck.check_chunk("rewritten", audio[0], audio[1])
    assert check.passed and check.samples == check.reference_samples, check
