// The IDX reader (tools/fashion_mnist/idx.h): good files, gzip and plain, read back
// exactly; every kind of corrupt file (missing, wrong magic, truncated header, pixels or gzip
// stream, trailing bytes, implausible dimensions, label out of range, counts that disagree)
// throws depengine::Error saying what is wrong.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "depengine/error.h"
#include "fashion_mnist/idx.h"

namespace depengine::fashion_mnist {
namespace {

namespace fs = std::filesystem;

class IdxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("depengine_idx_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

// Three 2×3 images whose pixels are their index times 10 plus the position.
std::vector<std::uint8_t> pixels(std::size_t count) {
  std::vector<std::uint8_t> p;
  for (std::size_t i = 0; i < count; ++i) {
    for (std::size_t j = 0; j < 6; ++j) p.push_back(static_cast<std::uint8_t>(i * 10 + j));
  }
  return p;
}

template <class F>
void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected an Error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST_F(IdxTest, GzipImagesAndLabelsReadBackExactly) {
  write_idx(path("i.gz"), kImagesMagic, {3, 2, 3}, pixels(3));
  write_idx(path("l.gz"), kLabelsMagic, {3}, {9, 0, 4});
  const Images img = read_images(path("i.gz"));
  EXPECT_EQ(img.count, 3u);
  EXPECT_EQ(img.rows, 2u);
  EXPECT_EQ(img.cols, 3u);
  EXPECT_EQ(img.pixels, pixels(3));
  EXPECT_EQ(read_labels(path("l.gz")), (std::vector<std::uint8_t>{9, 0, 4}));
}

TEST_F(IdxTest, UncompressedFilesReadToo) {
  write_idx(path("i"), kImagesMagic, {2, 2, 3}, pixels(2), false);
  EXPECT_EQ(read_images(path("i")).pixels, pixels(2));
}

TEST_F(IdxTest, LoadPairsTheSplitFiles) {
  write_idx(path("t10k-images-idx3-ubyte.gz"), kImagesMagic, {3, 2, 3}, pixels(3));
  write_idx(path("t10k-labels-idx1-ubyte.gz"), kLabelsMagic, {3}, {1, 2, 3});
  const Dataset d = load(dir_.string(), Split::test);
  EXPECT_EQ(d.size(), 3u);
  EXPECT_EQ(d.labels, (std::vector<std::uint8_t>{1, 2, 3}));
}

TEST_F(IdxTest, MissingFileIsNamed) {
  expect_error([&] { read_images(path("nope.gz")); }, "nope.gz: not found");
  expect_error([&] { load(dir_.string(), Split::train); }, "train-images-idx3-ubyte.gz: not found");
}

// Issue 11, item 14: opening a FIFO for reading used to wait for a writer forever. The
// ctest TIMEOUT turns a regression into a failure instead of a hang.
TEST_F(IdxTest, FifoIsRefusedWithoutBlocking) {
  ASSERT_EQ(::mkfifo(path("fifo.gz").c_str(), 0600), 0);
  expect_error([&] { read_images(path("fifo.gz")); }, "fifo.gz: is not a regular file");
  expect_error([&] { read_labels(path("fifo.gz")); }, "fifo.gz: is not a regular file");
}

TEST_F(IdxTest, DirectoryIsRefused) {
  fs::create_directories(path("d.gz"));
  expect_error([&] { read_images(path("d.gz")); }, "d.gz: is a directory");
}

TEST_F(IdxTest, WrongMagicIsRejected) {
  write_idx(path("i.gz"), kLabelsMagic, {3, 2, 3}, pixels(3));
  expect_error([&] { read_images(path("i.gz")); }, "wrong magic 0x00000801, expected 0x00000803");
  write_idx(path("l.gz"), kImagesMagic, {1}, {0});
  expect_error([&] { read_labels(path("l.gz")); }, "wrong magic");
}

TEST_F(IdxTest, TruncatedHeaderIsRejected) {
  write_idx(path("i.gz"), kImagesMagic, {3}, {});
  expect_error([&] { read_images(path("i.gz")); }, "truncated: the header");
}

TEST_F(IdxTest, TruncatedPixelsAreRejected) {
  write_idx(path("i.gz"), kImagesMagic, {3, 2, 3}, pixels(2));
  expect_error([&] { read_images(path("i.gz")); }, "truncated: the pixel data needs 18 bytes");
  write_idx(path("l.gz"), kLabelsMagic, {4}, {1, 2});
  expect_error([&] { read_labels(path("l.gz")); }, "truncated: the labels needs 4 bytes");
}

TEST_F(IdxTest, HeaderClaimingGigabytesIsTruncated) {
  write_idx(path("i.gz"), kImagesMagic, {1u << 27, 28, 28}, pixels(2));
  expect_error([&] { read_images(path("i.gz")); }, "truncated: the pixel data needs 105226698752");
}

TEST_F(IdxTest, TruncatedGzipStreamIsRejected) {
  write_idx(path("i.gz"), kImagesMagic, {40, 2, 3}, pixels(40));
  const auto size = fs::file_size(path("i.gz"));
  fs::resize_file(path("i.gz"), size / 2);
  expect_error([&] { read_images(path("i.gz")); }, "truncated");
}

TEST_F(IdxTest, TrailingBytesAreRejected) {
  write_idx(path("i.gz"), kImagesMagic, {2, 2, 3}, pixels(3));
  expect_error([&] { read_images(path("i.gz")); }, "longer than its header says");
}

TEST_F(IdxTest, ImplausibleDimensionsAreRejected) {
  write_idx(path("i.gz"), kImagesMagic, {3, 0, 3}, {});
  expect_error([&] { read_images(path("i.gz")); }, "implausible dimensions 3 x 0 x 3");
}

TEST_F(IdxTest, LabelOutOfRangeIsRejected) {
  write_idx(path("l.gz"), kLabelsMagic, {4}, {1, 2, 10, 3});
  expect_error([&] { read_labels(path("l.gz")); }, "label 10 at index 2 is out of range [0, 10)");
  EXPECT_EQ(read_labels(path("l.gz"), 11).size(), 4u);
}

TEST_F(IdxTest, ImageAndLabelCountsMustAgree) {
  write_idx(path("train-images-idx3-ubyte.gz"), kImagesMagic, {3, 2, 3}, pixels(3));
  write_idx(path("train-labels-idx1-ubyte.gz"), kLabelsMagic, {2}, {1, 2});
  expect_error([&] { load(dir_.string(), Split::train); }, "3 images but 2 labels");
}

// A split without examples is named with its file (train said only "BatchPipeline: the
// data set is empty", for either split).
TEST_F(IdxTest, EmptySplitIsNamed) {
  write_idx(path("t10k-images-idx3-ubyte.gz"), kImagesMagic, {0, 2, 3}, {});
  write_idx(path("t10k-labels-idx1-ubyte.gz"), kLabelsMagic, {0}, {});
  expect_error([&] { load(dir_.string(), Split::test); },
               "t10k-images-idx3-ubyte.gz: holds no images");
}

TEST(IdxRealData, FashionMnistTestSplitLoads) {
  if (!fs::exists(std::string(kDefaultDir) + "/t10k-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }
  const Dataset d = load(kDefaultDir, Split::test);
  EXPECT_EQ(d.size(), 10000u);
  EXPECT_EQ(d.images.rows, 28u);
  EXPECT_EQ(d.images.cols, 28u);
  std::vector<int> per_class(kClasses);
  for (std::uint8_t l : d.labels) ++per_class[l];
  for (int c : per_class) EXPECT_EQ(c, 1000);  // the test split is balanced
}

}  // namespace
}  // namespace depengine::fashion_mnist
