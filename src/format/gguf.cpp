#include "format/gguf.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>

namespace hc {

namespace {

constexpr uint32_t kMagicGguf = 0x46554747;  // "GGUF" little-endian
constexpr uint32_t kMagicPwri = 0x49525750;  // "PWRI" (PowerInfer)
constexpr int kMaxDims = 4;
constexpr int kMaxNesting = 4;

// Bounds-checked little-endian cursor over the file bytes.
class Cursor {
 public:
  explicit Cursor(std::span<const uint8_t> b) : b_(b) {}
  size_t pos() const { return pos_; }
  size_t remaining() const { return b_.size() - pos_; }

  template <class T>
  Status read(T* out, const char* what) {
    if (remaining() < sizeof(T))
      return Status::Error(std::string("truncated file: expected ") + std::to_string(sizeof(T)) +
                           " bytes for " + what + " at offset " + std::to_string(pos_) +
                           ", found " + std::to_string(remaining()));
    std::memcpy(out, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::Ok();
  }

  Status read_string(std::string* out, const char* what) {
    uint64_t len = 0;
    HC_TRY(read(&len, what));
    if (len > remaining())
      return Status::Error(std::string("bad string length for ") + what + ": " +
                           std::to_string(len) + " bytes at offset " + std::to_string(pos_) +
                           " but only " + std::to_string(remaining()) + " remain");
    out->assign(reinterpret_cast<const char*>(b_.data() + pos_), len);
    pos_ += len;
    return Status::Ok();
  }

 private:
  std::span<const uint8_t> b_;
  size_t pos_ = 0;
};

// Smallest encoded size of one element of type t (guards against absurd array counts).
uint64_t min_encoded_size(GgufType t) {
  switch (t) {
    case GgufType::UINT8: case GgufType::INT8: case GgufType::BOOL: return 1;
    case GgufType::UINT16: case GgufType::INT16: return 2;
    case GgufType::UINT32: case GgufType::INT32: case GgufType::FLOAT32: return 4;
    case GgufType::UINT64: case GgufType::INT64: case GgufType::FLOAT64: return 8;
    case GgufType::STRING: return 8;
    case GgufType::ARRAY: return 12;
  }
  return 1;
}

bool valid_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::FLOAT64); }

Status read_value(Cursor& c, GgufType type, GgufValue* v, int depth);

// Reads one scalar element of `type` into either the scalar or the matching array slot.
Status read_scalar(Cursor& c, GgufType type, GgufValue* v, bool into_array) {
  auto put_u = [&](uint64_t x) { into_array ? v->arr_u.push_back(x) : void(v->scalar = x); };
  auto put_i = [&](int64_t x) { into_array ? v->arr_i.push_back(x) : void(v->scalar = x); };
  auto put_f = [&](double x) { into_array ? v->arr_f.push_back(x) : void(v->scalar = x); };
  switch (type) {
    case GgufType::UINT8: { uint8_t x; HC_TRY(c.read(&x, "uint8 value")); put_u(x); break; }
    case GgufType::INT8: { int8_t x; HC_TRY(c.read(&x, "int8 value")); put_i(x); break; }
    case GgufType::UINT16: { uint16_t x; HC_TRY(c.read(&x, "uint16 value")); put_u(x); break; }
    case GgufType::INT16: { int16_t x; HC_TRY(c.read(&x, "int16 value")); put_i(x); break; }
    case GgufType::UINT32: { uint32_t x; HC_TRY(c.read(&x, "uint32 value")); put_u(x); break; }
    case GgufType::INT32: { int32_t x; HC_TRY(c.read(&x, "int32 value")); put_i(x); break; }
    case GgufType::UINT64: { uint64_t x; HC_TRY(c.read(&x, "uint64 value")); put_u(x); break; }
    case GgufType::INT64: { int64_t x; HC_TRY(c.read(&x, "int64 value")); put_i(x); break; }
    case GgufType::FLOAT32: { float x; HC_TRY(c.read(&x, "float32 value")); put_f(x); break; }
    case GgufType::FLOAT64: { double x; HC_TRY(c.read(&x, "float64 value")); put_f(x); break; }
    case GgufType::BOOL: {
      uint8_t x;
      HC_TRY(c.read(&x, "bool value"));
      if (x > 1) return Status::Error("bad bool value " + std::to_string(x) + " (expected 0 or 1)");
      if (into_array) v->arr_b.push_back(x); else v->scalar = (x != 0);
      break;
    }
    case GgufType::STRING: {
      std::string s;
      HC_TRY(c.read_string(&s, "string value"));
      if (into_array) v->arr_s.push_back(std::move(s)); else v->scalar = std::move(s);
      break;
    }
    case GgufType::ARRAY: return Status::Error("internal: array passed to read_scalar");
  }
  return Status::Ok();
}

Status read_array(Cursor& c, GgufValue* v, int depth) {
  if (depth > kMaxNesting) return Status::Error("arrays nested deeper than 4 levels");
  uint32_t et = 0;
  uint64_t n = 0;
  HC_TRY(c.read(&et, "array element type"));
  if (!valid_type(et))
    return Status::Error("unknown array element type " + std::to_string(et) + " (expected 0..12)");
  HC_TRY(c.read(&n, "array length"));
  v->elem_type = static_cast<GgufType>(et);
  if (n > c.remaining() / min_encoded_size(v->elem_type))
    return Status::Error("array length " + std::to_string(n) + " of " +
                         gguf_type_name(v->elem_type) + " exceeds the " +
                         std::to_string(c.remaining()) + " bytes left in the file");
  for (uint64_t i = 0; i < n; ++i) {
    if (v->elem_type == GgufType::ARRAY) {
      GgufValue inner;
      inner.type = GgufType::ARRAY;
      HC_TRY(read_array(c, &inner, depth + 1));
      v->arr_nested.push_back(std::move(inner));
    } else {
      HC_TRY(read_scalar(c, v->elem_type, v, /*into_array=*/true));
    }
  }
  return Status::Ok();
}

Status read_value(Cursor& c, GgufType type, GgufValue* v, int depth) {
  v->type = type;
  if (type == GgufType::ARRAY) return read_array(c, v, depth);
  return read_scalar(c, type, v, /*into_array=*/false);
}

Status read_header(Cursor& c, GgufFile* f, uint64_t* n_tensors, uint64_t* n_kv) {
  uint32_t magic = 0;
  HC_TRY(c.read(&magic, "magic"));
  if (magic != kMagicGguf && magic != kMagicPwri) {
    char m[5] = {};
    std::memcpy(m, &magic, 4);
    for (char& ch : m) if (ch && (ch < 32 || ch > 126)) ch = '?';
    return Status::Error(std::string("not a GGUF file: expected magic 'GGUF' or 'PWRI', found '") +
                         m + "'");
  }
  f->powerinfer_magic = magic == kMagicPwri;
  HC_TRY(c.read(&f->version, "version"));
  if (f->version != 2 && f->version != 3)
    return Status::Error("unsupported GGUF version " + std::to_string(f->version) +
                         " (expected 2 or 3)");
  HC_TRY(c.read(n_tensors, "tensor count"));
  HC_TRY(c.read(n_kv, "metadata count"));
  // Each KV needs at least 8 (key len) + 4 (type) + 1 bytes; each tensor info at least 8+4+4+8.
  if (*n_kv > c.remaining() / 13)
    return Status::Error("metadata count " + std::to_string(*n_kv) + " is impossible for a " +
                         std::to_string(c.remaining()) + "-byte header remainder");
  if (*n_tensors > c.remaining() / 24)
    return Status::Error("tensor count " + std::to_string(*n_tensors) + " is impossible for a " +
                         std::to_string(c.remaining()) + "-byte header remainder");
  return Status::Ok();
}

Status read_kvs(Cursor& c, GgufFile* f, uint64_t n_kv) {
  std::set<std::string> seen;
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key;
    HC_TRY(c.read_string(&key, "metadata key"));
    uint32_t t = 0;
    HC_TRY(c.read(&t, "metadata value type"));
    if (!valid_type(t))
      return Status::Error("metadata '" + key + "': unknown value type " + std::to_string(t) +
                           " (expected 0..12)");
    GgufValue v;
    HC_TRY(read_value(c, static_cast<GgufType>(t), &v, 0).with_context("metadata '" + key + "'"));
    if (!seen.insert(key).second) return Status::Error("duplicate metadata key '" + key + "'");
    f->kv.emplace_back(std::move(key), std::move(v));
  }
  return Status::Ok();
}

