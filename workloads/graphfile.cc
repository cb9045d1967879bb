#include "graphfile.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <iterator>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace depengine::graphfile {
namespace {

using nlohmann::json;

[[noreturn]] void op_error(std::size_t op, const std::string& field, const std::string& what) {
  throw FileError("op " + std::to_string(op) + ": field '" + field + "': " + what,
                  static_cast<long>(op), field);
}

[[noreturn]] void file_error(const std::string& field, const std::string& what) {
  throw FileError(field.empty() ? what : "field '" + field + "': " + what, -1, field);
}

// A short description of a JSON value for error messages.
std::string describe(const json& v) {
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    return "the string \"" + (s.size() > 40 ? s.substr(0, 40) + "..." : s) + "\"";
  }
  if (v.is_number()) return "the number " + v.dump();
  return std::string("a value of type ") + v.type_name();
}

constexpr const char* kOpFields[] = {"name",   "reads", "writes",  "commute", "reduce",
                                     "cost_us", "device", "lane", "priority"};

// Deeper than any graph file or dump (a dump's accesses sit at depth 5): a file of nested
// brackets is refused as soon as the parser reaches this depth (a 10 MB one took 1.27 GB
// and 4 s to be refused at its end).
constexpr std::size_t kMaxDepth = 64;

// A parser callback that rejects an object repeating a key (nlohmann's parser would keep
// the last one, so {"ops": [...], "ops": []} ran nothing) and nesting beyond kMaxDepth. It
// tracks where the parser is to name the place: an op's field as op_error does, anything
// else by its path.
class DuplicateKeys {
 public:
  bool operator()(int, json::parse_event_t event, json& parsed) {
    using E = json::parse_event_t;
    switch (event) {
      case E::object_start:
      case E::array_start:
        count_element();
        if (stack_.size() == kMaxDepth) {
          throw FileError("bad JSON: nested deeper than " + std::to_string(kMaxDepth) +
                              " levels (no graph file or dump is)",
                          -1, "");
        }
        stack_.push_back({event == E::object_start, {}, {}, 0});
        break;
      case E::object_end:
      case E::array_end:
        stack_.pop_back();
        break;
      case E::key: {
        Frame& top = stack_.back();
        top.key = parsed.get<std::string>();
        if (!top.keys.insert(top.key).second) duplicate(top.key);
        break;
      }
      case E::value:
        count_element();
        break;
    }
    return true;
  }

 private:
  struct Frame {
    bool object;
    std::set<std::string> keys;
    std::string key;       // objects: the key being read
    std::size_t elements;  // arrays: how many elements so far
  };

  void count_element() {
    if (!stack_.empty() && !stack_.back().object) ++stack_.back().elements;
  }

  [[noreturn]] void duplicate(const std::string& key) const {
    const std::string what = "duplicate key (a JSON object must not repeat a key)";
    if (stack_.size() == 1) file_error(key, what);
    if (stack_.size() == 3 && stack_[0].key == "ops" && !stack_[1].object) {
      op_error(stack_[1].elements - 1, key, what);
    }
    std::string path;
    for (std::size_t i = 0; i + 1 < stack_.size(); ++i) {
      const Frame& f = stack_[i];
      path += f.object ? (path.empty() ? "" : ".") + f.key
                       : "[" + std::to_string(f.elements - 1) + "]";
    }
    throw FileError("duplicate key \"" + key + "\" in " + path +
                        " (a JSON object must not repeat a key)",
                    -1, key);
  }

  std::vector<Frame> stack_;
};

class Builder {
 public:
  Program program;

  std::size_t var(const std::string& name) {
    auto [it, inserted] = index_.try_emplace(name, program.vars.size());
    if (inserted) program.vars.push_back(name);
    return it->second;
  }

  void add_name(std::size_t op, const std::string& name) {
    auto [it, inserted] = names_.try_emplace(name, op);
    if (!inserted) {
      op_error(op, "name", "\"" + name + "\" duplicates the name of op " +
                               std::to_string(it->second));
    }
  }

