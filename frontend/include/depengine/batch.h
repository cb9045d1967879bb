// depengine/batch.h — a data loader's batches as engine ops. The fields of a data set
// (images, labels) are held on the host as immutable tables; a batch — the rows its indices
// pick from every field, converted to float32 (with ToTensor's layout and scaling and
// Normalize's per-channel shift and scale where asked) — is assembled by ONE op pushed on the
// CPU's copy_to_device lane, so the caller pushes it and goes on, and the training step that
// reads the batch waits for it through the arrays' vars like any op (as
// tools/fashion_mnist's pipeline does for `depengine train`).
//
//   auto images = std::make_shared<const nd::HostTable>(pixels, Shape{60000, 28, 28, 1});
//   auto labels = std::make_shared<const nd::HostTable>(classes, Shape{60000});
//   nd::BatchGather gather({{images, {.to_chw = true, .divisor = 255.0f}}, {labels, {}}});
//   std::vector<NDArray> xy = gather(indices);   // x (n, 1, 28, 28), y (n,): returns at once
//
// A BatchGather may be called from several threads at once (it is immutable).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <variant>
#include <vector>

#include "depengine/ndarray.h"

namespace depengine::nd {

// A field of a data set: `shape` = (rows, sample dims...), values row-major, uint8 or
// float32. Error when the values do not fill the shape or the shape has no rows axis.
class HostTable {
 public:
  HostTable(std::vector<std::uint8_t> values, Shape shape);
  HostTable(std::vector<float> values, Shape shape);

  const Shape& shape() const noexcept { return shape_; }
  std::size_t rows() const noexcept { return shape_[0]; }
  // The values per row (the product of the sample dims).
  std::size_t row_elements() const noexcept;
  bool is_u8() const noexcept { return std::holds_alternative<std::vector<std::uint8_t>>(values_); }
  const void* data() const noexcept;

 private:
  std::variant<std::vector<std::uint8_t>, std::vector<float>> values_;
  Shape shape_;
};

// How a field's samples become float32 (the transforms of gluon.data.vision, in this order).
struct Conversion {
  // ToTensor's layout: a sample (H, W, C) becomes (C, H, W).
  bool to_chw = false;
  // > 0: values divided by it (ToTensor: 255).
  float divisor = 0.0f;
  // Normalize: value = (value − mean[c]) / stddev[c] for channel c, the converted sample's
  // first axis; one value each applies to every channel. Both empty: no normalization.
  std::vector<float> mean, stddev;
};

struct BatchField {
  std::shared_ptr<const HostTable> table;
  Conversion conversion;
};

class BatchGather {
 public:
  // Error (naming the field and the problem) for no field, a null table, fields with
  // different row counts, to_chw on a sample that is not 3-d, a negative or non-finite
  // divisor, mean and stddev of different lengths, or of a length other than 1 and the
  // converted sample's channel count.
  explicit BatchGather(std::vector<BatchField> fields);

  // Pushes, on the current engine, one op on the CPU's copy_to_device lane that writes rows
  // `indices` of every field (a negative index counts from the end, as NumPy's), converted,
  // into new float32 CPU arrays of shape (indices.size(), converted sample shape...), one per
  // field, and returns them at once. Error naming the index and the row count for an index
  // out of range (nothing pushed). Thread-safe.
  std::vector<NDArray> operator()(std::span<const std::int64_t> indices) const;

  // The samples of every field.
  std::size_t rows() const noexcept { return (*fields_)[0].table->rows(); }
  // The shape of field i's converted samples.
  const Shape& sample_shape(std::size_t i) const { return sample_shapes_.at(i); }

 private:
  // Shared with the ops in flight, which may outlive this object.
  std::shared_ptr<const std::vector<BatchField>> fields_;
  std::vector<Shape> sample_shapes_;
};

}  // namespace depengine::nd
