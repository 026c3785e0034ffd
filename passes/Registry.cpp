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
#include "passes/ProgressBarPass.h"
#include "passes/TrackingPass.h"

#include "llvm/ADT/STLExtras.h"

namespace accelerate::passes {

llvm::ArrayRef<PassInfo> allPasses() {
  static const PassInfo Passes[] = {
      {"backward", backwardPass,
       "`X.backward(args...)` on a tensor becomes `accelerator.backward(X, args...)`"},
      {"accelerator", acceleratorPass,
       "declares `accelerator` (in main, or `Accelerator::current()` elsewhere) where the rewritten code "
       "uses it, "
       "and includes <accelerate/accelerate.h>"},
      {"prepare", preparePass,
       "optimizers and schedulers become `accelerator.prepare(...)`; the models an optimizer trains are "
       "prepared "
       "before it"},
      {"data-loader", dataLoaderPass,
       "`torch::data::make_data_loader(...)` read by a training loop becomes "
       "`accelerator.prepare_data_loader(...)`"},
      {"device", devicePass,
       "device declarations become `accelerator.device()`; manual moves of prepared models and batches go"},
      {"accumulate", accumulatePass,
       "each training step runs inside `auto accumulate = accelerator.accumulate(...)`"},
      {"clip", clipPass, "`torch::nn::utils::clip_grad_norm_/value_` become the accelerator's"},
      {"main-process", mainProcessPass,
       "training output is printed (`accelerator.print`) or written by the main process only"},
      {"checkpoint", checkpointPass,
       "`torch::save(...)` in training code runs on the main process only; saving a model or optimizer in "
       "the "
       "training loop also saves a resumable `accelerator.save_state(...)`"},
      {"layers", layersPass,
       "`torch::nn::Linear` in the user's modules becomes `accelerate::nn::Linear` (off by default: the "
       "member's type "
       "changes, so code that takes it as a torch::nn::Linear must change too)",
       /*OnByDefault=*/false},
      {"fsdp-units", fsdpUnitsPass,
       "the forward of every module class of the project runs inside `accelerate::fsdp::unit`, so that under "
       "the fsdp strategy the wrap policy can make its instances units (`accelerate_target(... FSDP)` "
       "turns it on)",
       /*OnByDefault=*/false,
       "no class derived from torch::nn::Module with a forward is defined in the files rewritten (the "
       "inputs, "
       "and the headers --headers names), so no module can become an FSDP unit; rewrite the file that "
       "defines "
       "the model's classes, or name its header with --headers"},
      {"tracking", trackingPass,
       "with `--log-with NAME,...`: the accelerator logs to those trackers; `init_trackers` before the "
       "training loop, `end_training` after it, and each printed loss is also logged (`accelerator.log`) "
       "under its printed label, as its mean over the processes",
       /*OnByDefault=*/false},
      {"progress-bar", progressBarPass,
       "with `--progress-bar`: the training loop shows an `accelerate::ProgressBar` on the main process, "
       "over "
       "its step count or its data loader",
       /*OnByDefault=*/false},
      {"distributed", distributedPass,
       "notes functions left alone because they already use the runtime or c10d"},
  };
  return Passes;
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
