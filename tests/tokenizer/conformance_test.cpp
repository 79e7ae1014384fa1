// llama.cpp's tokenizer conformance suite (../shared/tokenizer-conformance, and qwen2 from the
// llama-cpp-python sdist, which scripts/setup.sh unpacks into $HOTCOLD_CACHE/vocab): every string
// of each .inp file must tokenize (add_special = false, parse_special = false) to exactly the ids
// on the matching line of the .out file.
#include <cstdio>
#include <sstream>

#include "tokenizer_test_util.h"

namespace hc {
namespace {

struct Case {
  std::string text;
  std::vector<int32_t> ids;
};

std::vector<Case> read_cases(const std::string& name) {
  const std::string base = test::conformance_path(name);
  const std::string inp = test::read_text_file(base + ".inp");
  const std::string out = test::read_text_file(base + ".out");
  const std::string sep = "\n__ggml_vocab_test__\n";

  std::vector<std::string> texts;
  for (size_t pos = 0;;) {
    const size_t next = inp.find(sep, pos);
    if (next == std::string::npos) {
      if (pos < inp.size()) texts.push_back(inp.substr(pos));  // no trailing separator
      break;
    }
    texts.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::vector<std::vector<int32_t>> ids;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream nums(line);
    std::vector<int32_t> row;
    for (int32_t id; nums >> id;) row.push_back(id);
    ids.push_back(std::move(row));
  }
  EXPECT_EQ(texts.size(), ids.size()) << name << ": .inp and .out disagree on the number of cases";
  std::vector<Case> cases;
  for (size_t i = 0; i < std::min(texts.size(), ids.size()); ++i)
    cases.push_back({texts[i], ids[i]});
  return cases;
}

std::string join(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += " " + std::to_string(id);
  return s;
}

class Conformance : public ::testing::TestWithParam<const char*> {};

TEST_P(Conformance, MatchesLlamaCpp) {
  const std::string name = GetParam();
  if (const std::string missing = test::missing_conformance_files(name); !missing.empty()) {
    GTEST_FAIL() << missing;
  }
  const Tokenizer& tok = test::conformance_tokenizer(name);
  const std::vector<Case> cases = read_cases(name);
  ASSERT_GT(cases.size(), 40u);
  size_t passed = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::vector<int32_t> got = tok.encode(cases[i].text, false, false);
    if (got == cases[i].ids) {
      passed++;
    } else {
      ADD_FAILURE() << name << " case " << i << " '" << cases[i].text
                    << "'\n  expected:" << join(cases[i].ids) << "\n  got:     " << join(got);
    }
  }
  std::printf("[ conformance ] %-15s %zu/%zu strings match\n", name.c_str(), passed, cases.size());
}

INSTANTIATE_TEST_SUITE_P(Vocab, Conformance,
                         ::testing::Values("llama-spm", "gpt-2", "starcoder", "deepseek-coder",
                                           "phi-3", "falcon", "qwen2"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string n = info.param;
                           for (char& c : n) {
                             if (c == '-') c = '_';
                           }
                           return n;
                         });

}  // namespace
}  // namespace hc
