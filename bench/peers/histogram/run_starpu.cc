// StarPU 1.3: a vector handle per chunk and one for the histogram; count tasks access it
// STARPU_RW, STARPU_RW | STARPU_COMMUTE, or STARPU_REDUX with the histogram's init (zeros)
// and redux (elementwise sum) codelets (starpu_data_set_reduction_methods). CPU workers
// only, the lws scheduler; paused between runs so their polling leaves the other runtimes
// alone.
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <starpu.h>

#include "histogram.h"

namespace depengine::histogram {

namespace {

struct Args {
  const Problem* p;
  std::size_t c;
};

void fill_kernel(void** buffers, void* cl_arg) {
  const auto* a = static_cast<const Args*>(cl_arg);
  fill_chunk(*a->p, a->c, reinterpret_cast<std::uint32_t*>(STARPU_VECTOR_GET_PTR(buffers[0])));
}

void count_kernel(void** buffers, void* cl_arg) {
  const auto* a = static_cast<const Args*>(cl_arg);
  count_chunk(*a->p, reinterpret_cast<const std::uint32_t*>(STARPU_VECTOR_GET_PTR(buffers[0])),
              reinterpret_cast<std::uint64_t*>(STARPU_VECTOR_GET_PTR(buffers[1])));
}

void init_kernel(void** buffers, void*) {
  std::memset(reinterpret_cast<void*>(STARPU_VECTOR_GET_PTR(buffers[0])), 0,
              kBins * sizeof(std::uint64_t));
}

void redux_kernel(void** buffers, void*) {
  auto* a = reinterpret_cast<std::uint64_t*>(STARPU_VECTOR_GET_PTR(buffers[0]));
  const auto* b = reinterpret_cast<const std::uint64_t*>(STARPU_VECTOR_GET_PTR(buffers[1]));
  for (std::size_t i = 0; i < kBins; ++i) a[i] += b[i];
}

class StarPu {
 public:
  explicit StarPu(int threads) {
    const std::string n = std::to_string(threads);
    setenv("STARPU_NCPU", n.c_str(), 1);
    setenv("STARPU_NCUDA", "0", 1);
    setenv("STARPU_NOPENCL", "0", 1);
    setenv("STARPU_SILENT", "1", 0);
    if (!std::getenv("STARPU_HOME")) {
      std::string dir = (std::filesystem::temp_directory_path() / "depengine-hist-XXXXXX").string();
      if (mkdtemp(dir.data())) setenv("STARPU_HOME", dir.c_str(), 1);
    }
    starpu_conf conf;
    starpu_conf_init(&conf);
    conf.ncpus = threads;
    conf.ncuda = 0;
    conf.nopencl = 0;
    conf.sched_policy_name = "lws";
    if (const int rc = starpu_init(&conf); rc != 0) {
      throw std::runtime_error("starpu_init failed (" + std::to_string(rc) + ")");
    }
    starpu_pause();
    for (starpu_codelet* cl : {&fill_, &count_[0], &count_[1], &count_[2], &init_, &redux_}) {
      starpu_codelet_init(cl);
    }
    fill_.cpu_funcs[0] = fill_kernel;
    fill_.nbuffers = 1;
    fill_.modes[0] = STARPU_W;
    // One count codelet per access mode (StarPU checks a task's modes against its codelet's).
    const starpu_data_access_mode modes[] = {
        STARPU_RW, static_cast<starpu_data_access_mode>(STARPU_RW | STARPU_COMMUTE), STARPU_REDUX};
    for (int m = 0; m < 3; ++m) {
      count_[m].cpu_funcs[0] = count_kernel;
      count_[m].nbuffers = 2;
      count_[m].modes[0] = STARPU_R;
      count_[m].modes[1] = modes[m];
    }
    init_.cpu_funcs[0] = init_kernel;
    init_.nbuffers = 1;
    init_.modes[0] = STARPU_W;
    redux_.cpu_funcs[0] = redux_kernel;
    redux_.nbuffers = 2;
    redux_.modes[0] = STARPU_RW;
    redux_.modes[1] = STARPU_R;
  }
  ~StarPu() {
    starpu_resume();
    starpu_shutdown();
  }

  void run(const Problem& p, Access access, std::uint32_t* data, std::uint64_t* hist) {
    const std::size_t n = p.chunk_size();
    std::vector<starpu_data_handle_t> chunks(p.chunks);
    std::vector<Args> args(p.chunks);
    starpu_data_handle_t h;
    for (std::size_t c = 0; c < p.chunks; ++c) {
      starpu_vector_data_register(&chunks[c], STARPU_MAIN_RAM,
                                  reinterpret_cast<uintptr_t>(data + c * n), n, sizeof(std::uint32_t));
      args[c] = {&p, c};
    }
    starpu_vector_data_register(&h, STARPU_MAIN_RAM, reinterpret_cast<uintptr_t>(hist), kBins,
                                sizeof(std::uint64_t));
    if (access == Access::reduce) starpu_data_set_reduction_methods(h, &redux_, &init_);
    const int m = static_cast<int>(access);
    const int mode = static_cast<int>(count_[m].modes[1]);
    starpu_resume();
    for (std::size_t c = 0; c < p.chunks; ++c) {
      check(starpu_task_insert(&fill_, STARPU_W, chunks[c], STARPU_CL_ARGS_NFREE, &args[c],
                               sizeof(Args), 0));
      check(starpu_task_insert(&count_[m], STARPU_R, chunks[c], mode, h, STARPU_CL_ARGS_NFREE,
                               &args[c], sizeof(Args), 0));
    }
    starpu_task_wait_for_all();
    for (starpu_data_handle_t c : chunks) starpu_data_unregister(c);
    starpu_data_unregister(h);  // brings the reduced histogram back to `hist`
    starpu_pause();
  }

 private:
  static void check(int rc) {
    if (rc != 0) throw std::runtime_error("starpu_task_insert failed (" + std::to_string(rc) + ")");
  }
  starpu_codelet fill_, count_[3], init_, redux_;  // count_ by Access
};

}  // namespace

Runtime starpu_runtime(int threads) {
  auto s = std::make_shared<StarPu>(threads);
  Runtime r{"starpu", {Access::rw, Access::commute, Access::reduce}, "", {}};
  r.run = [s](const Problem& p, Access a, std::uint32_t* data, std::uint64_t* hist) {
    s->run(p, a, data, hist);
  };
  return r;
}

}  // namespace depengine::histogram
