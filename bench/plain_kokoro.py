"""The yardstick of ``python -m bench coldstart``: a plain kokoro-onnx script, run as a file.

``python bench/plain_kokoro.py MODEL VOICES TEXT VOICE``: import kokoro-onnx, open the model with ONNX Runtime,
synthesize TEXT, print one JSON line with ``time.monotonic()`` at the moment the audio exists (the clock is
system-wide, so the parent compares it with its own spawn time), and exit. Nothing of this project is imported:
it is what a user who needs no server would write.
"""

import json
import sys
import time

from kokoro_onnx import Kokoro


def main(model: str, voices: str, text: str, voice: str) -> int:
    kokoro = Kokoro(model, voices)
    opened = time.monotonic()
    audio, rate = kokoro.create(text, voice=voice, speed=1.0, lang="en-us")
    sys.stdout.write(json.dumps({"opened": opened, "audio": time.monotonic(), "samples": len(audio),
                                 "rate": rate}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