Status read_tensor_info(Cursor& c, GgufTensorInfo* t) {
  HC_TRY(c.read_string(&t->name, "tensor name"));
  uint32_t n_dims = 0;
  HC_TRY(c.read(&n_dims, "tensor n_dims"));
  if (n_dims == 0 || n_dims > kMaxDims)
    return Status::Error("tensor '" + t->name + "': n_dims " + std::to_string(n_dims) +
                         " (expected 1..4)");
  uint64_t total = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    int64_t ne = 0;
    HC_TRY(c.read(&ne, "tensor dimension"));
    if (ne < 0)
      return Status::Error("tensor '" + t->name + "': negative dimension " + std::to_string(ne));
    if (ne != 0 && total > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / ne)
      return Status::Error("tensor '" + t->name + "': shape overflows int64");
    total *= static_cast<uint64_t>(ne);
    t->ne.push_back(ne);
  }
  uint32_t type = 0;
  HC_TRY(c.read(&type, "tensor type"));
  const DTypeTraits tr = dtype_traits(type);
  if (!tr.name)
    return Status::Error("tensor '" + t->name + "': unknown ggml type id " + std::to_string(type));
  t->type = static_cast<GgmlType>(type);
  if (t->ne[0] % tr.block_size != 0)
    return Status::Error("tensor '" + t->name + "': row length " + std::to_string(t->ne[0]) +
                         " is not a multiple of the " + tr.name + " block size " +
                         std::to_string(tr.block_size));
  HC_TRY(c.read(&t->offset, "tensor data offset"));
  // The element count fits int64, but its byte size may not (e.g. 2^62 F32 elements would wrap
  // to 0 bytes and pass every bounds check).
  const uint64_t blocks = total / static_cast<uint64_t>(tr.block_size);
  if (blocks > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) /
                   static_cast<uint64_t>(tr.type_size))
    return Status::Error("tensor '" + t->name + "': " + std::to_string(total) + " elements of " +
                         tr.name + " need more than 2^63 bytes");
  t->nbytes = blocks * static_cast<uint64_t>(tr.type_size);
  return Status::Ok();
}

