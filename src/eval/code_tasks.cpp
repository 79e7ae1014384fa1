#include "eval/code_tasks.h"

#include <zlib.h>

#include <cerrno>
#include <nlohmann/json.hpp>
#include <string_view>
#include <system_error>

namespace hc::eval {
namespace {

using nlohmann::json;

// The whole file, through zlib: gzip-compressed or plain (gzread passes plain files through).
Result<std::string> read_maybe_gzip(const std::string& path) {
  errno = 0;
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int e = errno ? errno : ENOMEM;
    return Status::Error("cannot open " + path + ": " +
                         std::error_code(e, std::generic_category()).message());
  }
  std::string data;
  char buf[1 << 16];
  for (;;) {
    const int n = gzread(f, buf, sizeof buf);
    if (n > 0) {
      data.append(buf, size_t(n));
      continue;
    }
    if (n < 0) {
      int code = 0;
      const std::string what = gzerror(f, &code);
      gzclose(f);
      return Status::Error(path + ": gzip data is corrupt or truncated after " +
                           std::to_string(data.size()) + " bytes: " + what);
    }
    break;
  }
  const int rc = gzclose(f);
  if (rc != Z_OK) {
    return Status::Error(path + ": gzip data is corrupt or truncated (zlib error " +
                         std::to_string(rc) + ")");
  }
  return data;
}

// MBPP's fields use \r\n, and a few end with a lone \r: both become \n (as python reads them).
std::string normalise_newlines(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\r') {
      out += s[i];
    } else if (i + 1 == s.size() || s[i + 1] != '\n') {
      out += '\n';
    }
  }
  return out;
}

// One JSON object per non-empty line; `fn(object, where)` with where = "path:line".
template <class Fn>
Status for_each_json_line(const std::string& path, const std::string& data, Fn fn) {
  size_t pos = 0;
  for (int line_no = 1; pos < data.size(); ++line_no) {
    size_t end = data.find('\n', pos);
    if (end == std::string::npos) end = data.size();
    const std::string_view line(data.data() + pos, end - pos);
    pos = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string where = path + ":" + std::to_string(line_no);
    json obj;
    try {
      obj = json::parse(line);
    } catch (const json::parse_error& e) {
      return Status::Error(where + ": expected a JSON object, found invalid JSON at byte " +
                           std::to_string(e.byte) + " of the line");
    }
    if (!obj.is_object()) {
      return Status::Error(where + ": expected a JSON object, found " +
                           std::string(obj.type_name()));
    }
    HC_TRY(fn(obj, where));
  }
  return Status::Ok();
}

std::string found_text(const json& obj, const char* key) {
  const auto it = obj.find(key);
  return it == obj.end() ? std::string("no such field") : std::string("a ") + it->type_name();
}

Result<std::string> get_string(const json& obj, const char* key, const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end() || !it->is_string()) {
    return Status::Error(where + ": field \"" + key + "\": expected a string, found " +
                         found_text(obj, key));
  }
  return it->get<std::string>();
}

Result<int64_t> get_int(const json& obj, const char* key, const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end() || !it->is_number_integer()) {
    return Status::Error(where + ": field \"" + key + "\": expected an integer, found " +
                         found_text(obj, key));
  }
  return it->get<int64_t>();
}

Result<std::vector<std::string>> get_strings(const json& obj, const char* key,
                                             const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end() || !it->is_array() || it->empty()) {
    return Status::Error(where + ": field \"" + key +
                         "\": expected a non-empty array of strings, found " +
                         (it != obj.end() && it->is_array() ? std::string("an empty array")
                                                            : found_text(obj, key)));
  }
  std::vector<std::string> out;
  for (const auto& v : *it) {
    if (!v.is_string()) {
      return Status::Error(where + ": field \"" + key + "\": expected strings, found a " +
                           std::string(v.type_name()) + " element");
    }
    out.push_back(normalise_newlines(v.get<std::string>()));
  }
  return out;
}

// The function the asserts call: the first top-level `def name(` that test_list[0] calls,
// else the first top-level def.
std::string mbpp_entry_point(const std::string& code, const std::string& first_test) {
  std::string first;
  size_t pos = 0;
  while (pos < code.size()) {
    size_t end = code.find('\n', pos);
    if (end == std::string::npos) end = code.size();
    const std::string_view line(code.data() + pos, end - pos);
    pos = end + 1;
    if (line.substr(0, 4) != "def ") continue;
    const size_t paren = line.find('(');
    if (paren == std::string_view::npos) continue;
    std::string name(line.substr(4, paren - 4));
    while (!name.empty() && name.back() == ' ') name.pop_back();
    if (first.empty()) first = name;
    if (first_test.find(name + "(") != std::string::npos) return name;
  }
  return first;
}