 private:
  std::unordered_map<std::string, std::size_t> index_;
  std::unordered_map<std::string, std::size_t> names_;
};

void read_var_list(const json& op, const char* field, std::size_t i, Builder& b,
                   std::vector<std::size_t>& out) {
  auto it = op.find(field);
  if (it == op.end()) return;
  if (!it->is_array()) op_error(i, field, "must be an array of var names, got " + describe(*it));
  for (std::size_t k = 0; k < it->size(); ++k) {
    const json& v = (*it)[k];
    if (!v.is_string() || v.get_ref<const std::string&>().empty()) {
      op_error(i, field,
               "entry " + std::to_string(k) + " must be a non-empty string, got " + describe(v));
    }
    out.push_back(b.var(v.get<std::string>()));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
}

// A commute or reduce var may not be in another list of the same op (the engine refuses
// reduce beside another access, and commute beside a write would be a plain read-write).
void check_exclusive_lists(const OpSpec& s, std::size_t i, const std::vector<std::string>& names) {
  const std::pair<const char*, const std::vector<std::size_t>*> lists[] = {
      {"reads", &s.reads}, {"writes", &s.writes}, {"commute", &s.commutes}, {"reduce", &s.reduces}};
  for (std::size_t a = 2; a < 4; ++a) {
    for (std::size_t b = 0; b < 4; ++b) {
      if (a == b || (b > a)) continue;
      for (std::size_t v : *lists[a].second) {
        if (std::binary_search(lists[b].second->begin(), lists[b].second->end(), v)) {
          op_error(i, lists[a].first,
                   "var '" + names[v] + "' is also in " + lists[b].first +
                       " (a commute or reduce var may be in no other list of the op)");
        }
      }
    }
  }
}

// reduce(v) contributes into the running thread's private buffer: the engine takes it only
// in a CPU op, and refused a GPU one at push, part way through a run.
void check_reduce_device(const OpSpec& s, std::size_t i, const std::vector<std::string>& names) {
  if (s.reduces.empty() || s.device.is_cpu()) return;
  op_error(i, "reduce",
           "var '" + names[s.reduces.front()] + "' is reduced on " + s.device.str() +
               " (reduce needs an op on the CPU: its private buffer is the running thread's)");
}

OpSpec read_op(const json& op, std::size_t i, Builder& b) {
  if (!op.is_object()) {
    throw FileError("op " + std::to_string(i) + ": must be an object, got " + describe(op),
                    static_cast<long>(i), "");
  }
  for (const auto& [key, value] : op.items()) {
    if (std::find(std::begin(kOpFields), std::end(kOpFields), key) == std::end(kOpFields)) {
      op_error(i, key,
               "unknown field (expected name, reads, writes, commute, reduce, cost_us, device, "
               "lane, priority)");
    }
  }
  OpSpec s;
  auto name = op.find("name");
  if (name == op.end()) op_error(i, "name", "missing (every op needs a unique name)");
  if (!name->is_string() || name->get_ref<const std::string&>().empty()) {
    op_error(i, "name", "must be a non-empty string, got " + describe(*name));
  }
  s.name = name->get<std::string>();
  b.add_name(i, s.name);
  read_var_list(op, "reads", i, b, s.reads);
  read_var_list(op, "writes", i, b, s.writes);
  read_var_list(op, "commute", i, b, s.commutes);
  read_var_list(op, "reduce", i, b, s.reduces);
  check_exclusive_lists(s, i, b.program.vars);
  if (auto c = op.find("cost_us"); c != op.end()) {
    if (!c->is_number()) op_error(i, "cost_us", "must be a number, got " + describe(*c));
    const double v = c->get<double>();
    if (!std::isfinite(v) || v < 0) {
      op_error(i, "cost_us", "must be a non-negative number, got " + c->dump());
    }
    if (v > kMaxCostUs) op_error(i, "cost_us", "must be at most 1e9 (1000 s), got " + c->dump());
    s.cost_us = v;
  }
  if (auto d = op.find("device"); d != op.end()) {
    if (!d->is_string() || !parse_device(d->get_ref<const std::string&>(), s.device)) {
      op_error(i, "device", "unknown device " + describe(*d) + " (expected \"cpu\" or \"gpu(N)\")");
    }
  }
  check_reduce_device(s, i, b.program.vars);
  if (auto l = op.find("lane"); l != op.end()) {
    if (!l->is_string() || !parse_lane(l->get_ref<const std::string&>(), s.lane)) {
      op_error(i, "lane",
               "unknown lane " + describe(*l) +
                   " (expected compute, copy_to_device, copy_from_device or priority)");
    }
  }
  if (auto p = op.find("priority"); p != op.end()) {
    const bool fits = (p->is_number_unsigned() &&
                       p->get<std::uint64_t>() <= std::numeric_limits<int>::max()) ||
                      (p->is_number_integer() && !p->is_number_unsigned() &&
                       p->get<std::int64_t>() >= std::numeric_limits<int>::min() &&
                       p->get<std::int64_t>() <= std::numeric_limits<int>::max());
    if (!fits) op_error(i, "priority", "must be an integer in int range, got " + describe(*p));
    s.priority = p->get<int>();
  }
  return s;
}

Program from_dump(std::string_view text) {
  Graph g;
  try {
    g = Graph::from_json(text);
  } catch (const Error& e) {
    throw FileError(e.what(), -1, "");
  }
  Builder b;
  std::unordered_map<std::uint64_t, std::size_t> by_id;  // dump var id -> program var
  for (std::size_t i = 0; i < g.node_count(); ++i) {
    const GraphNode& n = g.node(i);
    // Names are labels here (a recording names every Python op "python"), ids identity.
    if (n.name.empty()) op_error(i, "name", "must be a non-empty string");
    OpSpec s;
    s.name = n.name;
    s.cost_us = n.cost_us;
    if (s.cost_us > kMaxCostUs) op_error(i, "cost_us", "must be at most 1e9 (1000 s)");
    s.device = n.device;
    s.lane = n.lane;
    s.priority = n.priority;
    for (const VarAccess& a : n.accesses) {
      // By id: names are labels, and two vars may share one.
      auto [it, inserted] = by_id.try_emplace(a.var, b.program.vars.size());
      if (inserted) {
        const std::string label = g.var_name(a.var);
        b.program.vars.push_back(label.empty() ? "v" + std::to_string(a.var) : label);
      }
      const std::size_t v = it->second;
      if (a.mode == AccessMode::commute) {
        s.commutes.push_back(v);
        continue;
      }
      if (a.mode == AccessMode::reduce) {
        s.reduces.push_back(v);
        continue;
      }
      if (a.mode != AccessMode::write) s.reads.push_back(v);
      if (a.mode != AccessMode::read) s.writes.push_back(v);
    }
    for (auto* list : {&s.reads, &s.writes, &s.commutes, &s.reduces}) {
      std::sort(list->begin(), list->end());
      list->erase(std::unique(list->begin(), list->end()), list->end());
    }
    // As in a graph file: the engine would refuse the op at push, part way through a run.
    check_exclusive_lists(s, i, b.program.vars);
    check_reduce_device(s, i, b.program.vars);
    b.program.ops.push_back(std::move(s));
  }
  return std::move(b.program);
}

// nlohmann's lexer takes a NUL byte for the end of the input: what followed one was
// ignored, and the text before it ran as the whole file.
void check_no_nul(std::string_view text) {
  if (const std::size_t nul = text.find('\0'); nul != std::string_view::npos) {
    throw FileError("bad JSON at byte " + std::to_string(nul + 1) + ": a NUL byte (not text)", -1,
                    "");
  }
}
}  // namespace

