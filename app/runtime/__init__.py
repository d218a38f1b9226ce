"""The model's runtime: backends, where they run (this process or an inference process), their caches.

The engine depends on `app.runtime.protocol.Runtime` only.
"""
