#include "app/args.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace hc {

namespace {

std::vector<std::string> split_names(const std::string& names) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= names.size()) {
    size_t comma = names.find(',', start);
    if (comma == std::string::npos) comma = names.size();
    std::string n = names.substr(start, comma - start);
    // Tolerate "-m, --model" as well as "-m,--model".
    while (!n.empty() && n.front() == ' ') n.erase(n.begin());
    while (!n.empty() && n.back() == ' ') n.pop_back();
    if (!n.empty()) out.push_back(n);
    start = comma + 1;
  }
  return out;
}

// "tokens to generate (default: 128)"
// A help text that states its own default ("(default: all)" for a sentinel such as 0) keeps it.
std::string with_default(const std::string& help, const std::string& value) {
  if (help.find("(default") != std::string::npos) return help;
  return help + " (default: " + value + ")";
}

std::string format_float(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// "--temp: expected a number, found 'abc'"
Status bad_value(const std::string& flag, const char* expected, const std::string& value) {
  return Status::Error(flag + ": expected " + expected + ", found '" + value + "'");
}

Result<long long> parse_integer(const std::string& flag, const std::string& value) {
  if (value.empty() || value.find_first_of(" \t\n") != std::string::npos)
    return bad_value(flag, "an integer", value);
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(value.c_str(), &end, 0);
  if (end != value.c_str() + value.size()) return bad_value(flag, "an integer", value);
  if (errno == ERANGE) return bad_value(flag, "an integer in range", value);
  return v;
}

// "hotcold run" whether the parser was built with "run" or "hotcold run"; a tool that is its
// own binary (hc-synth-model, hc-device-bench) keeps its name.
std::string full_command(const std::string& command) {
  if (command.rfind("hotcold", 0) == 0 || command.rfind("hc-", 0) == 0) return command;
  return "hotcold " + command;
}

}  // namespace

ArgParser::ArgParser(std::string command, std::string summary)
    : command_(full_command(command)), summary_(std::move(summary)) {}

void ArgParser::add_option(const std::string& names, std::string help, std::string metavar,
                           Setter set) {
  Opt o;
  o.names = split_names(names);
  o.help = std::move(help);
  o.takes_value = !metavar.empty();
  o.metavar = std::move(metavar);
  o.set = std::move(set);
  // Aliases are fixed by the code, so a clash is a programming bug, not bad input.
  HC_CHECK(!o.names.empty());
  for (const auto& n : o.names) HC_CHECK(find(n) == nullptr);
  opts_.push_back(std::move(o));
}

void ArgParser::add_string(const std::string& names, std::string* out, const std::string& help) {
  add_string(names, out, help, [](const std::string& v) { return v; });
}

void ArgParser::add_string(const std::string& names, std::string* out, const std::string& help,
                           std::function<std::string(const std::string&)> transform) {
  HC_CHECK(out != nullptr && transform);
  auto set = [out, transform = std::move(transform)](const std::string&, const std::string& value) {
    *out = transform(value);
    return Status::Ok();
  };
  add_option(names, out->empty() ? help : with_default(help, *out), "STR", std::move(set));
}

void ArgParser::add_int(const std::string& names, int* out, const std::string& help) {
  HC_CHECK(out != nullptr);
  auto set = [out](const std::string& flag, const std::string& value) -> Status {
    auto v = parse_integer(flag, value);
    if (!v.ok()) return v.status();
    if (*v < std::numeric_limits<int>::min() || *v > std::numeric_limits<int>::max())
      return bad_value(flag, "a 32-bit integer", value);
    *out = static_cast<int>(*v);
    return Status::Ok();
  };
  add_option(names, with_default(help, std::to_string(*out)), "N", std::move(set));
}

void ArgParser::add_u64(const std::string& names, uint64_t* out, const std::string& help) {
  HC_CHECK(out != nullptr);
  auto set = [out](const std::string& flag, const std::string& value) -> Status {
    if (value.empty() || value[0] == '-' || value[0] == '+' ||
        value.find_first_of(" \t\n") != std::string::npos)
      return bad_value(flag, "a non-negative integer", value);
    errno = 0;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(value.c_str(), &end, 0);
    if (end != value.c_str() + value.size()) return bad_value(flag, "a non-negative integer", value);
    if (errno == ERANGE) return bad_value(flag, "a 64-bit non-negative integer", value);
    *out = static_cast<uint64_t>(v);
    return Status::Ok();
  };
  add_option(names, with_default(help, std::to_string(*out)), "N", std::move(set));
}

void ArgParser::add_float(const std::string& names, float* out, const std::string& help) {
  HC_CHECK(out != nullptr);
  auto set = [out](const std::string& flag, const std::string& value) -> Status {
    if (value.empty() || value.find_first_of(" \t\n") != std::string::npos)
      return bad_value(flag, "a number", value);
    errno = 0;
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    if (end != value.c_str() + value.size()) return bad_value(flag, "a number", value);
    // Overflow to inf (or a literal "nan"/"inf") is never a meaningful sampling setting.
    if (!std::isfinite(v) || std::fabs(v) > std::numeric_limits<float>::max())
      return bad_value(flag, "a finite number", value);
    *out = static_cast<float>(v);
    return Status::Ok();
  };
  add_option(names, with_default(help, format_float(*out)), "F", std::move(set));
}

