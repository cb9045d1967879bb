// Graph files: the documented errors for malformed files (op index and field, exit code 2,
// nothing run), round trips, and the `depengine` commands end to end.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <set>
#include <sstream>
#include <string>

#include "depengine/graph.h"
#include "graphfile.h"

#include "scratch.h"

namespace {

namespace gf = depengine::graphfile;

struct Malformed {
  const char* what;
  const char* text;
  long op;
  const char* field;
  const char* message;  // a part of the error message
};

const Malformed kMalformed[] = {
    {"bad JSON", R"({"ops": [ {"name": "a",, } ]})", -1, "", "bad JSON at byte"},
    {"top level not an object", R"([1, 2])", -1, "", "top level must be an object"},
    {"no ops", R"({"opz": []})", -1, "opz", "unknown top-level field"},
    {"missing ops", R"({})", -1, "ops", "missing"},
    {"ops not an array", R"({"ops": {}})", -1, "ops", "must be an array"},
    {"op not an object", R"({"ops": [{"name": "a"}, 7]})", 1, "", "must be an object"},
    {"op with no name", R"({"ops": [{"name": "a"}, {"writes": ["x"]}]})", 1, "name", "missing"},
    {"empty name", R"({"ops": [{"name": ""}]})", 0, "name", "non-empty string"},
    {"name not a string", R"({"ops": [{"name": 3}]})", 0, "name", "non-empty string"},
    {"duplicate names", R"({"ops": [{"name": "a"}, {"name": "b"}, {"name": "a"}]})", 2, "name",
     "duplicates the name of op 0"},
    {"reads not an array", R"({"ops": [{"name": "a", "reads": "x"}]})", 0, "reads",
     "must be an array"},
    {"write not a string", R"({"ops": [{"name": "a", "writes": ["x", 1]}]})", 0, "writes",
     "entry 1 must be a non-empty string"},
    {"negative cost", R"({"ops": [{"name": "a"}, {"name": "b", "cost_us": -5}]})", 1, "cost_us",
     "non-negative"},
    {"cost not a number", R"({"ops": [{"name": "a", "cost_us": "5"}]})", 0, "cost_us",
     "must be a number"},
    {"huge cost", R"({"ops": [{"name": "a", "cost_us": 1e12}]})", 0, "cost_us", "at most 1e9"},
    {"unknown device", R"({"ops": [{"name": "a", "device": "tpu"}]})", 0, "device",
     "unknown device"},
    {"unknown lane", R"({"ops": [{"name": "a", "lane": "fast"}]})", 0, "lane", "unknown lane"},
    {"priority not an integer", R"({"ops": [{"name": "a", "priority": 1.5}]})", 0, "priority",
     "must be an integer"},
    {"priority too large", R"({"ops": [{"name": "a", "priority": 4294967296}]})", 0, "priority",
     "must be an integer"},
    {"unknown field", R"({"ops": [{"name": "a", "cost": 5}]})", 0, "cost", "unknown field"},
    {"commute var also written", R"({"ops": [{"name": "a", "writes": ["x"], "commute": ["x"]}]})",
     0, "commute", "var 'x' is also in writes"},
    {"reduce var also commuted", R"({"ops": [{"name": "a", "commute": ["x"], "reduce": ["x"]}]})",
     0, "reduce", "var 'x' is also in commute"},
    {"reduce not an array", R"({"ops": [{"name": "a", "reduce": "x"}]})", 0, "reduce",
     "must be an array"},
    // Issue 11, item 14: nlohmann's parser takes the last of repeated keys, so this ran nothing.
    {"duplicate top level key", R"({"ops": [{"name": "a"}], "ops": []})", -1, "ops",
     "duplicate key"},
    {"duplicate op key", R"({"ops": [{"name": "a"}, {"name": "b", "reads": ["x"], "reads": []}]})",
     1, "reads", "duplicate key"},
    {"duplicate key deeper", R"({"ops": [{"name": "a", "device": {"x": 1, "x": 2}}]})", -1, "x",
     "duplicate key \"x\" in ops[0].device"},
    {"duplicate key in a dump", R"({"nodes": [{"id": 1, "id": 2}]})", -1, "id",
     "duplicate key \"id\" in nodes[0]"},
};

void PrintTo(const Malformed& m, std::ostream* os) { *os << m.what; }

class InspectGraphFile : public ::testing::TestWithParam<Malformed> {};

TEST_P(InspectGraphFile, MalformedFileGivesTheDocumentedError) {
  const Malformed& m = GetParam();
  try {
    gf::parse_program(m.text);
    FAIL() << m.what << ": parsed";
  } catch (const gf::FileError& e) {
    EXPECT_EQ(e.op(), m.op) << m.what;
    EXPECT_EQ(e.field(), m.field) << m.what;
    EXPECT_NE(std::string(e.what()).find(m.message), std::string::npos) << e.what();
    if (m.op >= 0) {
      EXPECT_EQ(std::string(e.what()).rfind("op " + std::to_string(m.op), 0), 0u) << e.what();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, InspectGraphFile, ::testing::ValuesIn(kMalformed),
                         [](const auto& p) {
                           std::string n = p.param.what;
                           for (char& c : n) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return n;
                         });

// nlohmann's lexer takes a NUL byte for the end of the input, so whatever followed one (the
// rest of a file that is not text) was ignored and the prefix ran as the whole file.
TEST(InspectGraphFileParse, NulByteIsNotTheEndOfTheFile) {
  using namespace std::string_literals;
  for (const std::string& text : {"{\"ops\": []}\n\0{\"ops\": 1}"s,
                                  "{\"nodes\": []}\0\x01\x02garbage"s}) {
    try {
      gf::parse_program(text);
      ADD_FAILURE() << "parsed";
    } catch (const gf::FileError& e) {
      EXPECT_NE(std::string(e.what()).find("a NUL byte"), std::string::npos) << e.what();
    }
    EXPECT_THROW(depengine::Graph::from_json(text), depengine::Error);
    EXPECT_THROW(gf::check_unique_keys(text), gf::FileError);  // run under mpirun
  }
}

TEST(InspectGraphFileParse, ExampleFromTheIssue) {
  const gf::Program p = gf::parse_program(R"({ "ops": [
      {"name": "potrf_0", "reads": [], "writes": ["A00"], "cost_us": 40},
      {"name": "trsm_1_0", "reads": ["A00"], "writes": ["A10"], "cost_us": 60,
       "device": "cpu", "lane": "compute", "priority": 1} ] })");
  ASSERT_EQ(p.ops.size(), 2u);
  EXPECT_EQ(p.vars, (std::vector<std::string>{"A00", "A10"}));
  EXPECT_EQ(p.ops[1].priority, 1);
  const auto a = depengine::analyze(gf::to_graph(p));
  EXPECT_DOUBLE_EQ(a.work, 100);
  EXPECT_DOUBLE_EQ(a.span, 100);
}

// Issue 14: "commute" and "reduce" lists. A commute run's ops are unordered among
// themselves but one at a time (analyze bounds the time by the heaviest run); a reduce
// run's ops are concurrent; the next other access waits for the whole run. Both survive a
// round trip through the file and through a graph dump, and run on an engine.
TEST(InspectGraphFileParse, CommuteAndReduceLists) {
  const char* text = R"({ "ops": [
      {"name": "init", "writes": ["h", "s"], "cost_us": 10},
      {"name": "c0", "reads": ["x"], "commute": ["h"], "cost_us": 100},
      {"name": "c1", "commute": ["h"], "cost_us": 100},
      {"name": "c2", "commute": ["h"], "reduce": ["s"], "cost_us": 100},
      {"name": "r0", "reduce": ["s"], "cost_us": 100},
      {"name": "use", "reads": ["h", "s"], "cost_us": 10} ] })";
  const gf::Program p = gf::parse_program(text);
  ASSERT_EQ(p.ops.size(), 6u);
  EXPECT_EQ(p.ops[3].commutes.size(), 1u);
  EXPECT_EQ(p.ops[3].reduces.size(), 1u);
  const depengine::Graph g = gf::to_graph(p);
  // init -> c0, c1, c2 (h) and -> c2, r0 (s); every run op -> use; none among the runs.
  std::set<std::pair<std::size_t, std::size_t>> pairs;
  for (const auto& e : g.edges()) pairs.emplace(e.from, e.to);
  EXPECT_EQ(pairs, (std::set<std::pair<std::size_t, std::size_t>>{
                       {0, 1}, {0, 2}, {0, 3}, {0, 4}, {1, 5}, {2, 5}, {3, 5}, {4, 5}}));
  const auto a = depengine::analyze(g);
  EXPECT_DOUBLE_EQ(a.span, 120);
  EXPECT_EQ(a.commute_runs, 1u);
  EXPECT_EQ(a.reduce_runs, 1u);
  EXPECT_DOUBLE_EQ(a.heaviest_commute_run, 300);
  EXPECT_DOUBLE_EQ(a.parallelism, 420.0 / 300);
  const std::string dot = g.to_dot();
  EXPECT_NE(dot.find("label=\"h (commute)\""), std::string::npos) << dot;
  EXPECT_NE(dot.find("label=\"s (reduce)\""), std::string::npos) << dot;
  EXPECT_EQ(gf::to_json(gf::parse_program(gf::to_json(p))), gf::to_json(p));
  EXPECT_EQ(gf::to_json(gf::parse_program(g.to_json())), gf::to_json(p));
  EXPECT_EQ(depengine::Graph::from_dot(dot).edge_count(), g.edge_count());
  for (const char* kind : {"naive", "threaded"}) {
    auto e = depengine::Engine::create(kind, {.cpu_threads = 2});
    EXPECT_GT(gf::run(*e, p, nullptr), 0);
  }
}

