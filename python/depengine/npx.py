"""depengine.npx: waitall, devices (cpu, gpu, num_gpus), seed, set_np (no effect), relu,
sigmoid, dropout, save / load, record and replay (recorded array ops, as a CachedOp)."""
from ._depengine import npx as _npx
from ._np_extra import load, save

globals().update({k: getattr(_npx, k) for k in dir(_npx) if not k.startswith("__")})
__all__ = [k for k in dir(_npx) if not k.startswith("_")] + ["load", "save"]
