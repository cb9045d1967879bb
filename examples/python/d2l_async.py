"""d2l.ai chapter 13.2, "Asynchronous Computation" (sections 13.2.1-13.2.4), on depengine.

The chapter's code with two changes: `from depengine import ...` instead of
`from mxnet import ...`, and 13.2.4's training loop runs 50 batches instead of 150 (150
batches of the chapter's MLP take minutes on a 2-core machine, and the loop without a barrier
would hold gigabytes; D2L_MEMORY_BATCHES=150 runs the chapter's count). d2l.Benchmark,
d2l.Timer and d2l.try_gpu come from the d2l/ folder beside this file. After the chapter's
code, the figures are printed again beside NumPy doing the same work, with what they mean.

    python examples/python/d2l_async.py
"""
import os
import subprocess
import numpy
from depengine import autograd, gluon, np, npx
from depengine.gluon import nn
from d2l import mxnet as d2l

npx.set_np()

# 13.2.1 Asynchrony via Backend

# Warmup for GPU computation
device = d2l.try_gpu()
a = np.random.normal(size=(1000, 1000), ctx=device)
b = np.dot(a, a)

with d2l.Benchmark('numpy'):
    for _ in range(10):
        a = numpy.random.normal(size=(1000, 1000))
        b = numpy.dot(a, a)

with d2l.Benchmark('mxnet.np'):
    for _ in range(10):
        a = np.random.normal(size=(1000, 1000), ctx=device)
        b = np.dot(a, a)

with d2l.Benchmark():
    for _ in range(10):
        a = np.random.normal(size=(1000, 1000), ctx=device)
        b = np.dot(a, a)
    npx.waitall()

x = np.ones((1, 2), ctx=device)
y = np.ones((1, 2), ctx=device)
z = x * y + 2
print(z)

# 13.2.2 Barriers and Blockers

with d2l.Benchmark('waitall'):
    b = np.dot(a, a)
    npx.waitall()

with d2l.Benchmark('wait_to_read'):
    b = np.dot(a, a)
    b.wait_to_read()

with d2l.Benchmark('numpy conversion'):
    b = np.dot(a, a)
    b.asnumpy()

with d2l.Benchmark('scalar conversion'):
    b = np.dot(a, a)
    b.sum().item()

# 13.2.3 Improving Computation

with d2l.Benchmark('synchronous'):
    for _ in range(10000):
        y = x + 1
        y.wait_to_read()

with d2l.Benchmark('asynchronous'):
    for _ in range(10000):
        y = x + 1
    npx.waitall()

# 13.2.4 Improving Memory Footprint

def data_iter():
    timer = d2l.Timer()
    num_batches, batch_size = int(os.environ.get('D2L_MEMORY_BATCHES', 50)), 1024
    for i in range(num_batches):
        X = np.random.normal(size=(batch_size, 512))
        y = np.ones((batch_size,))
        yield X, y
        if (i + 1) % 50 == 0:
            print(f'batch {i + 1}, time {timer.stop():.4f} sec')

net = nn.Sequential()
net.add(nn.Dense(2048, activation='relu'),
        nn.Dense(512, activation='relu'),
        nn.Dense(1))
net.initialize()
trainer = gluon.Trainer(net.collect_params(), 'sgd')
loss = gluon.loss.L2Loss()

def get_mem():
    res = subprocess.check_output(['ps', 'u', '-p', str(os.getpid())])
    return int(str(res).split()[15]) / 1e3

for X, y in data_iter():
    break
loss(y, net(X)).wait_to_read()

def peak_mem():  # not in the chapter: the loop's peak RSS (VmHWM), in MB
    with open('/proc/self/status') as f:
        return next(int(l.split()[1]) for l in f if l.startswith('VmHWM')) / 1e3

def reset_peak():  # not in the chapter: VmHWM back to the current RSS (Linux >= 4.0)
    with open('/proc/self/clear_refs', 'w') as f:
        f.write('5')

reset_peak()
mem = get_mem()
with d2l.Benchmark('time per epoch'):
    for X, y in data_iter():
        with autograd.record():
            l = loss(y, net(X))
        l.backward()
        trainer.step(X.shape[0])
        l.wait_to_read()  # Barrier before a new batch
    npx.waitall()
