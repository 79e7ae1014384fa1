// Code-generation benchmarks (HumanEval, MBPP) in the bigcode-evaluation-harness conventions:
// loading the problems, the prompt given to the model, its stop sequences, the program the
// sandbox runs to check a completion, and the unbiased pass@k estimator.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace hc::eval {

struct CodeProblem {
  std::string task_id;      // "HumanEval/0", "MBPP/11"
  std::string prompt;       // the text given to the model to complete
  std::string entry_point;  // function name (HumanEval; MBPP: parsed from the reference code)
  std::string reference;    // canonical solution (HumanEval: the body completing prompt; MBPP: full code)
  std::string test;         // test code (HumanEval: `test` field; MBPP: setup + asserts)
  std::vector<std::string> stop;  // stop sequences for generation
};

// HumanEval.jsonl or HumanEval.jsonl.gz (164 problems); the prompt is the `prompt` field as is.
Result<std::vector<CodeProblem>> load_humaneval(const std::string& path);
// mbpp.jsonl (974 problems): the test split, task_ids 11..510. Prompt:
// """\n<text>\n<test_list[0]>\n"""\n; \r\n in the fields becomes \n.
Result<std::vector<CodeProblem>> load_mbpp(const std::string& path);

// Where the earliest of the problem's stop sequences starts in a raw completion (its size when
// none occurs): generation tests this after each token without copying the text.
size_t stop_position(const CodeProblem& p, std::string_view completion);
// A raw completion cut at the earliest of the problem's stop sequences (which is dropped with
// everything after it).
std::string truncate_completion(const CodeProblem& p, const std::string& completion);

// The program the sandbox runs. HumanEval: prompt + completion + "\n" + test +
// "\ncheck(<entry_point>)\n". MBPP: prompt (a docstring, harmless) + completion + "\n" + test +
// "\n".
std::string build_program(const CodeProblem& p, const std::string& completion);

// Unbiased pass@k estimator (Chen et al. 2021, "Evaluating Large Language Models Trained on
// Code"): 1 - C(n-c, k) / C(n, k) for n samples of which c are correct; needs 0 <= c <= n and
// 1 <= k <= n (HC_CHECK).
double pass_at_k(int n, int c, int k);

}  // namespace hc::eval
