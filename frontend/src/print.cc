// numpy's repr for float32 arrays (numpy 1.2x defaults: precision 8, floatmode "maxprec",
// linewidth 75, threshold 1000, edgeitems 3), as mxnet.np prints them.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "internal.h"

namespace depengine::detail {
namespace {

constexpr int kPrecision = 8;
constexpr std::size_t kLineWidth = 75;
constexpr std::size_t kThreshold = 1000;
constexpr std::size_t kEdgeItems = 3;

std::string chars(float x, std::chars_format fmt) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, x, fmt);
  return std::string(buf, r.ptr);
}

std::string chars(float x, std::chars_format fmt, int precision) {
  char buf[96];
  auto r = std::to_chars(buf, buf + sizeof buf, x, fmt, precision);
  return std::string(buf, r.ptr);
}

// Splits "12.5" into {"12", "5"}; "3" into {"3", ""}.
std::pair<std::string, std::string> split_point(const std::string& s) {
  const std::size_t dot = s.find('.');
  if (dot == std::string::npos) return {s, ""};
  return {s.substr(0, dot), s.substr(dot + 1)};
}

// The shortest round-tripping digits, cut to kPrecision fractional digits (rounded, trailing
// zeros trimmed), as numpy's dragon4 with unique=True.
std::string digits(float x, std::chars_format fmt) {
  std::string s = chars(x, fmt);
  const std::size_t e = s.find('e');
  const std::string mant = e == std::string::npos ? s : s.substr(0, e);
  if (split_point(mant).second.size() > static_cast<std::size_t>(kPrecision)) {
    s = chars(x, fmt, kPrecision);
    const std::size_t e2 = s.find('e');
    std::string m = e2 == std::string::npos ? s : s.substr(0, e2);
    const std::string tail = e2 == std::string::npos ? "" : s.substr(e2);
    while (!m.empty() && m.back() == '0') m.pop_back();
    s = m + tail;
  }
  return s;
}

class FloatFormat {
 public:
  explicit FloatFormat(const std::vector<float>& shown) {
    float max_abs = 0.0f, min_abs = 0.0f;
    bool any_finite = false;
    for (float x : shown) {
      if (!std::isfinite(x)) {
        nonfinite_len_ = std::max(nonfinite_len_, std::size_t{x < 0 ? 4u : 3u});
        continue;
      }
      any_finite = true;
      const float a = std::fabs(x);
      max_abs = std::max(max_abs, a);
      if (a != 0.0f && (min_abs == 0.0f || a < min_abs)) min_abs = a;
    }
    if (any_finite && max_abs != 0.0f) {
      exp_ = max_abs >= 1e8f || min_abs < 1e-4f || max_abs / min_abs > 1e3f;
    }
    for (float x : shown) {
      if (!std::isfinite(x)) continue;
      std::string s = digits(x, exp_ ? std::chars_format::scientific : std::chars_format::fixed);
      const std::size_t e = s.find('e');
      const auto [ip, fp] = split_point(e == std::string::npos ? s : s.substr(0, e));
      pad_left_ = std::max(pad_left_, ip.size());
      frac_ = std::max(frac_, fp.size());
      if (e != std::string::npos) exp_digits_ = std::max(exp_digits_, s.size() - e - 2);
    }
    const std::size_t pad_right = frac_ + (exp_ ? exp_digits_ + 2 : 0);
    // numpy widens the integer part so that "nan" and "inf" fit the common width.
    if (nonfinite_len_ > pad_right + 1) pad_left_ = std::max(pad_left_, nonfinite_len_ - pad_right - 1);
    width_ = pad_left_ + 1 + pad_right;
  }

  std::string operator()(float x) const {
    if (!std::isfinite(x)) {
      const std::string s = std::isnan(x) ? "nan" : x > 0 ? "inf" : "-inf";
      return std::string(width_ > s.size() ? width_ - s.size() : 0, ' ') + s;
    }
    std::string s = digits(x, exp_ ? std::chars_format::scientific : std::chars_format::fixed);
    const std::size_t e = s.find('e');
    auto [ip, fp] = split_point(e == std::string::npos ? s : s.substr(0, e));
    std::string out(pad_left_ > ip.size() ? pad_left_ - ip.size() : 0, ' ');
    out += ip + ".";
    if (exp_) {
      // Scientific: fractions padded with zeros, exponents with leading zeros.
      out += fp + std::string(frac_ - fp.size(), '0');
      const std::string ex = s.substr(e + 1);
      const char sign = ex[0] == '-' ? '-' : '+';
      std::string num = ex[0] == '-' || ex[0] == '+' ? ex.substr(1) : ex;
      num.insert(0, exp_digits_ > num.size() ? exp_digits_ - num.size() : 0, '0');
      out += std::string("e") + sign + num;
    } else {
      out += fp + std::string(frac_ - fp.size(), ' ');
    }
    return out;
  }

