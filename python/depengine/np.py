"""depengine.np: the mxnet.np functions the d2l chapters use, as bound C++ functions."""
from ._depengine import np as _np

globals().update({k: getattr(_np, k) for k in dir(_np) if not k.startswith("__")})
__all__ = [k for k in dir(_np) if not k.startswith("_")]
