// GGUF v2/v3 reader and writer (also PowerInfer's "PWRI" magic, same layout as GGUF v3).
// parse_gguf is a pure function over a byte span: it validates every count, offset and shape
// and returns an error naming what was expected and found; it never aborts on bad input.
// Tensor data is not copied: GgufTensorInfo::data points into the span.
#pragma once
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace hc {

enum class GgufType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
const char* gguf_type_name(GgufType t);

// One metadata value. Scalars keep their declared type; numeric payloads are widened.
struct GgufValue {
  GgufType type = GgufType::UINT8;
  GgufType elem_type = GgufType::UINT8;  // element type when type == ARRAY
  // Scalar payload (unused for arrays).
  std::variant<uint64_t, int64_t, double, bool, std::string> scalar;
  // Array payload: exactly one of these is filled, matching elem_type's kind.
  std::vector<uint64_t> arr_u;        // UINT8/16/32/64
  std::vector<int64_t> arr_i;         // INT8/16/32/64
  std::vector<double> arr_f;          // FLOAT32/64
  std::vector<uint8_t> arr_b;         // BOOL
  std::vector<std::string> arr_s;     // STRING
  std::vector<GgufValue> arr_nested;  // ARRAY of ARRAY

  bool is_array() const { return type == GgufType::ARRAY; }
  size_t array_size() const;
  // Human-readable rendering (arrays abbreviated) for `hotcold inspect`.
  std::string to_string(size_t max_elems = 8) const;

  static GgufValue u32(uint32_t v);
  static GgufValue i32(int32_t v);
  static GgufValue u64(uint64_t v);
  static GgufValue f32(float v);
  static GgufValue boolean(bool v);
  static GgufValue str(std::string v);
  static GgufValue str_array(std::vector<std::string> v);
  static GgufValue f32_array(const std::vector<float>& v);
  static GgufValue i32_array(const std::vector<int32_t>& v);
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> ne;   // ggml order: ne[0] is the contiguous (row) dimension
  GgmlType type = GgmlType::F32;
  uint64_t offset = 0;       // relative to the data section
  const uint8_t* data = nullptr;  // points into the parsed span
  uint64_t nbytes = 0;
  int64_t n_elements() const;
};

struct GgufFile {
  uint32_t version = 3;
  bool powerinfer_magic = false;  // file began with "PWRI"
  uint64_t alignment = 32;
  uint64_t data_offset = 0;       // start of the tensor data section in the file
  std::vector<std::pair<std::string, GgufValue>> kv;  // file order
  std::vector<GgufTensorInfo> tensors;                // file order

  const GgufValue* find(const std::string& key) const;
  const GgufTensorInfo* find_tensor(const std::string& name) const;

  // Typed getters: error names the key and the expected vs found type when wrong or missing,
  // or the value when it does not fit the result type (never silently wrapped or made inf).
  Result<uint32_t> get_u32(const std::string& key) const;   // any integer type that fits
  Result<uint64_t> get_u64(const std::string& key) const;
  Result<float> get_f32(const std::string& key) const;      // FLOAT32/64 (or integer)
  Result<bool> get_bool(const std::string& key) const;
  Result<std::string> get_string(const std::string& key) const;
  Result<std::vector<std::string>> get_str_array(const std::string& key) const;
  Result<std::vector<float>> get_f32_array(const std::string& key) const;
  Result<std::vector<int32_t>> get_i32_array(const std::string& key) const;
  // Optional variants: fallback when the key is absent, error only when present but wrong.
  Result<uint32_t> get_u32_or(const std::string& key, uint32_t fallback) const;
  Result<float> get_f32_or(const std::string& key, float fallback) const;
  Result<bool> get_bool_or(const std::string& key, bool fallback) const;

 private:
  mutable std::map<std::string, size_t> kv_index_;
  mutable std::map<std::string, size_t> tensor_index_;
  void build_index() const;
};

Result<GgufFile> parse_gguf(std::span<const uint8_t> bytes);

// --- writer ---
struct GgufTensorToWrite {
  std::string name;
  std::vector<int64_t> ne;  // ggml order
  GgmlType type = GgmlType::F32;
  std::span<const uint8_t> data;  // must be exactly row_bytes(type, ne[0]) * rows
};

struct GgufWriter {
  uint32_t version = 3;
  uint64_t alignment = 32;
  std::vector<std::pair<std::string, GgufValue>> kv;
  std::vector<GgufTensorToWrite> tensors;

  void set(const std::string& key, GgufValue v);  // replaces an existing key
  void add_tensor(GgufTensorToWrite t) { tensors.push_back(std::move(t)); }
  Result<std::vector<uint8_t>> serialize() const;
  Status write_file(const std::string& path) const;

  // Streaming, for files too large to build in memory: the bytes before the tensor data
  // (header, metadata, tensor infos, zero padding to `alignment`). Tensors' `data` is not read,
  // so they may be added with name, shape and type only; the caller then writes each tensor's
  // row_bytes(type, ne[0]) * rows bytes in `tensors` order, each followed by
  // padding(nbytes) zero bytes. serialize() is exactly serialize_header() + that.
  Result<std::vector<uint8_t>> serialize_header() const;
  uint64_t padding(uint64_t nbytes) const { return (alignment - nbytes % alignment) % alignment; }
};

}  // namespace hc
