// Where `hotcold eval` finds its data sets (WikiText-2, TinyStories, HumanEval, MBPP), so that it
// works from any directory: a source checkout beside ../shared, a build tree, or an installed
// hotcold (`cmake --install`, which copies them to PREFIX/share/hotcold/data).
#pragma once
#include <string>
#include <vector>

#include "core/status.h"

namespace hc {

// The folders searched when --data is not given, in order: $HOTCOLD_DATA, ../shared/data from the
// working directory, <binary>/../share/hotcold/data (installed), <binary>/../../shared/data (the
// build tree build/ of a checkout beside shared/).
std::vector<std::string> eval_data_candidates();

// The data file of a task, inside the data folder: "wikitext-2/wiki.test.raw" for wikitext2.
std::string eval_task_file(const std::string& task);

// The data folder: `flag` when given (an error if it is not a folder), else the first candidate
// holding every one of `files` (paths inside it: the tasks' eval_task_file). The error names
// every folder looked in and how to fix it.
Result<std::string> find_eval_data(const std::string& flag, const std::vector<std::string>& files);

}  // namespace hc
