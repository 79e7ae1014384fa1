// HumanEval / MBPP loading, prompts, truncation and program building, checked end to end: the
// reference solutions pass in the sandbox and wrong ones fail.
#include "eval/code_tasks.h"

#include <unistd.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "eval/sandbox.h"

namespace hc::eval {
namespace {

const char* kHumanEval = "../shared/data/humaneval/HumanEval.jsonl.gz";
const char* kMbpp = "../shared/data/mbpp/mbpp.jsonl";

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// A scratch directory for broken input files, removed at the end of the test.
class ScratchDir {
 public:
  ScratchDir() {
    char tmpl[] = "/tmp/hc-eval-test-XXXXXX";
    if (mkdtemp(tmpl) != nullptr) path_ = tmpl;
  }
  ~ScratchDir() {
    for (const auto& f : files_) unlink(f.c_str());
    if (!path_.empty()) rmdir(path_.c_str());
  }
  std::string write(const std::string& name, const std::string& data) {
    const std::string p = path_ + "/" + name;
    std::ofstream(p, std::ios::binary) << data;
    files_.push_back(p);
    return p;
  }

 private:
  std::string path_;
  std::vector<std::string> files_;
};

TEST(CodeTasks, LoadsHumanEval) {
  auto r = load_humaneval(kHumanEval);
  ASSERT_TRUE(r.ok()) << r.message();
  const auto& ps = *r;
  ASSERT_EQ(ps.size(), 164u);
  EXPECT_EQ(ps[0].task_id, "HumanEval/0");
  EXPECT_EQ(ps[0].entry_point, "has_close_elements");
  EXPECT_EQ(ps[0].prompt.rfind("from typing import List\n\n\ndef has_close_elements(", 0), 0u);
  EXPECT_EQ(ps[0].prompt.back(), '\n');  // kept exactly as is
  EXPECT_EQ(ps[0].reference.rfind("    for idx, elem in enumerate(numbers):", 0), 0u);
  EXPECT_NE(ps[0].test.find("def check(candidate):"), std::string::npos);
  EXPECT_EQ(ps[163].task_id, "HumanEval/163");
  const std::vector<std::string> stops = {"\nclass", "\ndef", "\n#", "\n@", "\nprint", "\nif",
                                          "\n```"};
  EXPECT_EQ(ps[0].stop, stops);
}

TEST(CodeTasks, LoadsTheMbppTestSplit) {
  auto r = load_mbpp(kMbpp);
  ASSERT_TRUE(r.ok()) << r.message();
  const auto& ps = *r;
  ASSERT_EQ(ps.size(), 500u);
  for (size_t i = 0; i < ps.size(); ++i) {
    ASSERT_EQ(ps[i].task_id, "MBPP/" + std::to_string(11 + i));
    EXPECT_EQ(ps[i].prompt.find('\r'), std::string::npos) << ps[i].task_id;
    EXPECT_EQ(ps[i].reference.find('\r'), std::string::npos) << ps[i].task_id;
    EXPECT_EQ(ps[i].test.find('\r'), std::string::npos) << ps[i].task_id;
    EXPECT_FALSE(ps[i].entry_point.empty()) << ps[i].task_id;
  }
  EXPECT_EQ(ps[0].prompt,
            "\"\"\"\nWrite a python function to remove first and last occurrence of a given "
            "character from the string.\nassert remove_Occ(\"hello\",\"l\") == \"heo\"\n\"\"\"\n");
  EXPECT_EQ(ps[0].entry_point, "remove_Occ");
  EXPECT_EQ(ps[0].test,
            "\nassert remove_Occ(\"hello\",\"l\") == \"heo\"\n"
            "assert remove_Occ(\"abcda\",\"a\") == \"bcd\"\n"
            "assert remove_Occ(\"PHP\",\"P\") == \"H\"");
  const std::vector<std::string> stops = {"\nclass", "\nassert", "\n\"\"\"", "\nprint", "\nif",
                                          "\n```"};
  EXPECT_EQ(ps[0].stop, stops);
}

TEST(CodeTasks, TruncatesAtTheEarliestStop) {
  CodeProblem he;
  he.stop = {"\nclass", "\ndef", "\n#", "\n@", "\nprint", "\nif", "\n```"};
  EXPECT_EQ(truncate_completion(he, "    return 1\n\ndef other():\n    pass\n"), "    return 1\n");
  EXPECT_EQ(truncate_completion(he, "    x = 1\nprint(x)\n#c\ndef"), "    x = 1");
  EXPECT_EQ(truncate_completion(he, "    return [i for i in x if i]\n"),
            "    return [i for i in x if i]\n");  // "if" inside a line is no stop
  EXPECT_EQ(truncate_completion(he, "\nif __name__ == '__main__':"), "");
  EXPECT_EQ(truncate_completion(he, ""), "");
  CodeProblem mbpp;
  mbpp.stop = {"\nclass", "\nassert", "\n\"\"\"", "\nprint", "\nif", "\n```"};
  EXPECT_EQ(truncate_completion(mbpp, "def f():\n    return 1\nassert f() == 1\n"),
            "def f():\n    return 1");
  EXPECT_EQ(truncate_completion(mbpp, "def f():\n    return 1\n```\n"), "def f():\n    return 1");
}

TEST(CodeTasks, BuildsTheProgramsOfBothBenchmarks) {
  CodeProblem he;
  he.task_id = "HumanEval/999";
  he.prompt = "def f(x):\n";
  he.entry_point = "f";
  he.test = "def check(c):\n    assert c(1) == 2\n";
  EXPECT_EQ(build_program(he, "    return x + 1\n"),
            "def f(x):\n    return x + 1\n\ndef check(c):\n    assert c(1) == 2\n\ncheck(f)\n");
  CodeProblem mbpp;
  mbpp.task_id = "MBPP/999";
  mbpp.prompt = "\"\"\"\nAdd one.\nassert f(1) == 2\n\"\"\"\n";
  mbpp.entry_point = "f";
  mbpp.test = "\nassert f(1) == 2";
  EXPECT_EQ(build_program(mbpp, "def f(x):\n    return x + 1"),
            "\"\"\"\nAdd one.\nassert f(1) == 2\n\"\"\"\ndef f(x):\n    return x + 1\n\nassert "
            "f(1) == 2\n");
}

void expect_references_pass_and_wrong_fail(const std::vector<CodeProblem>& ps, bool mbpp) {
  SandboxLimits limits;
  limits.wall_s = 10;
  for (size_t i = 0; i < 8; ++i) {
    const CodeProblem& p = ps[i];
    auto good = run_python(build_program(p, p.reference), limits);
    ASSERT_TRUE(good.ok()) << good.message();
    EXPECT_EQ(good->outcome, Outcome::kPassed) << p.task_id << ": " << good->detail << "\n"
                                               << good->err;
    const std::string wrong =
        mbpp ? "def " + p.entry_point + "(*args, **kwargs):\n    return None\n"
             : "    return None\n";
    auto bad = run_python(build_program(p, wrong), limits);
    ASSERT_TRUE(bad.ok()) << bad.message();
    EXPECT_EQ(bad->outcome, Outcome::kFailed) << p.task_id << ": " << bad->detail;
    EXPECT_NE(bad->err.find("Traceback"), std::string::npos) << p.task_id << ": " << bad->err;
  }
}

TEST(CodeTasks, HumanEvalReferencesPassAndWrongCompletionsFail) {
  auto r = load_humaneval(kHumanEval);
  ASSERT_TRUE(r.ok()) << r.message();
  expect_references_pass_and_wrong_fail(*r, false);
}

TEST(CodeTasks, MbppReferencesPassAndWrongCompletionsFail) {
  auto r = load_mbpp(kMbpp);
  ASSERT_TRUE(r.ok()) << r.message();
  expect_references_pass_and_wrong_fail(*r, true);
}

TEST(CodeTasks, PassAtKMatchesHandValues) {
  EXPECT_NEAR(pass_at_k(10, 3, 1), 0.3, 1e-12);
  EXPECT_EQ(pass_at_k(10, 3, 10), 1.0);
  EXPECT_EQ(pass_at_k(10, 0, 1), 0.0);
  EXPECT_EQ(pass_at_k(10, 0, 5), 0.0);
  EXPECT_EQ(pass_at_k(1, 1, 1), 1.0);
  EXPECT_NEAR(pass_at_k(5, 2, 2), 0.7, 1e-12);  // 1 - C(3,2)/C(5,2) = 1 - 3/10
  EXPECT_NEAR(pass_at_k(200, 13, 10), 1.0 - std::exp(std::lgamma(188.0) - std::lgamma(178.0) -
                                                     std::lgamma(201.0) + std::lgamma(191.0)),
              1e-9);  // 1 - C(187,10)/C(200,10)
  EXPECT_EQ(pass_at_k(200, 195, 10), 1.0);  // n - c < k
}

TEST(CodeTasks, ErrorsNameTheFileLineAndField) {
  auto missing = load_humaneval("../shared/data/humaneval/no-such-file.jsonl.gz");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("no-such-file.jsonl.gz"), std::string::npos)
      << missing.message();
  EXPECT_NE(missing.message().find("No such file"), std::string::npos) << missing.message();