void ArgParser::add_flag(const std::string& names, bool* out, const std::string& help) {
  HC_CHECK(out != nullptr);
  auto set = [out](const std::string&, const std::string&) {
    *out = true;
    return Status::Ok();
  };
  add_option(names, help, /*metavar=*/"", std::move(set));
}

void ArgParser::add_positional(const std::string& name, std::string* out, bool required,
                               const std::string& help) {
  HC_CHECK(out != nullptr);
  // A required positional after an optional one could never be filled unambiguously.
  HC_CHECK(!required || pos_.empty() || pos_.back().required);
  pos_.push_back(Pos{name, out, required, help});
}

const ArgParser::Opt* ArgParser::find(const std::string& flag) const {
  for (const Opt& o : opts_)
    for (const std::string& n : o.names)
      if (n == flag) return &o;
  return nullptr;
}

Status ArgParser::parse(const std::vector<std::string>& args) {
  const std::string see = "; see '" + command_ + " --help'";
  size_t n_pos = 0;
  bool only_positional = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    // A lone "-" (stdin by convention) and negative numbers are positionals, not flags.
    const bool looks_like_flag = !only_positional && arg.size() > 1 && arg[0] == '-' &&
                                 !(arg[1] >= '0' && arg[1] <= '9') && arg[1] != '.';
    if (!only_positional && arg == "--") {
      only_positional = true;
      continue;
    }
    if (!looks_like_flag) {
      if (n_pos >= pos_.size())
        return Status::Error("unexpected argument '" + arg + "' for '" + command_ + "'" + see);
      *pos_[n_pos++].out = arg;
      continue;
    }
    if (arg == "-h" || arg == "--help") {
      help_ = true;
      continue;
    }
    std::string flag = arg;
    std::string value;
    bool has_inline_value = false;
    const Opt* opt = find(flag);
    if (opt == nullptr) {
      const size_t eq = arg.find('=');
      if (eq != std::string::npos) {
        flag = arg.substr(0, eq);
        value = arg.substr(eq + 1);
        has_inline_value = true;
        opt = find(flag);
      }
    }
    if (opt == nullptr)
      return Status::Error("unknown flag '" + flag + "' for '" + command_ + "'" + see);
    if (!opt->takes_value) {
      if (has_inline_value)
        return Status::Error(flag + ": takes no value, found '" + value + "'");
      HC_TRY(opt->set(flag, ""));
      continue;
    }
    if (!has_inline_value) {
      if (i + 1 >= args.size())
        return Status::Error(flag + ": expected a value (" + opt->metavar + ") after it" + see);
      value = args[++i];
    }
    HC_TRY(opt->set(flag, value));
  }
  if (help_) return Status::Ok();
  for (size_t k = n_pos; k < pos_.size(); ++k) {
    if (pos_[k].required)
      return Status::Error("missing required argument <" + pos_[k].name + "> for '" + command_ +
                           "'" + see);
  }
  return Status::Ok();
}

std::string ArgParser::usage() const {
  std::string out = "usage: " + command_ + " [options]";
  for (const Pos& p : pos_) out += p.required ? " <" + p.name + ">" : " [" + p.name + "]";
  out += "\n";
  if (!summary_.empty()) out += "\n" + summary_ + "\n";

  // Left column: "-m, --model STR"; help aligned after the widest one (capped).
  std::vector<std::pair<std::string, std::string>> rows;
  for (const Pos& p : pos_) rows.emplace_back(p.name, p.help + (p.required ? "" : " (optional)"));
  const size_t n_pos_rows = rows.size();
  for (const Opt& o : opts_) {
    std::string left;
    for (size_t k = 0; k < o.names.size(); ++k) left += (k ? ", " : "") + o.names[k];
    if (o.takes_value) left += " " + o.metavar;
    rows.emplace_back(left, o.help);
  }
  rows.emplace_back("-h, --help", "show this help and exit");
  size_t width = 0;
  for (const auto& r : rows) width = std::max(width, r.first.size());
  width = std::min<size_t>(width, 28);

  auto emit = [&](const std::pair<std::string, std::string>& r) {
    std::string line = "  " + r.first;
    if (r.first.size() > width) {
      line += "\n" + std::string(width + 4, ' ');
    } else {
      line += std::string(width - r.first.size() + 2, ' ');
    }
    out += line + r.second + "\n";
  };
  if (n_pos_rows > 0) {
    out += "\narguments:\n";
    for (size_t k = 0; k < n_pos_rows; ++k) emit(rows[k]);
  }
  out += "\noptions:\n";
  for (size_t k = n_pos_rows; k < rows.size(); ++k) emit(rows[k]);
  return out;
}

}  // namespace hc
