"""The two helpers of the d2l book (d2l.ai) that chapter 13.2 uses, so that its code runs
unchanged without installing the d2l package (which pulls in MXNet, matplotlib, ...).
`from d2l import mxnet as d2l` finds this folder first when run from examples/python."""