Program parse_program(std::string_view text) {
  check_no_nul(text);
  json doc;
  try {
    DuplicateKeys duplicates;
    doc = json::parse(text, std::ref(duplicates));
  } catch (const json::parse_error& e) {
    throw FileError("bad JSON at byte " + std::to_string(e.byte) + ": " +
                        std::string(e.what()).substr(std::string(e.what()).find(':') + 2),
                    -1, "");
  } catch (const json::exception& e) {  // e.g. a number too large for a double (found by fuzzing)
    throw FileError("bad JSON: " + std::string(e.what()).substr(std::string(e.what()).find(']') + 2),
                    -1, "");
  }
  if (!doc.is_object()) file_error("", "the top level must be an object with an \"ops\" array");
  if (!doc.contains("ops") && doc.contains("nodes")) return from_dump(text);
  for (const auto& [key, value] : doc.items()) {
    if (key != "ops" && key != "description" && key != "generator") {
      file_error(key, "unknown top-level field (expected ops, description, generator)");
    }
  }
  auto ops = doc.find("ops");
  if (ops == doc.end()) file_error("ops", "missing (the file needs an \"ops\" array)");
  if (!ops->is_array()) file_error("ops", "must be an array, got " + describe(*ops));
  Builder b;
  b.program.ops.reserve(ops->size());
  for (std::size_t i = 0; i < ops->size(); ++i) b.program.ops.push_back(read_op((*ops)[i], i, b));
  return std::move(b.program);
}