TEST(InspectGraphFileParse, GraphFileAndDumpRoundTrip) {
  const gf::Program p = gf::generate_lu(4, 7);
  const gf::Program again = gf::parse_program(gf::to_json(p));
  EXPECT_EQ(gf::to_json(again), gf::to_json(p));
  // A JSON dump of the graph is a graph file too.
  const gf::Program from_dump = gf::parse_program(gf::to_graph(p).to_json());
  EXPECT_EQ(gf::to_json(from_dump), gf::to_json(p));
}

// Issue 11, item 13: the loader keyed a dump's vars by name, so renaming a Cholesky dump's
// vars to one name merged them and changed its edges. Vars are keyed by id.
TEST(InspectGraphFileParse, DumpVarsAreKeyedByIdNotName) {
  const gf::Program chol = gf::generate_cholesky(4, 1);
  depengine::Graph g = gf::to_graph(chol);
  for (std::uint64_t v : g.vars()) g.set_var_name(v, "A");
  const gf::Program p = gf::parse_program(g.to_json());
  ASSERT_EQ(p.vars.size(), chol.vars.size());
  for (const std::string& name : p.vars) EXPECT_EQ(name, "A");
  const depengine::Graph again = gf::to_graph(p);
  EXPECT_EQ(again.edge_count(), g.edge_count());
  EXPECT_DOUBLE_EQ(depengine::analyze(again).span, depengine::analyze(g).span);
  // As a graph file (vars by name) they get distinct names, and stay distinct.
  const gf::Program file = gf::parse_program(gf::to_json(p));
  EXPECT_EQ(file.vars.size(), chol.vars.size());
  EXPECT_EQ(gf::to_graph(file).edge_count(), g.edge_count());
}

