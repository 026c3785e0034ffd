// passes/Registry.h: the table of every rewrite pass accel-rewrite runs, in the order it runs them, and the
// selection of the passes a front end asks for. What a pass is: passes/Pass.h.
#ifndef ACCELERATE_PASSES_REGISTRY_H
#define ACCELERATE_PASSES_REGISTRY_H

#include "passes/Pass.h"

#include "llvm/ADT/ArrayRef.h"

#include <string>
#include <variant>
#include <vector>

namespace accelerate::passes {

/// All passes, in the order they run. Every pass sees the original code; their edits must not overlap.
llvm::ArrayRef<PassInfo> allPasses();

/// The passes a front end is asked to run (accel-rewrite's --passes, --enable, --disable and its settings;
/// the clang-tidy check's Enable and Disable options): the passes on by default, or exactly `Only` when it
/// names any; plus `Enable`; plus each pass whose Setting is in `Settings`; minus `Disable`.
struct PassRequest {
  std::vector<std::string> Only;
  std::vector<std::string> Enable;
  std::vector<std::string> Disable;
  std::vector<std::string> Settings; ///< the settings given, as PassInfo::Setting spells them
};

/// What is wrong with a PassRequest, for the front end to say in its own words.
struct PassRequestProblem {
  enum class Kind {
    UnknownPass,        ///< `Pass` is no pass of the table (knownPassNames() lists them)
    SettingButDisabled, ///< `Pass`'s Setting is given, and Disable names `Pass`
    EnabledAndDisabled, ///< Enable and Disable both name `Pass`
    NeedsItsSetting,    ///< Only or Enable names `Pass` without its Setting
  };
  Kind What;
  const PassInfo* Pass = nullptr; ///< null for UnknownPass
  std::string Name;               ///< the name as the request wrote it
};

/// The passes `Request` selects, in the table's order; or its first problem, checked in the order of Kind.
std::variant<std::vector<PassInfo>, PassRequestProblem> selectPasses(const PassRequest& Request);

/// The table's pass names, comma-separated, for a message naming the known ones.
std::string knownPassNames();

} // namespace accelerate::passes

#endif // ACCELERATE_PASSES_REGISTRY_H
