"""Reclaimable lifecycle: release inference state after a quiet window and restore it on demand.

Knows nothing of HTTP or of the app: what it manages satisfies `lifecycle.protocol.Reclaimable`.
"""
