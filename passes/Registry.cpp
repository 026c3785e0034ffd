// passes/Registry.cpp: the pass table; one row per pass.
#include "passes/Registry.h"

#include "passes/AcceleratorPass.h"
#include "passes/AccumulatePass.h"
#include "passes/BackwardPass.h"
#include "passes/CheckpointPass.h"
#include "passes/ClipPass.h"
#include "passes/DataLoaderPass.h"
#include "passes/DevicePass.h"
#include "passes/DistributedPass.h"
#include "passes/FsdpUnitsPass.h"
#include "passes/LayersPass.h"
#include "passes/MainProcessPass.h"
#include "passes/PreparePass.h"
#include "passes/ProfilePass.h"
#include "passes/ProgressBarPass.h"
#include "passes/TrackingPass.h"
#include "passes/TrainingCode.h"

#include "llvm/ADT/STLExtras.h"

namespace accelerate::passes {

// Each row: Name, MakeRule, Summary, OnByDefault, WhenNothingFound, LeavesAlone, TurnedOnBy, UsesAccelerator,
// UsesAcceleratorInMain, AcceleratorOptions, Setting (PassInfo, in that order; later ones may be left out).
// scripts/passes_table.py reads the rows' texts for docs/passes.md's table: after changing one, run
// `python3 scripts/passes_table.py --update`.
llvm::ArrayRef<PassInfo> allPasses() {
  static const PassInfo Passes[] = {
      {"backward", backwardPass,
       "`X.backward(args...)` on a tensor becomes `accelerator.backward(X, args...)`; "
       "`torch::autograd::backward({a, b})` becomes `accelerator.backward(a + b)`",
       /*OnByDefault=*/true, /*WhenNothingFound=*/{},
       /*LeavesAlone=*/
       "calls from a macro; in a template, calls not every instantiation makes a tensor call; "
       "`torch::autograd::backward` given gradients",
       /*TurnedOnBy=*/{}, /*UsesAccelerator=*/trainingBackwardCall},
      {"accelerator", acceleratorPass,
       "declares `accelerator` (in main, or `Accelerator::current()` elsewhere) where the rewritten code "
       "uses it, "
       "and includes <accelerate/accelerate.h>",
       /*OnByDefault=*/true, /*WhenNothingFound=*/{},
       /*LeavesAlone=*/"files that already have an accelerator"},
      {"prepare", preparePass,
       "optimizers and schedulers become `accelerator.prepare(...)`; the models an optimizer trains are "
       "prepared "
       "before it",
       /*OnByDefault=*/true, /*WhenNothingFound=*/{},
       /*LeavesAlone=*/
       "optimizers over loose tensors; member optimizers used in ways a prepared one does not "
       "support; plateau schedulers stepped with a metric of this process's share (warnings)",
       /*TurnedOnBy=*/{}, /*UsesAccelerator=*/prepareUsesAccelerator,
       /*UsesAcceleratorInMain=*/preparedGlobalOptimizer},
      {"data-loader", dataLoaderPass,
       "`torch::data::make_data_loader(...)` read by a training loop becomes "
       "`accelerator.prepare_data_loader(...)`",
       /*OnByDefault=*/true, /*WhenNothingFound=*/{},
       /*LeavesAlone=*/
       "evaluation loaders (note); own samplers, stateful datasets, non-`auto` declarations "
       "(warning); loaders of static storage (refusal: the file is left as it is)",
       /*TurnedOnBy=*/{}, /*UsesAccelerator=*/preparedLoaderDeclaration},
      {"device", devicePass,
       "device declarations become `accelerator.device()`; manual moves of prepared models and batches go",
       /*OnByDefault=*/true, /*WhenNothingFound=*/{},
       /*LeavesAlone=*/"CPU moves, dtype conversions, models only evaluated",
       /*TurnedOnBy=*/{}, /*UsesAccelerator=*/deviceSiteUsingAccelerator},
      {"accumulate", accumulatePass,
       "each training step runs inside `auto accumulate = accelerator.accumulate(...)`",
       /*OnByDefault=*/true, /*WhenNothingFound=*/{},
       /*LeavesAlone=*/"loops whose step is in a helper, non-block bodies",
       /*TurnedOnBy=*/{}, /*UsesAccelerator=*/accumulatedLoop},
      {"clip", clipPass, "`torch::nn::utils::clip_grad_norm_/value_` become the accelerator's",
       /*OnByDefault=*/true, /*WhenNothingFound=*/{},
       /*LeavesAlone=*/"calls with `error_if_nonfinite`",
       /*TurnedOnBy=*/{}, /*UsesAccelerator=*/clipCall},
      {"main-process", mainProcessPass,
       "training output is printed (`accelerator.print`) or written by the main process only",
       /*OnByDefault=*/true, /*WhenNothingFound=*/{},
       /*LeavesAlone=*/"output in other functions",
       /*TurnedOnBy=*/{}, /*UsesAccelerator=*/mainProcessOutput},
      {"checkpoint", checkpointPass,
       "`torch::save(...)` in training code runs on the main process only; saving a model or optimizer in "
       "the "
       "training loop also saves a resumable `accelerator.save_state(...)`",
       /*OnByDefault=*/true, /*WhenNothingFound=*/{},
       /*LeavesAlone=*/
       "`save_state` under a tensor condition (explained); loops a restart cannot continue "
       "(warning)",
       /*TurnedOnBy=*/{}, /*UsesAccelerator=*/checkpointUsesAccelerator},
      {"layers", layersPass,
       "`torch::nn::Linear` in the user's modules becomes `accelerate::nn::Linear` (off by default: the "
       "member's type "
       "changes, so code that takes it as a torch::nn::Linear must change too)",
       /*OnByDefault=*/false, /*WhenNothingFound=*/{},
       /*LeavesAlone=*/"modules the user does not define",
       /*TurnedOnBy=*/"`--enable=layers`"},
      {"fsdp-units", fsdpUnitsPass,
       "the forward of every module class of the project runs inside `accelerate::fsdp::unit`, so that under "
       "the fsdp strategy the wrap policy can make its instances units (`accelerate_target(... FSDP)` "
       "turns it on)",
       /*OnByDefault=*/false,
       /*WhenNothingFound=*/
       "no class derived from torch::nn::Module with a forward is defined in the files "
       "rewritten (the inputs, and the headers --headers names), so no module can "
       "become an FSDP unit; rewrite the file that defines the model's classes, or name "
       "its header with --headers",
       /*LeavesAlone=*/
       "forwards that return no tensors, `const` forwards, forwards written by a macro "
       "(warnings); forwards that already call `accelerate::fsdp::unit`, libtorch's "
       "composite modules (notes)",
       /*TurnedOnBy=*/"`--enable=fsdp-units`, `accelerate_target(... FSDP)`"},
      {"tracking", trackingPass,
       "with `--log-with NAME,...`: the accelerator logs to those trackers; `init_trackers` before the "
       "training loop, `end_training` after it, and each printed loss, mean, sum or count is also logged "
       "(`accelerator.log`) under its printed label, made global as the printed line makes it",
       /*OnByDefault=*/false, /*WhenNothingFound=*/{},
       /*LeavesAlone=*/
       "values in `printf` or under a tensor condition, ratios of this process's sums, loops that "
       "print no training number, unbraced loops (warnings)",
       /*TurnedOnBy=*/"`--log-with`", /*UsesAccelerator=*/trackedTrainingLoop,
       /*UsesAcceleratorInMain=*/nullptr,
       /*AcceleratorOptions=*/trackedAcceleratorOptions, /*Setting=*/"--log-with"},
      {"progress-bar", progressBarPass,
       "with `--progress-bar`: the training loop shows an `accelerate::ProgressBar` on the main process, "
       "over "
       "its step count or its data loader",
       /*OnByDefault=*/false, /*WhenNothingFound=*/{},
       /*LeavesAlone=*/"loops whose length is not known, loaders left unprepared, unbraced loops (warnings)",
       /*TurnedOnBy=*/"`--progress-bar`", /*UsesAccelerator=*/progressBarOverSteps,
       /*UsesAcceleratorInMain=*/nullptr,
       /*AcceleratorOptions=*/nullptr, /*Setting=*/"--progress-bar"},
      {"profile", profilePass,
       "with `--profile`: the training loop runs under `accelerator.profile()` (libtorch's profiler), "
       "stepped "
       "after each optimizer step; each process writes a Chrome trace",
       /*OnByDefault=*/false, /*WhenNothingFound=*/{},
       /*LeavesAlone=*/"loops written without braces around them or their body (warnings)",
       /*TurnedOnBy=*/"`--profile`, `accelerate_target(... PROFILE)`",
       /*UsesAccelerator=*/profiledTrainingRun,
       /*UsesAcceleratorInMain=*/nullptr,
       /*AcceleratorOptions=*/nullptr, /*Setting=*/"--profile"},
      {"distributed", distributedPass,
       "notes functions left alone because they already use the runtime or c10d",
       /*OnByDefault=*/true, /*WhenNothingFound=*/{},
       /*LeavesAlone=*/"functions that already call the runtime or c10d (note)"},
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
