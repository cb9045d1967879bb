"""depengine.np: the mxnet.np functions the d2l chapters use, as bound C++ functions."""
from ._depengine import np as _np
from . import _np_extra

globals().update({k: getattr(_np, k) for k in dir(_np) if not k.startswith("__")})
cumsum = _np_extra.cumsum
linalg = _np_extra.linalg
random.multinomial = _np_extra._multinomial
random.shuffle = _np_extra._shuffle
ndarray.cumsum = _np_extra.ndarray_cumsum
__all__ = [k for k in dir(_np) if not k.startswith("_")] + ["cumsum", "linalg"]
