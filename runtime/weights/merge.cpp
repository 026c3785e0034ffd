// A checkpoint's model turned into full weights (merge.h).
#include "weights/merge.h"

#include "common/durable_file.h"
#include "weights/safetensors_format.h"
#include "weights/weight_files.h"

#include <algorithm>
#include <map>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

namespace accelerate::weights {
namespace {

// The checkpoint format's names (runtime/checkpoint/format.h, docs/checkpoint-format.md).
constexpr const char* kFormatName = "accelerate-cpp checkpoint";
constexpr const char* kMetadataFile = "metadata.json";
constexpr const char* kOffsetPrefix = "offset:";

/// A tensor of the merged weights: where its bytes come from.
struct Source {
  WeightInfo info;
  /// Each piece: the file, its entry, and the first element it holds in the flattened tensor (0 and the
  /// whole tensor for a tensor written whole).
  struct Piece {
    const SafetensorsFile* file;
    TensorEntry entry;
    int64_t offset;
  };
  std::vector<Piece> pieces;
};

class Merge {
public:
  Merge(std::string checkpoint, size_t model) : checkpoint_(std::move(checkpoint)), model_(model) {}

  std::vector<Source> read(MergeResult& result) {
    const nlohmann::json metadata = read_metadata();
    result.parallel_strategy = metadata.value("parallel_strategy", std::string("ddp"));
    result.world_size = metadata.value("world_size", 0);
    if (!metadata.contains("models") || !metadata["models"].is_array()) {
      damaged(std::string(kMetadataFile) + " has no list of models");
    }
    const auto& models = metadata["models"];
    if (model_ >= models.size()) {
      throw CheckpointInputError("the checkpoint '" + checkpoint_ + "' holds " +
                                 std::to_string(models.size()) + " model(s), so it has no model " +
                                 std::to_string(model_) + ": give --model a number below " +
                                 std::to_string(models.size()));
    }
    files_ =
        metadata.contains("files") && metadata["files"].is_object() ? metadata["files"] : nlohmann::json();
    const auto& entry = models[model_];
    std::vector<std::string> names;
    if (entry.contains("shards") && entry["shards"].is_array()) {
      for (const auto& name : entry["shards"]) {
        names.push_back(name.get<std::string>());
      }
    } else if (entry.contains("file") && entry["file"].is_string()) {
      names.push_back(entry["file"].get<std::string>());
    } else {
      damaged("model " + std::to_string(model_) + "'s entry in " + kMetadataFile +
              " names neither its file nor its shards");
    }
    const nlohmann::json weights = entry.contains("weights") ? entry["weights"] : nlohmann::json::object();

    std::map<std::string, Source> sources;
    for (const auto& name : names) {
      const SafetensorsFile& file = open(name);
      for (const auto& tensor : file.header().tensors) {
        auto& source = sources[tensor.name];
        const auto offset = file.header().metadata.find(kOffsetPrefix + tensor.name);
        if (offset == file.header().metadata.end()) {
          source.info = {tensor.name, tensor.dtype, tensor.shape};
          source.pieces.push_back({&file, tensor, 0});
          continue;
        }
        if (!weights.contains(tensor.name)) {
          throw CheckpointInputError(
              "the checkpoint '" + checkpoint_ + "' holds '" + tensor.name + "' in pieces, but its " +
              kMetadataFile +
              " does not record the tensor's full shape (it was written by an accelerate-cpp older than "
              "merge-weights): load it with load_state in the training program and write the weights with "
              "accelerator.save_model, or save the checkpoint again with this version");
        }
        const auto& full = weights[tensor.name];
        std::vector<int64_t> shape;
        for (const auto& size : full.at("shape")) {
          shape.push_back(size.get<int64_t>());
        }
        source.info = {tensor.name, full.at("dtype").get<std::string>(), shape};
        int64_t begin = 0;
        try {
          begin = std::stoll(offset->second);
        } catch (const std::exception&) {
          damaged("'" + name + "' gives the piece of '" + tensor.name + "' the offset '" + offset->second +
                  "'");
        }
        source.pieces.push_back({&file, tensor, begin});
      }
    }
    std::vector<Source> merged;
    for (auto& [name, source] : sources) {
      check_pieces(source);
      merged.push_back(std::move(source));
    }
    result.tensors = merged.size();
    return merged;
  }

  static std::string bytes_of(const Source& source) {
    const auto& only = source.pieces.front();
    if (source.pieces.size() == 1 && only.offset == 0 && only.entry.shape == source.info.shape) {
      return only.file->read(only.entry);
    }
    const uint64_t element = element_size(source.info.dtype);
    std::string bytes(source.info.bytes(), '\0');
    for (const auto& piece : source.pieces) {
      const std::string part = piece.file->read(piece.entry);
      std::copy(part.begin(), part.end(),
                bytes.begin() + static_cast<std::ptrdiff_t>(piece.offset * element));
    }
    return bytes;
  }

private:
  [[noreturn]] void damaged(const std::string& problem) const {
    throw CheckpointInputError("the checkpoint '" + checkpoint_ + "' is damaged: " + problem +
                               ". Merge another checkpoint (the folders next to it), or save a new one");
  }

