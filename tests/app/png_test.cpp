// The PNG encoder and the plotter: checksums against published values, and files decoded here
// by an independent reader (chunk CRCs, IHDR, the stored-deflate zlib stream, row filters)
// give back the drawn pixels.
#include "app/png.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "app/plot.h"

namespace hc {
namespace {

std::span<const uint8_t> bytes_of(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// Bitwise CRC-32, no table: an independent twin of the encoder's.
uint32_t crc32_bitwise(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
}

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

struct Decoded {
  std::string error;  // empty when the file decoded
  int width = 0, height = 0;
  std::vector<std::string> chunk_types;
  int stored_blocks = 0;
  Image img;
};

// Reads exactly what encode_png writes: 8-bit RGB, stored deflate blocks, filter 0.
Decoded decode(const std::vector<uint8_t>& f) {
  Decoded d;
  static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (f.size() < 8 || std::memcmp(f.data(), sig, 8) != 0) return d.error = "bad signature", d;
  std::vector<uint8_t> idat;
  for (size_t pos = 8; pos < f.size();) {
    if (pos + 12 > f.size()) return d.error = "truncated chunk", d;
    const uint32_t len = be32(&f[pos]);
    if (pos + 12 + len > f.size()) return d.error = "chunk past the end", d;
    const std::string type(reinterpret_cast<const char*>(&f[pos + 4]), 4);
    if (crc32_bitwise(&f[pos + 4], 4 + len) != be32(&f[pos + 8 + len]))
      return d.error = "bad CRC in " + type, d;
    const uint8_t* data = &f[pos + 8];
    d.chunk_types.push_back(type);
    if (type == "IHDR") {
      if (len != 13) return d.error = "IHDR length", d;
      d.width = static_cast<int>(be32(data));
      d.height = static_cast<int>(be32(data + 4));
      if (data[8] != 8 || data[9] != 2 || data[10] || data[11] || data[12])
        return d.error = "IHDR not 8-bit RGB, deflate, filter 0, no interlace", d;
    } else if (type == "IDAT") {
      idat.insert(idat.end(), data, data + len);
    }
    pos += 12 + len;
  }
  // zlib: CMF/FLG, stored blocks, Adler-32 of the raw bytes.
  if (idat.size() < 6 || idat[0] != 0x78 || ((idat[0] << 8) | idat[1]) % 31 != 0)
    return d.error = "bad zlib header", d;
  std::vector<uint8_t> raw;
  size_t p = 2;
  for (bool final = false; !final;) {
    if (p + 5 > idat.size()) return d.error = "truncated deflate block", d;
    final = idat[p] & 1;
    if (((idat[p] >> 1) & 3) != 0) return d.error = "not a stored block", d;
    const unsigned len = idat[p + 1] | (idat[p + 2] << 8);
    const unsigned nlen = idat[p + 3] | (idat[p + 4] << 8);
    if ((len ^ 0xFFFFu) != nlen) return d.error = "LEN/NLEN mismatch", d;
    if (p + 5 + len > idat.size()) return d.error = "stored block past the end", d;
    raw.insert(raw.end(), idat.begin() + static_cast<std::ptrdiff_t>(p + 5),
               idat.begin() + static_cast<std::ptrdiff_t>(p + 5 + len));
    p += 5 + len;
    ++d.stored_blocks;
  }
  if (p + 4 != idat.size()) return d.error = "bytes after the deflate stream", d;
  uint32_t a = 1, b = 0;
  for (uint8_t v : raw) {
    a = (a + v) % 65521;
    b = (b + a) % 65521;
  }
  if (((b << 16) | a) != be32(&idat[p])) return d.error = "bad Adler-32", d;
  const size_t row = static_cast<size_t>(d.width) * 3 + 1;
  if (raw.size() != row * static_cast<size_t>(d.height)) return d.error = "raw size", d;
  d.img = Image(d.width, d.height, Rgb{});
  for (int y = 0; y < d.height; ++y) {
    if (raw[static_cast<size_t>(y) * row] != 0) return d.error = "row filter not 0", d;
    std::memcpy(&d.img.rgb[static_cast<size_t>(y) * (row - 1)],
                &raw[static_cast<size_t>(y) * row + 1], row - 1);
  }
  return d;
}

const Rgb kWhite{255, 255, 255}, kRed{220, 0, 0}, kBlue{0, 0, 200};

TEST(Png, ChecksumsMatchPublishedValues) {
  EXPECT_EQ(crc32(bytes_of("123456789")), 0xCBF43926u);
  EXPECT_EQ(crc32(bytes_of("IEND")), 0xAE426082u);
  EXPECT_EQ(crc32(bytes_of("")), 0u);
  EXPECT_EQ(crc32(bytes_of("56789"), crc32(bytes_of("1234"))), 0xCBF43926u);  // continues
  EXPECT_EQ(adler32(bytes_of("Wikipedia")), 0x11E60398u);
  EXPECT_EQ(adler32(bytes_of("")), 1u);
  // Long input: the modular reduction must not overflow.
  std::vector<uint8_t> ff(100000, 0xFF);
  uint32_t a = 1, b = 0;
  for (uint8_t v : ff) a = (a + v) % 65521, b = (b + a) % 65521;
  EXPECT_EQ(adler32(ff), (b << 16) | a);
}

TEST(Png, DecodesToTheDrawnPixels) {
  Image img(37, 23, kWhite);
  Canvas cv(&img);
  cv.line(2, 5, 30, 5, kRed);        // horizontal
  cv.line(10, 0, 10, 22, kBlue);     // vertical, drawn over the red at (10, 5)
  cv.line(20, 10, 26, 16, kRed, 3);  // diagonal, 3 pixels wide
  const Decoded d = decode(encode_png(img));
  ASSERT_EQ(d.error, "");
  EXPECT_EQ(d.chunk_types, (std::vector<std::string>{"IHDR", "IDAT", "IEND"}));
  EXPECT_EQ(d.width, 37);
  EXPECT_EQ(d.height, 23);
  EXPECT_EQ(d.img.rgb, img.rgb);
  EXPECT_EQ(d.img.at(2, 5), kRed);
  EXPECT_EQ(d.img.at(30, 5), kRed);
  EXPECT_EQ(d.img.at(31, 5), kWhite);
  EXPECT_EQ(d.img.at(1, 5), kWhite);
  EXPECT_EQ(d.img.at(2, 4), kWhite);
  EXPECT_EQ(d.img.at(10, 5), kBlue);
  EXPECT_EQ(d.img.at(10, 22), kBlue);
  EXPECT_EQ(d.img.at(11, 12), kWhite);
  for (int k = 0; k <= 6; ++k) {  // the diagonal's brush covers one pixel either side
    EXPECT_EQ(d.img.at(20 + k, 10 + k), kRed);
    EXPECT_EQ(d.img.at(21 + k, 10 + k), kRed);
    EXPECT_EQ(d.img.at(19 + k, 10 + k), kRed);
  }
  EXPECT_EQ(d.img.at(23, 10), kWhite);
}

TEST(Png, LargeImagesSplitIntoStoredBlocks) {
  Image img(300, 200, kWhite);  // 200 rows of 901 bytes: 180200 raw bytes, 3 blocks
  for (int y = 0; y < 200; ++y)
    for (int x = 0; x < 300; ++x)
      img.set(x, y,
              Rgb{static_cast<uint8_t>(x), static_cast<uint8_t>(y), static_cast<uint8_t>(x ^ y)});
  const Decoded d = decode(encode_png(img));
  ASSERT_EQ(d.error, "");
  EXPECT_EQ(d.stored_blocks, 3);
  EXPECT_EQ(d.img.rgb, img.rgb);
}

TEST(Png, CorruptionIsDetectedByTheReader) {
  // The test's reader must be able to fail: a flipped byte breaks a CRC.
  std::vector<uint8_t> f = encode_png(Image(4, 4, kRed));
  f[f.size() / 2] ^= 1;
  EXPECT_NE(decode(f).error, "");
}

TEST(Plot, LinePlotDrawsSeriesGridFrameAndText) {
  LinePlot p;
  p.title = "test plot";
  p.x_label = "x";
  p.y_label = "y";
  p.legend_title = "layer";
  p.series.push_back({"0", kRed, {{0.0, 0.0}, {1.0, 1.0}}});
  p.series.push_back({"1", kBlue, {{0.0, 0.5}, {1.0, 0.5}}});
  PlotArea a;
  const Image img = render_line_plot(p, 500, 360, &a);
  const Decoded d = decode(encode_png(img));
  ASSERT_EQ(d.error, "");
  ASSERT_EQ(d.width, 500);
  ASSERT_EQ(d.height, 360);
  ASSERT_LT(a.x0, a.x1);
  ASSERT_LT(a.y0, a.y1);
  auto px = [&](double x) { return a.x0 + static_cast<int>(std::lround(x * (a.x1 - a.x0))); };
  auto py = [&](double y) { return a.y1 - static_cast<int>(std::lround(y * (a.y1 - a.y0))); };
  // The red diagonal and the blue horizontal at y = 0.5 (within a pixel of rounding).
  auto near = [&](int x, int y, Rgb c) {
    for (int dy = -1; dy <= 1; ++dy)
      for (int dx = -1; dx <= 1; ++dx)
        if (d.img.at(x + dx, y + dy) == c) return true;
    return false;
  };
  EXPECT_TRUE(near(px(0.25), py(0.25), kRed));
  EXPECT_TRUE(near(px(0.75), py(0.75), kRed));
  EXPECT_FALSE(near(px(0.25), py(0.75), kRed));
  EXPECT_TRUE(near(px(0.2), py(0.5), kBlue));
  EXPECT_TRUE(near(px(0.9), py(0.5), kBlue));
  EXPECT_FALSE(near(px(0.9), py(0.7), kBlue));
  // Frame in black, a grid line (x = 0.3) in light grey away from the series, white between.
  const Rgb black{0, 0, 0};
  EXPECT_EQ(d.img.at(a.x0, py(0.8)), black);
  EXPECT_EQ(d.img.at(a.x1, py(0.8)), black);
  EXPECT_EQ(d.img.at(px(0.5), a.y0), black);
  const Rgb grid = d.img.at(px(0.3), py(0.85));
  EXPECT_TRUE(grid.r == grid.g && grid.g == grid.b && grid.r > 150 && grid.r < 255)
      << int(grid.r) << "," << int(grid.g) << "," << int(grid.b);
  EXPECT_EQ(d.img.at(px(0.35), py(0.85)), kWhite);
  // Text: the title row and the tick labels under the x axis carry ink.
  auto ink = [&](int x0, int y0, int x1, int y1) {
    int n = 0;
    for (int y = y0; y <= y1; ++y)
      for (int x = x0; x <= x1; ++x) n += d.img.at(x, y) == kWhite ? 0 : 1;
    return n;
  };
  EXPECT_GT(ink(0, 0, 499, a.y0 - 30), 50);
  EXPECT_GT(ink(px(0.4) - 18, a.y1 + 6, px(0.4) + 18, a.y1 + 24), 20);  // tick label "0.4"
  EXPECT_EQ(ink(px(0.5) - 4, a.y1 + 6, px(0.5) + 4, a.y1 + 24), 0);     // no label at 0.5
  // The legend (right of the data area) shows both series' colours.
  int red = 0, blue = 0;
  for (int y = a.y0; y <= a.y1; ++y)
    for (int x = a.x1 + 2; x < 500; ++x) {
      red += d.img.at(x, y) == kRed ? 1 : 0;
      blue += d.img.at(x, y) == kBlue ? 1 : 0;
    }
  EXPECT_GT(red, 20);
  EXPECT_GT(blue, 20);
}

}  // namespace
}  // namespace hc