Status place_tensors(std::span<const uint8_t> bytes, GgufFile* f) {
  const uint64_t data_size = bytes.size() - f->data_offset;
  std::set<std::string> names;
  for (GgufTensorInfo& t : f->tensors) {
    if (!names.insert(t.name).second)
      return Status::Error("duplicate tensor name '" + t.name + "'");
    if (t.offset % f->alignment != 0)
      return Status::Error("tensor '" + t.name + "': data offset " + std::to_string(t.offset) +
                           " is not a multiple of the alignment " + std::to_string(f->alignment));
    if (t.offset > data_size || t.nbytes > data_size - t.offset)
      return Status::Error("tensor '" + t.name + "': data [" + std::to_string(t.offset) + ", " +
                           std::to_string(t.offset + t.nbytes) +
                           ") lies outside the data section of " + std::to_string(data_size) +
                           " bytes (file truncated?)");
    t.data = bytes.data() + f->data_offset + t.offset;
  }
  return Status::Ok();
}

}  // namespace

const char* gguf_type_name(GgufType t) {
  static const char* kNames[] = {"uint8", "int8",  "uint16", "int16", "uint32", "int32", "float32",
                                 "bool",  "string", "array", "uint64", "int64", "float64"};
  const auto i = static_cast<uint32_t>(t);
  return i < 13 ? kNames[i] : "unknown";
}

