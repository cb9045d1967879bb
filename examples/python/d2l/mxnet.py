"""d2l.Benchmark, d2l.Timer and d2l.try_gpu as the d2l book defines them (mxnet flavour),
over depengine.npx instead of mxnet.npx. Benchmark also keeps its figures (RESULTS) so that
the example can print them side by side at the end."""
import time

from depengine import npx

RESULTS = {}


class Timer:
    """Record multiple running times."""

    def __init__(self):
        self.times = []
        self.start()

    def start(self):
        self.tik = time.time()

    def stop(self):
        self.times.append(time.time() - self.tik)
        return self.times[-1]


class Benchmark:
    """For measuring running time."""

    def __init__(self, description='Done'):
        self.description = description

    def __enter__(self):
        self.timer = Timer()
        return self

    def __exit__(self, *args):
        elapsed = self.timer.stop()
        RESULTS[self.description] = elapsed
        print(f'{self.description}: {elapsed:.4f} sec')


def try_gpu(i=0):
    """Return gpu(i) if exists, otherwise return cpu()."""
    return npx.gpu(i) if npx.num_gpus() >= i + 1 else npx.cpu()
