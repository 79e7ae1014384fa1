// llama.cpp-style flag parser. Each subcommand declares its flags; an unknown flag, a missing
// value or a malformed number is an error naming the flag and the expected form.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"

namespace hc {

class ArgParser {
 public:
  // command: a subcommand ("run": shown as "hotcold run"), or a tool's own name ("hc-...").
  ArgParser(std::string command, std::string summary);
  // names: comma-separated aliases, e.g. "-m,--model".
  void add_string(const std::string& names, std::string* out, const std::string& help);
  // The value as `transform` returns it (e.g. a model's name resolved to its file).
  void add_string(const std::string& names, std::string* out, const std::string& help,
                  std::function<std::string(const std::string&)> transform);
  void add_int(const std::string& names, int* out, const std::string& help);
  void add_u64(const std::string& names, uint64_t* out, const std::string& help);
  void add_float(const std::string& names, float* out, const std::string& help);
  void add_flag(const std::string& names, bool* out, const std::string& help);
  // Positional arguments are filled in order.
  void add_positional(const std::string& name, std::string* out, bool required,
                      const std::string& help);
  // -h/--help is always accepted and sets help_requested().
  Status parse(const std::vector<std::string>& args);
  bool help_requested() const { return help_; }
  std::string usage() const;

 private:
  using Setter = std::function<Status(const std::string& flag, const std::string& value)>;
  struct Opt {
    std::vector<std::string> names;
    std::string help;
    bool takes_value = true;
    std::string metavar;
    Setter set;
  };
  struct Pos {
    std::string name;
    std::string* out;
    bool required;
    std::string help;
  };
  // The registration every add_* shares; an empty metavar marks a flag that takes no value.
  void add_option(const std::string& names, std::string help, std::string metavar, Setter set);
  const Opt* find(const std::string& flag) const;
  std::string command_, summary_;
  std::vector<Opt> opts_;
  std::vector<Pos> pos_;
  bool help_ = false;
};

}  // namespace hc