TEST(InspectGraphFileParse, SharedNamesBecomeDistinctInAGraphFile) {
  gf::Program p;
  p.vars = {"A", "A", "A#2", "A"};
  for (std::size_t v = 0; v < p.vars.size(); ++v) {
    gf::OpSpec op;
    op.name = "w" + std::to_string(v);
    op.writes = {v};
    p.ops.push_back(std::move(op));
  }
  EXPECT_EQ(gf::parse_program(gf::to_json(p)).vars,
            (std::vector<std::string>{"A", "A#3", "A#2", "A#4"}));
}

// Issue 27, item 5: a recorded dump names every Python op "python" (and every delete
// "delete_var"); the loader refused it as soon as two ops shared a name. In a dump names
// are labels and ids identity; written back as a graph file, the names become distinct.
gf::Program ops_named_alike() {
  gf::Program p;
  p.vars = {"x"};
  for (int i = 0; i < 3; ++i) {
    gf::OpSpec op;
    op.name = "python";
    op.writes = {0};
    p.ops.push_back(std::move(op));
  }
  return p;
}

TEST(InspectGraphFileParse, ADumpMayRepeatOpNames) {
  const std::string dump = gf::to_graph(ops_named_alike()).to_json();
  const gf::Program p = gf::parse_program(dump);
  ASSERT_EQ(p.ops.size(), 3u);
  for (const gf::OpSpec& op : p.ops) EXPECT_EQ(op.name, "python");
  EXPECT_EQ(gf::to_graph(p).edge_count(), 2u);
  const gf::Program file = gf::parse_program(gf::to_json(p));
  std::vector<std::string> names;
  for (const gf::OpSpec& op : file.ops) names.push_back(op.name);
  EXPECT_EQ(names, (std::vector<std::string>{"python", "python#2", "python#3"}));
}

