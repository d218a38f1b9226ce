"""The body of ``POST /v1/audio/speech``, checked field by field (OpenAI's shape plus a few extras)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from app.audio import FORMATS
from app.errors import InputTooLarge, InvalidInput, InvalidType
from app.text import languages
from app.text.normalize import DEFAULT, Normalization

MODELS = ("kokoro", "tts-1", "tts-1-hd", "gpt-4o-mini-tts", "gpt-4o-mini-tts-2025-12-15")
"""Accepted model names: ours, and OpenAI's, so unchanged OpenAI clients work."""
STREAM_FORMATS = ("audio", "sse")
"""``audio``: the encoded bytes as they come; ``sse``: OpenAI's server-sent events (base64 audio)."""
MAX_INSTRUCTIONS = 4096


@dataclass(frozen=True)
class SpeechRequest:
    input: str
    voice: str
    response_format: str
    speed: float
    stream: bool
    lang: str | None
    """Language override (a `app.text.languages.Language` key, from ``lang_code``); None follows the voice."""
    phonemes: bool
    """``input`` is a phoneme string, not text."""
    stream_format: str = "audio"
    """One of `STREAM_FORMATS`; ``sse`` always streams, whatever ``stream`` says."""
    instructions: str = ""
    """OpenAI's voice instructions: accepted so that its clients work, but Kokoro cannot follow them."""
    return_timestamps: bool = True
    """Kokoro-FastAPI's: whether ``/dev/captioned_speech`` times the words (the speech endpoint ignores it)."""
    normalization: Normalization = DEFAULT
    """Kokoro-FastAPI's ``normalization_options``: what of English text is rewritten before it is read."""

    @classmethod
    def from_body(cls, raw: bytes, *, max_input_chars: int, default_voice: str) -> SpeechRequest:
        try:
            body = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            raise InvalidInput(f"the body is not valid JSON: {str(exc)[:120]}", code="invalid_json") from None
        if not isinstance(body, dict):
            raise InvalidType("the body must be a JSON object")
        model = _get(body, "model", str, "kokoro")
        if model not in MODELS:
            raise InvalidInput(f"unknown model {model[:60]!r}; use one of {', '.join(MODELS)}", param="model",
                               code="model_not_found")
        text = _get(body, "input", str, None)
        if text is None:
            raise InvalidInput("'input' is required", param="input")
        if len(text) > max_input_chars:
            raise InputTooLarge(f"input is {len(text)} characters; the limit is {max_input_chars}", param="input")
        if not text.strip():
            raise InvalidInput("input is empty", param="input", code="empty_input")
        fmt = _get(body, "response_format", str, "mp3")
        if fmt not in FORMATS:
            raise InvalidInput(f"unsupported response_format {fmt[:40]!r}; use one of {', '.join(FORMATS)}",
                               param="response_format")
        speed = _get(body, "speed", float, 1.0)
        lang_code = _get(body, "lang_code", str, None)
        lang = languages.parse(lang_code).key if lang_code else None
        input_format = _get(body, "input_format", str, "text")
        if input_format not in ("text", "phonemes"):
            raise InvalidInput("input_format must be 'text' or 'phonemes'", param="input_format")
        stream_format = _get(body, "stream_format", str, "audio")
        if stream_format not in STREAM_FORMATS:
            raise InvalidInput(f"unsupported stream_format {stream_format[:40]!r}; use 'audio' or 'sse'",
                               param="stream_format")
        instructions = _get(body, "instructions", str, "")
        if len(instructions) > MAX_INSTRUCTIONS:
            raise InputTooLarge(f"instructions are {len(instructions)} characters; the limit is {MAX_INSTRUCTIONS}",
                                param="instructions")
        return cls(
            input=text,
            voice=_voice(body.get("voice")) or default_voice,
            response_format=fmt,
            speed=speed,
            stream=_get(body, "stream", bool, True),
            lang=lang,
            phonemes=input_format == "phonemes",
            stream_format=stream_format,
            instructions=instructions,
            return_timestamps=_get(body, "return_timestamps", bool, True),
            normalization=Normalization.from_body(body.get("normalization_options")),
        )


def _voice(value: Any) -> str | None:
    """A voice expression, from a string or OpenAI's voice object ``{"id": ...}``."""
    if isinstance(value, dict):
        voice_id = value.get("id")
        if voice_id is not None and not isinstance(voice_id, str):
            raise InvalidType("the voice object's 'id' must be a string", param="voice")
        if not voice_id:
            raise InvalidInput("a voice object needs an 'id'", param="voice")
        return voice_id
    if value is not None and not isinstance(value, str):
        raise InvalidType("'voice' must be a string or an object with an 'id'", param="voice")
    return value


def _get(body: dict[str, Any], name: str, kind: type, default: Any) -> Any:
    value = body.get(name)
    if value is None:
        return default
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidType(f"'{name}' must be a number", param=name)
        return float(value)
    if not isinstance(value, kind):
        raise InvalidType(f"'{name}' must be a {'string' if kind is str else 'boolean'}", param=name)
    return value
