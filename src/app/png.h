// A minimal PNG encoder for plots: 8-bit RGB, no interlacing, filter 0 on every row, and a
// zlib stream of stored (uncompressed) deflate blocks, so it needs no compression library.
// Files are ~3 bytes per pixel; a plot of 900 x 600 is ~1.6 MB.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace hc {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Rgb&) const = default;
};

// An RGB raster, row-major from the top-left pixel.
struct Image {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;  // [height][width][3]

  Image() = default;
  Image(int w, int h, Rgb fill);
  Rgb at(int x, int y) const;
  void set(int x, int y, Rgb c);  // ignores pixels outside the image
};

// CRC-32 (ISO-HDLC, as PNG chunks use) continuing from `crc` (0 for a fresh one).
uint32_t crc32(std::span<const uint8_t> data, uint32_t crc = 0);
// Adler-32 (as the zlib stream trailer uses) continuing from `adler` (1 for a fresh one).
uint32_t adler32(std::span<const uint8_t> data, uint32_t adler = 1);
// `raw` as a zlib stream of stored deflate blocks (at most 65535 bytes each).
std::vector<uint8_t> zlib_stored(std::span<const uint8_t> raw);

std::vector<uint8_t> encode_png(const Image& img);
Status write_png(const std::string& path, const Image& img);

}  // namespace hc
