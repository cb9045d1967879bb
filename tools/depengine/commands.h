// The subcommands of the `depengine` command line. Each lives in its own file and gets
// the arguments after its name. Return value: the process exit code (2 for bad input).
#pragma once

namespace depengine::cli {

int bench(int argc, char** argv);  // engine overhead scenarios, naive vs threaded (bench.cc)

}  // namespace depengine::cli
