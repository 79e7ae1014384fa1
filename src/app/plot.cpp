#include "app/plot.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace hc {

namespace {

// 5x7 glyphs, one string of 5 columns per row ('#' = ink). Lower-case letters draw as upper.
struct Glyph {
  char c;
  const char* rows[7];
};

constexpr Glyph kFont[] = {
    {'0', {".###.", "#...#", "#..##", "#.#.#", "##..#", "#...#", ".###."}},
    {'1', {"..#..", ".##..", "..#..", "..#..", "..#..", "..#..", ".###."}},
    {'2', {".###.", "#...#", "....#", "...#.", "..#..", ".#...", "#####"}},
    {'3', {"#####", "...#.", "..#..", "...#.", "....#", "#...#", ".###."}},
    {'4', {"...#.", "..##.", ".#.#.", "#..#.", "#####", "...#.", "...#."}},
    {'5', {"#####", "#....", "####.", "....#", "....#", "#...#", ".###."}},
    {'6', {"..##.", ".#...", "#....", "####.", "#...#", "#...#", ".###."}},
    {'7', {"#####", "....#", "...#.", "..#..", ".#...", ".#...", ".#..."}},
    {'8', {".###.", "#...#", "#...#", ".###.", "#...#", "#...#", ".###."}},
    {'9', {".###.", "#...#", "#...#", ".####", "....#", "...#.", ".##.."}},
    {'A', {".###.", "#...#", "#...#", "#####", "#...#", "#...#", "#...#"}},
    {'B', {"####.", "#...#", "#...#", "####.", "#...#", "#...#", "####."}},
    {'C', {".###.", "#...#", "#....", "#....", "#....", "#...#", ".###."}},
    {'D', {"###..", "#..#.", "#...#", "#...#", "#...#", "#..#.", "###.."}},
    {'E', {"#####", "#....", "#....", "####.", "#....", "#....", "#####"}},
    {'F', {"#####", "#....", "#....", "####.", "#....", "#....", "#...."}},
    {'G', {".###.", "#...#", "#....", "#.###", "#...#", "#...#", ".####"}},
    {'H', {"#...#", "#...#", "#...#", "#####", "#...#", "#...#", "#...#"}},
    {'I', {".###.", "..#..", "..#..", "..#..", "..#..", "..#..", ".###."}},
    {'J', {"..###", "...#.", "...#.", "...#.", "...#.", "#..#.", ".##.."}},
    {'K', {"#...#", "#..#.", "#.#..", "##...", "#.#..", "#..#.", "#...#"}},
    {'L', {"#....", "#....", "#....", "#....", "#....", "#....", "#####"}},
    {'M', {"#...#", "##.##", "#.#.#", "#.#.#", "#...#", "#...#", "#...#"}},
    {'N', {"#...#", "#...#", "##..#", "#.#.#", "#..##", "#...#", "#...#"}},
    {'O', {".###.", "#...#", "#...#", "#...#", "#...#", "#...#", ".###."}},
    {'P', {"####.", "#...#", "#...#", "####.", "#....", "#....", "#...."}},
    {'Q', {".###.", "#...#", "#...#", "#...#", "#.#.#", "#..#.", ".##.#"}},
    {'R', {"####.", "#...#", "#...#", "####.", "#.#..", "#..#.", "#...#"}},
    {'S', {".####", "#....", "#....", ".###.", "....#", "....#", "####."}},
    {'T', {"#####", "..#..", "..#..", "..#..", "..#..", "..#..", "..#.."}},
    {'U', {"#...#", "#...#", "#...#", "#...#", "#...#", "#...#", ".###."}},
    {'V', {"#...#", "#...#", "#...#", "#...#", "#...#", ".#.#.", "..#.."}},
    {'W', {"#...#", "#...#", "#...#", "#.#.#", "#.#.#", "#.#.#", ".#.#."}},
    {'X', {"#...#", "#...#", ".#.#.", "..#..", ".#.#.", "#...#", "#...#"}},
    {'Y', {"#...#", "#...#", ".#.#.", "..#..", "..#..", "..#..", "..#.."}},
    {'Z', {"#####", "....#", "...#.", "..#..", ".#...", "#....", "#####"}},
    {'.', {".....", ".....", ".....", ".....", ".....", ".##..", ".##.."}},
    {',', {".....", ".....", ".....", ".....", ".##..", "..#..", ".#..."}},
    {'%', {"##...", "##..#", "...#.", "..#..", ".#...", "#..##", "...##"}},
    {'-', {".....", ".....", ".....", "#####", ".....", ".....", "....."}},
    {'+', {".....", "..#..", "..#..", "#####", "..#..", "..#..", "....."}},
    {'=', {".....", ".....", "#####", ".....", "#####", ".....", "....."}},
    {'(', {"...#.", "..#..", ".#...", ".#...", ".#...", "..#..", "...#."}},
    {')', {".#...", "..#..", "...#.", "...#.", "...#.", "..#..", ".#..."}},
    {':', {".....", ".##..", ".##..", ".....", ".##..", ".##..", "....."}},
    {'/', {".....", "....#", "...#.", "..#..", ".#...", "#....", "....."}},
    {'_', {".....", ".....", ".....", ".....", ".....", ".....", "#####"}},
    {'\'', {"..#..", "..#..", ".#...", ".....", ".....", ".....", "....."}},
};

const Glyph* find_glyph(char c) {
  const char u = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const Glyph& g : kFont)
    if (g.c == u) return &g;
  return nullptr;  // blank (space and anything unknown)
}

