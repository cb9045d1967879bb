"""gluon.data.vision: MNIST, FashionMNIST and transforms."""
from . import transforms
from .datasets import MNIST, FashionMNIST

__all__ = ["MNIST", "FashionMNIST", "transforms"]
