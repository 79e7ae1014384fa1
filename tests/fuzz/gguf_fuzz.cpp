// libFuzzer entry for the GGUF reader (docs/TESTING.md, "Fuzzing"). For any input parse_gguf
// returns ok or an error, never crashes, leaks or hits UB; when it accepts a file:
//  - every metadata value renders and every typed getter answers (ok or error) for every key,
//    and the getters agree with each other (u32 == u64 when both succeed, *_or == plain);
//  - every tensor is found by name, is aligned, has nbytes == its shape times its type's size,
//    and lies inside the data section; its first and last bytes are read, so ASan checks them;
//  - writing the parsed file back with GgufWriter and parsing the result gives the same
//    metadata and tensors (a writer/reader disagreement is a crash too).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>

#include "format/gguf.h"

namespace {

void fail(const char* what, const std::string& detail = "") {
  std::fprintf(stderr, "gguf_fuzz: invariant violated: %s %s\n", what, detail.c_str());
  std::abort();
}
#define FUZZ_CHECK(cond, detail)    \
  do {                              \
    if (!(cond)) fail(#cond, detail); \
  } while (0)

volatile uint8_t g_sink;

bool same_double(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

bool same_value(const hc::GgufValue& a, const hc::GgufValue& b) {
  if (a.type != b.type || a.is_array() != b.is_array()) return false;
  if (!a.is_array()) {
    if (a.scalar.index() != b.scalar.index()) return false;
    if (auto* d = std::get_if<double>(&a.scalar)) return same_double(*d, std::get<double>(b.scalar));
    return a.scalar == b.scalar;
  }
  if (a.elem_type != b.elem_type || a.array_size() != b.array_size()) return false;
  if (a.arr_u != b.arr_u || a.arr_i != b.arr_i || a.arr_b != b.arr_b || a.arr_s != b.arr_s ||
      a.arr_f.size() != b.arr_f.size() || a.arr_nested.size() != b.arr_nested.size())
    return false;
  for (size_t k = 0; k < a.arr_f.size(); ++k)
    if (!same_double(a.arr_f[k], b.arr_f[k])) return false;
  for (size_t k = 0; k < a.arr_nested.size(); ++k)
    if (!same_value(a.arr_nested[k], b.arr_nested[k])) return false;
  return true;
}

// Every accessor on every key; results are checked for consistency, errors must say something.
void exercise_getters(const hc::GgufFile& f, const std::string& key) {
  auto u32 = f.get_u32(key);
  auto u64 = f.get_u64(key);
  if (u32.ok()) FUZZ_CHECK(u64.ok() && *u64 == *u32, key);
  if (!u64.ok()) FUZZ_CHECK(!u64.message().empty(), key);
  auto f32 = f.get_f32(key);
  auto b = f.get_bool(key);
  auto s = f.get_string(key);
  auto sa = f.get_str_array(key);
  auto fa = f.get_f32_array(key);
  auto ia = f.get_i32_array(key);
  const hc::GgufValue* v = f.find(key);
  FUZZ_CHECK(v != nullptr, key);
  if (sa.ok()) FUZZ_CHECK(sa->size() == v->array_size(), key);
  if (fa.ok()) FUZZ_CHECK(fa->size() == v->array_size(), key);
  if (ia.ok()) FUZZ_CHECK(ia->size() == v->array_size(), key);
  if (s.ok()) g_sink = static_cast<uint8_t>(s->size());
  auto u32_or = f.get_u32_or(key, 7);
  FUZZ_CHECK(u32_or.ok() == u32.ok(), key);
  auto f32_or = f.get_f32_or(key, 0.5f);
  FUZZ_CHECK(f32_or.ok() == f32.ok(), key);
  auto b_or = f.get_bool_or(key, true);
  FUZZ_CHECK(b_or.ok() == b.ok(), key);
  (void)v->to_string();
  (void)v->to_string(1u << 20);
}

void check_tensors(const hc::GgufFile& f, const uint8_t* data, size_t size) {
  const uint8_t* section = data + f.data_offset;
  FUZZ_CHECK(f.data_offset <= size, "");
  for (const hc::GgufTensorInfo& t : f.tensors) {
    FUZZ_CHECK(f.find_tensor(t.name) == &t, t.name);
    FUZZ_CHECK(!t.ne.empty() && t.ne.size() <= 4, t.name);
    const hc::DTypeTraits tr = hc::dtype_traits(t.type);
    FUZZ_CHECK(tr.name != nullptr && t.ne[0] % tr.block_size == 0, t.name);
    // nbytes must be the exact size of the shape, computed without overflow.
    unsigned __int128 elems = 1;
    for (int64_t d : t.ne) {
      FUZZ_CHECK(d >= 0, t.name);
      elems *= static_cast<uint64_t>(d);
    }
    FUZZ_CHECK(elems <= static_cast<uint64_t>(INT64_MAX), t.name);
    FUZZ_CHECK(static_cast<unsigned __int128>(t.n_elements()) == elems, t.name);
    const unsigned __int128 want = elems / static_cast<uint64_t>(tr.block_size) *
                                   static_cast<uint64_t>(tr.type_size);
    FUZZ_CHECK(want == t.nbytes, t.name + ": nbytes " + std::to_string(t.nbytes));
    FUZZ_CHECK(t.offset % f.alignment == 0, t.name);
    FUZZ_CHECK(t.data == section + t.offset, t.name);
    FUZZ_CHECK((t.data - data) % 8 == 0, t.name);  // alignment >= 8: typed loads stay aligned
    FUZZ_CHECK(t.data >= section && t.nbytes <= static_cast<uint64_t>(data + size - t.data), t.name);
    if (t.nbytes > 0) g_sink = static_cast<uint8_t>(t.data[0] + t.data[t.nbytes - 1]);
  }
}

// Parsed file -> GgufWriter -> bytes -> parse again: same metadata and tensors.
void check_round_trip(const hc::GgufFile& f, size_t size) {
  // The written file is at least `alignment` bytes and holds every tensor separately: skip
  // inputs that would make it huge (general.alignment up to 2^31, or many tensors overlapping
  // one region) — found as a 1 GiB, 7 s round trip of a 59-byte file.
  if (f.alignment > (1u << 16)) return;
  uint64_t total = 0;
  for (const auto& t : f.tensors) total += t.nbytes;
  if (total > 4 * static_cast<uint64_t>(size) + (1u << 20)) return;
  hc::GgufWriter w;
  w.version = f.version;
  w.alignment = f.alignment;
  for (const auto& [key, v] : f.kv)
    if (key != "general.alignment") w.kv.emplace_back(key, v);  // the writer adds it
  for (const auto& t : f.tensors) w.add_tensor({t.name, t.ne, t.type, {t.data, t.nbytes}});
  auto bytes = w.serialize();
  FUZZ_CHECK(bytes.ok(), bytes.message());
  auto g = hc::parse_gguf(*bytes);
  FUZZ_CHECK(g.ok(), g.message());
  FUZZ_CHECK(g->alignment == f.alignment && g->version == f.version, "");
  size_t n_kv = 0;
  for (const auto& [key, v] : f.kv) {
    if (key == "general.alignment") continue;
    const hc::GgufValue* v2 = g->find(key);
    FUZZ_CHECK(v2 != nullptr && same_value(v, *v2), key);
    ++n_kv;
  }
  FUZZ_CHECK(g->kv.size() == n_kv + (f.alignment != 32 ? 1 : 0), "");
  FUZZ_CHECK(g->tensors.size() == f.tensors.size(), "");
  for (size_t i = 0; i < f.tensors.size(); ++i) {
    const auto &a = f.tensors[i], &b = g->tensors[i];
    FUZZ_CHECK(a.name == b.name && a.ne == b.ne && a.type == b.type && a.nbytes == b.nbytes,
               a.name);
    FUZZ_CHECK(a.nbytes == 0 || std::memcmp(a.data, b.data, a.nbytes) == 0, a.name);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = hc::parse_gguf(std::span<const uint8_t>(data, size));
  if (!f.ok()) {
    FUZZ_CHECK(!f.message().empty(), "");
    return 0;
  }
  FUZZ_CHECK(f->version == 2 || f->version == 3, "");
  FUZZ_CHECK(f->alignment >= 8 && (f->alignment & (f->alignment - 1)) == 0, "");
  for (const auto& [key, v] : f->kv) exercise_getters(*f, key);
  const std::string absent = "fuzz.absent.key";
  if (f->find(absent) == nullptr) {
    FUZZ_CHECK(!f->get_string(absent).ok(), "");
    FUZZ_CHECK(*f->get_u32_or(absent, 7) == 7u && *f->get_bool_or(absent, true), "");
  }
  check_tensors(*f, data, size);
  check_round_trip(*f, size);
  return 0;
}
