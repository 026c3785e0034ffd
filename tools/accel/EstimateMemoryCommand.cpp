// `accel estimate-memory` (see EstimateMemoryCommand.h).
#include "EstimateMemoryCommand.h"

#include "Executable.h"
#include "Flags.h"
#include "weights/safetensors_format.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <iostream>
#include <map>
#include <spawn.h>
#include <stdexcept>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace accel {

const char* const kEstimateMemorySummary =
    "the memory a model needs to load and to train, per dtype and per process under each strategy";

namespace {

constexpr std::int64_t kFloat32Bytes = 4;

const std::vector<FlagSpec>& estimateFlags() {
  static const std::vector<FlagSpec> kFlags = {
      FlagSpec::withValue(
          "dtypes", "LIST",
          "the dtypes of Accelerate's table, comma-separated, of float32, float16, int8, int4 "
          "(default: all four)"),
      FlagSpec::withValue("num_processes", "N", "the process count of the per-process table (default: 2)")
          .alsoCalled({"nproc_per_node"}),
      FlagSpec::toggle("help", 'h', "show this help"),
  };
  return kFlags;
}

std::string helpText() {
  return "usage: accel estimate-memory [flags] MODEL [program args...]\n"
         "\n"
         "MODEL is a safetensors file, a folder of them (a sharded checkpoint), or a training program built "
         "on\n"
         "accelerate-cpp: the program runs alone up to its first prepare(model), which writes the model's\n"
         "tensors and ends it, before anything is allocated for training. Prints Accelerate's table (per "
         "dtype:\n"
         "the largest layer, the total size, training using Adam) and, per process, what training in "
         "float32\n"
         "with Adam keeps under DDP, ZeRO-1, ZeRO-2 and FSDP at --num_processes processes (docs/cli.md).\n"
         "\n"
         "flags:\n" +
         formatFlagHelp(estimateFlags());
}

/// Bytes as Accelerate's `convert_bytes` writes them: the largest unit under 1024, two decimals at most (a
/// whole number of bytes as an integer when `whole`: Python prints an int so, and a float as "322.0 bytes").
std::string convertBytes(double size, bool whole = true) {
  const char* units[] = {"bytes", "KB", "MB", "GB", "TB"};
  for (const char* unit : units) {
    if (size < 1024.0) {
      char text[64];
      std::snprintf(text, sizeof(text), "%.2f", size);
      std::string number = text;
      while (number.back() == '0' && number[number.size() - 2] != '.')
        number.pop_back(); // Python's repr of round(size, 2): "3.0", "1.6", "84.95"
      if (whole && std::string(unit) == "bytes" &&
          size == static_cast<double>(static_cast<std::int64_t>(size)))
        number = std::to_string(static_cast<std::int64_t>(size));
      return number + " " + unit;
    }
    size /= 1024.0;
  }
  char text[64];
  std::snprintf(text, sizeof(text), "%.2f PB", size);
  return text;
}

/// A boxed table: a title row, then the headers and rows, each column as wide as its widest cell, centred.
std::string boxTable(const std::string& title, const std::vector<std::string>& headers,
                     const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (size_t column = 0; column < headers.size(); ++column) {
    size_t width = headers[column].size();
    for (const auto& row : rows)
      width = std::max(width, row[column].size());
    widths.push_back(width + 2);
  }
  size_t inner = widths.size() - 1;
  for (size_t width : widths)
    inner += width;
  if (title.size() + 2 > inner) {
    widths.back() += title.size() + 2 - inner;
    inner = title.size() + 2;
  }
  auto repeat = [](const std::string& text, size_t count) {
    std::string result;
    for (size_t i = 0; i < count; ++i)
      result += text;
    return result;
  };
  auto centred = [](const std::string& text, size_t width) {
    const size_t left = (width - text.size()) / 2;
    return std::string(left, ' ') + text + std::string(width - text.size() - left, ' ');
  };
  auto rule = [&](const char* left, const char* middle, const char* right) {
    std::string line = left;
    for (size_t column = 0; column < widths.size(); ++column)
      line += (column == 0 ? "" : middle) + repeat("─", widths[column]);
    return line + right + "\n";
  };
  auto line = [&](const std::vector<std::string>& cells) {
    std::string text = "│";
    for (size_t column = 0; column < widths.size(); ++column)
      text += centred(cells[column], widths[column]) + "│";
    return text + "\n";
  };
  std::string table = "┌" + repeat("─", inner) + "┐\n" + "│" + centred(title, inner) + "│\n" +
                      rule("├", "┬", "┤") + line(headers) + rule("├", "┼", "┤");
  for (const auto& row : rows)
    table += line(row);
  return table + rule("└", "┴", "┘");
}

/// The tensors of one safetensors file, from its header (read and checked by the weights library, which the
/// runtime's reader and merge-weights share).
std::vector<ModelTensor> readOneSafetensorsFile(const std::string& path) {
  accelerate::weights::Header header;
  try {
    header = accelerate::weights::read_header(path);
  } catch (const std::runtime_error& error) {
    std::string message = error.what();
    if (message.rfind("accelerate: ", 0) == 0)
      message.erase(0, std::string("accelerate: ").size());
    throw std::runtime_error(message);
  }
  std::vector<ModelTensor> tensors;
  for (const auto& entry : header.tensors)
    tensors.push_back({entry.name, entry.elements(), true});
  return tensors;
}

bool endsWith(const std::string& text, const std::string& end) {
  return text.size() >= end.size() && text.compare(text.size() - end.size(), end.size(), end) == 0;
}

/// Runs `program` alone with ACCELERATE_ESTIMATE_MEMORY set: its first prepare(model) writes the model's
/// tensors to a file and ends it.
std::vector<ModelTensor> tensorsOfProgram(const std::string& program, const std::vector<std::string>& args) {
  const std::string executable = resolveExecutable(program);
  char folder[] = "/tmp/accel-estimate-XXXXXX";
  if (::mkdtemp(folder) == nullptr)
    throw std::runtime_error(std::string("cannot create a temporary folder: ") + std::strerror(errno));
  const std::string report = std::string(folder) + "/tensors.tsv";
  std::vector<std::string> environment;
  for (char** variable = environ; *variable != nullptr; ++variable) {
    const std::string entry = *variable;
    const std::string name = entry.substr(0, entry.find('='));
    // Alone: no launcher's variables reach it, so it forms no process group.
    static const char* const launcherVariables[] = {
        "RANK",        "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",          "MASTER_ADDR",
        "MASTER_PORT", "GROUP_RANK", "NODE_RANK",  "ACCELERATE_ESTIMATE_MEMORY"};
    const bool launcher = std::any_of(std::begin(launcherVariables), std::end(launcherVariables),
                                      [&](const char* known) { return name == known; }) ||
                          name.rfind("OMPI_", 0) == 0 || name.rfind("PMIX_", 0) == 0 ||
                          name.rfind("SLURM_", 0) == 0 || name.rfind("TORCHELASTIC_", 0) == 0;
    if (!launcher)
      environment.push_back(entry);
  }
  environment.push_back("ACCELERATE_ESTIMATE_MEMORY=" + report);
  std::vector<char*> envp, argv;
  for (auto& entry : environment)
    envp.push_back(entry.data());
  envp.push_back(nullptr);
  std::vector<std::string> arguments = {program};
  arguments.insert(arguments.end(), args.begin(), args.end());
  for (auto& argument : arguments)
    argv.push_back(argument.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (int error = ::posix_spawn(&pid, executable.c_str(), nullptr, nullptr, argv.data(), envp.data()))
    throw std::runtime_error("cannot run " + executable + ": " + std::strerror(error));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::ifstream file(report);
  std::vector<ModelTensor> tensors;
  std::string line;
  bool ended = false;
  while (std::getline(file, line)) {
    if (line == "end") {
      ended = true;
      break;
    }
    const auto first = line.find('\t'), second = line.find('\t', first + 1),
               third = line.find('\t', second + 1);
    if (line.rfind("tensor\t", 0) != 0 || third == std::string::npos)
      continue;
    tensors.push_back({line.substr(first + 1, second - first - 1),
                       std::stoll(line.substr(second + 1, third - second - 1)),
                       line.substr(third + 1) == "1"});
  }
  ::unlink(report.c_str());
  ::rmdir(folder);
  if (ended && WIFEXITED(status) && WEXITSTATUS(status) == 0)
    return tensors;
  const std::string how = WIFSIGNALED(status) ? "was killed by signal " + std::to_string(WTERMSIG(status))
                                              : "exited with code " + std::to_string(WEXITSTATUS(status));
  if (!ended && WIFEXITED(status) && WEXITSTATUS(status) == 0)
    throw std::runtime_error(program +
                             " ran to its end without preparing a model: estimate-memory counts the "
                             "model a program gives to Accelerator::prepare (is it built on "
                             "accelerate-cpp, or rewritten by accelerate_target()?)");
  throw std::runtime_error(program + " " + how +
                           " before its first prepare(model) (its output above says why)");
}

void printEstimate(const std::string& model, const MemoryEstimate& estimate,
                   const std::vector<std::string>& dtypes, int processes) {
  // Accelerate's table: the model counted in float32; float16 halves it, int8 and int4 quarter and eighth it;
  // training with Adam is float32's model + gradients + two moments (4x), mixed precision's optimizer state
  // (2x, its largest part), and not estimated for int8/int4.
  std::vector<std::vector<std::string>> rows;
  for (const std::string& dtype : dtypes) {
    const double divisor = dtype == "float16" ? 2 : dtype == "int8" ? 4 : dtype == "int4" ? 8 : 1;
    const double total = static_cast<double>(estimate.totalBytes);
    const std::string training = dtype == "float32"   ? convertBytes(total * 4)
                                 : dtype == "float16" ? convertBytes(total * 2)
                                                      : "N/A";
    rows.push_back({dtype,
                    convertBytes(static_cast<double>(estimate.largestLayerBytes) / divisor, divisor == 1),
                    convertBytes(total / divisor, divisor == 1), training});
  }
  std::cout << boxTable("Memory Usage for loading `" + model + "`",
                        {"dtype", "Largest Layer", "Total Size", "Training using Adam"}, rows);
  // Ours: what each process keeps to train in float32 with Adam (activations not counted).
  const double p = static_cast<double>(estimate.trainedBytes);
  const double rest = static_cast<double>(estimate.totalBytes - estimate.trainedBytes);
  const double layer = static_cast<double>(estimate.largestLayerBytes);
  const double n = processes;
  struct Strategy {
    const char* name;
    double weights, gradients, adam;
  };
  const Strategy strategies[] = {
      {"DDP", p + rest, p, 2 * p},
      {"ZeRO-1", p + rest, p, 2 * p / n},
      {"ZeRO-2", p + rest, p / n, 2 * p / n},
      {"FSDP", p / n + rest + layer, p / n + layer, 2 * p / n},
  };
  std::vector<std::vector<std::string>> perProcess;
  for (const Strategy& strategy : strategies)
    perProcess.push_back({strategy.name, convertBytes(strategy.weights), convertBytes(strategy.gradients),
                          convertBytes(strategy.adam),
                          convertBytes(strategy.weights + strategy.gradients + strategy.adam)});
  std::cout << boxTable("Training in float32 with Adam, per process of " + std::to_string(processes),
                        {"strategy", "weights", "gradients", "Adam state", "per process"}, perProcess);
  std::cout << "largest layer: "
            << (estimate.largestLayer.empty() ? "(the model's own tensors)" : estimate.largestLayer)
            << "; activations are not counted (docs/cli.md, \"accel estimate-memory\")\n";
}

} // namespace

MemoryEstimate estimateMemory(const std::vector<ModelTensor>& tensors) {
  MemoryEstimate estimate;
  std::map<std::string, std::int64_t> layers; // module name -> float32 bytes of its own tensors
  for (const ModelTensor& tensor : tensors) {
    const std::int64_t bytes = tensor.elements * kFloat32Bytes;
    estimate.totalBytes += bytes;
    estimate.trainedBytes += tensor.trained ? bytes : 0;
    const auto dot = tensor.name.rfind('.');
    // A tensor at the top is a layer of its own (Accelerate treats the model's own parameters one by one).
    const std::string layer = dot == std::string::npos ? tensor.name : tensor.name.substr(0, dot);
    layers[layer] += bytes;
  }
  for (const auto& [name, bytes] : layers) {
    if (bytes > estimate.largestLayerBytes) {
      estimate.largestLayerBytes = bytes;
      estimate.largestLayer = name;
    }
  }
  return estimate;
}

std::vector<ModelTensor> readSafetensorsTensors(const std::string& path) {
  struct stat info{};
  if (::stat(path.c_str(), &info) != 0)
    throw std::runtime_error("cannot read " + path + ": " + std::strerror(errno));
  if (!S_ISDIR(info.st_mode))
    return readOneSafetensorsFile(path);
  std::vector<std::string> files;
  if (DIR* folder = ::opendir(path.c_str())) {
    while (const dirent* entry = ::readdir(folder))
      if (endsWith(entry->d_name, ".safetensors"))
        files.push_back(path + "/" + entry->d_name);
    ::closedir(folder);
  }
  if (files.empty())
    throw std::runtime_error(path + " is a folder without a .safetensors file");
  std::sort(files.begin(), files.end());
  std::vector<ModelTensor> tensors;
  for (const std::string& file : files) {
    auto some = readOneSafetensorsFile(file);
    tensors.insert(tensors.end(), some.begin(), some.end());
  }
  return tensors;
}

int runEstimateMemoryCommand(const std::vector<std::string>& args) {
  ParsedFlags flags = parseFlags(estimateFlags(), args);
  if (flags.has("help")) {
    std::cout << helpText();
    return 0;
  }
  if (flags.positionals.empty())
    throw UsageError("give a model: a safetensors file, a folder of them, or a training program (see accel "
                     "estimate-memory --help)");
  std::vector<std::string> dtypes = {"float32", "float16", "int8", "int4"};
  if (auto list = flags.last("dtypes")) {
    dtypes.clear();
    size_t start = 0;
    while (start <= list->size()) {
      const size_t comma = std::min(list->find(',', start), list->size());
      const std::string dtype = list->substr(start, comma - start);
      if (dtype != "float32" && dtype != "float16" && dtype != "int8" && dtype != "int4")
        throw UsageError("--dtypes: '" + dtype + "' is not one of float32, float16, int8, int4");
      dtypes.push_back(dtype);
      start = comma + 1;
    }
  }
  const int processes = flags.last("num_processes")
                            ? parseWholeNumberFlag("num_processes", *flags.last("num_processes"), 1, {})
                            : 2;
  const std::string model = flags.positionals.front();
  const std::vector<std::string> programArgs(flags.positionals.begin() + 1, flags.positionals.end());
  struct stat info{};
  const bool exists = ::stat(model.c_str(), &info) == 0;
  const bool safetensors = exists && (S_ISDIR(info.st_mode) || endsWith(model, ".safetensors"));
  if (safetensors && !programArgs.empty())
    throw UsageError("arguments after a safetensors model (" + programArgs.front() +
                     ") are for a program; give them after a training program only");
  std::vector<ModelTensor> tensors;
  try {
    tensors = safetensors ? readSafetensorsTensors(model) : tensorsOfProgram(model, programArgs);
  } catch (const std::runtime_error& error) {
    std::cerr << "accel estimate-memory: " << error.what() << "\n";
    return 1;
  }
  if (tensors.empty()) {
    std::cerr << "accel estimate-memory: " << model << " has no tensors\n";
    return 1;
  }
  printEstimate(model, estimateMemory(tensors), dtypes, processes);
  return 0;
}

} // namespace accel
