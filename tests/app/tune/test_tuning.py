"""The tuned engine choice: manifests keyed to the machine, the choice rules, and a real tuning run."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import pytest

from app.runtime import cpu
from app.runtime.spec import Options
from app.settings import Settings
from app.sizing import read_budget
from app.tune import candidates, outputcheck, ranking, tuner
from app.tune.choice import resolve_engine
from app.tune.manifest import DIRECTORY, SHIPPED, Candidate, Manifest, TuneKey, find, write
from lifecycle import trim
from tests.conftest import live_server

ORT_2X1 = Candidate("onnxruntime", "f32", 2, 1)
ORT_1X2 = Candidate("onnxruntime", "f32", 1, 2)
OV_2X1 = Candidate("openvino", "f32", 2, 1)


def key(**changes: Any) -> TuneKey:
    return dataclasses.replace(TuneKey.here(2, "ab" * 32), **changes)


def manifest(for_key: TuneKey, choice: Candidate = ORT_1X2) -> Manifest:
    return Manifest(key=for_key, choice=choice, why=f"{choice.name} was fastest",
                    table=[{"candidate": choice.name, "efficiency": 1.5, "chosen": True}])


def test_the_key_describes_this_machine() -> None:
    here = TuneKey.here(2, "ab" * 32)
    assert here.cpus == 2 and here.model_sha256 == "ab" * 32
    assert here.cpu and here.isa and len(here.flags) == 16
    assert here.openvino and here.onnxruntime  # versions from package metadata, no runtime imported
    assert here.slug().startswith(f"{here.isa}-2cpu-")


def test_a_manifest_for_this_cpu_wins_over_one_for_its_class_and_others_are_ignored(tmp_path: Path) -> None:
    here = key()
    write(tmp_path / "baked", manifest(key(cpu="Some Other CPU", flags="0" * 16, cpu_class="intel-amx")))
    write(tmp_path / "baked", manifest(key(model_sha256="cd" * 32)))
    missed = find([tmp_path / "baked"], here)
    assert missed.manifest is None and missed.match == ""
    assert "'intel-amx'" in missed.reason and "'cdcd" in missed.reason

    # Another CPU model of the same class serves; a manifest made on this CPU model wins over it.
    sibling = key(cpu="Some Sibling CPU", flags="1" * 16)
    write(tmp_path / "shipped", manifest(sibling, ORT_2X1))
    found = find([tmp_path / "baked", tmp_path / "writable", tmp_path / "shipped"], here)
    assert found.manifest is not None and found.manifest.choice == ORT_2X1 and found.match == "class"
    assert "another" in found.reason and "Some Sibling CPU" in found.reason
    write(tmp_path / "shipped", manifest(here))
    write(tmp_path / "writable", manifest(key(cpus=16), OV_2X1))
    found = find([tmp_path / "baked", tmp_path / "writable", tmp_path / "shipped"], here)
    # This CPU model in the first directory that has one (the tuner's over the package's), another budget or not.
    assert found.manifest is not None and found.manifest.choice == OV_2X1 and found.match == "cpu"
    assert found.path is not None and found.path.parent == tmp_path / "writable" / "tuning"
    assert "cpus 16 (here 2)" in found.reason
    # Within one directory, the manifest made for this budget first.
    write(tmp_path / "writable", manifest(here, ORT_1X2))
    found = find([tmp_path / "writable"], here)
    assert found.manifest is not None and found.manifest.choice == ORT_1X2


def test_an_unreadable_manifest_is_skipped(tmp_path: Path) -> None:
    folder = tmp_path / "tuning"
    folder.mkdir()
    (folder / "broken.json").write_text("{not json")
    assert "unreadable" in find([tmp_path], key()).reason


def test_resolve_forced_default_and_tuned(tmp_path: Path) -> None:
    forced = resolve_engine(Settings(backend="onnxruntime", streams=3), 2, "ab" * 32, tmp_path)
    assert (forced.backend, forced.source, forced.streams, forced.threads_per_stream) == ("onnxruntime", "forced", 3, 0)

    # No manifest for this CPU or its class: the portable default, one single-threaded session per CPU.
    default = resolve_engine(Settings(baked_cache_dir=tmp_path / "baked"), 2, "ab" * 32, tmp_path, shipped=False)
    assert (default.source, default.backend, default.form) == ("default", "onnxruntime", "fused")
    assert (default.streams, default.threads_per_stream) == (2, 1)
    assert default.reason.startswith("no tuning manifest (run `python -m app tune`); serving the portable default")

    write(tmp_path, manifest(TuneKey.here(2, "ab" * 32)))
    tuned = resolve_engine(Settings(), 2, "ab" * 32, tmp_path)
    assert (tuned.backend, tuned.streams, tuned.threads_per_stream) == ("onnxruntime", 1, 2)
    assert tuned.source == "tuned" and tuned.reason.endswith(": onnxruntime-f32-1x2 was fastest") and tuned.table
    # A shape set explicitly stays.
    pinned = resolve_engine(Settings(streams=2), 2, "ab" * 32, tmp_path)
    assert (pinned.streams, pinned.threads_per_stream) == (2, 2)
    # /v1/info's ``engine`` shows the choice as before; the shape served is its ``pool``.
    assert "streams" not in tuned.public() and tuned.public()["form"] == "onnx"


def test_a_manifest_for_another_budget_keeps_its_threads_and_fills_this_budget(tmp_path: Path) -> None:
    write(tmp_path, manifest(key(cpu="Some Sibling CPU", flags="1" * 16, cpus=2), ORT_1X2))
    wide = resolve_engine(Settings(), 8, "ab" * 32, tmp_path)
    assert (wide.source, wide.streams, wide.threads_per_stream) == ("class", 4, 2)
    narrow = resolve_engine(Settings(), 1, "ab" * 32, tmp_path)
    assert (narrow.streams, narrow.threads_per_stream) == (1, 1)


def test_the_shipped_manifests_cover_the_classes_on_record_and_name_how_they_were_made(cache_dir: Path) -> None:
    from app.runtime.cpu import CLASS_TIERS
    from app.tune.manifest import SHIPPED

    shipped = [Manifest.from_json(json.loads(p.read_text())) for p in sorted((SHIPPED / DIRECTORY).glob("*.json"))]
    classes = {m.key.cpu_class for m in shipped}
    assert {"intel-amx", "amd-avx512-bf16", "amd-avx2"} <= classes
    tiers = {name for name, _ in CLASS_TIERS}
    for m in shipped:
        assert m.key.cpu_class.split("-", 1)[1] in tiers and m.made and m.command.startswith("python -m app tune")
        assert m.key.model_sha256 == served_sha256(cache_dir)  # the embedded model's timed copy, as served
        chosen = [r for r in m.table if r.get("chosen")]
        assert len(chosen) == 1 and chosen[0]["candidate"] == m.choice.name


def row(candidate: Candidate, throughput: float, error: str = "") -> dict[str, Any]:
    return {"candidate": candidate.name, **dataclasses.asdict(candidate), "efficiency": throughput / 2,
            "throughput": throughput, "error": error}


BF16_2X1 = Candidate("openvino", "bf16", 2, 1, "dequant16")
BF16_1X2 = Candidate("openvino", "bf16", 1, 2, "dequant16")
XEON_TABLE = [row(ORT_2X1, 3.15), row(BF16_2X1, 4.79), row(ORT_1X2, 2.13), row(BF16_1X2, 3.47)]
"""The tuning run on the 2-vCPU Xeon with AMX of 2026-12-03 (audio-s per s)."""


def test_a_tuned_openvino_choice_is_served_alone(tmp_path: Path) -> None:
    """One engine per instance: the choice names what is served and nothing in front of it."""
    here = TuneKey.here(2, "ab" * 32)
    write(tmp_path, Manifest(key=here, choice=BF16_2X1, why="bf16 was fastest", table=XEON_TABLE))
    choice = resolve_engine(Settings(), 2, "ab" * 32, tmp_path)
    assert (choice.backend, choice.precision, choice.form) == ("openvino", "bf16", "dequant16")
    assert set(choice.public()) == {"source", "backend", "precision", "reason", "form", "manifest", "table"}


def result(candidate: Candidate, efficiency: float, passed: bool = True, error: str = "") -> ranking.Result:
    verdict = outputcheck.Verdict(candidate.name, "ref", passed, 3, () if passed else ("t0/0",), 0,
                                  0.3 if passed else 1.2, 0.3)
    return ranking.Result(candidate, [efficiency], [efficiency], check=verdict, error=error)


def test_a_form_that_fails_the_check_or_crashed_is_never_chosen() -> None:
    best, why = ranking.choose([result(OV_2X1, 1.1), result(ORT_2X1, 3.0, passed=False),
                              result(ORT_1X2, 2.0, error="trial ended with signal 11")])
    assert best is not None and best.candidate == OV_2X1
    assert "not eligible" in why and ORT_2X1.name in why
    assert ranking.choose([result(ORT_2X1, 3.0, passed=False)])[0] is None


def test_openvino_keeps_ties_and_onnxruntime_wins_by_more() -> None:
    tie, why = ranking.choose([result(ORT_2X1, 1.02), result(OV_2X1, 1.0)])
    assert tie is not None and tie.candidate == OV_2X1 and "ties" in why
    beaten, why = ranking.choose([result(ORT_2X1, 1.2), result(OV_2X1, 1.0)])
    assert beaten is not None and beaten.candidate == ORT_2X1 and "above the best OpenVINO form" in why


def test_more_streams_win_a_tie_within_a_backend() -> None:
    """This Zen 5's tuning: ONNX Runtime 1 x 2 scored 2.8 % above 2 x 1; two streams let a first chunk start
    beside a running one, so 2 x 1 is chosen. Beyond the tie, or against another backend, the score decides."""
    wider, why = ranking.choose([result(ORT_1X2, 2.554), result(ORT_2X1, 2.49)])
    assert wider is not None and wider.candidate == ORT_2X1 and "more streams" in why
    best, why = ranking.choose([result(ORT_1X2, 2.554), result(ORT_2X1, 2.3)])
    assert best is not None and best.candidate == ORT_1X2 and "more streams" not in why
    ov_1x2 = Candidate("openvino", "f32", 1, 2)
    kept, why = ranking.choose([result(ov_1x2, 1.0), result(ORT_2X1, 1.01)])
    assert kept is not None and kept.candidate == ov_1x2 and "ties" in why  # OpenVINO's tie, no wider OpenVINO
    both, why = ranking.choose([result(ORT_1X2, 1.02), result(ov_1x2, 1.0), result(OV_2X1, 0.985)])
    assert both is not None and both.candidate == OV_2X1 and "ties" in why and "more streams" in why


def test_memory_priced_as_an_instance_bills_it_can_turn_the_choice() -> None:
    """Figures like this Xeon's trials: OpenVINO's dequantized f32 form 5 % more efficient than ONNX Runtime but
    at 2.5 GB against 0.5 GB. On CPU efficiency alone OpenVINO wins; priced as Cloud Run bills an instance
    (a GiB-second at 0.111 vCPU-seconds), ONNX Runtime makes more audio per dollar, by more than the tie."""
    openvino = result(Candidate("openvino", "f32", 2, 1, form="dequant"), 1.153)
    openvino.peak_rss_mb = 2565
    onnxruntime = result(ORT_2X1, 1.093)
    onnxruntime.peak_rss_mb = 529
    by_cpu, _ = ranking.choose([onnxruntime, openvino], ranking.Ranking(cpus=2, memory_price=0.0, base_mb=400))
    assert by_cpu is openvino
    priced = ranking.Ranking(cpus=2, memory_price=0.111, base_mb=400)
    by_cost, why = ranking.choose([onnxruntime, openvino], priced)
    assert by_cost is onnxruntime, why
    assert priced.score(onnxruntime) > priced.score(openvino) * (1 + ranking.TIE)
    assert "GiB" in why and "--memory-price" in why and "above the best OpenVINO form" in why
    # The score is audio per unit of instance cost: efficiency / (1 + price x GiB / vCPUs).
    assert priced.score(onnxruntime) == pytest.approx(1.093 / (1 + 0.111 * (529 + 400) / 1024 / 2))
    # On a budget with more vCPUs the same memory weighs less, and the efficiency gap decides again.
    assert ranking.choose([onnxruntime, openvino], ranking.Ranking(cpus=16, memory_price=0.111, base_mb=400))[0] \
        is openvino


def test_the_memory_price_is_the_tuners_flag_not_a_setting(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as refused:
        tuner.main(["--memory-price", "-1"], Settings())
    assert refused.value.code == 2 and "--memory-price -1: must be between 0 and 10" in capsys.readouterr().err
    assert ranking.MEMORY_PRICE == 0.111


def test_candidates_fill_the_budget() -> None:
    assert candidates.shapes(2) == [(2, 1), (1, 2)]
    assert candidates.shapes(16) == [(16, 1), (8, 2), (4, 4)]
    names = {c.name for c in candidates.candidates(2, frozenset({"avx2"}))}
    assert names == {"openvino-dequant-f32-2x1", "openvino-dequant-f32-1x2", "onnxruntime-f32-2x1",
                     "onnxruntime-f32-1x2", "onnxruntime-convgemm-f32-2x1", "onnxruntime-convgemm-f32-1x2",
                     "onnxruntime-fused-f32-2x1", "onnxruntime-fused-f32-1x2"}
    bf16 = [c for c in candidates.candidates(2, frozenset({"avx512_bf16"})) if c.precision == "bf16"]
    assert bf16 and all(c.form == "dequant16" for c in bf16)


@pytest.mark.parametrize("manifest", sorted((SHIPPED / DIRECTORY).glob("*.json")), ids=lambda p: p.stem)
def test_a_shipped_manifest_measured_every_candidate_the_tuner_tries_now(manifest: Path) -> None:
    """A shipped manifest whose table lacks a candidate the tuner now tries (a form added since it was made) chose
    without it: it fails here until the class is tuned again."""
    made = json.loads(manifest.read_text())
    flags = cpu.tier_flags(made["key"]["cpu_class"])
    assert flags, made["key"]["cpu_class"]
    tried = {c.name for c in candidates.candidates(made["key"]["cpus"], flags)}
    measured = {row["candidate"] for row in made["table"]}
    assert tried <= measured, f"{manifest.name} lacks {sorted(tried - measured)}: run python -m app tune on that class"


def test_a_real_tuning_run_never_picks_a_broken_form(tmp_path: Path, cache_dir: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A real trial (in its own process) on a short corpus; one more candidate is a deliberately broken form that
    reports a huge efficiency but says something else (noise as long as the real audio, in place of a second real
    trial): the check rules it out."""
    monkeypatch.setattr(tuner, "TUNING_TEXTS", (("af_heart", "Thanks for calling."),
                                                ("am_michael", "Please hold the line for a moment.")))
    broken = ORT_1X2
    real: list[tuple[dict[str, Any], dict[str, npt.NDArray[np.float32]]]] = []

    def trial(candidate: Candidate, job: dict[str, Any]) -> tuple[dict[str, Any], dict[str, npt.NDArray[np.float32]]]:
        if candidate == broken:  # the tuner runs the reference configuration (2 x 1 here) first
            outcome, audio = real[-1]
            rng = np.random.default_rng(0)
            audio = {k: rng.normal(0, 0.3, len(v)).astype(np.float32) for k, v in audio.items()}
            return {**outcome, "candidate": broken.name, "efficiency": 100.0}, audio
        outcome, audio = tuner.subprocess_trial(candidate, job)
        # Each trial runs with the server's malloc settings, so its peak RSS is the server's.
        assert job["malloc_mmap_threshold_kb"] == trim.MMAP_THRESHOLD_KB > 0
        assert outcome["malloc"] == {"arenas": True, "mmap_threshold": True}
        real.append((outcome, audio))
        return outcome, audio

    made = tuner.tune(Settings(cache_dir=cache_dir), out=tmp_path, rounds=1, only=[ORT_2X1, broken], trial=trial)
    assert made.choice == ORT_2X1
    rows = {row["candidate"]: row for row in made.table}
    assert rows[broken.name]["check"]["passed"] is False and rows[broken.name]["efficiency"] == 100.0
    assert rows[ORT_2X1.name]["check"]["passed"] is True and rows[ORT_2X1.name]["chosen"] is True
    assert rows[ORT_2X1.name]["efficiency"] > 0.1 and rows[ORT_2X1.name]["peak_rss_mb"] > 100
    saved = json.loads(next((tmp_path / "tuning").glob("*.json")).read_text())
    assert saved["choice"]["streams"] == 2 and saved["key"]["model_sha256"] == served_sha256(cache_dir)
    assert "onnxruntime-f32-2x1" in tuner.format_table(made)
    # Each row carries the memory the ranking charged and the score it gave (Settings' default price).
    assert rows[ORT_2X1.name]["memory_gib"] > rows[ORT_2X1.name]["peak_rss_mb"] / 1024
    assert 0 < rows[ORT_2X1.name]["score"] < rows[ORT_2X1.name]["efficiency"]


