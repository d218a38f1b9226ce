"""The quality benchmark's corpus figures and README.md (`bench.quality`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

SIDES = ("served", "inprocess")


def summarize(takes: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Corpus-level figures: errors over all reference words (not a mean of per-utterance rates)."""
    words = sum(t["words"] for t in takes)
    errors = sum(t["errors"] for t in takes)
    pauses = [p for t in takes for p in t["pauses"]]
    audio_s = sum(t["audio_s"] for t in takes)
    inserted = sum(1 for p in pauses if p["inserted"])
    return {"utterances": len(takes), "words": words, "errors": errors,
            "wer": round(errors / words, 4) if words else 0.0, "audio_s": round(audio_s, 1),
            "pauses_inserted": inserted,
            "pauses_at_punctuation": sum(1 for p in pauses if p["punctuated"]),
            "pauses_unplaced": sum(1 for p in pauses if p["punctuated"] is None),
            "inserted_per_min": round(60.0 * inserted / audio_s, 2) if audio_s else 0.0}


def render(results: dict[str, Any]) -> str:
    """The results folder's README: how it was made, the table, and every inserted pause."""
    run_info, voices = results["run"], results["voices"]
    server = results.get("server", {})
    served_by = run_info["url"] or "a server this command started"
    if server.get("peer"):
        served_by = (f"the peer {server['peer']} {server.get('versions', {}).get(server['peer'], '')} "
                     f"(`bench.peers`: installed from PyPI, started offline on the same model and voices)")
    lines = [
        f"# Speech quality: {run_info['id']}", "",
        f"`{run_info['command']}`", "",
        f"{run_info['started']}, {results['machine']['cpu_model']} ({results['machine']['logical_cpus']} CPUs), "
        f"commit {run_info['commit']}. Corpus "
        f"{results['corpus']['name']} ({len(results['corpus']['items'])} utterances: "
        f"{', '.join(results['corpus']['items'])}). Served: {served_by}, backend {server.get('backend', '?')}; "
        f"voices: {run_info['voices_file']}. {_load(run_info.get('loadavg', {}))}"
        "In process: kokoro-onnx `Kokoro.create` on the same model file and "
        f"voice styles. Recogniser: {run_info['recogniser']} ({run_info.get('recogniser_weights', '?')}).", "",
        "Word error rate over all the corpus's words (normalised: lowercase, numbers as words, no punctuation). "
        f"A pause is at least {run_info['min_pause_s']:g} s below {run_info['threshold_dbfs']:g} dBFS inside an "
        "utterance; *inserted* where the text between the recognised words around it has no punctuation "
        "(see `bench/transcript.py`).", "",
        "| voice | lang | served WER | in-process WER | served pauses inserted / at punctuation | "
        "in-process pauses inserted / at punctuation | words | served audio s | in-process audio s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, voice in voices.items():
        served, plain = voice.get("served", {}).get("summary", {}), voice.get("inprocess", {}).get("summary", {})
        lines.append(f"| {name} | {voice['lang']} | {_pct(served)} | {_pct(plain)} | {_pauses(served)} | "
                     f"{_pauses(plain)} | {served.get('words', '')} | {served.get('audio_s', '')} | "
                     f"{plain.get('audio_s', '')} |")
    lines += ["", "## Inserted pauses", ""]
    for name, voice in voices.items():
        for side in SIDES:
            for item, take in voice.get(side, {}).get("utterances", {}).items():
                for pause in take["pauses"]:
                    if pause["inserted"]:
                        lines.append(f"- {name} {side} {item}: {pause['end_s'] - pause['start_s']:.2f} s at "
                                     f"{pause['start_s']:.2f} s, between \"{pause['before']}\" and "
                                     f"\"{pause['after']}\"")
    if lines[-1] == "":
        lines.append("None.")
    lines += ["", "## Word errors", "", "Reference→heard, -missed, +added, after normalisation.", ""]
    for name, voice in voices.items():
        for side in SIDES:
            for item, take in voice.get(side, {}).get("utterances", {}).items():
                if take.get("differences"):
                    lines.append(f"- {name} {side} {item}: {', '.join(take['differences'])}")
    if lines[-1] == "":
        lines.append("None.")
    return "\n".join(lines) + "\n"


def _load(loadavg: dict[str, float]) -> str:
    if not loadavg:
        return ""
    return ("One-minute load average at the start, after serving and after synthesis: "
            f"{', '.join(f'{v:.1f}' for v in loadavg.values())}. ")


def _pct(summary: dict[str, Any]) -> str:
    return f"{100.0 * summary['wer']:.1f} % ({summary['errors']})" if summary else "n/a"


def _pauses(summary: dict[str, Any]) -> str:
    return f"{summary['pauses_inserted']} / {summary['pauses_at_punctuation']}" if summary else "n/a"
