// Shared helpers for the tokenizer tests: locating ../shared files and loading vocabularies.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "core/mmap.h"
#include "format/gguf.h"
#include "tokenizer/tokenizer.h"

namespace hc::test {

// ../shared/<rel> as seen from the project root (where ctest runs the tests), falling back to
// the source tree's sibling so the binary also works when started from elsewhere.
inline std::string shared_path(const std::string& rel) {
  const std::string local = "../shared/" + rel;
  if (std::filesystem::exists(local)) return local;
  return std::string(HC_SOURCE_DIR) + "/../shared/" + rel;
}

// $HOTCOLD_CACHE/<rel> (default ~/.cache/hotcold): files scripts/setup.sh makes.
inline std::string cache_path(const std::string& rel) {
  const char* cache = std::getenv("HOTCOLD_CACHE");
  const char* home = std::getenv("HOME");
  return (cache ? std::string(cache) : std::string(home ? home : "/root") + "/.cache/hotcold") +
         "/" + rel;
}

// Conformance vocabularies ../shared lacks: scripts/setup.sh extracts them from the
// llama-cpp-python sdist into $HOTCOLD_CACHE/vocab.
inline bool is_cached_vocab(const std::string& name) { return name == "qwen2"; }

inline std::string conformance_path(const std::string& name) {
  if (is_cached_vocab(name)) return cache_path("vocab/ggml-vocab-" + name + ".gguf");
  return shared_path("tokenizer-conformance/ggml-vocab-" + name + ".gguf");
}

// "" when the .gguf, .inp and .out of `name` exist, else what is missing and which step makes
// it. Tests needing them fail with this message (conformance_tokenizer would abort instead).
inline std::string missing_conformance_files(const std::string& name) {
  const std::string base = conformance_path(name);
  for (const char* ext : {"", ".inp", ".out"}) {
    if (std::filesystem::exists(base + ext)) continue;
    return base + ext + " is missing: " +
           (is_cached_vocab(name)
                ? "run scripts/setup.sh (its step 'tokenizer conformance files' extracts it "
                  "from the llama-cpp-python sdist)"
                : "../shared/tokenizer-conformance must hold llama.cpp's conformance files");
  }
  return "";
}

inline Result<Tokenizer> load_tokenizer(const std::string& path) {
  HC_ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(path));
  HC_ASSIGN_OR_RETURN(GgufFile gguf, parse_gguf(file.bytes()));
  return Tokenizer::from_gguf(gguf);
}

inline std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Loads a conformance vocabulary once per test binary run (they take a moment to parse).
inline const Tokenizer& conformance_tokenizer(const std::string& name) {
  static std::map<std::string, Tokenizer> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    Result<Tokenizer> tok = load_tokenizer(conformance_path(name));
    if (!tok.ok()) {
      ADD_FAILURE() << "loading " << name << ": " << tok.message();
      std::abort();
    }
    it = cache.emplace(name, std::move(tok).value()).first;
  }
  return it->second;
}

// Texts that must survive encode -> decode unchanged where the vocabulary does not clean up
// spaces: Unicode of many scripts, emoji sequences, code, odd whitespace and control bytes.
inline const std::vector<std::string>& round_trip_texts() {
  static const std::vector<std::string> texts = {
      "Hello world",
      " leading and trailing  ",
      "\n\n\tindented\r\n  code();\n",
      "def f(x):\n    return {'a': [1, 2, 3]} if x else None  # comment\n",
      "int main() { std::printf(\"%d\\n\", 42); return 0; }",
      "Caf\xc3\xa9 \xc3\xa0 la cr\xc3\xa8me br\xc3\xbbl\xc3\xa9"
      "e, na\xc3\xafve co\xc3\xb6perate",
      "\xd0\xbd\xd0\xb5\xd1\x89\xd0\xbe \xd0\xbd\xd0\xb0 "
      "\xd0\x91\xd1\x8a\xd0\xbb\xd0\xb3\xd0\xb0\xd1\x80\xd1\x81\xd0\xba\xd0\xb8",
      "\xe6\x88\x91\xe6\x83\xb3\xe5\x9c\xa8"
      "apple\xe5\xb7\xa5\xe4\xbd\x9c"
      "1314151\xe5\xa4\xa9\xef\xbd\x9e",
      "\xe1\x9e\x80\xe1\x9e\xb6\xe1\x9e\x93\xe1\x9f\x8b\xe1\x9e\x8f\xe1\x9f\x82",
      "\xf0\x9f\x9a\x80 (normal) \xf0\x9f\x98\xb6\xe2\x80\x8d\xf0\x9f\x8c\xab\xef\xb8\x8f "
      "\xe2\x9c\x85 \xf0\x9f\xa6\x99",
      "\xd8\xa7\xd9\x84\xd8\xb9\xd8\xb1\xd8\xa8\xd9\x8a\xd8\xa9 \xd9\xa1\xd9\xa2\xd9\xa3 "
      "\xe0\xa4\xb9\xe0\xa4\xbf\xe0\xa4\x82\xe0\xa4\xa6\xe0\xa5\x80",
      "\xc2\xa0non-breaking\xe3\x80\x80ideographic\xe2\x80\x83"
      "em space\xe2\x80\xa8line sep",
      "3.14159 1,000,000 0x7fff 1e-9 \xc2\xbd \xe2\x85\xa7",
      "'s 't 're 've 'm 'll 'd 'S 'T 'RE I'm",
      "!!!!!!??????......------=======``````\"\"\"\"''''",
      std::string("nul\0byte and \x01\x7f controls", 24),
      "<0x41> is text, not a byte token",
  };
  return texts;
}

}  // namespace hc::test