print(f'increased memory: {get_mem() - mem:f} MB')
barrier = (d2l.RESULTS['time per epoch'], get_mem() - mem, peak_mem() - mem)

# Not in the chapter: the barrier loop again on 10 batches, to tell the first training step's
# storage (the warm-up above ran only a forward) from growth per batch.
mem = get_mem()
for _, (X, y) in zip(range(10), data_iter()):
    with autograd.record():
        l = loss(y, net(X))
    l.backward()
    trainer.step(X.shape[0])
    l.wait_to_read()
npx.waitall()
again = get_mem() - mem

reset_peak()
mem = get_mem()
with d2l.Benchmark('time per epoch'):
    for X, y in data_iter():
        with autograd.record():
            l = loss(y, net(X))
        l.backward()
        trainer.step(X.shape[0])
    npx.waitall()
print(f'increased memory: {get_mem() - mem:f} MB')
no_barrier = (d2l.RESULTS['time per epoch'], get_mem() - mem, peak_mem() - mem)

# ---- Not in the chapter: the same figures beside NumPy doing the same work. ----
r = dict(d2l.RESULTS)
xn = numpy.ones((1, 2), dtype=numpy.float32)
with d2l.Benchmark('numpy y = x + 1'):
    for _ in range(10000):
        yn = xn + 1
an = numpy.random.normal(size=(1000, 1000)).astype(numpy.float32)
with d2l.Benchmark('numpy float32 dot'):
    bn = numpy.dot(an, an)
r.update(d2l.RESULTS)

print()
print(f"device: {device}, {os.cpu_count()} cores, engine: {os.environ.get('DEPENGINE_TYPE', 'threaded')}")
print(f"{'figure':<34}{'depengine':>12}{'numpy':>12}")
print(f"{'ten 1000x1000 dots, returned':<34}{r['mxnet.np']:>11.4f}s{r['numpy']:>11.4f}s")
print(f"{'ten 1000x1000 dots, computed':<34}{r['Done']:>11.4f}s{r['numpy']:>11.4f}s")
print(f"{'one dot + waitall':<34}{r['waitall']:>11.4f}s{r['numpy float32 dot']:>11.4f}s")
print(f"{'10,000 y = x + 1, synchronous':<34}{r['synchronous']:>11.4f}s{r['numpy y = x + 1']:>11.4f}s")
print(f"{'10,000 y = x + 1, asynchronous':<34}{r['asynchronous']:>11.4f}s{r['numpy y = x + 1']:>11.4f}s")
print(f"{'  per op, asynchronous':<34}{r['asynchronous'] / 1e4 * 1e6:>10.2f}us"
      f"{r['numpy y = x + 1'] / 1e4 * 1e6:>10.2f}us")
print(f"{'  synchronous / asynchronous':<34}{r['synchronous'] / r['asynchronous']:>11.1f}x")
# What the figures say, checked against them (a loaded or small machine can hide the
# chapter's effects; the text then says so instead of claiming them).
returned = r['mxnet.np'] / r['numpy']
ratio = round(r['synchronous'] / r['asynchronous'], 1)  # as the table shows it
if returned < 0.5:
    pushes = "so it is far below NumPy"
else:
    pushes = (f"yet here it took {returned:.1f}x NumPy's time: the pushes themselves were slow "
              "in this run")
if ratio >= 1.1:
    waits = (f"which is why it is {ratio:.1f}x slower than the asynchronous one -- the "
             "chapter's point.")
else:
    waits = (f"which should make it slower than the asynchronous one -- the chapter's point; in "
             f"this run it took {ratio:.1f}x the asynchronous loop's time, so the gap did not "
             "show: on an engine with nothing else to run, depengine runs an op this small on "
             "the calling thread (a small op), so neither loop hands it to a worker, and the "
             "wait finds it done. DEPENGINE_INLINE_SMALL_OPS=0 hands every op over, as the "
             "chapter's engine does.")
print(f"""
What these say. 'mxnet.np' times only the pushes: the ten dots are still running when the loop
ends, {pushes}; 'Done' adds waitall and is the real cost of the work (the random numbers and
float32 GEMMs, on the engine's workers; NumPy draws float64 numbers and multiplies in float64,
so its figure is not the same arithmetic). For y = x + 1 on a (1, 2) array there is nothing to
compute: the figures are the cost of each op's bookkeeping. NumPy computes it outright on the
calling thread; depengine pushes an op (a var, a storage block, a dependency check, and a
worker wake-up unless it runs the op itself) and the synchronous loop also waits for each one,
{waits}""")

