#include "app/png.h"

#include <algorithm>
#include <array>
#include <fstream>

namespace hc {

Image::Image(int w, int h, Rgb fill) : width(w), height(h) {
  HC_CHECK(w > 0 && h > 0);
  rgb.resize(static_cast<size_t>(w) * static_cast<size_t>(h) * 3);
  for (size_t i = 0; i < rgb.size(); i += 3) {
    rgb[i] = fill.r;
    rgb[i + 1] = fill.g;
    rgb[i + 2] = fill.b;
  }
}

Rgb Image::at(int x, int y) const {
  HC_CHECK(x >= 0 && x < width && y >= 0 && y < height);
  const uint8_t* p =
      &rgb[(static_cast<size_t>(y) * static_cast<size_t>(width) + static_cast<size_t>(x)) * 3];
  return {p[0], p[1], p[2]};
}

void Image::set(int x, int y, Rgb c) {
  if (x < 0 || x >= width || y < 0 || y >= height) return;
  uint8_t* p =
      &rgb[(static_cast<size_t>(y) * static_cast<size_t>(width) + static_cast<size_t>(x)) * 3];
  p[0] = c.r;
  p[1] = c.g;
  p[2] = c.b;
}

namespace {

const std::array<uint32_t, 256>& crc_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t n = 0; n < 256; ++n) {
      uint32_t c = n;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[n] = c;
    }
    return t;
  }();
  return table;
}

void put_u32_be(std::vector<uint8_t>& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(v >> s));
}

// A chunk: length, type, data, CRC of type + data.
void put_chunk(std::vector<uint8_t>& out, const char type[4], std::span<const uint8_t> data) {
  put_u32_be(out, static_cast<uint32_t>(data.size()));
  const size_t type_at = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data.begin(), data.end());
  put_u32_be(out, crc32(std::span<const uint8_t>(out.data() + type_at, 4 + data.size())));
}

}  // namespace

uint32_t crc32(std::span<const uint8_t> data, uint32_t crc) {
  const auto& t = crc_table();
  uint32_t c = crc ^ 0xFFFFFFFFu;
  for (uint8_t b : data) c = t[(c ^ b) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t adler32(std::span<const uint8_t> data, uint32_t adler) {
  constexpr uint32_t kMod = 65521;
  uint32_t a = adler & 0xFFFF, b = adler >> 16;
  size_t i = 0;
  while (i < data.size()) {
    // 5552 bytes is the most that can be summed before b may overflow 32 bits (zlib's NMAX).
    const size_t end = std::min(data.size(), i + 5552);
    for (; i < end; ++i) {
      a += data[i];
      b += a;
    }
    a %= kMod;
    b %= kMod;
  }
  return (b << 16) | a;
}

std::vector<uint8_t> zlib_stored(std::span<const uint8_t> raw) {
  std::vector<uint8_t> out;
  out.reserve(raw.size() + raw.size() / 65535 * 5 + 16);
  out.push_back(0x78);  // CM = 8 (deflate), CINFO = 7 (32 KiB window)
  out.push_back(0x01);  // FLEVEL 0, no dictionary; 0x7801 % 31 == 0
  size_t pos = 0;
  do {
    const size_t n = std::min<size_t>(65535, raw.size() - pos);
    const bool final = pos + n == raw.size();
    out.push_back(final ? 1 : 0);  // BFINAL, BTYPE = 00 (stored); then byte-aligned
    const auto len = static_cast<uint16_t>(n);
    const auto nlen = static_cast<uint16_t>(~len);
    out.push_back(static_cast<uint8_t>(len & 0xFF));
    out.push_back(static_cast<uint8_t>(len >> 8));
    out.push_back(static_cast<uint8_t>(nlen & 0xFF));
    out.push_back(static_cast<uint8_t>(nlen >> 8));
    out.insert(out.end(), raw.begin() + static_cast<std::ptrdiff_t>(pos),
               raw.begin() + static_cast<std::ptrdiff_t>(pos + n));
    pos += n;
  } while (pos < raw.size());
  put_u32_be(out, adler32(raw));
  return out;
}

std::vector<uint8_t> encode_png(const Image& img) {
  HC_CHECK(img.width > 0 && img.height > 0 &&
           img.rgb.size() == static_cast<size_t>(img.width) * static_cast<size_t>(img.height) * 3);
  static constexpr uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  std::vector<uint8_t> out(kSignature, kSignature + 8);

  std::vector<uint8_t> ihdr;
  put_u32_be(ihdr, static_cast<uint32_t>(img.width));
  put_u32_be(ihdr, static_cast<uint32_t>(img.height));
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});  // bit depth 8, RGB, deflate, filter 0, no interlace
  put_chunk(out, "IHDR", ihdr);

  const size_t row_bytes = static_cast<size_t>(img.width) * 3;
  std::vector<uint8_t> raw;  // [height][1 + width * 3]: filter type 0 (None), then the row
  raw.reserve((row_bytes + 1) * static_cast<size_t>(img.height));
  for (int y = 0; y < img.height; ++y) {
    raw.push_back(0);
    const auto* row = img.rgb.data() + static_cast<size_t>(y) * row_bytes;
    raw.insert(raw.end(), row, row + row_bytes);
  }
  put_chunk(out, "IDAT", zlib_stored(raw));
  put_chunk(out, "IEND", {});
  return out;
}

Status write_png(const std::string& path, const Image& img) {
  const std::vector<uint8_t> bytes = encode_png(img);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return Status::Error("cannot open '" + path + "' for writing");
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  f.close();
  if (!f) return Status::Error("write to '" + path + "' failed");
  return Status::Ok();
}

}  // namespace hc
