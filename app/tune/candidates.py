"""What the tuner measures: every backend, precision and form worth running on this CPU, at every pool shape of
the budget (`candidates`)."""

from __future__ import annotations

from app.forms import store
from app.tune.manifest import Candidate


def shapes(cpus: int) -> list[tuple[int, int]]:
    """Streams x threads that fill ``cpus``: one thread per stream, two, and four on larger budgets."""
    found = [(cpus, 1)]
    for threads in (2, 4):
        if cpus >= 2 * threads or (threads == 2 and cpus >= 2):
            found.append((max(1, cpus // threads), threads))
    return list(dict.fromkeys(found))


def candidates(cpus: int, flags: frozenset[str]) -> list[Candidate]:
    """Everything worth measuring on this CPU, at every shape of `shapes`: OpenVINO f32 on the dequantized form
    (`app.forms.store`), OpenVINO bf16 on its f16-stored twin where the CPU computes bf16 natively, and ONNX
    Runtime on the shipped model and on its ``convgemm`` form (the convolutions as GEMMs on int8 weights, which
    MLAS runs faster than ``ConvInteger`` wherever measured, docs/performance.md; its output differs from the
    shipped graph's by the bias's rounding and, without VNNI, int16 saturation, so the output check and the
    measurement decide), and on its ``fused`` form (its decoder rewritten for the CPU, `app.forms.fused`; the tuner
    decides per CPU between the two).

    Left out, each dominated wherever it was measured (docs/experiments.md): OpenVINO on the shipped export (slower
    than the dequantized form, with more memory, and its trials took a good part of a tuning); the ``ir`` form (the
    shipped graph, as fast, only saved); bf16 on the shipped graph (the dequantized form beat it by far at the same
    distance); bf16 on the f32-stored dequantized form (the f16-stored one ran as fast within the noise with
    less memory)."""
    found: list[Candidate] = []
    bf16 = bool({"avx512_bf16", "amx_bf16"} & flags)
    for streams, threads in shapes(cpus):
        found.append(Candidate("openvino", "f32", streams, threads, form=store.DEQUANT))
        if bf16:
            found.append(Candidate("openvino", "bf16", streams, threads, form=store.DEQUANT16))
        found.append(Candidate("onnxruntime", "f32", streams, threads))
        found.append(Candidate("onnxruntime", "f32", streams, threads, form=store.CONVGEMM))
        found.append(Candidate("onnxruntime", "f32", streams, threads, form=store.FUSED))
    return found
