// Local stub of the matplot++ names the GAN example uses (figures are not drawn here).
#pragma once
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>
namespace matplot {
struct line_type {
  line_type& line_width(float);
  line_type& display_name(const std::string&);
  line_type& marker_color(std::initializer_list<float>);
};
using line_handle = std::shared_ptr<line_type>;
struct axes_type {};
using axes_handle = std::shared_ptr<axes_type>;
struct figure_type {
  void size(int, int);
  void x_position(int);
  void y_position(int);
  unsigned width() const;
  void width(unsigned);
  unsigned height() const;
  void height(unsigned);
  void add_axes(bool);
  void reactive_mode(bool);
  void tiledlayout(int, int);
  void position(int, int);
  axes_handle nexttile();
  void draw();
  void show();
};
using figure_handle = std::shared_ptr<figure_type>;
figure_handle figure(bool quiet = false);
axes_handle subplot(int, int, int);
template <typename... A> line_handle plot(A&&...);
template <typename... A> line_handle scatter(A&&...);
template <typename... A> void legend(A&&...);
void hold(bool);
void show();
void xlabel(const std::string&);
void ylabel(const std::string&);
void title(const std::string&);
} // namespace matplot
