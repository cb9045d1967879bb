"""gluon.nn: layers (MXNet 1.9's names)."""
from .basic_layers import Activation, Dense, Dropout, Flatten, HybridSequential, Sequential
from ..block import Block, HybridBlock

__all__ = ["Activation", "Block", "Dense", "Dropout", "Flatten", "HybridBlock",
           "HybridSequential", "Sequential"]
