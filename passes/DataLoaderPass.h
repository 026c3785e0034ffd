// passes/DataLoaderPass.h: training loaders made with `torch::data::make_data_loader` become the runtime's
// distributed loader.
#ifndef ACCELERATE_PASSES_DATALOADERPASS_H
#define ACCELERATE_PASSES_DATALOADERPASS_H

#include "passes/Pass.h"

namespace accelerate::passes {

/// Rewrites the loaders a training loop reads into prepared loaders, which give each process its share of
/// every global batch, already on `accelerator.device()`:
///
///   auto loader = torch::data::make_data_loader(std::move(dataset), 64);
///     →  auto loader = accelerator.prepare_data_loader(std::move(dataset), 64);
///   auto loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(dataset, options);
///     →  auto loader = accelerator.prepare_data_loader(dataset,
///                                                      accelerate::DataLoaderOptions(options).shuffle(false));
///
/// `for (auto& batch : *loader)` keeps working. Loaders that only evaluation loops read are left alone: every
/// process evaluates the whole set, so metrics stay global. Loaders with an explicit sampler object or a
/// stateful dataset, and loaders declared with a type other than `auto`, are reported.
PassRule dataLoaderPass();

} // namespace accelerate::passes

#endif // ACCELERATE_PASSES_DATALOADERPASS_H
