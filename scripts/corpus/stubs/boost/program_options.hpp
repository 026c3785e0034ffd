// Local stub of the boost::program_options names the corpus uses.
#pragma once
#include <map>
#include <string>
namespace boost::program_options {
struct variable_value {
  template <typename T> const T& as() const;
  bool empty() const;
};
struct variables_map : std::map<std::string, variable_value> {
  size_t count(const std::string&) const;
  const variable_value& operator[](const std::string&) const;
};
} // namespace boost::program_options
