"""``python -m bench``: run the benchmark, re-render a report, or audit cost and autoscaling.

- ``run``: measure every configuration and write results.json, figures.json, report.md and plots.
- ``report RUN``: rebuild figures, plots and report.md from RUN/results.json without measuring.
- ``cost`` / ``autoscale``: the cost and autoscaling audit (bench/audit.py; ``cost --run RUN`` prices a run).
- ``soak``: memory under shape churn, per OpenVINO shape cache size (bench/soak.py).
- ``overload``: a server held at 4 × its capacity (bench/overload.py).
- ``latency``: first audio and stalls of server variants side by side, interleaved (bench/latency.py).
- ``coldstart``: process start and release to first audio against a plain kokoro-onnx script (bench/coldstart.py).
- ``agents``: voice-agent sessions streaming text in over the ElevenLabs-shaped socket, against HTTP (bench/agents.py).
- ``quality``: word error rate and inserted pauses, served and plain kokoro-onnx, by an offline recogniser
  (bench/quality.py; needs the ``quality`` extra); ``quality --languages``: the same per language, by a
  multilingual recogniser (bench/languages.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import logging
import shlex
import signal
import sys
from pathlib import Path

from bench import agents, audit, coldstart, configs, languages, latency, overload, quality, report, runner, soak

DEFAULT_CACHE = Path.home() / ".cache" / "kokoro-tts-bench"


def _ints(text: str) -> tuple[int, ...]:
    values = tuple(int(v) for v in text.split(",") if v.strip())
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers separated by commas, got {text!r}")
    return values


def _names(text: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in text.split(",") if v.strip())


def _pool(text: str) -> str:
    try:
        configs.parse_pool(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text.strip().lower()


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug detail")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="measure the configurations and write a report")
    defaults = runner.Options(out=Path(), cache_dir=DEFAULT_CACHE)
    run.add_argument("--quick", action="store_true",
                     help="a few minutes: ort-defaults and complete, 2 utterances, 1 and 2 clients, short windows")
    run.add_argument("--configs", type=_names,
                     help="comma-separated configuration names (default: all of this server's; the foreign instance, "
                          "fastkokoro and kokoro-pi only when named)")
    run.add_argument("--clients", type=_ints, help=f"client counts (default {','.join(map(str, defaults.clients))})")
    run.add_argument("--ramp-s", type=float, help=f"excluded ramp-up per client count (default {defaults.ramp_s:g})")
    run.add_argument("--window-s", type=float, help=f"steady-state window (default {defaults.window_s:g})")
    run.add_argument("--drain-s", type=float,
                     help=f"longest wait past a window for in-flight chunks (default {defaults.drain_s:g})")
    run.add_argument("--idle-s", type=float, help=f"idle period (default {defaults.idle_s:g}; the issue's is 600)")
    run.add_argument("--quiet-window-s", type=float,
                     help=f"the complete system's quiet window (default {defaults.quiet_window_s:g})")
    run.add_argument("--release-cycles", type=int, help=f"default {defaults.release_cycles}")
    run.add_argument("--growth-cycles", type=int, help=f"default {defaults.growth_cycles}")
    run.add_argument("--cold-starts", type=int, help=f"each with and without cache (default {defaults.cold_starts})")
    run.add_argument("--corpus", type=Path, help="corpus JSON (default bench/corpus/study16-v2.json)")
    run.add_argument("--items", type=_names, help="utterance ids to use (default: all)")
    run.add_argument("--out", type=Path, help="run folder (default bench/results/<timestamp>)")
    run.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE,
                     help=f"model, compile caches, logs and audio (default {DEFAULT_CACHE})")
    run.add_argument("--no-tune", dest="tune", action="store_false", default=None,
                     help="serve the complete system untuned (TTS_BACKEND=auto finds no manifest: OpenVINO)")
    run.add_argument("--tuned-dir", type=Path,
                     help="reuse the manifest a tuning run left in DIR/tuning/ instead of tuning first")
    run.add_argument("--no-ceiling", dest="ceiling_1x1", action="store_false", default=None,
                     help="skip the in-process OpenVINO 1 stream x 1 thread run over the corpus (the raw runtime's "
                          "ceiling: minutes of one thread on a many-core machine)")
    run.add_argument("--pool", type=_pool,
                     help="STREAMSxTHREADS in place of the sizing rule's shape for the sized and complete "
                          "configurations (the study's 8x2 on a machine whose rule picks another); default: the rule's")
    run.add_argument("--voice", help="every utterance in this voice (default: the corpus's voices); the peers' "
                                     "comparison speaks af_heart, which every server offers")
    rep = sub.add_parser("report", help="rebuild report.md, plots and figures.json from RUN/results.json")
    rep.add_argument("run", type=Path)
    rep.add_argument("--readme", action="store_true", help="print the headline table for the README instead")
    sub.add_parser("cost", help="cost audit (see python -m bench cost --help)", add_help=False)
    sub.add_parser("autoscale", help="autoscaling audit (see python -m bench autoscale --help)", add_help=False)
    sub.add_parser("soak", help="memory under shape churn (see python -m bench soak --help)", add_help=False)
    sub.add_parser("overload", help="4 x capacity for minutes (see python -m bench overload --help)", add_help=False)
    sub.add_parser("latency", help="first audio and stalls side by side (see python -m bench latency --help)",
                   add_help=False)
    sub.add_parser("coldstart", help="start and restore against a plain script (python -m bench coldstart --help)",
                   add_help=False)
    sub.add_parser("quality", help="word error rate and inserted pauses (python -m bench quality --help)",
                   add_help=False)
    return parser


def options_of(args: argparse.Namespace, command: str) -> runner.Options:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    out = args.out or Path("bench/results") / (f"quick-{stamp}" if args.quick else stamp)
    base = (runner.quick_options(out, args.cache_dir, command) if args.quick
            else runner.Options(out=out, cache_dir=args.cache_dir, command=command))
    overrides = {name: getattr(args, name) for name in (
        "configs", "clients", "ramp_s", "window_s", "drain_s", "idle_s", "quiet_window_s", "release_cycles",
        "growth_cycles", "cold_starts", "corpus", "items", "tune", "tuned_dir", "pool", "voice",
        "ceiling_1x1") if getattr(args, name) is not None}
    return dataclasses.replace(base, **overrides)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("cost", "autoscale"):
        return audit.main(argv)
    if argv and argv[0] == "soak":
        return soak.main(argv[1:])
    if argv and argv[0] == "overload":
        return overload.main(argv[1:])
    if argv and argv[0] == "latency":
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
        return latency.main(argv[1:])
    if argv and argv[0] == "coldstart":
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
        return coldstart.main(argv[1:])
    if argv and argv[0] == "agents":
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
        return agents.main(argv[1:])
    if argv and argv[0] == "quality":
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
        return languages.main(argv[2:]) if argv[1:2] == ["--languages"] else quality.main(argv[1:])
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if args.command == "report":
        if args.readme:
            print(report.readme_snippet(json.loads((args.run / "results.json").read_text())))
        else:
            print(runner.rerender(args.run))
        return 0
    # SIGTERM unwinds like Ctrl-C, so every server is stopped and its cgroup removed on the way out.
    signal.signal(signal.SIGTERM, _interrupt)
    options = options_of(args, "python -m bench " + shlex.join(argv))
    try:
        out = runner.Run(options).execute()
    except KeyboardInterrupt as exc:
        print(f"interrupted ({exc or 'Ctrl-C'}); servers stopped; partial results: {options.out / 'results.json'}",
              file=sys.stderr)
        return 130
    print(out / "report.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
