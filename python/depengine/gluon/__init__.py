"""depengine.gluon: MXNet 1.9's Gluon on the engine — Parameter, Block / HybridBlock, nn
layers, losses, Trainer (fused optimizer ops) and data loading. See docs/training.md, "Gluon".

    from depengine import autograd, gluon, init, np, npx
    from depengine.gluon import nn
    net = nn.Sequential()
    net.add(nn.Dense(256, activation='relu'), nn.Dense(10))
    net.initialize(init.Normal(sigma=0.01))
    loss = gluon.loss.SoftmaxCrossEntropyLoss()
    trainer = gluon.Trainer(net.collect_params(), 'sgd', {'learning_rate': 0.1})
"""
from . import data, loss, metric, nn
from .block import Block, HybridBlock
from .parameter import DeferredInitializationError, Parameter, ParameterDict
from .trainer import Trainer

__all__ = ["Block", "DeferredInitializationError", "HybridBlock", "Parameter", "ParameterDict",
           "Trainer", "data", "loss", "metric", "nn"]