// Issue 27, item 5: 10 MB of '[' took 1.27 GB and 4 s before it was refused.
TEST(InspectGraphFileParse, DeepNestingIsRefusedAtOnce) {
  const std::string deep(10'000'000, '[');
  try {
    gf::parse_program(deep);
    ADD_FAILURE() << "accepted";
  } catch (const gf::FileError& e) {
    EXPECT_NE(std::string(e.what()).find("nested deeper than 64 levels"), std::string::npos)
        << e.what();
  }
  try {
    (void)depengine::Graph::from_json(deep);
    ADD_FAILURE() << "accepted";
  } catch (const depengine::Error& e) {
    EXPECT_NE(std::string(e.what()).find("nested deeper than 64 levels"), std::string::npos)
        << e.what();
  }
  const std::string dot = "digraph G {\ndepengine_format=\"depengine-graph 1\";\nvar_names=\"" +
                          std::string(100, '[') + "\";\n}\n";
  try {
    (void)depengine::Graph::from_dot(dot);
    ADD_FAILURE() << "accepted";
  } catch (const depengine::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'var_names': nested deeper than 64"), std::string::npos)
        << e.what();
  }
}

TEST(InspectGraphFileLoad, WhatCannotBeReadIsAReadErrorNamingIt) {
  const std::string dir = depengine::test::scratch_prefix() + "graph_dir.json";
  std::filesystem::create_directories(dir);
  auto message = [](const std::string& path) {
    try {
      gf::load_program(path);
    } catch (const gf::ReadError& e) {
      return std::string(e.what());
    }
    return std::string("no ReadError");
  };
  // A directory used to read as an empty file: "bad JSON at byte 1".
  EXPECT_EQ(message(dir), "'" + dir + "' is a directory");
  EXPECT_EQ(message("/dev/zero"), "'/dev/zero' is not a regular file or a pipe");
  EXPECT_EQ(message("/nonexistent/g.json"),
            "cannot read '/nonexistent/g.json': No such file or directory");
  std::filesystem::remove(dir);
}

TEST(InspectGraphFileGenerate, HugeSizesAreRefusedBeforeBuilding) {
  // 1e6 ops of 128 accesses each used to end in bad_alloc (or the OOM killer).
  EXPECT_THROW(gf::generate_random(1000000, 1000000, 64, 64, 1, 1), std::invalid_argument);
  EXPECT_NO_THROW(gf::generate_random(1000, 100, 64, 64, 1, 1));
}

TEST(InspectGraphFileParse, GpuOpsNeedAGpu) {
  gf::Program p = gf::generate_tree(4, 1);
  p.ops[2].device = depengine::Device::gpu(1);
  EXPECT_NO_THROW(gf::check_devices(p, 2));
  try {
    gf::check_devices(p, 1);
    FAIL() << "no error";
  } catch (const gf::FileError& e) {
    EXPECT_EQ(e.op(), 2);
    EXPECT_EQ(e.field(), "device");
  }
}

// The fuzzer's seed corpus, replayed through the same checks in every build (the fuzzer
// itself needs clang; scripts/fuzz-graphfile.sh runs it).
TEST(InspectFuzzCorpus, SeedsParseOrGiveAFileError) {
  std::size_t parsed = 0, rejected = 0;
  for (const auto& entry : std::filesystem::directory_iterator(INSPECT_CORPUS)) {
    std::ifstream in(entry.path());
    std::ostringstream ss;
    ss << in.rdbuf();
    try {
      const gf::Program p = gf::parse_program(ss.str());
      EXPECT_EQ(gf::to_json(gf::parse_program(gf::to_json(p))), gf::to_json(p)) << entry.path();
      const auto a = depengine::analyze(gf::to_graph(p));
      EXPECT_LE(a.span, a.work + 1e-9) << entry.path();
      ++parsed;
    } catch (const gf::FileError& e) {
      EXPECT_EQ(entry.path().filename().string().rfind("bad_", 0), 0u)
          << entry.path() << ": " << e.what();
      ++rejected;
    }
  }
  EXPECT_GE(parsed, 5u);
  EXPECT_GE(rejected, 3u);
}

#ifdef INSPECT_CLI