def speak(url: str) -> bytes:
    response = httpx.post(f"{url}/v1/audio/speech", timeout=120,
                          json={"input": "The tuned form speaks.", "voice": "af_heart", "response_format": "pcm"})
    assert response.status_code == 200, response.text
    return response.content


def served_sha256(cache_dir: Path) -> str:
    """The key's model hash as the server computes it: its timed copy's (app.forms.timed), not the shipped file's."""
    from app.served import served_model

    return served_model(Settings(cache_dir=cache_dir), cache_dir)[1]


def test_the_server_serves_with_the_tuned_choice_and_reports_it(tmp_path: Path, cache_dir: Path) -> None:
    baked = tmp_path / "baked"
    here = TuneKey.here(read_budget().cpus, served_sha256(cache_dir))
    written = write(baked, manifest(here, ORT_1X2))
    with live_server(cache_dir, tmp_path, baked_cache_dir=str(baked), quiet_window_s="0") as server:
        assert len(speak(server.url)) > 24000
        info = httpx.get(f"{server.url}/v1/info").json()
    assert info["backend"] == "onnxruntime" and info["engine"]["source"] == "tuned"
    assert info["engine"]["reason"].endswith(": onnxruntime-f32-1x2 was fastest") and info["engine"]["table"]
    assert info["engine"]["manifest"] == str(written)  # the baked manifest, found and used
    assert info["resolved"]["backend"] == "onnxruntime"
    assert (info["pool"]["streams"], info["pool"]["threads_per_stream"]) == (1, 2)