constexpr int kAdvance = 6;  // glyph width 5 + 1 column of spacing

const Rgb kBlack{0, 0, 0};
const Rgb kWhite{255, 255, 255};
const Rgb kGrid{222, 222, 222};
const Rgb kAxisText{40, 40, 40};
const Rgb kReference{150, 150, 150};

std::string tick_label(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", std::round(v * 1e6) / 1e6);
  return buf;
}

}  // namespace

Canvas::Canvas(Image* img) : img_(img) { reset_clip(); }

void Canvas::set_clip(int x0, int y0, int x1, int y1) {
  cx0_ = std::max(0, x0);
  cy0_ = std::max(0, y0);
  cx1_ = std::min(img_->width - 1, x1);
  cy1_ = std::min(img_->height - 1, y1);
}

void Canvas::reset_clip() { set_clip(0, 0, img_->width - 1, img_->height - 1); }

void Canvas::pixel(int x, int y, Rgb c) {
  if (x >= cx0_ && x <= cx1_ && y >= cy0_ && y <= cy1_) img_->set(x, y, c);
}

void Canvas::fill_rect(int x, int y, int w, int h, Rgb c) {
  for (int j = y; j < y + h; ++j)
    for (int i = x; i < x + w; ++i) pixel(i, j, c);
}

void Canvas::line(int x0, int y0, int x1, int y1, Rgb c, int width, int dash) {
  const int dx = std::abs(x1 - x0), dy = -std::abs(y1 - y0);
  const int sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
  const int lo = -(width - 1) / 2;  // the brush covers [lo, lo + width) around each point
  int err = dx + dy;
  for (int step = 0;; ++step) {
    if (dash <= 0 || (step / dash) % 2 == 0) fill_rect(x0 + lo, y0 + lo, width, width, c);
    if (x0 == x1 && y0 == y1) break;
    const int e2 = 2 * err;
    if (e2 >= dy) {
      err += dy;
      x0 += sx;
    }
    if (e2 <= dx) {
      err += dx;
      y0 += sy;
    }
  }
}

void Canvas::text(int x, int y, std::string_view s, Rgb c, int scale) {
  for (size_t k = 0; k < s.size(); ++k) {
    const Glyph* g = find_glyph(s[k]);
    if (g == nullptr) continue;
    const int gx = x + static_cast<int>(k) * kAdvance * scale;
    for (int r = 0; r < 7; ++r)
      for (int col = 0; col < 5; ++col)
        if (g->rows[r][col] == '#') fill_rect(gx + col * scale, y + r * scale, scale, scale, c);
  }
}

int Canvas::text_width(std::string_view s, int scale) {
  return s.empty() ? 0 : (static_cast<int>(s.size()) * kAdvance - 1) * scale;
}

Rgb series_color(int i, int n) {
  // HSV with hue from 0 (red) to 270 degrees (violet), full saturation, value 0.8.
  const double h = n > 1 ? 270.0 * i / (n - 1) : 0.0;
  const double v = 0.8, c = v, x = c * (1 - std::fabs(std::fmod(h / 60.0, 2.0) - 1));
  const double sectors[5][3] = {{c, x, 0}, {x, c, 0}, {0, c, x}, {0, x, c}, {x, 0, c}};
  const double* rgb = sectors[std::min(4, static_cast<int>(h / 60.0))];
  auto u8 = [](double t) { return static_cast<uint8_t>(std::lround(255 * t)); };
  return {u8(rgb[0]), u8(rgb[1]), u8(rgb[2])};
}

