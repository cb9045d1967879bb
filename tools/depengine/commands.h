// The subcommands of the `depengine` command line. Each lives in its own file and gets
// the arguments after its name. Return value: the process exit code (2 for bad input).
#pragma once

namespace depengine::cli {

int bench(int argc, char** argv);  // engine overhead scenarios, naive vs threaded (bench.cc)
int run(int argc, char** argv);       // run a graph file, compare with naive (graph_commands.cc)
int analyze(int argc, char** argv);   // work, span, critical path of a graph file
int generate(int argc, char** argv);  // graph files for well-known DAGs
int demo(int argc, char** argv);      // the d2l chapter 13.2 experiments on NDArray (demo.cc)
int train(int argc, char** argv);     // softmax / MLP on Fashion-MNIST (train.cc)
bool under_mpirun();                  // started by mpirun (run_dist.cc, built with MPI)
int run_dist(int argc, char** argv);  // `run` under mpirun: the graph over MPI ranks

}  // namespace depengine::cli