struct Result {
  int code;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Result cli(const std::string& args) {
  const std::string dir = depengine::test::scratch_prefix();
  const std::string out = dir + "inspect_cli.out", err = dir + "inspect_cli.err";
  const int status =
      std::system(("'" INSPECT_CLI "' " + args + " > '" + out + "' 2> '" + err + "'").c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
}

std::string temp_file(const std::string& name, const std::string& text) {
  const std::string path = depengine::test::scratch_prefix() + name;
  std::ofstream(path) << text;
  return path;
}

TEST(InspectCli, MalformedFileExitsWithTwoAndRunsNothing) {
  const std::string trace = depengine::test::scratch_prefix() + "inspect_cli_bad_trace.json";
  std::remove(trace.c_str());
  // Op 3 is bad; ops 0-2 must not run (no timing lines, no trace).
  const std::string bad = temp_file(
      "inspect_bad.json",
      R"({"ops": [{"name": "a", "writes": ["x"]}, {"name": "b", "reads": ["x"]},
                  {"name": "c", "writes": ["x"]}, {"name": "d", "lane": "sideways"}]})");
  const Result r = cli("run '" + bad + "' --trace '" + trace + "'");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("op 3: field 'lane'"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("naive"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(trace));
  EXPECT_EQ(cli("analyze '" + bad + "'").code, 2);
  EXPECT_EQ(cli("run /nonexistent/file.json").code, 1);  // cannot read: a runtime failure
  EXPECT_EQ(cli("run '" + bad + "' --threads zero").code, 2);
  const std::string gpu = temp_file("inspect_gpu.json",
                                    R"j({"ops": [{"name": "a", "device": "gpu(7)"}]})j");
  const Result g = cli("run '" + gpu + "'");
  EXPECT_EQ(g.code, 2);
  EXPECT_NE(g.err.find("op 0: field 'device'"), std::string::npos) << g.err;
}

TEST(InspectCli, GenerateAnalyzeRun) {
  const std::string dir = depengine::test::scratch_prefix();
  const std::string file = dir + "inspect_chol.json";
  ASSERT_EQ(cli("generate cholesky --tiles 4 --cost-us 50 -o '" + file + "'").code, 0);
  const Result a = cli("analyze '" + file + "' --unit");
  EXPECT_EQ(a.code, 0);
  EXPECT_NE(a.out.find("graph: 20 ops"), std::string::npos) << a.out;
  EXPECT_NE(a.out.find("span: 10 ops"), std::string::npos) << a.out;
  EXPECT_NE(a.out.find("critical path (10 ops): potrf_0 -> trsm_1_0"), std::string::npos) << a.out;

  const std::string dot = dir + "inspect_cli.dot", json = dir + "inspect_cli_graph.json",
                    trace = dir + "inspect_cli_trace.json";
  const Result r = cli("run '" + file + "' --threads 2 --dot '" + dot + "' --json '" + json +
                       "' --trace '" + trace + "'");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("speedup over naive"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("parallelism: 2.00"), std::string::npos) << r.out;
  EXPECT_EQ(depengine::Graph::from_dot(slurp(dot)).node_count(), 20u);
  EXPECT_EQ(depengine::Graph::from_json(slurp(json)).node_count(), 20u);
  EXPECT_NE(slurp(trace).find("traceEvents"), std::string::npos);
  // The recorded JSON dump runs again, from standard input.
  const Result again = cli("run - --engine naive < '" + json + "'");
  EXPECT_EQ(again.code, 0) << again.err;
  EXPECT_NE(again.out.find("graph: 20 ops"), std::string::npos) << again.out;

  for (const char* kind : {"lu --tiles 3", "stencil --width 4 --steps 3", "tree --leaves 9",
                           "forkjoin --width 3 --stages 2", "random --ops 50 --seed 5"}) {
    const Result gen = cli(std::string("generate ") + kind + " --cost-us 1");
    EXPECT_EQ(gen.code, 0) << kind << ": " << gen.err;
    EXPECT_NO_THROW(gf::parse_program(gen.out)) << kind;
  }
  EXPECT_EQ(cli("generate cholesky --tiles 0").code, 2);
  EXPECT_EQ(cli("generate spiral").code, 2);
}

TEST(InspectCli, AnalyzeTakesADumpWithRepeatedOpNames) {
  const std::string dump =
      temp_file("inspect_alike.json", gf::to_graph(ops_named_alike()).to_json());
  const Result a = cli("analyze '" + dump + "' --unit");
  EXPECT_EQ(a.code, 0) << a.err;
  EXPECT_NE(a.out.find("graph: 3 ops"), std::string::npos) << a.out;
}

#endif  // INSPECT_CLI

}  // namespace