bool is_mbpp(const CodeProblem& p) { return p.task_id.rfind("MBPP/", 0) == 0; }

}  // namespace

Result<std::vector<CodeProblem>> load_humaneval(const std::string& path) {
  HC_ASSIGN_OR_RETURN(const std::string data, read_maybe_gzip(path));
  std::vector<CodeProblem> problems;
  HC_TRY(for_each_json_line(path, data, [&](const json& obj, const std::string& where) -> Status {
    CodeProblem p;
    HC_ASSIGN_OR_RETURN(p.task_id, get_string(obj, "task_id", where));
    HC_ASSIGN_OR_RETURN(p.prompt, get_string(obj, "prompt", where));
    HC_ASSIGN_OR_RETURN(p.entry_point, get_string(obj, "entry_point", where));
    HC_ASSIGN_OR_RETURN(p.reference, get_string(obj, "canonical_solution", where));
    HC_ASSIGN_OR_RETURN(p.test, get_string(obj, "test", where));
    p.stop = {"\nclass", "\ndef", "\n#", "\n@", "\nprint", "\nif", "\n```"};
    problems.push_back(std::move(p));
    return Status::Ok();
  }));
  if (problems.empty()) return Status::Error(path + ": expected HumanEval problems, found none");
  return problems;
}

Result<std::vector<CodeProblem>> load_mbpp(const std::string& path) {
  HC_ASSIGN_OR_RETURN(const std::string data, read_maybe_gzip(path));
  std::vector<CodeProblem> problems;
  HC_TRY(for_each_json_line(path, data, [&](const json& obj, const std::string& where) -> Status {
    HC_ASSIGN_OR_RETURN(const int64_t id, get_int(obj, "task_id", where));
    if (id < 11 || id > 510) return Status::Ok();  // not the test split
    HC_ASSIGN_OR_RETURN(const std::string text, get_string(obj, "text", where));
    HC_ASSIGN_OR_RETURN(const std::string code, get_string(obj, "code", where));
    HC_ASSIGN_OR_RETURN(const std::string setup, get_string(obj, "test_setup_code", where));
    HC_ASSIGN_OR_RETURN(const std::vector<std::string> tests, get_strings(obj, "test_list", where));
    CodeProblem p;
    p.task_id = "MBPP/" + std::to_string(id);
    p.prompt = "\"\"\"\n" + normalise_newlines(text) + "\n" + tests[0] + "\n\"\"\"\n";
    p.reference = normalise_newlines(code);
    p.entry_point = mbpp_entry_point(p.reference, tests[0]);
    p.test = normalise_newlines(setup) + "\n";
    for (size_t i = 0; i < tests.size(); ++i) p.test += (i ? "\n" : "") + tests[i];
    p.stop = {"\nclass", "\nassert", "\n\"\"\"", "\nprint", "\nif", "\n```"};
    problems.push_back(std::move(p));
    return Status::Ok();
  }));
  if (problems.empty()) {
    return Status::Error(path + ": expected MBPP problems with task_id 11..510, found none");
  }
  return problems;
}

size_t stop_position(const CodeProblem& p, std::string_view completion) {
  size_t cut = completion.size();
  for (const std::string& s : p.stop) {
    if (s.empty()) continue;
    const size_t at = completion.find(s);
    if (at < cut) cut = at;
  }
  return cut;
}

std::string truncate_completion(const CodeProblem& p, const std::string& completion) {
  return completion.substr(0, stop_position(p, completion));
}

std::string build_program(const CodeProblem& p, const std::string& completion) {
  if (is_mbpp(p)) return p.prompt + completion + "\n" + p.test + "\n";
  return p.prompt + completion + "\n" + p.test + "\ncheck(" + p.entry_point + ")\n";
}

double pass_at_k(int n, int c, int k) {
  HC_CHECK(n >= 1 && c >= 0 && c <= n && k >= 1 && k <= n);
  if (n - c < k) return 1.0;
  // 1 - prod_{i = n-c+1}^{n} (1 - k / i): the ratio of binomials without overflowing.
  double fail = 1.0;
  for (int i = n - c + 1; i <= n; ++i) fail *= 1.0 - double(k) / double(i);
  return 1.0 - fail;
}

}  // namespace hc::eval