Result<GgufFile> parse_gguf(std::span<const uint8_t> bytes) {
  GgufFile f;
  Cursor c(bytes);
  uint64_t n_tensors = 0, n_kv = 0;
  HC_TRY(read_header(c, &f, &n_tensors, &n_kv));
  HC_TRY(read_kvs(c, &f, n_kv));
  f.tensors.resize(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i)
    HC_TRY(read_tensor_info(c, &f.tensors[i]).with_context("tensor info #" + std::to_string(i)));
  auto align = f.get_u32_or("general.alignment", 32);
  if (!align.ok()) return align.status();
  // The GGUF spec asks for a multiple of 8; with a power of two >= 8 every tensor's data is
  // 8-byte aligned (the span is mmap'd or heap memory), so typed loads of it are never misaligned.
  if (*align < 8 || (*align & (*align - 1)) != 0)
    return Status::Error("general.alignment must be a power of two and a multiple of 8, found " +
                         std::to_string(*align));
  f.alignment = *align;
  f.data_offset = (c.pos() + f.alignment - 1) / f.alignment * f.alignment;
  if (f.data_offset > bytes.size()) {
    if (n_tensors > 0)
      return Status::Error("truncated file: tensor data section starts at offset " +
                           std::to_string(f.data_offset) + " but the file has " +
                           std::to_string(bytes.size()) + " bytes");
    f.data_offset = bytes.size();
  }
  HC_TRY(place_tensors(bytes, &f));
  return f;
}

// ---- GgufValue ----

size_t GgufValue::array_size() const {
  return arr_u.size() + arr_i.size() + arr_f.size() + arr_b.size() + arr_s.size() +
         arr_nested.size();
}

std::string GgufValue::to_string(size_t max_elems) const {
  if (!is_array()) {
    if (auto* u = std::get_if<uint64_t>(&scalar)) return std::to_string(*u);
    if (auto* i = std::get_if<int64_t>(&scalar)) return std::to_string(*i);
    if (auto* d = std::get_if<double>(&scalar)) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%g", *d);
      return buf;
    }
    if (auto* b = std::get_if<bool>(&scalar)) return *b ? "true" : "false";
    std::string s = std::get<std::string>(scalar);
    if (s.size() > 80) s = s.substr(0, 77) + "...";
    return "\"" + s + "\"";
  }
  std::string out = "[" + std::string(gguf_type_name(elem_type)) + " x " +
                    std::to_string(array_size()) + "]";
  const size_t n = std::min(array_size(), max_elems);
  if (n == 0) return out;
  out += " ";
  for (size_t k = 0; k < n; ++k) {
    if (k) out += ", ";
    if (!arr_u.empty()) out += std::to_string(arr_u[k]);
    else if (!arr_i.empty()) out += std::to_string(arr_i[k]);
    else if (!arr_f.empty()) { char b[32]; std::snprintf(b, sizeof b, "%g", arr_f[k]); out += b; }
    else if (!arr_b.empty()) out += arr_b[k] ? "true" : "false";
    else if (!arr_s.empty()) out += "\"" + arr_s[k].substr(0, 40) + "\"";
    else out += arr_nested[k].to_string(2);
  }
  if (array_size() > n) out += ", ...";
  return out;
}

GgufValue GgufValue::u32(uint32_t v) { GgufValue x; x.type = GgufType::UINT32; x.scalar = uint64_t{v}; return x; }
GgufValue GgufValue::i32(int32_t v) { GgufValue x; x.type = GgufType::INT32; x.scalar = int64_t{v}; return x; }
GgufValue GgufValue::u64(uint64_t v) { GgufValue x; x.type = GgufType::UINT64; x.scalar = v; return x; }
GgufValue GgufValue::f32(float v) { GgufValue x; x.type = GgufType::FLOAT32; x.scalar = double{v}; return x; }
GgufValue GgufValue::boolean(bool v) { GgufValue x; x.type = GgufType::BOOL; x.scalar = v; return x; }
GgufValue GgufValue::str(std::string v) { GgufValue x; x.type = GgufType::STRING; x.scalar = std::move(v); return x; }
GgufValue GgufValue::str_array(std::vector<std::string> v) {
  GgufValue x; x.type = GgufType::ARRAY; x.elem_type = GgufType::STRING; x.arr_s = std::move(v); return x;
}
GgufValue GgufValue::f32_array(const std::vector<float>& v) {
  GgufValue x; x.type = GgufType::ARRAY; x.elem_type = GgufType::FLOAT32;
  x.arr_f.assign(v.begin(), v.end()); return x;
}
GgufValue GgufValue::i32_array(const std::vector<int32_t>& v) {
  GgufValue x; x.type = GgufType::ARRAY; x.elem_type = GgufType::INT32;
  x.arr_i.assign(v.begin(), v.end()); return x;
}

