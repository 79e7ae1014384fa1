// Replays tests/tokenizer/llamacpp_reference.tsv: ids llama.cpp produced (see
// gen_llamacpp_reference.py) for pre-tokenizers the conformance suite does not exercise
// (llama-bpe, default, dbrx, mpt, smollm, command-r on GPT-2's vocabulary), for BOS/EOS and
// special-token parsing on every conformance vocabulary, and for SmolLM2's and Qwen2's own
// vocabularies (qwen2: the file scripts/setup.sh unpacks; its rows fail when it is missing).
#include <cstdlib>
#include <map>
#include <sstream>

#include "tokenizer_test_util.h"

namespace hc {
namespace {

struct Row {
  std::string vocab, pre;
  bool add_special, parse_special;
  std::string text;
  std::vector<int32_t> ids;
};

std::string unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  }
  return out;
}

std::vector<Row> read_rows() {
  const std::string path = std::string(HC_SOURCE_DIR) + "/tests/tokenizer/llamacpp_reference.tsv";
  std::istringstream in(test::read_text_file(path));
  std::vector<Row> rows;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> f;
    std::istringstream fields(line);
    for (std::string x; std::getline(fields, x, '\t');) f.push_back(x);
    if (f.size() == 5) f.push_back("");  // no ids
    EXPECT_EQ(f.size(), 6u) << line;
    if (f.size() != 6) continue;
    Row r{f[0], f[1], f[2] == "1", f[3] == "1", unhex(f[4]), {}};
    std::istringstream nums(f[5]);
    for (int32_t id; nums >> id;) r.ids.push_back(id);
    rows.push_back(std::move(r));
  }
  return rows;
}

std::string smollm2_path() {
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "/root") +
         "/.cache/hotcold/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

// The vocabulary of `name` with tokenizer.ggml.pre replaced by `pre` ("-": unchanged).
Result<Tokenizer> load_variant(const std::string& name, const std::string& pre) {
  const std::string path = name == "smollm2" ? smollm2_path() : test::conformance_path(name);
  HC_ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(path));
  HC_ASSIGN_OR_RETURN(GgufFile gguf, parse_gguf(file.bytes()));
  if (pre != "-") {
    for (auto& [key, value] : gguf.kv) {
      if (key == "tokenizer.ggml.pre") value = GgufValue::str(pre);
    }
  }
  return Tokenizer::from_gguf(gguf);
}

TEST(LlamaCppReference, AllRowsMatch) {
  const std::vector<Row> rows = read_rows();
  ASSERT_GT(rows.size(), 300u);
  std::map<std::string, std::pair<size_t, size_t>> tally;  // variant -> (passed, total)
  std::map<std::string, Tokenizer> tokenizers;
  std::map<std::string, std::string> missing;  // cached vocabulary -> why it is absent
  for (const Row& row : rows) {
    const std::string variant = row.vocab + (row.pre == "-" ? "" : " pre=" + row.pre);
    if (row.vocab == "smollm2" && !std::filesystem::exists(smollm2_path())) continue;
    if (test::is_cached_vocab(row.vocab)) {
      auto [it, first] = missing.try_emplace(row.vocab, test::missing_conformance_files(row.vocab));
      if (!it->second.empty()) {
        if (first) ADD_FAILURE() << it->second;
        continue;
      }
    }
    auto it = tokenizers.find(variant);
    if (it == tokenizers.end()) {
      Result<Tokenizer> tok = load_variant(row.vocab, row.pre);
      ASSERT_TRUE(tok.ok()) << variant << ": " << tok.message();
      it = tokenizers.emplace(variant, std::move(tok).value()).first;
    }
    const std::vector<int32_t> got =
        it->second.encode(row.text, row.add_special, row.parse_special);
    auto& [passed, total] = tally[variant];
    total++;
    if (got == row.ids) {
      passed++;
    } else {
      ADD_FAILURE() << variant << " add_special=" << row.add_special
                    << " parse_special=" << row.parse_special << " text '" << row.text << "'";
    }
  }
  for (const auto& [variant, counts] : tally) {
    std::printf("[ llama.cpp   ] %-24s %zu/%zu match\n", variant.c_str(), counts.first,
                counts.second);
  }
}

}  // namespace
}  // namespace hc
