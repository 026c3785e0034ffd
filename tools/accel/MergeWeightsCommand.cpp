// `accel merge-weights` (see MergeWeightsCommand.h): the flags, then the weights library's merge.
#include "MergeWeightsCommand.h"

#include "Flags.h"
#include "weights/merge.h"
#include "weights/weight_files.h"

#include <iostream>
#include <stdexcept>

namespace accel {

const char* const kMergeWeightsSummary =
    "merge a sharded FSDP/ZeRO checkpoint (save_state's) into full safetensors weights";

namespace {

const std::vector<FlagSpec>& mergeFlags() {
  static const std::vector<FlagSpec> kFlags = {
      FlagSpec::withValue(
          "max_shard_size", "SIZE",
          "the largest weight file, as Accelerate reads sizes (\"10GB\", \"500MB\", \"2GiB\", or "
          "bytes; default 10GB): larger weights are split into model-00001-of-0000N.safetensors "
          "... with model.safetensors.index.json"),
      FlagSpec::withValue("model", "N",
                          "which prepared model of the checkpoint (0 for the first; default 0)"),
      FlagSpec::toggle(
          "unsafe_serialization", '\0',
          "Accelerate's flag for pickle files (pytorch_model.bin): refused, accel writes safetensors"),
      FlagSpec::toggle("help", 'h', "show this help"),
  };
  return kFlags;
}

std::string helpText() {
  return "usage: accel merge-weights [flags] CHECKPOINT_DIR OUTPUT_DIR\n"
         "\n"
         "CHECKPOINT_DIR is a folder save_state wrote (it holds metadata.json), under any strategy and "
         "process\n"
         "count: FSDP's and ZeRO-3's per-process shards (model_shards_<r>.safetensors) are assembled into "
         "whole\n"
         "tensors with the full shapes metadata.json records. OUTPUT_DIR gets model.safetensors, or shards "
         "with\n"
         "model.safetensors.index.json above --max_shard_size: what Accelerator::save_model writes, loadable "
         "by\n"
         "safetensors, transformers and Accelerate's load_checkpoint_in_model. Torch is not needed.\n"
         "\n"
         "flags:\n" +
         formatFlagHelp(mergeFlags());
}

} // namespace

int runMergeWeightsCommand(const std::vector<std::string>& args) {
  ParsedFlags flags = parseFlags(mergeFlags(), args);
  if (flags.has("help")) {
    std::cout << helpText();
    return 0;
  }
  if (flags.has("unsafe_serialization"))
    throw UsageError(
        "--unsafe_serialization asks for pickle files (pytorch_model.bin), which accelerate-cpp does "
        "not write: drop the flag; the safetensors weights load in Python with safetensors, "
        "transformers' from_pretrained or Accelerate's load_checkpoint_in_model");
  if (flags.positionals.size() != 2)
    throw UsageError("give the checkpoint folder and the output folder: accel merge-weights CHECKPOINT_DIR "
                     "OUTPUT_DIR (see accel merge-weights --help)");
  uint64_t maxShardSize = 0;
  try {
    maxShardSize = accelerate::weights::parse_size(
        flags.last("max_shard_size").value_or(accelerate::weights::kDefaultMaxShardSize), "--max_shard_size");
  } catch (const std::invalid_argument& error) {
    throw UsageError(error.what());
  }
  const size_t model = flags.last("model")
                           ? static_cast<size_t>(parseWholeNumberFlag("model", *flags.last("model"), 0, {}))
                           : 0;
  const std::string& checkpoint = flags.positionals[0];
  const std::string& out = flags.positionals[1];
  accelerate::weights::MergeResult result;
  try {
    result = accelerate::weights::merge_checkpoint_weights(checkpoint, out, model, maxShardSize);
  } catch (const accelerate::weights::CheckpointInputError& error) {
    throw UsageError(error.what());
  }
  std::cout << "merged " << result.tensors << " tensors (" << result.total_size
            << " bytes) of the checkpoint " << checkpoint << " (" << result.parallel_strategy << ", "
            << result.world_size << " process(es)) into " << out << ": "
            << (result.files == 1
                    ? std::string(accelerate::weights::kSingleFile)
                    : std::to_string(result.files) + " shards and " + accelerate::weights::kIndexFile)
            << "\n";
  return 0;
}

} // namespace accel