int64_t GgufTensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

// ---- GgufFile lookups ----

void GgufFile::build_index() const {
  if (kv_index_.size() != kv.size()) {
    kv_index_.clear();
    for (size_t i = 0; i < kv.size(); ++i) kv_index_[kv[i].first] = i;
  }
  if (tensor_index_.size() != tensors.size()) {
    tensor_index_.clear();
    for (size_t i = 0; i < tensors.size(); ++i) tensor_index_[tensors[i].name] = i;
  }
}

const GgufValue* GgufFile::find(const std::string& key) const {
  build_index();
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv[it->second].second;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  build_index();
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors[it->second];
}

namespace {
Status missing(const std::string& key, const char* expected) {
  return Status::Error("missing metadata key '" + key + "' (expected " + expected + ")");
}
Status wrong(const std::string& key, const char* expected, const GgufValue& v) {
  std::string found = gguf_type_name(v.type);
  if (v.is_array()) found += std::string(" of ") + gguf_type_name(v.elem_type);
  return Status::Error("metadata key '" + key + "': expected " + expected + ", found " + found);
}
}  // namespace

Result<uint64_t> GgufFile::get_u64(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return missing(key, "an unsigned integer");
  if (v->is_array()) return wrong(key, "an unsigned integer", *v);
  if (auto* u = std::get_if<uint64_t>(&v->scalar)) return *u;
  if (auto* i = std::get_if<int64_t>(&v->scalar)) {
    if (*i >= 0) return static_cast<uint64_t>(*i);
    return Status::Error("metadata key '" + key + "': expected a non-negative integer, found " +
                         std::to_string(*i));
  }
  return wrong(key, "an unsigned integer", *v);
}

Result<uint32_t> GgufFile::get_u32(const std::string& key) const {
  HC_ASSIGN_OR_RETURN(uint64_t u, get_u64(key));
  if (u > std::numeric_limits<uint32_t>::max())
    return Status::Error("metadata key '" + key + "': value " + std::to_string(u) +
                         " does not fit in 32 bits");
  return static_cast<uint32_t>(u);
}

namespace {
// A float64 beyond float32's range would silently become infinity.
bool fits_f32(double d) {
  return !std::isfinite(d) || std::fabs(d) <= static_cast<double>(std::numeric_limits<float>::max());
}
Status not_f32(const std::string& key, double d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", d);
  return Status::Error("metadata key '" + key + "': value " + buf + " does not fit in float32");
}
}  // namespace

Result<float> GgufFile::get_f32(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return missing(key, "a float");
  if (auto* d = std::get_if<double>(&v->scalar); d && !v->is_array()) {
    if (!fits_f32(*d)) return not_f32(key, *d);
    return static_cast<float>(*d);
  }
  if (!v->is_array()) {
    if (auto* u = std::get_if<uint64_t>(&v->scalar)) return static_cast<float>(*u);
    if (auto* i = std::get_if<int64_t>(&v->scalar)) return static_cast<float>(*i);
  }
  return wrong(key, "a float", *v);
}

Result<bool> GgufFile::get_bool(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return missing(key, "a bool");
  if (auto* b = std::get_if<bool>(&v->scalar); b && !v->is_array()) return *b;
  return wrong(key, "a bool", *v);
}

Result<std::string> GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return missing(key, "a string");
  if (auto* s = std::get_if<std::string>(&v->scalar); s && !v->is_array()) return *s;
  return wrong(key, "a string", *v);
}

Result<std::vector<std::string>> GgufFile::get_str_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return missing(key, "an array of strings");
  if (!v->is_array() || v->elem_type != GgufType::STRING)
    return wrong(key, "an array of strings", *v);
  return v->arr_s;
}

