// Reads rank, world size and rendezvous address from the variables each supported launcher sets.
#include "transport/environment.h"

#include <cstdlib>
#include <optional>
#include <stdexcept>

namespace accelerate::detail {
namespace {

std::optional<std::string> read_variable(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') {
    return std::nullopt;
  }
  return std::string(value);
}

std::optional<int> read_int(const char* name, int minimum) {
  auto text = read_variable(name);
  if (!text) {
    return std::nullopt;
  }
  std::size_t used = 0;
  int value = 0;
  try {
    value = std::stoi(*text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text->size() || value < minimum) {
    throw std::invalid_argument("accelerate: environment variable " + std::string(name) + "='" + *text +
                                "' is not an integer >= " + std::to_string(minimum) +
                                "; fix or unset it (it is normally set by the launcher)");
  }
  return value;
}

/// The first host of a Slurm node list: "node[03-05,7]" -> "node03", "a,b" -> "a".
std::string first_slurm_host(const std::string& nodelist) {
  auto bracket = nodelist.find('[');
  auto comma = nodelist.find(',');
  if (bracket == std::string::npos || (comma != std::string::npos && comma < bracket)) {
    return nodelist.substr(0, comma);
  }
  auto prefix = nodelist.substr(0, bracket);
  auto first = nodelist.substr(bracket + 1);
  first = first.substr(0, first.find_first_of("-,]"));
  return prefix + first;
}

bool read_torchrun(LaunchEnvironment& env) {
  auto world_size = read_int("WORLD_SIZE", 1);
  auto rank = read_int("RANK", 0);
  if (!world_size && !rank) {
    return false;
  }
  if (!world_size || !rank) {
    throw std::invalid_argument(std::string("accelerate: ") + (rank ? "RANK" : "WORLD_SIZE") +
                                " is set but " + (rank ? "WORLD_SIZE" : "RANK") +
                                " is not; a launcher sets both (accel launch, torchrun)");
  }
  env.world_size = *world_size;
  env.rank = *rank;
  env.local_rank = read_int("LOCAL_RANK", 0).value_or(env.rank);
  env.local_world_size = read_int("LOCAL_WORLD_SIZE", 1).value_or(env.world_size);
  env.launcher = "torchrun";
  return true;
}

bool read_open_mpi(LaunchEnvironment& env) {
  auto world_size = read_int("OMPI_COMM_WORLD_SIZE", 1);
  if (!world_size) {
    return false;
  }
  env.world_size = *world_size;
  env.rank = read_int("OMPI_COMM_WORLD_RANK", 0).value_or(0);
  env.local_rank = read_int("OMPI_COMM_WORLD_LOCAL_RANK", 0).value_or(env.rank);
  env.local_world_size = read_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1).value_or(env.world_size);
  env.launcher = "mpirun";
  return true;
}

bool read_slurm(LaunchEnvironment& env) {
  auto world_size = read_int("SLURM_NTASKS", 1);
  auto rank = read_int("SLURM_PROCID", 0);
  if (!world_size || !rank) {
    return false;
  }
  env.world_size = *world_size;
  env.rank = *rank;
  env.local_rank = read_int("SLURM_LOCALID", 0).value_or(0);
  env.local_world_size = read_int("SLURM_NTASKS_PER_NODE", 1).value_or(env.world_size);
  if (auto nodes = read_variable("SLURM_JOB_NODELIST"); nodes && !read_variable("MASTER_ADDR")) {
    env.master_addr = first_slurm_host(*nodes);
  }
  env.launcher = "srun";
  return true;
}

/// The run id the launcher gave (LaunchEnvironment::run_id).
std::string launcher_run_id() {
  if (auto id = read_variable("ACCELERATE_RUN_ID")) {
    return *id;
  }
  if (auto id = read_variable("TORCHELASTIC_RUN_ID")) {
    return *id;
  }
  if (auto job = read_variable("SLURM_JOB_ID")) {
    auto step = read_variable("SLURM_STEP_ID");
    return step ? *job + "." + *step : *job;
  }
  for (const char* name : {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid"}) {
    if (auto id = read_variable(name)) {
      return *id;
    }
  }
  return "";
}

} // namespace

LaunchEnvironment discover_launch_environment() {
  LaunchEnvironment env;
  if (!read_torchrun(env) && !read_open_mpi(env)) {
    read_slurm(env);
  }
  if (env.rank >= env.world_size) {
    throw std::invalid_argument("accelerate: rank " + std::to_string(env.rank) +
                                " is not below the world size " + std::to_string(env.world_size) +
                                " (read from " + env.launcher +
                                "'s variables); every process of one job must see the same world size");
  }
  if (env.local_rank >= env.local_world_size) {
    throw std::invalid_argument("accelerate: local rank " + std::to_string(env.local_rank) +
                                " is not below the local world size " + std::to_string(env.local_world_size) +
                                " (read from " + env.launcher + "'s variables)");
  }
  if (auto addr = read_variable("MASTER_ADDR")) {
    env.master_addr = *addr;
  }
  if (auto port = read_int("MASTER_PORT", 1)) {
    if (*port > 65535) {
      throw std::invalid_argument("accelerate: MASTER_PORT=" + std::to_string(*port) +
                                  " is not a TCP port (1-65535)");
    }
    env.master_port = *port;
  }
  env.run_id = launcher_run_id();
  return env;
}

std::string run_file_name(const std::string& run_id) {
  if (run_id.empty()) {
    return "unnamed";
  }
  std::string name = run_id.substr(0, 64);
  for (char& c : name) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '-' || c == '_' || c == '.';
    c = plain ? c : '_';
  }
  return name;
}

} // namespace accelerate::detail
