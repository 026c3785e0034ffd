// Local stub of the OpenCV names the corpus files use (declarations only; never linked).
#pragma once
#include <string>
#include <vector>
#define CV_8UC3 16
#define CV_8UC1 0
#define CV_32FC3 21
#define CV_32F 5
#define CV_8U 0
#define CV_BGR2RGB 4
namespace cv {
enum {
  INTER_LINEAR = 1,
  INTER_CUBIC = 2,
  BORDER_CONSTANT = 0,
  IMREAD_COLOR = 1,
  IMREAD_GRAYSCALE = 0,
  COLOR_BGR2RGB = 4,
  COLOR_RGB2BGR = 4,
  COLOR_BGR2GRAY = 6
};
struct Size {
  Size();
  Size(int w, int h);
  int width, height;
};
struct Scalar {
  Scalar();
  Scalar(double a, double b = 0, double c = 0, double d = 0);
  double operator[](int) const;
};
struct Point {
  Point();
  Point(int x, int y);
  int x, y;
};
struct Rect {
  Rect();
  Rect(int x, int y, int w, int h);
};
struct Mat {
  Mat();
  Mat(int rows, int cols, int type);
  Mat(int rows, int cols, int type, void* data);
  Mat(Size size, int type);
  Mat(int rows, int cols, int type, const Scalar& s);
  int rows, cols;
  unsigned char* data;
  int channels() const;
  int type() const;
  Mat clone() const;
  bool empty() const;
  Size size() const;
  void convertTo(Mat& m, int rtype, double alpha = 1, double beta = 0) const;
  template <typename T> T& at(int r, int c);
  Mat operator()(const Rect&) const;
  template <typename T = unsigned char> T* ptr(int row = 0);
  template <typename T = unsigned char> const T* ptr(int row = 0) const;
  static Mat zeros(int rows, int cols, int type);
  static Mat ones(int rows, int cols, int type);
  static Mat zeros(Size size, int type);
  static Mat ones(Size size, int type);
};
Mat imread(const std::string& filename, int flags = IMREAD_COLOR);
bool imwrite(const std::string& filename, const Mat& img);
void imshow(const std::string& winname, const Mat& mat);
int waitKey(int delay = 0);
void destroyAllWindows();
void resize(const Mat& src, Mat& dst, Size dsize, double fx = 0, double fy = 0,
            int interpolation = INTER_LINEAR);
void cvtColor(const Mat& src, Mat& dst, int code);
void split(const Mat& src, std::vector<Mat>& mv);
void merge(const std::vector<Mat>& mv, Mat& dst);
void fillPoly(Mat& img, const std::vector<std::vector<Point>>& pts, const Scalar& color, int lineType = 8,
              int shift = 0, Point offset = Point());
} // namespace cv
