"""depengine.npx: waitall, devices (cpu, gpu, num_gpus), seed, set_np (no effect), record and
replay (recorded array ops, as a CachedOp)."""
from ._depengine import npx as _npx

globals().update({k: getattr(_npx, k) for k in dir(_npx) if not k.startswith("__")})
__all__ = [k for k in dir(_npx) if not k.startswith("_")]