  ScratchDir dir;
  const std::string gz = read_file(kHumanEval);
  ASSERT_GT(gz.size(), 1000u);
  const std::string cut = dir.write("cut.jsonl.gz", gz.substr(0, gz.size() / 2));
  auto truncated = load_humaneval(cut);
  ASSERT_FALSE(truncated.ok());
  EXPECT_NE(truncated.message().find(cut), std::string::npos) << truncated.message();
  EXPECT_NE(truncated.message().find("truncated"), std::string::npos) << truncated.message();

  const std::string no_prompt = dir.write(
      "no_prompt.jsonl",
      "{\"task_id\": \"HumanEval/0\", \"prompt\": \"def f():\\n\", \"entry_point\": \"f\", "
      "\"canonical_solution\": \"    pass\\n\", \"test\": \"\"}\n"
      "{\"task_id\": \"HumanEval/1\", \"entry_point\": \"f\", \"canonical_solution\": \"\", "
      "\"test\": \"\"}\n");
  auto bad = load_humaneval(no_prompt);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.message(),
            no_prompt + ":2: field \"prompt\": expected a string, found no such field");

  const std::string wrong_type = dir.write(
      "wrong_type.jsonl", "{\"task_id\": 11, \"text\": \"t\", \"code\": \"c\", "
                          "\"test_setup_code\": \"\", \"test_list\": \"assert 1\"}\n");
  auto mbpp = load_mbpp(wrong_type);
  ASSERT_FALSE(mbpp.ok());
  EXPECT_EQ(mbpp.message(), wrong_type +
                                ":1: field \"test_list\": expected a non-empty array of strings, "
                                "found a string");

  const std::string not_json = dir.write("not_json.jsonl", "\n{\"task_id\": \n");
  auto garbage = load_mbpp(not_json);
  ASSERT_FALSE(garbage.ok());
  EXPECT_NE(garbage.message().find(not_json + ":2: expected a JSON object"), std::string::npos)
      << garbage.message();
}

}  // namespace
}  // namespace hc::eval
