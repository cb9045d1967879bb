"""gluon.data: datasets, samplers and the DataLoader (MXNet 1.9's names)."""
from . import vision
from .dataloader import (BatchSampler, DataLoader, RandomSampler, Sampler, SequentialSampler,
                         default_batchify_fn)
from .dataset import ArrayDataset, Dataset, SimpleDataset

__all__ = ["ArrayDataset", "BatchSampler", "DataLoader", "Dataset", "RandomSampler", "Sampler",
           "SequentialSampler", "SimpleDataset", "default_batchify_fn", "vision"]
