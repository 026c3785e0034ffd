// Stand-in with definitions for scripts/corpus-train.sh: matplot++ calls do nothing (no figures drawn).
#pragma once
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>
namespace matplot {
struct line_type {
  line_type& line_width(float) { return *this; }
  line_type& display_name(const std::string&) { return *this; }
  line_type& marker_color(std::initializer_list<float>) { return *this; }
};
using line_handle = std::shared_ptr<line_type>;
struct axes_type {};
using axes_handle = std::shared_ptr<axes_type>;
struct figure_type {
  void size(int, int) {}
  void x_position(int) {}
  void y_position(int) {}
  unsigned width() const { return 0; }
  void width(unsigned) {}
  unsigned height() const { return 0; }
  void height(unsigned) {}
  void add_axes(bool) {}
  void reactive_mode(bool) {}
  void tiledlayout(int, int) {}
  void position(int, int) {}
  axes_handle nexttile() { return std::make_shared<axes_type>(); }
  void draw() {}
  void show() {}
};
using figure_handle = std::shared_ptr<figure_type>;
inline figure_handle figure(bool = false) {
  return std::make_shared<figure_type>();
}
inline axes_handle subplot(int, int, int) {
  return std::make_shared<axes_type>();
}
template <typename... A> line_handle plot(A&&...) {
  return std::make_shared<line_type>();
}
template <typename... A> line_handle scatter(A&&...) {
  return std::make_shared<line_type>();
}
template <typename... A> void legend(A&&...) {}
inline void hold(bool) {}
inline void show() {}
inline void xlabel(const std::string&) {}
inline void ylabel(const std::string&) {}
inline void title(const std::string&) {}
} // namespace matplot