def test_a_cpu_no_manifest_covers_gets_the_portable_default(tmp_path: Path, cache_dir: Path) -> None:
    """As an instance on a CPU class never measured: a manifest of another class is ignored, saying why, and the
    server serves ONNX Runtime on the fused form, one single-threaded session per CPU, made and checked once."""
    baked = tmp_path / "baked"
    here = TuneKey.here(read_budget().cpus, served_sha256(cache_dir))
    other_class = "amd-avx2" if here.cpu_class != "amd-avx2" else "intel-amx"
    other = dataclasses.replace(here, cpu="Another CPU", flags="0" * 16, cpu_class=other_class)
    written = write(baked, manifest(other, ORT_1X2))
    with live_server(cache_dir, tmp_path, baked_cache_dir=str(baked), quiet_window_s="0",
                     options=Options(shipped_tuning=False)) as server:
        assert len(speak(server.url)) > 24000
        info = httpx.get(f"{server.url}/v1/info").json()
    assert info["engine"]["source"] == "default" and info["resolved"]["backend"] == "onnxruntime"
    assert info["engine"]["form"] == "fused" and info["engine"]["manifest"] is None
    assert (info["pool"]["streams"], info["pool"]["threads_per_stream"]) == (read_budget().cpus, 1)
    reason = info["engine"]["reason"]  # as the start log says it
    assert reason.startswith("no tuning manifest for this CPU") and f"{written.name}: made for " in reason
    assert "serving the portable default" in reason and "output check passed" in reason


def test_a_form_that_cannot_be_made_leaves_the_model_file_serving(tmp_path: Path) -> None:
    """A model the fused form cannot be made from (here a float graph with no quantized convolution) is served as it
    is, saying why, whether the form was to be checked (chosen elsewhere) or not (tuned here): the server starts."""
    import onnx
    from onnx import TensorProto, helper

    from app.tune import portable

    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "float",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = tmp_path / "float.onnx"
    onnx.save(helper.make_model(graph), str(model))
    for check in (True, False):
        served, why = portable.form_path(model, tmp_path / "cache", "ef" * 32, [], check=check)
        assert served == model and why.startswith("the fused form could not be made")