void check_unique_keys(std::string_view text) {
  check_no_nul(text);
  DuplicateKeys duplicates;
  // Not JSON is left to the parse that follows: only a repeated key throws here.
  [[maybe_unused]] const json parsed = json::parse(text, std::ref(duplicates), false);
}

namespace {

// The whole of a regular file or a pipe. stat() first, so that a device is refused before
// an open() that could block on it (a FIFO's open waits for its writer, as `cat` does).
std::string read_file(const std::string& path) {
  struct stat st {};
  auto check_kind = [&] {
    if (S_ISDIR(st.st_mode)) throw ReadError("'" + path + "' is a directory");
    if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode)) {
      throw ReadError("'" + path + "' is not a regular file or a pipe");
    }
  };
  auto fail = [&](int err) -> ReadError {
    return ReadError("cannot read '" + path + "': " + std::strerror(err));
  };
  if (::stat(path.c_str(), &st) != 0) throw fail(errno);
  check_kind();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw fail(errno);
  std::string text;
  try {
    if (::fstat(fd, &st) != 0) throw fail(errno);
    check_kind();  // the path may name something else by now
    char buf[1 << 16];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n == 0) break;
      if (n < 0) {
        if (errno == EINTR) continue;
        throw fail(errno);
      }
      text.append(buf, static_cast<std::size_t>(n));
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return text;
}

// Graph-file names for the program's vars (or ops): their own, except that a name an earlier
// one already has becomes the first free "name#k" (k = 2, 3, ...).
std::vector<std::string> unique_names(const std::vector<std::string>& vars) {
  std::unordered_set<std::string> taken(vars.begin(), vars.end());
  if (taken.size() == vars.size()) return vars;
  std::unordered_set<std::string> seen;
  std::unordered_map<std::string, long> next;  // per name, the k to try first
  std::vector<std::string> out;
  out.reserve(vars.size());
  for (const std::string& v : vars) {
    if (seen.insert(v).second) {
      out.push_back(v);
      continue;
    }
    long& k = next.try_emplace(v, 2).first->second;
    std::string name;
    do name = v + "#" + std::to_string(k++);
    while (taken.contains(name));
    taken.insert(name);
    out.push_back(std::move(name));
  }
  return out;
}

}  // namespace

Program load_program(const std::string& path) {
  std::string text;
  if (path == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    if (std::cin.bad()) throw ReadError("cannot read standard input");
  } else {
    text = read_file(path);
  }
  return parse_program(text);
}

