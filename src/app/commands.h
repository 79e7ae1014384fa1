// Subcommands of the hotcold binary. Each takes the arguments after the subcommand name and
// returns the process exit code (0 ok, 1 runtime error, 2 usage error). Generated text goes to
// stdout; logs and errors go to stderr.
#pragma once
#include <string>
#include <vector>

namespace hc {

using Args = std::vector<std::string>;

int cmd_run(const Args& args);         // cmd_run.cpp
int cmd_chat(const Args& args);        // cmd_chat.cpp
int cmd_perplexity(const Args& args);  // cmd_perplexity.cpp
int cmd_bench(const Args& args);       // cmd_bench.cpp
int cmd_tokenize(const Args& args);    // cmd_tokenize.cpp
int cmd_inspect(const Args& args);     // cmd_inspect.cpp
int cmd_quantize(const Args& args);    // cmd_quantize.cpp
int cmd_convert(const Args& args);     // cmd_convert.cpp
int cmd_profile(const Args& args);     // cmd_profile.cpp
int cmd_train_predictor(const Args& args);  // cmd_train_predictor.cpp
int cmd_serve(const Args& args);       // cmd_serve.cpp
int cmd_plan(const Args& args);        // cmd_plan.cpp
int cmd_simulate(const Args& args);    // cmd_simulate.cpp
int cmd_eval(const Args& args);        // cmd_eval.cpp
int cmd_models(const Args& args);      // cmd_models.cpp

}  // namespace hc
