"""How the tuner compares what it measured: each candidate's trials (`Result`), their score (`Ranking`: audio per
unit of instance cost) and the choice (`choose`), OpenVINO winning ties (within `TIE`)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from app.tune import outputcheck
from app.tune.manifest import Candidate

TIE = 0.03
"""OpenVINO keeps the choice unless another backend scores more than 3 % higher."""

CHECK_MARGIN = 0.9
"""A chosen form's worst log-mel distance on the tuning corpus must stay under 90 % of the output check's
limit. The tuning corpus is small and the benchmark checks other text: OpenVINO bf16 here measured 0.72 on
one run and 0.68 on the next against the 0.70 limit, so a form that only just passes on the tuning corpus
can fail elsewhere; backend-to-backend differences in f32 sit near 0.50."""


@dataclasses.dataclass
class Result:
    """A candidate's trials."""

    candidate: Candidate
    efficiencies: list[float] = dataclasses.field(default_factory=list)
    throughputs: list[float] = dataclasses.field(default_factory=list)
    peak_rss_mb: float = 0.0
    load_s: float = 0.0
    check: outputcheck.Verdict | None = None
    error: str = ""

    @property
    def median(self) -> float:
        return float(np.median(self.efficiencies)) if self.efficiencies else 0.0

    @property
    def eligible(self) -> bool:
        check = self.check
        return (not self.error and check is not None and check.passed and bool(self.efficiencies)
                and check.max_mel_distance <= CHECK_MARGIN * outputcheck.THRESHOLDS.max_mel_distance)

    def row(self) -> dict[str, Any]:
        check = self.check
        return {"candidate": self.candidate.name, **dataclasses.asdict(self.candidate),
                "efficiency": round(self.median, 4), "efficiencies": [round(e, 4) for e in self.efficiencies],
                "throughput": round(float(np.median(self.throughputs)), 4) if self.throughputs else 0.0,
                "peak_rss_mb": round(self.peak_rss_mb, 1), "load_s": round(self.load_s, 2),
                "check": None if check is None else {"passed": check.passed, "failed": len(check.failed),
                                                    "max_mel_distance": round(check.max_mel_distance, 3),
                                                    "max_abs_sample_diff": check.max_abs_sample_diff},
                "chosen": False, "error": self.error}


MEMORY_PRICE = 0.111
"""The price of one GiB-second in vCPU-seconds that `Ranking` charges by default: Cloud Run's instance-based price
($0.000002 per GiB-s over $0.000018 per vCPU-s; Fargate's is 0.110)."""


@dataclasses.dataclass(frozen=True)
class Ranking:
    """How candidates are compared: audio per unit of instance cost.

    An instance-billed platform bills, per second, its vCPUs and the memory it reserves; at full load a
    candidate makes ``efficiency x cpus`` audio-seconds a second. With memory priced at ``memory_price``
    vCPU-seconds per GiB-second, audio per cost is ``efficiency / (1 + memory_price x GiB / cpus)`` (in
    audio-seconds per vCPU-second). A candidate's GiB is its trial's peak RSS (the inference process) plus
    ``base_mb``, what the server's own process holds whatever the runtime (the front end and the voices,
    measured in the tuning process). ``memory_price=0`` ranks by CPU efficiency alone."""

    cpus: int = 1
    memory_price: float = 0.0
    base_mb: float = 0.0

    def memory_gib(self, result: Result) -> float:
        return (result.peak_rss_mb + self.base_mb) / 1024

    def score(self, result: Result) -> float:
        return result.median / (1 + self.memory_price * self.memory_gib(result) / self.cpus)

    def describe(self, result: Result) -> str:
        """``1.093 audio-s per CPU-s`` and, when memory is priced, the score and the memory behind it."""
        text = f"{result.median:.3f} audio-s per CPU-s"
        if self.memory_price:
            text += f" at {self.memory_gib(result):.2f} GiB (score {self.score(result):.3f})"
        return text


def choose(results: list[Result], ranking: Ranking | None = None) -> tuple[Result | None, str]:
    """The eligible result with the highest score (`Ranking`), OpenVINO winning ties; and one sentence saying
    why. Without a ``ranking``, by CPU efficiency alone."""
    ranking = ranking or Ranking()
    eligible = sorted((r for r in results if r.eligible), key=ranking.score, reverse=True)
    if not eligible:
        return None, "no candidate passed the output check"
    best = eligible[0]
    measure = "score" if ranking.memory_price else "efficiency"
    openvino = next((r for r in eligible if r.candidate.backend == "openvino"), None)
    if openvino is not None and openvino is not best and ranking.score(openvino) >= ranking.score(best) * (1 - TIE):
        return _more_streams(openvino, eligible, ranking, (
            f"{openvino.candidate.name}: {ranking.describe(openvino)}, within {TIE:.0%} of "
            f"{best.candidate.name} ({ranking.describe(best)}): OpenVINO keeps ties"))
    wider = _more_streams(best, eligible, ranking, "")
    if wider[0] is not best:
        return wider
    why = f"{best.candidate.name}: the highest {measure}, {ranking.describe(best)}"
    if openvino is not None and best.candidate.backend != "openvino":
        why += (f", {ranking.score(best) / ranking.score(openvino) - 1:.0%} above the best OpenVINO form "
                f"({openvino.candidate.name}, {ranking.describe(openvino)})")
    if ranking.memory_price:
        why += (f"; memory priced at {ranking.memory_price:g} vCPU-s per GiB-s (--memory-price) on "
                f"{ranking.cpus} vCPUs")
    failed = [r.candidate.name for r in results if not r.eligible]
    if failed:
        why += f"; not eligible: {', '.join(failed)}"
    return best, why


def _more_streams(chosen: Result, eligible: list[Result], ranking: Ranking, why: str) -> tuple[Result, str]:
    """``chosen``, or the same backend with more streams where that scores within `TIE` of it: more streams let a
    new request's first chunk start beside a running chunk instead of waiting for it to end: at level efficiency,
    first audio came sooner at 2 clients (docs/experiments.md)."""
    rivals = [r for r in eligible if r.candidate.backend == chosen.candidate.backend
              and r.candidate.streams > chosen.candidate.streams
              and ranking.score(r) >= ranking.score(chosen) * (1 - TIE)]
    if not rivals:
        return chosen, why
    wider = max(rivals, key=lambda r: (r.candidate.streams, ranking.score(r)))
    return wider, (f"{wider.candidate.name}: {ranking.describe(wider)}, within {TIE:.0%} of "
                   f"{chosen.candidate.name} ({ranking.describe(chosen)}) with more streams: a new request's first "
                   "chunk waits less" + (f" (before that: {why})" if why else ""))
