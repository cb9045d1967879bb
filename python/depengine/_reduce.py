"""How pickle rebuilds depengine objects (the bound classes' __reduce__ name these)."""
from ._depengine import npx as _npx
from ._depengine import np as _np


def device(kind, device_id):
    """npx.cpu(i) or npx.gpu(i)."""
    return _npx.gpu(device_id) if kind == "gpu" else _npx.cpu(device_id)


def ndarray(data, kind, device_id):
    """A new array holding `data` (a NumPy array) on the current engine and that device."""
    return _np.array(data, ctx=device(kind, device_id))