Result<std::vector<float>> GgufFile::get_f32_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return missing(key, "an array of floats");
  if (!v->is_array() || (v->elem_type != GgufType::FLOAT32 && v->elem_type != GgufType::FLOAT64))
    return wrong(key, "an array of floats", *v);
  for (double d : v->arr_f)
    if (!fits_f32(d)) return not_f32(key, d);
  return std::vector<float>(v->arr_f.begin(), v->arr_f.end());
}

Result<std::vector<int32_t>> GgufFile::get_i32_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return missing(key, "an array of integers");
  if (!v->is_array() || (v->arr_i.empty() && v->arr_u.empty() && v->array_size() != 0))
    return wrong(key, "an array of integers", *v);
  std::vector<int32_t> out;
  out.reserve(v->array_size());
  auto out_of_range = [&](const std::string& x) {
    return Status::Error("metadata key '" + key + "': element " + std::to_string(out.size()) +
                         " = " + x + " does not fit in int32");
  };
  for (int64_t x : v->arr_i) {
    if (x < std::numeric_limits<int32_t>::min() || x > std::numeric_limits<int32_t>::max())
      return out_of_range(std::to_string(x));
    out.push_back(static_cast<int32_t>(x));
  }
  for (uint64_t x : v->arr_u) {
    if (x > static_cast<uint64_t>(std::numeric_limits<int32_t>::max()))
      return out_of_range(std::to_string(x));
    out.push_back(static_cast<int32_t>(x));
  }
  return out;
}

Result<uint32_t> GgufFile::get_u32_or(const std::string& key, uint32_t fallback) const {
  return find(key) ? get_u32(key) : Result<uint32_t>(fallback);
}
Result<float> GgufFile::get_f32_or(const std::string& key, float fallback) const {
  return find(key) ? get_f32(key) : Result<float>(fallback);
}
Result<bool> GgufFile::get_bool_or(const std::string& key, bool fallback) const {
  return find(key) ? get_bool(key) : Result<bool>(fallback);
}

// ---- writer ----

namespace {
class Out {
 public:
  std::vector<uint8_t> buf;
  template <class T>
  void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    buf.insert(buf.end(), p, p + sizeof(T));
  }
  void str(const std::string& s) {
    put<uint64_t>(s.size());
    buf.insert(buf.end(), s.begin(), s.end());
  }
  void pad_to(uint64_t align) { buf.resize((buf.size() + align - 1) / align * align, 0); }
};

void put_element(Out& o, GgufType t, const GgufValue& v, size_t k) {
  auto u = [&] { return v.arr_u[k]; };
  auto i = [&] { return v.arr_i[k]; };
  switch (t) {
    case GgufType::UINT8: o.put<uint8_t>(static_cast<uint8_t>(u())); break;
    case GgufType::INT8: o.put<int8_t>(static_cast<int8_t>(i())); break;
    case GgufType::UINT16: o.put<uint16_t>(static_cast<uint16_t>(u())); break;
    case GgufType::INT16: o.put<int16_t>(static_cast<int16_t>(i())); break;
    case GgufType::UINT32: o.put<uint32_t>(static_cast<uint32_t>(u())); break;
    case GgufType::INT32: o.put<int32_t>(static_cast<int32_t>(i())); break;
    case GgufType::UINT64: o.put<uint64_t>(u()); break;
    case GgufType::INT64: o.put<int64_t>(i()); break;
    case GgufType::FLOAT32: o.put<float>(static_cast<float>(v.arr_f[k])); break;
    case GgufType::FLOAT64: o.put<double>(v.arr_f[k]); break;
    case GgufType::BOOL: o.put<uint8_t>(v.arr_b[k]); break;
    case GgufType::STRING: o.str(v.arr_s[k]); break;
    case GgufType::ARRAY: break;
  }
}

