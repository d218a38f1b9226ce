"""Kokoro-82M text-to-speech server for CPU containers."""
