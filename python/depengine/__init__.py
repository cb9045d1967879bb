"""depengine: an MXNet-style dependency engine.

    from depengine import np, npx          # the mxnet.np / mxnet.npx surface
    import depengine as de
    e = de.Engine("threaded", cpu_threads=4)
    v = e.new_var()
    e.push(lambda: print("runs on a worker"), reads=[], writes=[v])
    e.wait_all()

See docs/python.md.
"""
import atexit as _atexit

from . import _depengine
from ._depengine import (Completion, Device, Engine, Error, Graph, GraphAnalysis, Program,
                         Recording, Segment, Var, current_engine, engine, load_program, parse_program,
                         profile, record)
from . import np, npx, autograd

__all__ = ["Completion", "Device", "Engine", "Error", "Graph", "GraphAnalysis", "Program",
           "Recording", "Segment", "Var", "current_engine", "engine", "load_program", "parse_program",
           "profile", "record", "np", "npx", "autograd"]

# Before the interpreter finalizes: wait for every engine Python used, then keep engine
# workers out of Python for good (a later Python op fails instead of running).
_atexit.register(_depengine._close_python)
