// Resuming a restarted job: TORCHELASTIC_RESTART_COUNT and the checkpoint directory
// (include/accelerate/resume.h).
#include <accelerate/accelerator.h>
#include <accelerate/resume.h>

#include "checkpoint/format.h"
#include "common/durable_file.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <stdexcept>

#include <unistd.h>

namespace accelerate {

namespace {

/// Whether this process prints the job's notes: the accelerator's main process, or without an accelerator
/// the process a launcher numbered 0.
bool prints_notes() {
  try {
    return Accelerator::current().is_main_process();
  } catch (const std::logic_error&) {
    const char* rank = std::getenv("RANK");
    return rank == nullptr || std::string(rank) == "0";
  }
}

} // namespace

bool is_restart() {
  const char* value = std::getenv("TORCHELASTIC_RESTART_COUNT");
  if (value == nullptr || *value == '\0') {
    return false;
  }
  char* end = nullptr;
  const long long count = std::strtoll(value, &end, 10);
  if (*end != '\0' || count < 0) {
    throw std::invalid_argument(std::string("accelerate: TORCHELASTIC_RESTART_COUNT is '") + value +
                                "', not a restart count (0 on the first start, 1, 2, ... after restarts); "
                                "it is set by accel launch and torchrun: unset it, or set it to a number");
  }
  return count > 0;
}

bool checkpoint_exists(const std::string& directory) {
  if (!detail::path_exists(directory)) {
    return false;
  }
  const std::string fix =
      ": a save_state that completed always writes one, so this is another program's folder "
      "or a damaged checkpoint; move it away to start from the beginning, or name the "
      "checkpoint to resume from";
  if (!detail::is_directory(directory)) {
    throw std::runtime_error("accelerate: '" + directory + "' is a file, not a checkpoint folder" + fix);
  }
  const std::string metadata = detail::join_path(directory, detail::kMetadataFile);
  if (!detail::path_exists(metadata)) {
    const auto entries = detail::list_directory(directory);
    if (entries.empty()) {
      return false; // an empty folder: nothing was saved there yet
    }
    throw std::runtime_error("accelerate: '" + directory + "' holds " + std::to_string(entries.size()) +
                             " entries but no " + detail::kMetadataFile +
                             ", so it is not a complete checkpoint" + fix);
  }
  if (::access(metadata.c_str(), R_OK) != 0) {
    const int error = errno;
    throw std::runtime_error("accelerate: '" + directory + "' is not a readable checkpoint: its " +
                             detail::kMetadataFile + " cannot be read (" + std::strerror(error) + ")" + fix);
  }
  return true;
}

bool restarted_with_checkpoint(const std::string& directory) {
  if (!is_restart()) {
    return false;
  }
  if (checkpoint_exists(directory)) {
    return true;
  }
  if (prints_notes()) {
    std::cerr << "accelerate: this run is restart " << std::getenv("TORCHELASTIC_RESTART_COUNT")
              << " of the job, but '" << directory
              << "' holds no checkpoint yet (the job failed before its first save_state): training starts "
                 "from the beginning"
              << std::endl;
  }
  return false;
}

} // namespace accelerate
