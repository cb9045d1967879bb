"""gluon.nn: layers (MXNet 1.9's names)."""
from .basic_layers import Activation, Dense, Dropout, Flatten, HybridSequential, Sequential
from .conv_layers import (AvgPool2D, BatchNorm, Conv2D, GlobalAvgPool2D, GlobalMaxPool2D,
                          MaxPool2D)
from ..block import Block, HybridBlock

__all__ = ["Activation", "AvgPool2D", "BatchNorm", "Block", "Conv2D", "Dense", "Dropout",
           "Flatten", "GlobalAvgPool2D", "GlobalMaxPool2D", "HybridBlock", "HybridSequential",
           "MaxPool2D", "Sequential"]