  nlohmann::json read_metadata() const {
    if (!detail::is_directory(checkpoint_)) {
      throw CheckpointInputError("'" + checkpoint_ +
                                 "' is not a folder: give the checkpoint folder that "
                                 "save_state wrote (one holding metadata.json), e.g. "
                                 "project_dir/checkpoints/checkpoint_3");
    }
    const std::string path = detail::join_path(checkpoint_, kMetadataFile);
    if (!detail::path_exists(path)) {
      throw CheckpointInputError(
          "'" + checkpoint_ + "' is not a checkpoint folder: it has no " + kMetadataFile +
          " (save_state writes it last, so a folder without it is not a checkpoint, or one whose save did "
          "not finish). Give the folder save_state wrote, e.g. project_dir/checkpoints/checkpoint_3; to "
          "shard weights that are already whole, load them and call accelerator.save_model");
    }
    nlohmann::json metadata;
    try {
      metadata = nlohmann::json::parse(detail::read_whole_file(path));
    } catch (const nlohmann::json::exception& error) {
      damaged(std::string(kMetadataFile) + " does not parse (" + error.what() + ")");
    } catch (const detail::FileError& error) {
      throw CheckpointInputError(std::string(error.what()) +
                                 ": make the checkpoint readable, or merge another");
    }
    if (!metadata.is_object() || metadata.value("format", std::string()) != kFormatName) {
      throw CheckpointInputError("'" + path + "' is not an accelerate-cpp checkpoint's " + kMetadataFile +
                                 " (its \"format\" is not \"" + kFormatName +
                                 "\"): give the folder accelerate-cpp's save_state wrote");
    }
    return metadata;
  }

  const SafetensorsFile& open(const std::string& name) {
    const std::string path = detail::join_path(checkpoint_, name);
    const auto record = files_.is_object() && files_.contains(name) ? files_[name] : nlohmann::json();
    const std::string writer = record.is_object() && record.contains("rank")
                                   ? " (written by process " + record["rank"].dump() + ")"
                                   : "";
    if (!detail::path_exists(path)) {
      throw CheckpointInputError(
          "the checkpoint '" + checkpoint_ + "' lacks '" + name + "'" + writer + ", which " + kMetadataFile +
          " lists: the checkpoint is incomplete (a file lost in a copy, or a process's "
          "folder not shared). Copy the whole checkpoint folder, or merge another checkpoint");
    }
    struct stat info{};
    ::stat(path.c_str(), &info);
    if (record.is_object() && record.contains("bytes") &&
        record["bytes"].get<uint64_t>() != static_cast<uint64_t>(info.st_size)) {
      damaged("'" + name + "'" + writer + " holds " + std::to_string(info.st_size) + " bytes, but " +
              kMetadataFile + " recorded " + record["bytes"].dump() + " (truncated, or from another save)");
    }
    try {
      opened_.push_back(std::make_unique<SafetensorsFile>(path));
    } catch (const std::runtime_error& error) {
      throw CheckpointInputError(std::string(error.what()) + " (merge another checkpoint)");
    }
    return *opened_.back();
  }

  void check_pieces(Source& source) const {
    const std::string& name = source.info.name;
    if (source.pieces.size() == 1 && source.pieces.front().offset == 0 &&
        source.pieces.front().entry.shape == source.info.shape) {
      return;
    }
    if (element_size(source.info.dtype) == 0) {
      damaged("'" + name + "' has the dtype " + source.info.dtype + ", which merge-weights does not know (" +
              known_dtypes() + ")");
    }
    int64_t numel = 1;
    for (const int64_t size : source.info.shape) {
      numel *= size;
    }
    std::sort(source.pieces.begin(), source.pieces.end(),
              [](const Source::Piece& a, const Source::Piece& b) { return a.offset < b.offset; });
    int64_t covered = 0;
    for (const auto& piece : source.pieces) {
      if (piece.entry.dtype != source.info.dtype) {
        damaged("a piece of '" + name + "' in '" + piece.file->path() + "' is " + piece.entry.dtype +
                ", but " + kMetadataFile + " records the tensor as " + source.info.dtype);
      }
      if (piece.offset != covered) {
        damaged("the pieces of '" + name + "' do not add up to its " + std::to_string(numel) +
                " elements: elements from " + std::to_string(covered) + " on are " +
                (piece.offset > covered ? "missing" : "held twice") +
                " (a process's file is missing or from another checkpoint)");
      }
      covered += piece.entry.elements();
    }
    if (covered != numel) {
      damaged("the pieces of '" + name + "' hold " + std::to_string(covered) + " of its " +
              std::to_string(numel) + " elements (a process's file is missing or from another checkpoint)");
    }
  }

  std::string checkpoint_;
  size_t model_;
  nlohmann::json files_;
  std::vector<std::unique_ptr<SafetensorsFile>> opened_;
};

} // namespace

MergeResult merge_checkpoint_weights(const std::string& checkpoint, const std::string& out, size_t model,
                                     uint64_t max_shard_size) {
  MergeResult result;
  Merge merge(checkpoint, model);
  std::vector<Source> sources;
  try {
    sources = merge.read(result);
  } catch (const nlohmann::json::exception& error) {
    throw CheckpointInputError("the checkpoint '" + checkpoint + "' is damaged: its " + kMetadataFile +
                               " does not have the layout save_state writes (" + error.what() +
                               "). Merge another checkpoint (the folders next to it), or save a new one");
  }
  std::vector<WeightInfo> tensors;
  for (const auto& source : sources) {
    tensors.push_back(source.info);
  }
  const ShardPlan plan =
      write_weight_files(out, tensors, max_shard_size, [&](size_t i) { return Merge::bytes_of(sources[i]); },
                         {{"format", "pt"}});
  result.files = plan.files.size();
  result.total_size = plan.total_size;
  return result;
}

} // namespace accelerate::weights