# 13.2.4's loops, side by side, and what they say.
batches = int(os.environ.get('D2L_MEMORY_BATCHES', 50))
print()
print(f"13.2.4: {batches} batches of 1024x512 through Dense(2048, relu), Dense(512, relu), "
      "Dense(1), L2Loss, sgd")
print(f"{'':<36}{'time':>10}{'memory increase':>18}{'peak increase':>16}")
for label, (t, m, p) in (("with l.wait_to_read() per batch", barrier),
                         ("without (waitall at the end)", no_barrier)):
    print(f"{label:<36}{t:>9.3f}s{m:>15.1f} MB{p:>13.1f} MB")
print(f"{'with it again, on 10 batches':<36}{'':>10}{again:>15.1f} MB")
t_ratio = no_barrier[0] / barrier[0]
per_batch = no_barrier[2] / batches
ran_ahead = no_barrier[2] > 2 * max(barrier[2], 1.0) + 10
if barrier[2] <= 100:
    flat = (f"so at most one batch is in flight and memory stays flat: {barrier[1]:.1f} MB "
            f"after the loop, {barrier[2]:.1f} MB at the peak, about one training step's "
            f"arrays, which the storage pool hands on from batch to batch")
else:
    flat = (f"so at most one batch is in flight; yet in this run the peak grew by "
            f"{barrier[2]:.1f} MB, more than one batch's arrays")
if again <= max(5.0, 0.2 * barrier[1]):
    flat += (f"; run again on 10 batches, the same loop grew by {again:.1f} MB: what the first "
             f"loop added was the first step's storage (the warm-up ran only a forward), not "
             f"growth per batch.")
else:
    flat += (f"; run again on 10 batches, the same loop grew by {again:.1f} MB more, so memory "
             f"did grow from batch to batch in this run.")
if ran_ahead:
    held = (f"Without it, the loop pushed batch after batch while the workers were still on "
            f"the first ones, and depengine allocates an op's output when the op is pushed "
            f"(MXNet when it runs): every batch pushed ahead held its input, activations and "
            f"gradients at once, so the peak grew by {no_barrier[2]:.0f} MB, about "
            f"{per_batch:.1f} MB per batch. After waitall depengine has freed that storage, yet "
            f"the process still holds {no_barrier[1]:.1f} MB more than at the start: the storage "
            f"pool keeps up to {npx.pool_cap() / 2**20:.0f} MiB of freed blocks and the C "
            f"allocator the rest, for the next loop to reuse.")
else:
    held = (f"Without it, the peak grew by {no_barrier[2]:.0f} MB, not much more than with "
            f"it: in this run the frontend did not get far ahead of the workers.")
if t_ratio < 0.9:
    timing = (f"Without the barrier the loop took {t_ratio:.2f}x the time: the frontend's Python "
              f"(the pushes) overlapped the workers' arithmetic instead of alternating with it.")
elif t_ratio <= 1.1:
    timing = (f"The time is about the same either way ({t_ratio:.2f}x): the arithmetic, not the "
              f"frontend, bounds this loop, so running ahead saves little.")
else:
    timing = (f"Without the barrier it took {t_ratio:.2f}x the time: running ahead cannot save "
              f"time in a loop that the arithmetic bounds, and here it cost some: the workers "
              f"had the ops of many batches ready at once and ran them over "
              f"{no_barrier[2]:.0f} MB of fresh storage rather than one batch's reused blocks "
              f"(timings on a shared machine also vary: rerun to compare).")
advice = ("So the chapter's advice holds here too: with a frontend that runs ahead, a barrier "
          "per batch (or a bound on the ops in flight, DEPENGINE_MAX_INFLIGHT) keeps memory in "
          "check." if ran_ahead else "")
explanation = (f"What 13.2.4's figures say. With l.wait_to_read() after each batch the frontend "
               f"waits until the batch's loss is computed, {flat} {held} {timing} {advice}")
line = ""
print()
for word in explanation.split():  # wrapped at 92 columns
    if line and len(line) + 1 + len(word) > 92:
        print(line)
        line = word
    else:
        line = f"{line} {word}" if line else word
print(line)
