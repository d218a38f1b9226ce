"""``python -m app``: start the server. Every flag maps onto the ``TTS_*`` setting of the same name."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import logging
import os
import signal
import sys
from typing import TYPE_CHECKING, Any

from app.runtime import early
from app.settings import Settings, SettingsError, documented

if TYPE_CHECKING:  # not imported at start: the inference process starts first (`app.runtime.early`)
    import uvicorn

    from app.runtime.spec import Options

log = logging.getLogger("app")


def parse_args(argv: list[str]) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m app", description="Kokoro-82M TTS server "
                                     "(`python -m app tune --help`: the build-time engine tuner)",
                                     epilog="Every flag overrides the TTS_* environment variable of the same name.")
    docs = {name: text for name, _, text in documented()}
    for f in dataclasses.fields(Settings):
        flag = "--" + f.name.replace("_", "-")
        # argparse treats "%" in help as a format: the docs say "6 %" and the like.
        parser.add_argument(flag, dest=f.name, default=None,
                            help=docs.get(f"TTS_{f.name.upper()}", "").replace("%", "%%"))
    return {k: v for k, v in vars(parser.parse_args(argv)).items() if v is not None}


def main(argv: list[str] | None = None, options: Options | None = None) -> int:
    """``python -m app``; ``options``: where the benchmark runs the model otherwise than the server does
    (`app.runtime.spec.Options`; `bench.baseline`), never from the environment."""
    # No telemetry leaves the process: ONNX Runtime reports usage on Linux unless told not to.
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["tune"]:
        return _tune(argv[1:])
    flags = parse_args(argv)
    try:
        env = dict(os.environ)
        env.update({f"TTS_{k.upper()}": str(v) for k, v in flags.items()})
        settings = Settings.from_env(env)
    except SettingsError as exc:
        logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
        log.error("invalid setting: %s", exc)
        return 2
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if options is None or not options.in_process:
        # Before the server's own imports (about half a second): the two processes import side by side.
        proxy = sys.modules.get("app.runtime.proxy")  # a test harness may run another child module
        # Its runtime first thing: ONNX Runtime unless OpenVINO is forced (auto serves ONNX Runtime on every CPU
        # class on record; where a local tuning picks OpenVINO, the child imports ONNX Runtime for nothing).
        runtime = "openvino" if settings.backend == "openvino" else "onnxruntime"
        early.start(proxy.ProcessRuntime.child_module if proxy is not None else early.CHILD_MODULE, (runtime,))
        # What it loads first, sent now: it loads while the server imports.
        early.prepare(functools.partial(_served_spec, settings, options))
    return _serve(settings, options)


def _served_spec(settings: Settings, options: Options | None) -> Any:
    """The `Spec` the server will serve from ``settings`` (`app.served`), for the inference process started early."""
    from app import served
    from app.runtime.spec import SERVER
    from app.sizing import read_budget

    return served.resolve(settings, read_budget(), options or SERVER).spec


def server_config(settings: Settings, app: Any) -> uvicorn.Config:
    """uvicorn's configuration of the server. The grace period goes to uvicorn as it is: uvicorn waits for the
    in-flight requests under ``asyncio.timeout(grace)``, so 0 cuts them at once and a fraction of a second is
    a fraction of a second (``None`` would wait for ever, which no setting means)."""
    import uvicorn

    config = uvicorn.Config(app, host=settings.host, port=settings.port, workers=1, log_level=settings.log_level,
                            lifespan="on", log_config=None)
    # uvicorn annotates it as an int, and uses it as asyncio.timeout's delay, which takes any float.
    config.timeout_graceful_shutdown = settings.shutdown_grace_s  # type: ignore[assignment]
    return config


def _serve(settings: Settings, options: Options | None) -> int:
    import uvicorn

    from app.http.server import create_app
    from app.runtime.spec import SERVER
    from lifecycle.trim import configure_malloc

    class _DrainingServer(uvicorn.Server):
        """On SIGTERM/SIGINT mark the app as draining (readiness goes 503, new speech gets 503), then
        let uvicorn stop accepting and wait up to the grace period for in-flight streams."""

        def __init__(self, config: uvicorn.Config, app: Any) -> None:
            super().__init__(config)
            self._app = app

        def handle_exit(self, sig: int, frame: Any) -> None:
            services = getattr(self._app.state, "services", None)
            if services is not None:
                services.draining = True
            log.info("signal %d: draining in-flight requests (grace %g s)", sig,
                     self.config.timeout_graceful_shutdown)
            super().handle_exit(sig, frame)

    configure_malloc()
    app = create_app(settings, options=options or SERVER)
    server = _DrainingServer(server_config(settings, app), app)
    # uvicorn re-raises the captured signal after its graceful shutdown, to the handler that was
    # installed before it ran; a no-op there makes a drained SIGTERM end in exit status 0.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    server.run()
    return 0 if server.started else 1


def _tune(argv: list[str]) -> int:
    """``python -m app tune``: the engine tuner (`app.tune.tuner`), configured by the same TTS_* variables."""
    try:
        settings = Settings.from_env(os.environ)
    except SettingsError as exc:
        logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
        log.error("invalid setting: %s", exc)
        return 2
    from app.tune import tuner

    return tuner.main(argv, settings)


if __name__ == "__main__":
    sys.exit(main())
