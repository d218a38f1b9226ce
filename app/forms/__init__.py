"""The model's files: the embedded model assembled (`modelfile`), its timed copy (`timed`), and the forms rewritten
from it ahead of time (`store`: which forms exist, where each is made and found; `dequantize`, `convgemm`, `fused`,
`channels_last`, `phase`: the rewrites). Knows nothing of the runtimes that serve them or of the tuner that picks one.
"""
