"""``python -m bench.variant``: the server (``python -m app``) with `app.runtime.spec.Options` other than its own, for
the benchmark's baselines: the runtime's own thread and stream defaults, OpenVINO's own per-shape kernel cache, no
compile cache. These are not settings (an operator has no reason to set them): the benchmark hands them over in
`OPTIONS`, a variable the server never reads; the settings are ``TTS_*`` variables as always.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Mapping

from app.__main__ import main
from app.runtime.spec import SERVER, Options

OPTIONS = "BENCH_OPTIONS"
"""The variable that carries the options (JSON, `encode`)."""
MODULE = "bench.variant"


def encode(options: Options) -> str:
    return json.dumps(dataclasses.asdict(options), sort_keys=True)


def decode(env: Mapping[str, str]) -> Options:
    """The options `encode` put in ``env``; the server's where there are none."""
    text = env.get(OPTIONS)
    return Options(**json.loads(text)) if text else SERVER


def launch_env(options: Options) -> dict[str, str]:
    """What a server's environment gets for ``options``: nothing for the server's own."""
    return {} if options == SERVER else {OPTIONS: encode(options)}


def module_for(env: Mapping[str, str]) -> str:
    """The module a server with this environment runs: this one where it carries options, else the app."""
    return MODULE if OPTIONS in env else "app"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], decode(os.environ)))
