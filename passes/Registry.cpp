// passes/Registry.cpp: the pass table; one row per pass.
#include "passes/Registry.h"

#include "passes/TrainingCode.h"

#include "llvm/ADT/STLExtras.h"

namespace accelerate::passes {

// The rows, each from its pass's file, in passes/Passes.def's order.
#define ACCELERATE_PASS(Row) PassInfo Row();
#include "passes/Passes.def"
#undef ACCELERATE_PASS

llvm::ArrayRef<PassInfo> allPasses() {
  static const PassInfo Passes[] = {
#define ACCELERATE_PASS(Row) Row(),
#include "passes/Passes.def"
#undef ACCELERATE_PASS
  };
  return Passes;
}

std::variant<std::vector<PassInfo>, PassRequestProblem> selectPasses(const PassRequest& Request) {
  using Kind = PassRequestProblem::Kind;
  auto Find = [](llvm::StringRef Name) -> const PassInfo* {
    for (const PassInfo& Pass : allPasses())
      if (Pass.Name == Name)
        return &Pass;
    return nullptr;
  };
  for (const auto* Names : {&Request.Only, &Request.Enable, &Request.Disable})
    for (const std::string& Name : *Names)
      if (!Find(Name))
        return PassRequestProblem{Kind::UnknownPass, nullptr, Name};
  auto Given = [&](const PassInfo& Pass) {
    return !Pass.Setting.empty() && llvm::is_contained(Request.Settings, Pass.Setting);
  };
  for (const std::string& Name : Request.Disable)
    if (Given(*Find(Name)))
      return PassRequestProblem{Kind::SettingButDisabled, Find(Name), Name};
  for (const std::string& Name : Request.Enable)
    if (llvm::is_contained(Request.Disable, Name))
      return PassRequestProblem{Kind::EnabledAndDisabled, Find(Name), Name};
  for (const auto* Names : {&Request.Only, &Request.Enable})
    for (const std::string& Name : *Names)
      if (const PassInfo* Pass = Find(Name); !Pass->Setting.empty() && !Given(*Pass))
        return PassRequestProblem{Kind::NeedsItsSetting, Pass, Name};
  std::vector<PassInfo> Selected;
  for (const PassInfo& Pass : allPasses()) {
    const bool Wanted =
        (Request.Only.empty() ? Pass.OnByDefault : llvm::is_contained(Request.Only, Pass.Name)) ||
        llvm::is_contained(Request.Enable, Pass.Name) || Given(Pass);
    if (Wanted && !llvm::is_contained(Request.Disable, Pass.Name))
      Selected.push_back(Pass);
  }
  return Selected;
}

std::string knownPassNames() {
  std::string Names;
  for (const PassInfo& Pass : allPasses())
    Names += (Names.empty() ? "" : ", ") + Pass.Name.str();
  return Names;
}

namespace {
thread_local const EnabledPasses* CurrentScope = nullptr;
} // namespace

EnabledPasses::EnabledPasses(llvm::ArrayRef<PassInfo> Passes, PassSettings Settings)
    : Outer(CurrentScope), Settings(std::move(Settings)) {
  for (const PassInfo& Pass : Passes)
    Names.push_back(Pass.Name.str());
  CurrentScope = this;
}

EnabledPasses::~EnabledPasses() {
  CurrentScope = Outer;
}

bool isPassEnabled(llvm::StringRef Name) {
  if (CurrentScope)
    return llvm::is_contained(CurrentScope->Names, Name);
  return llvm::any_of(allPasses(),
                      [&](const PassInfo& Pass) { return Pass.Name == Name && Pass.OnByDefault; });
}

const PassSettings& passSettings() {
  static const PassSettings Defaults;
  return CurrentScope ? CurrentScope->Settings : Defaults;
}

} // namespace accelerate::passes
