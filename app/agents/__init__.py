"""The voice-agent layer: text that arrives in pieces, spoken as it comes, over the protocols agents speak.

- `stream`: text fed in pieces cut into segments at natural boundaries, bounded in all (`TextStream`).
- `utterance`: the segments spoken in order through the same admission, warm hold and schedule as a request.
- `elevenlabs`: ElevenLabs' input-streaming sockets, their messages as a small state machine (the Starlette routes
  that carry them are `app.http.elevenlabs`: HTTP stays in `app/http/`).
- `wyoming`: the Wyoming server (Home Assistant) on ``TTS_WYOMING_PORT``, beside HTTP.
- `output`: ElevenLabs' ``output_format`` names (`app.audio.Resampled` encodes them); `alignment`: its character
  timings from the model's word times.

`start` starts what listens on a port of its own, from the services the app's lifespan built, and returns what stops it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from app.services import Services


async def start(svc: Services) -> Callable[[], Awaitable[None]]:
    """Start the agent servers the settings ask for (Wyoming, where ``TTS_WYOMING_PORT`` is set); the function
    returned stops them, at shutdown."""
    servers = []
    if svc.settings.wyoming_port:
        from app.agents import wyoming

        servers.append(await wyoming.serve(svc))

    async def stop() -> None:
        for server in servers:
            await server.stop()

    return stop
