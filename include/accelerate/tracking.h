// What `Accelerator::log` and `init_trackers` accept: named numbers, 0-d tensors and texts.
#pragma once

#include <accelerate/tracker.h>

#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <ATen/core/Tensor.h>

namespace accelerate {

/// One value given to `accelerator.log` or `init_trackers`: a number, a 0-d tensor (read when it is logged:
/// all the tensors of one `log` call are copied to the host together, one synchronisation per call on a
/// GPU), or a text.
class LogValue {
public:
  template <typename Number, std::enable_if_t<std::is_arithmetic_v<Number>, int> = 0>
  LogValue(Number number) : value_(static_cast<double>(number)) {}
  LogValue(const at::Tensor& tensor) : value_(tensor) {}
  LogValue(std::string text) : value_(std::move(text)) {}
  LogValue(const char* text) : value_(std::string(text)) {}

  const std::variant<double, at::Tensor, std::string>& get() const { return value_; }

private:
  std::variant<double, at::Tensor, std::string> value_;
};

/// Named values, in the order given: `{{"loss", loss}, {"lr", 3e-4}, {"phase", "warmup"}}`.
using LogValues = std::vector<std::pair<std::string, LogValue>>;

} // namespace accelerate