void put_value(Out& o, const GgufValue& v) {
  if (v.is_array()) {
    o.put<uint32_t>(static_cast<uint32_t>(v.elem_type));
    o.put<uint64_t>(v.array_size());
    for (size_t k = 0; k < v.array_size(); ++k) {
      if (v.elem_type == GgufType::ARRAY) {
        put_value(o, v.arr_nested[k]);
      } else {
        put_element(o, v.elem_type, v, k);
      }
    }
    return;
  }
  // Scalars: re-encode through a one-element array view of the payload.
  GgufValue one;
  if (auto* u = std::get_if<uint64_t>(&v.scalar)) one.arr_u = {*u};
  if (auto* i = std::get_if<int64_t>(&v.scalar)) one.arr_i = {*i};
  if (auto* d = std::get_if<double>(&v.scalar)) one.arr_f = {*d};
  if (auto* b = std::get_if<bool>(&v.scalar)) one.arr_b = {static_cast<uint8_t>(*b)};
  if (auto* s = std::get_if<std::string>(&v.scalar)) one.arr_s = {*s};
  put_element(o, v.type, one, 0);
}
}  // namespace

void GgufWriter::set(const std::string& key, GgufValue v) {
  for (auto& kvp : kv) {
    if (kvp.first == key) {
      kvp.second = std::move(v);
      return;
    }
  }
  kv.emplace_back(key, std::move(v));
}

namespace {
// Bytes of tensor t's data, or an error when its shape or type cannot be written.
Result<uint64_t> tensor_nbytes(const GgufTensorToWrite& t) {
  int64_t n = 1;
  for (int64_t d : t.ne) n *= d;
  const DTypeTraits tr = dtype_traits(t.type);
  if (t.ne.empty() || t.ne.size() > 4 || !tr.name || t.ne[0] % tr.block_size != 0)
    return Status::Error("tensor '" + t.name + "': invalid shape or type for writing");
  return static_cast<uint64_t>(n / tr.block_size * tr.type_size);
}
}  // namespace

Result<std::vector<uint8_t>> GgufWriter::serialize_header() const {
  if (alignment < 8 || alignment > std::numeric_limits<uint32_t>::max() ||
      (alignment & (alignment - 1)) != 0)
    return Status::Error("GGUF alignment must be a power of two, at least 8 and 32-bit, found " +
                         std::to_string(alignment));
  Out o;
  o.put<uint32_t>(kMagicGguf);
  o.put<uint32_t>(version);
  o.put<uint64_t>(tensors.size());
  const bool write_alignment = alignment != 32;
  o.put<uint64_t>(kv.size() + (write_alignment ? 1 : 0));
  if (write_alignment) {
    o.str("general.alignment");
    o.put<uint32_t>(static_cast<uint32_t>(GgufType::UINT32));
    o.put<uint32_t>(static_cast<uint32_t>(alignment));
  }
  for (const auto& [key, v] : kv) {
    o.str(key);
    o.put<uint32_t>(static_cast<uint32_t>(v.type));
    put_value(o, v);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    HC_ASSIGN_OR_RETURN(const uint64_t nbytes, tensor_nbytes(t));
    o.str(t.name);
    o.put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) o.put<int64_t>(d);
    o.put<uint32_t>(static_cast<uint32_t>(t.type));
    o.put<uint64_t>(offset);
    offset += nbytes + padding(nbytes);
  }
  o.pad_to(alignment);
  return std::move(o.buf);
}

Result<std::vector<uint8_t>> GgufWriter::serialize() const {
  for (const auto& t : tensors) {
    HC_ASSIGN_OR_RETURN(const uint64_t nbytes, tensor_nbytes(t));
    if (nbytes != t.data.size())
      return Status::Error("tensor '" + t.name + "': expected " + std::to_string(nbytes) +
                           " bytes of " + dtype_name(t.type) + " data, found " +
                           std::to_string(t.data.size()));
  }
  HC_ASSIGN_OR_RETURN(std::vector<uint8_t> buf, serialize_header());
  for (const auto& t : tensors) {
    buf.insert(buf.end(), t.data.begin(), t.data.end());
    buf.resize(buf.size() + padding(t.data.size()), 0);
  }
  return buf;
}

Status GgufWriter::write_file(const std::string& path) const {
  HC_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, serialize());
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return Status::Error("cannot open '" + path + "' for writing");
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) return Status::Error("write to '" + path + "' failed");
  return Status::Ok();
}

}  // namespace hc
