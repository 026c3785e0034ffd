// Where this process sits in the job: rank and world size as the launcher that started it reports them.
#pragma once

#include <string>

namespace accelerate::detail {

/// What the launcher told this process. Read from, in order: torchrun's variables (also exported by
/// `accel launch` and Hugging Face's `accelerate launch`), Open MPI's `OMPI_COMM_WORLD_*`, Slurm's `SLURM_*`.
struct LaunchEnvironment {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  /// Which launcher's variables were read: "torchrun", "mpirun", "srun" or "none".
  std::string launcher = "none";
  /// The job's identity as its launcher names it: `ACCELERATE_RUN_ID` (accel launch), else torchrun's
  /// `TORCHELASTIC_RUN_ID`, Slurm's `SLURM_JOB_ID.SLURM_STEP_ID`, Open MPI's `PMIX_NAMESPACE` or
  /// `OMPI_MCA_ess_base_jobid`; "" when none is set (processes started by hand). The Accelerator's `run_id`
  /// option replaces it.
  std::string run_id;
};

/// The run id as a part of a file or shared-memory name: other characters than letters, digits, '-', '_' and
/// '.' become '_', at most 64 characters; "unnamed" for an empty id.
std::string run_file_name(const std::string& run_id);

/// Reads the launcher's variables; throws `std::invalid_argument` naming the variable on a bad value.
LaunchEnvironment discover_launch_environment();

} // namespace accelerate::detail
