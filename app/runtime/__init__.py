"""The serving runtime: backends, where they run (this process or an inference process), their caches.

The engine depends on `app.runtime.protocol.Runtime` only. The model files it loads come from `app.forms`; nothing
here knows of tuning (`app.tune`).
"""
