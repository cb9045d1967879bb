// A data loader's batch gather as one engine op (depengine/batch.h).
#include "depengine/batch.h"

#include <cmath>
#include <string>
#include <utility>

#include "depengine/ops/gather.h"
#include "internal.h"

namespace depengine::nd {
namespace {

using detail::ArrayInternals;

Shape checked_table_shape(std::size_t values, Shape shape) {
  if (shape.empty()) throw Error("HostTable: the shape needs a rows axis, got ()");
  if (values != detail::checked_size(shape, "HostTable")) {
    throw Error("HostTable: " + std::to_string(values) + " values do not fill shape " +
                shape_str(shape));
  }
  return shape;
}

std::string field_str(std::size_t i) { return "BatchGather: field " + std::to_string(i) + ": "; }

}  // namespace

HostTable::HostTable(std::vector<std::uint8_t> values, Shape shape)
    : shape_(checked_table_shape(values.size(), std::move(shape))) {
  values_ = std::move(values);
}

HostTable::HostTable(std::vector<float> values, Shape shape)
    : shape_(checked_table_shape(values.size(), std::move(shape))) {
  values_ = std::move(values);
}

std::size_t HostTable::row_elements() const noexcept {
  std::size_t n = 1;
  for (std::size_t i = 1; i < shape_.size(); ++i) n *= shape_[i];
  return n;
}

const void* HostTable::data() const noexcept {
  return std::visit([](const auto& v) -> const void* { return v.data(); }, values_);
}

BatchGather::BatchGather(std::vector<BatchField> fields) {
  if (fields.empty()) throw Error("BatchGather: no field to gather");
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const BatchField& f = fields[i];
    if (!f.table) throw Error(field_str(i) + "no table");
    if (f.table->rows() != fields[0].table->rows()) {
      throw Error("BatchGather: field " + std::to_string(i) + " has " +
                  std::to_string(f.table->rows()) + " rows, field 0 has " +
                  std::to_string(fields[0].table->rows()));
    }
    Shape sample(f.table->shape().begin() + 1, f.table->shape().end());
    const Conversion& c = f.conversion;
    if (c.to_chw) {
      if (sample.size() != 3) {
        throw Error(field_str(i) + "a (H, W, C) to (C, H, W) conversion needs 3-d samples, got " +
                    shape_str(sample));
      }
      sample = {sample[2], sample[0], sample[1]};
    }
    if (!(c.divisor >= 0.0f) || !std::isfinite(c.divisor)) {
      throw Error(field_str(i) + "the divisor must be finite and positive (0: none), got " +
                  std::to_string(c.divisor));
    }
    if (c.mean.size() != c.stddev.size()) {
      throw Error(field_str(i) + "mean has " + std::to_string(c.mean.size()) + " values, stddev " +
                  std::to_string(c.stddev.size()));
    }
    const std::size_t channels = sample.empty() ? 1 : sample[0];
    if (c.mean.size() > 1 && c.mean.size() != channels) {
      throw Error(field_str(i) + "mean and stddev have " + std::to_string(c.mean.size()) +
                  " values (one per channel, or one for all) but the sample " +
                  shape_str(sample) + " has " + std::to_string(channels) + " channels");
    }
    sample_shapes_.push_back(std::move(sample));
  }
  fields_ = std::make_shared<const std::vector<BatchField>>(std::move(fields));
}

std::vector<NDArray> BatchGather::operator()(std::span<const std::int64_t> indices) const {
  const char* op = "gather_batch";
  const auto rows = static_cast<std::int64_t>(this->rows());
  auto picked = std::make_shared<std::vector<std::int64_t>>(indices.begin(), indices.end());
  for (std::int64_t& i : *picked) {
    if (i < -rows || i >= rows) {
      throw Error("gather_batch: index " + std::to_string(i) + " is out of range for " +
                  std::to_string(rows) + " samples");
    }
    if (i < 0) i += rows;
  }
  Engine& e = current_engine();
  std::vector<NDArray> out;
  std::vector<Var> writes;
  std::vector<float*> dst;
  for (const Shape& sample : sample_shapes_) {
    Shape shape{picked->size()};
    shape.insert(shape.end(), sample.begin(), sample.end());
    out.push_back(ArrayInternals::make(e, std::move(shape), op));
    detail::Chunk& c = *ArrayInternals::chunk(out.back());
    writes.push_back(c.var);
    dst.push_back(c.data);
  }
  e.push(
      [fields = fields_, picked, dst, samples = sample_shapes_] {
        for (std::size_t f = 0; f < fields->size(); ++f) {
          const BatchField& field = (*fields)[f];
          const Conversion& c = field.conversion;
          const ops::cpu::GatherRows g{
              .table = field.table->data(),
              .u8 = field.table->is_u8(),
              .row_elements = field.table->row_elements(),
              .hwc_channels = c.to_chw ? field.table->shape()[3] : 0,
              .divisor = c.divisor,
              .norm_values = c.mean.size(),
              .mean = c.mean.data(),
              .stddev = c.stddev.data(),
              .channels = c.to_chw || c.mean.size() > 1 ? samples[f][0] : 1};
          ops::cpu::gather_rows(g, picked->data(), picked->size(), dst[f]);
        }
      },
      {}, writes, {.lane = Lane::copy_to_device, .name = op});
  return out;
}

}  // namespace depengine::nd