std::string to_json(const Program& program) {
  const std::vector<std::string> names = unique_names(program.vars);
  // A graph file's op names are unique; a dump's need not be (names are labels there).
  std::vector<std::string> op_names;
  op_names.reserve(program.ops.size());
  for (const OpSpec& s : program.ops) op_names.push_back(s.name);
  op_names = unique_names(op_names);
  // One op per line: diffable, and still small. Each op is dumped as soon as it is built,
  // so a large program never exists twice as a JSON tree.
  std::string out = "{\"ops\": [\n";
  for (std::size_t i = 0; i < program.ops.size(); ++i) {
    const OpSpec& s = program.ops[i];
    nlohmann::ordered_json j;
    j["name"] = op_names[i];
    j["reads"] = nlohmann::ordered_json::array();
    for (std::size_t v : s.reads) j["reads"].push_back(names[v]);
    j["writes"] = nlohmann::ordered_json::array();
    for (std::size_t v : s.writes) j["writes"].push_back(names[v]);
    if (!s.commutes.empty()) {
      j["commute"] = nlohmann::ordered_json::array();
      for (std::size_t v : s.commutes) j["commute"].push_back(names[v]);
    }
    if (!s.reduces.empty()) {
      j["reduce"] = nlohmann::ordered_json::array();
      for (std::size_t v : s.reduces) j["reduce"].push_back(names[v]);
    }
    j["cost_us"] = s.cost_us;
    if (!s.device.is_cpu()) j["device"] = s.device.str();
    if (s.lane != Lane::compute) j["lane"] = lane_name(s.lane);
    if (s.priority != 0) j["priority"] = s.priority;
    out += "  " + j.dump() + (i + 1 < program.ops.size() ? ",\n" : "\n");
  }
  out += "]}\n";
  return out;
}

Graph to_graph(const Program& program) {
  Graph g;
  std::vector<std::uint64_t> versions(program.vars.size(), 0);
  std::vector<VarAccess> acc;
  for (std::size_t i = 0; i < program.ops.size(); ++i) {
    const OpSpec& op = program.ops[i];
    OpSpec s;
    s.reads = op.reads;
    s.writes = op.writes;
    for (auto* list : {&s.reads, &s.writes}) {
      std::sort(list->begin(), list->end());
      list->erase(std::unique(list->begin(), list->end()), list->end());
    }
    acc.clear();
    // Merge the two sorted lists into one access per var, as the engine does.
    std::size_t r = 0, w = 0;
    while (r < s.reads.size() || w < s.writes.size()) {
      const bool take_r = w == s.writes.size() || (r < s.reads.size() && s.reads[r] <= s.writes[w]);
      const bool take_w = r == s.reads.size() || (w < s.writes.size() && s.writes[w] <= s.reads[r]);
      const std::size_t v = take_r ? s.reads[r] : s.writes[w];
      const AccessMode mode = take_r && take_w ? AccessMode::read_write
                              : take_r         ? AccessMode::read
                                               : AccessMode::write;
      const std::uint64_t version = mode == AccessMode::read ? versions[v] : ++versions[v];
      acc.push_back({v + 1, version, mode});
      r += take_r;
      w += take_w;
    }
    for (std::size_t v : op.commutes) acc.push_back({v + 1, ++versions[v], AccessMode::commute});
    for (std::size_t v : op.reduces) acc.push_back({v + 1, ++versions[v], AccessMode::reduce});
    OpInfo info{i, op.name, op.device, op.lane, op.priority, acc};
    g.add_op(info, op.cost_us);
  }
  for (std::size_t v = 0; v < program.vars.size(); ++v) g.set_var_name(v + 1, program.vars[v]);
  return g;
}

void check_devices(const Program& program, int gpus) {
  for (std::size_t i = 0; i < program.ops.size(); ++i) {
    const Device& d = program.ops[i].device;
    if (d.is_gpu() && d.id >= gpus) {
      op_error(i, "device",
               d.str() + " is not available (this engine has " + std::to_string(gpus) +
                   " GPU" + (gpus == 1 ? "" : "s") +
                   "; --sim-gpus N or DEPENGINE_SIM_GPUS=N simulates some)");
    }
  }
}

