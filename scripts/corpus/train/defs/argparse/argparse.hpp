// Stand-in with definitions for scripts/corpus-train.sh: `--name value` options with defaults (no
// validation).
#pragma once
#include <map>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>
namespace argparse {
struct Argument {
  std::string name, value;
  Argument& help(const std::string&) { return *this; }
  template <typename T> Argument& default_value(T v) {
    std::ostringstream s;
    s << v;
    value = s.str();
    return *this;
  }
  Argument& scan(...) { return *this; }
  template <char C, typename T> Argument& scan() { return *this; }
  Argument& action(...) { return *this; }
  Argument& implicit_value(bool) { return *this; }
};
struct ArgumentParser {
  std::map<std::string, std::shared_ptr<Argument>> args;
  ArgumentParser(std::string = "", std::string = "") {}
  template <typename... A> Argument& add_argument(A... names) {
    auto a = std::make_shared<Argument>();
    for (std::string n : {std::string(names)...})
      args[n] = a;
    return *a;
  }
  void parse_args(int argc, const char** argv) {
    for (int i = 1; i + 1 < argc; i += 2)
      if (args.count(argv[i]))
        args[argv[i]]->value = argv[i + 1];
  }
  void parse_args(int argc, char** argv) { parse_args(argc, const_cast<const char**>(argv)); }
  template <typename T = std::string> T get(const std::string& n) const {
    std::istringstream s(args.at(n)->value);
    T v{};
    s >> v;
    return v;
  }
};
inline std::ostream& operator<<(std::ostream& o, const ArgumentParser&) {
  return o;
}
} // namespace argparse