 private:
  bool exp_ = false;
  std::size_t nonfinite_len_ = 0;  // longest of "nan", "inf", "-inf" present
  std::size_t pad_left_ = 0, frac_ = 0, exp_digits_ = 2, width_ = 0;
};

class Printer {
 public:
  Printer(const float* v, const Shape& shape, bool summarize)
      : v_(v), shape_(shape), summarize_(summarize) {
    strides_.assign(shape.size(), 1);
    for (std::size_t d = shape.size(); d-- > 1;) strides_[d - 1] = strides_[d] * shape[d];
  }

  // The elements that will be shown, in order (for the common number format).
  void collect(std::size_t axis, std::size_t offset, std::vector<float>& out) const {
    if (axis == shape_.size()) {
      out.push_back(v_[offset]);
      return;
    }
    for (std::size_t i : indices(axis)) collect(axis + 1, offset + i * strides_[axis], out);
  }

  // numpy's _formatArray recursion.
  std::string format(std::size_t axis, std::size_t offset, const std::string& hanging,
                     std::size_t width, const FloatFormat& fmt) const {
    if (axis == shape_.size()) return fmt(v_[offset]);
    const std::string next_hanging = hanging + " ";
    const std::size_t next_width = width - 1;
    const std::size_t len = shape_[axis];
    const bool summary = summarize_ && 2 * kEdgeItems < len;
    const std::size_t lead = summary ? kEdgeItems : 0;
    const std::size_t trail = summary ? kEdgeItems : len;
    const std::size_t axes_left = shape_.size() - axis;
    std::string s;
    auto at = [&](std::size_t i) { return offset + i * strides_[axis]; };
    if (len == 0) return "[]";
    if (axes_left == 1) {
      const std::size_t elem_width = width - 1;
      std::string line = hanging;
      auto extend = [&](const std::string& word) {
        bool wrap = line.size() + word.size() > elem_width;
        if (line.size() <= hanging.size()) wrap = false;
        if (wrap) {
          while (!line.empty() && line.back() == ' ') line.pop_back();
          s += line + "\n";
          line = hanging;
        }
        line += word;
      };
      for (std::size_t i = 0; i < lead; ++i) {
        extend(format(axis + 1, at(i), next_hanging, next_width, fmt));
        line += ", ";
      }
      if (summary) {
        extend("...");
        line += ", ";
      }
      for (std::size_t i = trail; i > 1; --i) {
        extend(format(axis + 1, at(len - i), next_hanging, next_width, fmt));
        line += ", ";
      }
      extend(format(axis + 1, at(len - 1), next_hanging, next_width, fmt));
      s += line;
    } else {
      std::string sep(axes_left, '\n');
      sep[0] = ',';
      // Appends piecewise: GCC 12 misreports chains of string + at -O3 (-Wrestrict).
      auto row = [&](std::string_view item, bool last) {
        s.append(hanging);
        s.append(item);
        if (!last) s.append(sep);
      };
      for (std::size_t i = 0; i < lead; ++i) {
        row(format(axis + 1, at(i), next_hanging, next_width, fmt), false);
      }
      if (summary) row("...", false);
      for (std::size_t i = trail; i > 1; --i) {
        row(format(axis + 1, at(len - i), next_hanging, next_width, fmt), false);
      }
      row(format(axis + 1, at(len - 1), next_hanging, next_width, fmt), true);
    }
    std::string out = "[";
    out.append(s, hanging.size());
    out.push_back(']');
    return out;
  }

 private:
  std::vector<std::size_t> indices(std::size_t axis) const {
    const std::size_t len = shape_[axis];
    std::vector<std::size_t> idx;
    if (summarize_ && 2 * kEdgeItems < len) {
      for (std::size_t i = 0; i < kEdgeItems; ++i) idx.push_back(i);
      for (std::size_t i = len - kEdgeItems; i < len; ++i) idx.push_back(i);
    } else {
      for (std::size_t i = 0; i < len; ++i) idx.push_back(i);
    }
    return idx;
  }

  const float* v_;
  const Shape& shape_;
  bool summarize_;
  std::vector<std::size_t> strides_;
};

}  // namespace

std::string format_array(const float* values, const Shape& shape) {
  const std::size_t n = shape_size(shape);
  if (n == 0) return shape.size() == 1 ? "array([])" : "array([], shape=" + shape_str(shape) + ")";
  Printer p(values, shape, n > kThreshold);
  std::vector<float> shown;
  p.collect(0, 0, shown);
  const FloatFormat fmt(shown);
  constexpr std::string_view prefix = "array(";
  // numpy: the suffix ")" comes off the line width, and continuation lines skip "array([".
  const std::string hanging(prefix.size() + 1, ' ');
  std::string out(prefix);
  out.append(p.format(0, 0, hanging, kLineWidth - 1, fmt));
  out.push_back(')');
  return out;
}

}  // namespace depengine::detail