void spin_for_us(double us) {
  if (us <= 0) return;
  const auto end = std::chrono::steady_clock::now() +
                   std::chrono::nanoseconds(static_cast<std::int64_t>(std::llround(us * 1e3)));
  while (std::chrono::steady_clock::now() < end) {
  }
}

// The ops of a graph file only spin: the vars they reduce get hooks that combine nothing.
void set_spin_reductions(Engine& engine, const Program& program, const std::vector<Var>& vars) {
  std::vector<char> done(vars.size(), 0);
  for (const OpSpec& s : program.ops) {
    for (std::size_t v : s.reduces) {
      if (std::exchange(done[v], 1)) continue;
      static char nothing = 0;
      engine.set_reduction(vars[v], {.identity = [] { return std::make_shared<char>(0); },
                                     .combine = [](void*, const void*) {},
                                     .target = &nothing});
    }
  }
}

double run(Engine& engine, const Program& program, GraphRecorder* recorder) {
  std::vector<Var> vars;
  vars.reserve(program.vars.size());
  for (std::size_t v = 0; v < program.vars.size(); ++v) {
    vars.push_back(engine.new_var());
    if (recorder) recorder->set_var_name(vars.back().id(), program.vars[v]);
  }
  set_spin_reductions(engine, program, vars);
  std::vector<Var> reads, writes;
  const auto t0 = std::chrono::steady_clock::now();
  for (const OpSpec& s : program.ops) {
    reads.clear();
    writes.clear();
    for (std::size_t v : s.reads) reads.push_back(vars[v]);
    for (std::size_t v : s.writes) writes.push_back(vars[v]);
    for (std::size_t v : s.commutes) writes.push_back(commute(vars[v]));
    for (std::size_t v : s.reduces) writes.push_back(reduce(vars[v]));
    const double cost = s.cost_us;
    engine.push(
        [cost](const RunContext& ctx) {
          if (ctx.stream) {
            ctx.stream->enqueue_host([cost] { spin_for_us(cost); });
          } else {
            spin_for_us(cost);
          }
        },
        reads, writes,
        PushOptions{.device = s.device, .lane = s.lane, .priority = s.priority, .name = s.name});
  }
  engine.wait_all();
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(t1 - t0).count();
}

double run_plain(Engine& engine, const Program& program) {
  std::vector<Var> vars;
  vars.reserve(program.vars.size());
  for (std::size_t v = 0; v < program.vars.size(); ++v) vars.push_back(engine.new_var());
  set_spin_reductions(engine, program, vars);
  // Every op's reads then writes, resolved before the clock starts.
  std::vector<Var> flat;
  std::vector<std::size_t> starts;
  starts.reserve(program.ops.size() + 1);
  for (const OpSpec& s : program.ops) {
    starts.push_back(flat.size());
    for (std::size_t v : s.reads) flat.push_back(vars[v]);
    for (std::size_t v : s.writes) flat.push_back(vars[v]);
    for (std::size_t v : s.commutes) flat.push_back(commute(vars[v]));
    for (std::size_t v : s.reduces) flat.push_back(reduce(vars[v]));
  }
  starts.push_back(flat.size());
  const std::span<const Var> all(flat);
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t k = 0; k < program.ops.size(); ++k) {
    const OpSpec& s = program.ops[k];
    const double cost = s.cost_us;
    const std::span<const Var> reads = all.subspan(starts[k], s.reads.size());
    const std::span<const Var> writes =
        all.subspan(starts[k] + s.reads.size(), starts[k + 1] - starts[k] - s.reads.size());
    engine.push([cost] { spin_for_us(cost); }, reads, writes);
  }
  engine.wait_all();
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(t1 - t0).count();
}

}  // namespace depengine::graphfile
