"""The stream pool, by concern: who is let in (`admission`), which waiting chunk runs next (`schedule`), how fast the
inferences run (`throughput`), what each listener has heard (`playback`), and the `StreamPool` that joins them
(`pool`). It knows nothing of HTTP, of the model, or of how long a chunk is (`app.text.chunker` decides that)."""

from app.pool import admission
from app.pool.admission import FIRST_AUDIO_BOUND_S, REALTIME_MAX_HOLD_S, Admission, Ticket
from app.pool.playback import Playback
from app.pool.pool import StreamPool
from app.pool.schedule import DEADLINE_MARGIN_S, FIRST_CHUNK_CREDIT_S, Lease, Schedule
from app.pool.throughput import Throughput

__all__ = ["DEADLINE_MARGIN_S", "FIRST_AUDIO_BOUND_S", "FIRST_CHUNK_CREDIT_S", "REALTIME_MAX_HOLD_S", "Admission",
           "Lease", "Playback", "Schedule", "StreamPool", "Throughput", "Ticket", "admission"]