Image render_line_plot(const LinePlot& p, int width, int height, PlotArea* area_out) {
  Image img(width, height, kWhite);
  Canvas cv(&img);
  const int n = static_cast<int>(p.series.size());

  // Legend: as many columns as needed to fit the series beside the plot.
  const int lscale = n > 24 ? 1 : 2;
  const int entry_h = Canvas::text_height(lscale) + 5;
  const int top = 56, bottom = 64, left = 70;
  const int legend_title_h = p.legend_title.empty() ? 0 : entry_h + 2;
  const int rows = std::max(1, (height - bottom - top - legend_title_h) / entry_h);
  const int cols = n == 0 ? 0 : (n + rows - 1) / rows;
  int label_w = Canvas::text_width(p.legend_title, lscale);
  for (const PlotSeries& s : p.series)
    label_w = std::max(label_w, Canvas::text_width(s.label, lscale));
  const int col_w = 22 + 6 + label_w + 12;
  const int legend_w = cols * col_w + 16;

  PlotArea a{left, top, width - legend_w - 20, height - bottom};
  auto px = [&](double x) {
    return a.x0 +
           static_cast<int>(std::lround((x - p.x_min) / (p.x_max - p.x_min) * (a.x1 - a.x0)));
  };
  auto py = [&](double y) {
    return a.y1 -
           static_cast<int>(std::lround((y - p.y_min) / (p.y_max - p.y_min) * (a.y1 - a.y0)));
  };

  // Grid, reference diagonal, series (clipped to the data area), then the frame on top.
  const double eps = 1e-9;
  for (double x = p.x_min; x <= p.x_max + eps; x += p.grid_step)
    cv.line(px(x), a.y0, px(x), a.y1, kGrid);
  const double y_grid = p.y_grid_step > 0 ? p.y_grid_step : p.grid_step;
  const double y_label = p.y_label_step > 0 ? p.y_label_step : p.label_step;
  for (double y = p.y_min; y <= p.y_max + eps; y += y_grid)
    cv.line(a.x0, py(y), a.x1, py(y), kGrid);
  cv.set_clip(a.x0, a.y0, a.x1, a.y1);
  if (p.diagonal) cv.line(px(p.x_min), py(p.y_min), px(p.x_max), py(p.y_max), kReference, 1, 6);
  for (const PlotSeries& s : p.series)
    for (size_t k = 1; k < s.points.size(); ++k)
      cv.line(px(s.points[k - 1].first), py(s.points[k - 1].second), px(s.points[k].first),
              py(s.points[k].second), s.color, 2);
  cv.reset_clip();
  cv.line(a.x0, a.y0, a.x1, a.y0, kBlack);
  cv.line(a.x0, a.y1, a.x1, a.y1, kBlack);
  cv.line(a.x0, a.y0, a.x0, a.y1, kBlack);
  cv.line(a.x1, a.y0, a.x1, a.y1, kBlack);

  // Tick marks and labels.
  const int ts = 2, th = Canvas::text_height(ts);
  for (double x = p.x_min; x <= p.x_max + eps; x += p.label_step) {
    const std::string l = tick_label(x);
    cv.line(px(x), a.y1, px(x), a.y1 + 4, kBlack);
    cv.text(px(x) - Canvas::text_width(l, ts) / 2, a.y1 + 8, l, kAxisText, ts);
  }
  for (double y = p.y_min; y <= p.y_max + eps; y += y_label) {
    const std::string l = tick_label(y);
    cv.line(a.x0 - 4, py(y), a.x0, py(y), kBlack);
    cv.text(a.x0 - 8 - Canvas::text_width(l, ts), py(y) - th / 2, l, kAxisText, ts);
  }

  // Titles: the plot's above, the y axis's above its axis, the x axis's below its labels.
  cv.text((width - Canvas::text_width(p.title, 2)) / 2, 10, p.title, kBlack, 2);
  cv.text(8, a.y0 - th - 10, p.y_label, kAxisText, 2);
  cv.text((a.x0 + a.x1 - Canvas::text_width(p.x_label, 2)) / 2, a.y1 + 8 + th + 14, p.x_label,
          kAxisText, 2);

  // Legend: a sample of each series' line and its label.
  const int lx = a.x1 + 24;
  int ly = a.y0;
  if (!p.legend_title.empty()) {
    cv.text(lx, ly, p.legend_title, kBlack, lscale);
    ly += legend_title_h;
  }
  for (int i = 0; i < n; ++i) {
    const int x = lx + (i / rows) * col_w, y = ly + (i % rows) * entry_h;
    const int mid = y + Canvas::text_height(lscale) / 2;
    cv.line(x, mid, x + 22, mid, p.series[static_cast<size_t>(i)].color, 3);
    cv.text(x + 28, y, p.series[static_cast<size_t>(i)].label, kAxisText, lscale);
  }
  if (area_out) *area_out = a;
  return img;
}

}  // namespace hc
