// A tiny raster plotter for the CLI's charts (hotcold profile's firing CDF): lines, rectangles
// and text in a built-in 5x7 bitmap font (digits, letters shown upper-case, a few symbols),
// and a line plot with grid, tick labels, axis titles and a legend.
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "app/png.h"

namespace hc {

// Draws into an Image, clipped to a rectangle (the whole image by default).
class Canvas {
 public:
  explicit Canvas(Image* img);
  void set_clip(int x0, int y0, int x1, int y1);  // inclusive pixel bounds
  void reset_clip();

  void pixel(int x, int y, Rgb c);
  void fill_rect(int x, int y, int w, int h, Rgb c);
  // A line of `width` pixels between two points (Bresenham with a square brush); dash > 0
  // draws dash pixels on, dash off.
  void line(int x0, int y0, int x1, int y1, Rgb c, int width = 1, int dash = 0);
  // Text with its top-left corner at (x, y), each font pixel a scale x scale square.
  void text(int x, int y, std::string_view s, Rgb c, int scale = 1);
  static int text_width(std::string_view s, int scale = 1);  // pixels
  static int text_height(int scale = 1) { return 7 * scale; }

 private:
  Image* img_;
  int cx0_, cy0_, cx1_, cy1_;
};

struct PlotSeries {
  std::string label;
  Rgb color;
  std::vector<std::pair<double, double>> points;  // (x, y) in data coordinates, drawn in order
};

struct LinePlot {
  std::string title, x_label, y_label;
  double x_min = 0, x_max = 1, y_min = 0, y_max = 1;
  double grid_step = 0.1;   // grid lines every this many data units (both axes)
  double label_step = 0.2;  // tick labels every this many data units (both axes)
  double y_grid_step = 0, y_label_step = 0;  // the y axis's own steps (0: as above)
  bool diagonal = false;    // a dashed y = x reference line
  std::string legend_title;
  std::vector<PlotSeries> series;
};

// Distinct colours for n series: hues from red through green to violet.
Rgb series_color(int i, int n);

// The pixel rectangle the data range maps to: x_min -> x0, x_max -> x1, y_max -> y0 (top),
// y_min -> y1 (bottom), all inclusive.
struct PlotArea {
  int x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};

// Renders the plot on a white image of width x height pixels; *area (if given) receives the
// data rectangle.
Image render_line_plot(const LinePlot& p, int width, int height, PlotArea* area = nullptr);

}  // namespace hc
