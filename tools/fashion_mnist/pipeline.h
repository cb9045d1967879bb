// fashion_mnist/pipeline.h — the input pipeline as engine ops: a seeded shuffle and the
// assembly of normalized float batches, pushed on a CPU lane apart from the model's compute
// lane, into a ring of batch buffers (NDArrays) that the engine orders like any array.
//
//   BatchPipeline pipe(train, 256, 3);
//   pipe.begin_epoch(seed, epoch);             // pushes the shuffle
//   auto b0 = pipe.assemble(0), b1 = pipe.assemble(1);
//   for (k = 0; ...) { auto next = pipe.assemble(k + 2); model.train_step(b.x, b.y, lr); ... }
//
// Buffer k % slots holds batch k. Assembling batch k + slots - 1 writes the buffer that
// batch k - 1 read, so the engine runs it after batch k - 1's reads and alongside batch k's
// training (WAR ordering does the double/triple buffering; no threads or locks of its own).
// A pipeline is used from one thread; its arrays live on the current engine when it is made.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "depengine/ndarray.h"
#include "fashion_mnist/idx.h"

namespace depengine::fashion_mnist {

// x = (pixel / 255 - mean) / stddev; the defaults are Fashion-MNIST's training-set figures.
struct Normalization {
  float mean = 0.2860f;
  float stddev = 0.3530f;
};

class BatchPipeline {
 public:
  // `data` is read by ops until they finish, and never written. `slots` >= 1 buffers of
  // `batch` rows (plus one for a shorter last batch). Throws Error for an empty data set, a
  // zero batch or slot count, or more than 2^24 examples (indices are held as floats).
  BatchPipeline(std::shared_ptr<const Dataset> data, std::size_t batch, int slots,
                Normalization norm = {});

  std::size_t batches() const noexcept { return (data_->size() + batch_ - 1) / batch_; }
  std::size_t batch_size() const noexcept { return batch_; }
  const Dataset& data() const noexcept { return *data_; }

  // Pushes the epoch's order: a Fisher-Yates shuffle from (seed, epoch), or the data set's
  // own order when `shuffle` is false.
  void begin_epoch(std::uint64_t seed, int epoch, bool shuffle = true);

  struct Batch {
    NDArray x;  // (rows, pixels), normalized
    NDArray y;  // (rows,), class indices as floats
  };
  // Pushes the assembly of batch k (k < batches()) of the current order into its buffer and
  // returns that buffer; it stays valid until batch k + slots is assembled.
  Batch assemble(std::size_t k);

 private:
  std::shared_ptr<const Dataset> data_;
  std::size_t batch_;
  Normalization norm_;
  NDArray order_;
  std::vector<Batch> slots_;
  Batch tail_;
};

}  // namespace depengine::fashion_mnist
