// Local stub of the argparse names the corpus uses.
#pragma once
#include <ostream>
#include <string>
namespace argparse {
struct Argument {
  Argument& help(const std::string&);
  template <typename T> Argument& default_value(T);
  Argument& scan(...);
  template <char C, typename T> Argument& scan();
  Argument& action(...);
  Argument& implicit_value(bool);
};
struct ArgumentParser {
  ArgumentParser(std::string name = "", std::string version = "");
  template <typename... A> Argument& add_argument(A...);
  void parse_args(int, char**);
  void parse_args(int, const char**);
  template <typename T = std::string> T get(const std::string&) const;
};
std::ostream& operator<<(std::ostream&, const ArgumentParser&);
} // namespace argparse
