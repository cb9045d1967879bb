#include "graphfile.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

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

constexpr const char* kOpFields[] = {"name", "reads", "writes", "cost_us",
                                     "device", "lane", "priority"};

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

OpSpec read_op(const json& op, std::size_t i, Builder& b) {
  if (!op.is_object()) {
    throw FileError("op " + std::to_string(i) + ": must be an object, got " + describe(op),
                    static_cast<long>(i), "");
  }
  for (const auto& [key, value] : op.items()) {
    if (std::find(std::begin(kOpFields), std::end(kOpFields), key) == std::end(kOpFields)) {
      op_error(i, key,
               "unknown field (expected name, reads, writes, cost_us, device, lane, priority)");
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
  for (std::size_t i = 0; i < g.node_count(); ++i) {
    const GraphNode& n = g.node(i);
    if (n.name.empty()) op_error(i, "name", "must be a non-empty string");
    b.add_name(i, n.name);
    OpSpec s;
    s.name = n.name;
    s.cost_us = n.cost_us;
    if (s.cost_us > kMaxCostUs) op_error(i, "cost_us", "must be at most 1e9 (1000 s)");
    s.device = n.device;
    s.lane = n.lane;
    s.priority = n.priority;
    for (const VarAccess& a : n.accesses) {
      const std::size_t v = b.var(g.var_name(a.var));
      if (a.mode != AccessMode::write) s.reads.push_back(v);
      if (a.mode != AccessMode::read) s.writes.push_back(v);
    }
    for (auto* list : {&s.reads, &s.writes}) {
      std::sort(list->begin(), list->end());
      list->erase(std::unique(list->begin(), list->end()), list->end());
    }
    b.program.ops.push_back(std::move(s));
  }
  return std::move(b.program);
}

}  // namespace

Program parse_program(std::string_view text) {
  json doc;
  try {
    doc = json::parse(text);
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

Program load_program(const std::string& path) {
  std::string text;
  if (path == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw FileError("cannot read '" + path + "'", -1, "");
    std::ostringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  return parse_program(text);
}

std::string to_json(const Program& program) {
  nlohmann::ordered_json ops = nlohmann::ordered_json::array();
  for (const OpSpec& s : program.ops) {
    nlohmann::ordered_json j;
    j["name"] = s.name;
    j["reads"] = nlohmann::ordered_json::array();
    for (std::size_t v : s.reads) j["reads"].push_back(program.vars[v]);
    j["writes"] = nlohmann::ordered_json::array();
    for (std::size_t v : s.writes) j["writes"].push_back(program.vars[v]);
    j["cost_us"] = s.cost_us;
    if (!s.device.is_cpu()) j["device"] = s.device.str();
    if (s.lane != Lane::compute) j["lane"] = lane_name(s.lane);
    if (s.priority != 0) j["priority"] = s.priority;
    ops.push_back(std::move(j));
  }
  // One op per line: diffable, and still small.
  std::string out = "{\"ops\": [\n";
  for (std::size_t i = 0; i < ops.size(); ++i) {
    out += "  " + ops[i].dump() + (i + 1 < ops.size() ? ",\n" : "\n");
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

double run(Engine& engine, const Program& program, GraphRecorder* recorder) {
  std::vector<Var> vars;
  vars.reserve(program.vars.size());
  for (std::size_t v = 0; v < program.vars.size(); ++v) {
    vars.push_back(engine.new_var());
    if (recorder) recorder->set_var_name(vars.back().id(), program.vars[v]);
  }
  std::vector<Var> reads, writes;
  const auto t0 = std::chrono::steady_clock::now();
  for (const OpSpec& s : program.ops) {
    reads.clear();
    writes.clear();
    for (std::size_t v : s.reads) reads.push_back(vars[v]);
    for (std::size_t v : s.writes) writes.push_back(vars[v]);
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

}  // namespace depengine::graphfile
