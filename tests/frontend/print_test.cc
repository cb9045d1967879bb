// operator<< prints an NDArray as numpy's repr does (the mxnet.np spelling, without a dtype):
// number formats (integers, fractions padded with spaces, scientific padded with zeros,
// nan/inf), nesting, line wrapping at 75 columns, and "..." summaries above 1000 elements.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "depengine/ndarray.h"

namespace depengine {
namespace {

std::string repr(const NDArray& a) {
  std::ostringstream os;
  os << a;
  return os.str();
}

TEST(NDArrayPrint, SmallArraysLikeNumpy) {
  EXPECT_EQ(repr(nd::array({1, 2, 3}, {3})), "array([1., 2., 3.])");
  EXPECT_EQ(repr(nd::array({1, 2, 3, 4}, {2, 2})), "array([[1., 2.],\n       [3., 4.]])");
  EXPECT_EQ(repr(nd::array({1.5f, 2.25f}, {2})), "array([1.5 , 2.25])");
  EXPECT_EQ(repr(nd::array({-1, 2}, {2})), "array([-1.,  2.])");
  EXPECT_EQ(repr(nd::array({0.1f, 0.123456789f}, {2})), "array([0.1       , 0.12345679])");
  EXPECT_EQ(repr(nd::full({}, 3.0f)), "array(3.)");
  EXPECT_EQ(repr(nd::sum(nd::array({0.5f, 0.25f}, {2}))), "array(0.75)");
  EXPECT_EQ(repr(nd::zeros({0})), "array([])");
  EXPECT_EQ(repr(nd::arange(0, 8).reshape({2, 2, 2})),
            "array([[[0., 1.],\n        [2., 3.]],\n\n       [[4., 5.],\n        [6., 7.]]])");
}

TEST(NDArrayPrint, ScientificAndNonFinite) {
  EXPECT_EQ(repr(nd::array({1e-5f, 1.0f}, {2})), "array([1.e-05, 1.e+00])");
  EXPECT_EQ(repr(nd::array({1.5e-5f, 1.0f}, {2})), "array([1.5e-05, 1.0e+00])");
  EXPECT_EQ(repr(nd::array({NAN, 1.0f}, {2})), "array([nan,  1.])");
  EXPECT_EQ(repr(nd::array({-INFINITY, 1.0f}, {2})), "array([-inf,   1.])");
}

TEST(NDArrayPrint, WrapsAt75Columns) {
  EXPECT_EQ(repr(nd::arange(0, 30)),
            "array([ 0.,  1.,  2.,  3.,  4.,  5.,  6.,  7.,  8.,  9., 10., 11., 12.,\n"
            "       13., 14., 15., 16., 17., 18., 19., 20., 21., 22., 23., 24., 25.,\n"
            "       26., 27., 28., 29.])");
}

TEST(NDArrayPrint, SummarizesLargeArrays) {
  EXPECT_EQ(repr(nd::arange(0, 2000)),
            "array([0.000e+00, 1.000e+00, 2.000e+00, ..., 1.997e+03, 1.998e+03,\n"
            "       1.999e+03])");
  const std::string row = "[1., 1., 1., ..., 1., 1., 1.]";
  EXPECT_EQ(repr(nd::ones({1000, 1000})),
            "array([" + row + ",\n       " + row + ",\n       " + row + ",\n       ...,\n       " +
                row + ",\n       " + row + ",\n       " + row + "])");
}

}  // namespace
}  // namespace depengine
