// The collective, atomic commit of a checkpoint (commit.h).
#include "checkpoint/commit.h"

#include "accelerator/state.h"
#include "common/durable_file.h"
#include "transport/store_rendezvous.h"
#include "watch/stacks.h"

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <random>
#include <stdexcept>

#include <c10/util/Exception.h>
#include <torch/torch.h>

namespace accelerate::detail {
namespace {

constexpr const char* kProbeFile = ".probe";

/// `save_state` calls this process has made, for the test-only kill hook.
int saves_started = 0;

} // namespace

void count_save_for_kill_points() {
  ++saves_started;
}

void kill_point(const std::string& point) {
  const char* wanted = std::getenv("ACCELERATE_TEST_KILL_DURING_SAVE");
  if (wanted == nullptr) {
    return;
  }
  const std::string spec = wanted;
  const auto at = spec.find('@');
  const int call = at == std::string::npos ? 1 : std::atoi(spec.c_str() + at + 1);
  if (spec.substr(0, at) == point && call == saves_started) {
    std::cerr << "accelerate: ACCELERATE_TEST_KILL_DURING_SAVE=" << spec << ": killing this process"
              << std::endl;
    std::raise(SIGKILL);
  }
}

// ---- Collective -------------------------------------------------------------------------------------------

Collective::Collective(AcceleratorState& state, std::string op, const std::string& argument)
    : state_(state), op_(std::move(op)) {
  const int64_t call = state.checkpoint_calls++;
  if (state.process_group) {
    store_ = state.process_group->getStore();
    rank_ = state.process_group->getRank();
    world_ = state.process_group->getSize();
    prefix_ = "accelerate/checkpoint/" + std::to_string(call) + "/";
    check_arrival(argument);
  }
}

void Collective::agree(const std::string& phase, const std::function<void()>& work) {
  std::exception_ptr error;
  std::string message;
  try {
    work();
  } catch (const FileError& failure) {
    message = "accelerate: " + op_ + ": " + failure.what() + ". " + guarantee();
    error = std::make_exception_ptr(std::runtime_error(message));
  } catch (const c10::Error& failure) {
    message = "accelerate: " + op_ + ": " + failure.what_without_backtrace();
    error = std::make_exception_ptr(std::runtime_error(message));
  } catch (const std::exception& failure) {
    message = failure.what();
    error = std::current_exception();
  }
  if (world_ == 1) {
    if (error) {
      std::rethrow_exception(error);
    }
    return;
  }
  auto flags = torch::zeros({world_}, torch::kInt32);
  if (error) {
    flags[rank_] = 1;
    try {
      set("error/" + phase + "/" + std::to_string(rank_), message);
    } catch (const std::exception&) {
      // The store is gone with process 0; the collective below reports that.
    }
  }
  try {
    std::vector<at::Tensor> tensors{flags};
    state_.process_group->allreduce(tensors)->wait();
  } catch (const std::exception& failure) {
    if (error) {
      std::rethrow_exception(error);
    }
    throw std::runtime_error("accelerate: " + op_ + ": lost contact with the other processes while " + phase +
                             " (a process died, or stopped answering within the " +
                             std::to_string(state_.config.timeout.count()) +
                             " ms timeout). Cause: " + first_line(failure.what()));
  }
  if (flags.sum().item<int32_t>() == 0) {
    return;
  }
  std::string relayed;
  for (int rank = 0; rank < world_ && !error && relayed.empty(); ++rank) {
    if (flags[rank].item<int32_t>() != 0) {
      std::string reason = "(its message could not be read)";
      try {
        reason = get("error/" + phase + "/" + std::to_string(rank));
      } catch (const std::exception&) {
      }
      if (const std::string own = "accelerate: " + op_ + ": "; reason.rfind(own, 0) == 0) {
        reason.erase(0, own.size());
      }
      relayed = "accelerate: " + op_ + " failed on process " + std::to_string(rank) + " while " + phase +
                ": " + reason;
    }
  }
  // No process leaves before every other has read the message it relays: process 0 hosts the store, and a
  // process that throws may end its program (and the store with it) at once.
  try {
    std::vector<at::Tensor> read{torch::zeros({1}, torch::kInt32)};
    state_.process_group->allreduce(read)->wait();
  } catch (const std::exception&) {
    // A process died meanwhile: each one still reports what it knows.
  }
  if (error) {
    std::rethrow_exception(error);
  }
  throw std::runtime_error(relayed);
}

void Collective::publish(const std::string& name, const std::string& value) {
  if (store_) {
    set(name, value);
  }
}

std::string Collective::fetch(const std::string& name) {
  return get(name);
}

void Collective::finish() {
  for (const auto& key : own_keys_) {
    try {
      store_->deleteKey(key);
    } catch (const std::exception&) {
    }
  }
  own_keys_.clear();
}

std::string Collective::guarantee() const {
  return op_ == "save_state"   ? "Nothing was replaced: the previous checkpoints are untouched"
         : op_ == "save_model" ? "Nothing was replaced: the weights the directory held are untouched"
                               : "Nothing was loaded";
}

void Collective::set(const std::string& name, const std::string& value) {
  try {
    store_->set(prefix_ + name, std::vector<uint8_t>(value.begin(), value.end()));
  } catch (const c10::Error& error) {
    throw store_lost(error);
  }
  own_keys_.push_back(prefix_ + name);
}

std::string Collective::get(const std::string& name) {
  try {
    const auto value = store_->get(prefix_ + name);
    return std::string(value.begin(), value.end());
  } catch (const c10::Error& error) {
    throw store_lost(error);
  }
}

std::runtime_error Collective::store_lost(const c10::Error& error) const {
  return std::runtime_error("accelerate: " + op_ +
                            ": the rendezvous store (hosted by process 0) stopped answering; process 0 has "
                            "probably died. Cause: " +
                            first_line(error.what_without_backtrace()));
}

void Collective::check_arrival(const std::string& argument) {
  const std::string location = watch::caller_location();
  const std::string mine = op_ + "\n" + argument + "\n" + location;
  const auto timeout = state_.config.timeout;
  std::vector<std::string> arrived;
  try {
    own_keys_.push_back(prefix_ + "arrived/" + std::to_string(rank_));
    arrived = store_rendezvous<std::logic_error>(
        *store_, {prefix_ + "arrived/", prefix_ + "abandoned"}, rank_, world_, mine, timeout,
        [&](const Absentees& absent) {
          std::string list;
          for (int rank : absent.missing) {
            list += (list.empty() ? "" : ", ") + std::to_string(rank);
          }
          return "accelerate: " + op_ + " is collective: every process must call it, but process" +
                 (absent.missing.size() == 1 ? " " : "es ") + list + " did not within " +
                 std::to_string(timeout.count()) + " ms, while process " + std::to_string(rank_) +
                 " called it from " + watch::describe_code_location(location) + ". " +
                 (op_ == "save_model"
                      ? "Under a strategy that shards parameters every process sends its shares of the model "
                        "to the main process, which writes the files"
                      : "Each process saves and restores its own random-number state, and the main process "
                        "writes the shared files") +
                 ", so a call under `if (accelerator.is_main_process())` can never complete: call " + op_ +
                 " on every process (it already writes shared files from the main process only). If the " +
                 "call is on every process, the missing one died or is stuck before it";
        },
        [](const std::string& reason) { return reason; });
  } catch (const c10::Error& error) {
    throw store_lost(error);
  }
  // Everyone arrived: the calls must be the same operation on the same directory.
  for (int rank = 0; rank < world_; ++rank) {
    const std::string& theirs = arrived[static_cast<size_t>(rank)];
    const auto first = theirs.find('\n');
    const auto second = theirs.find('\n', first + 1);
    const std::string their_op = theirs.substr(0, first);
    const std::string their_argument = theirs.substr(first + 1, second - first - 1);
    if (their_op != op_ || their_argument != argument) {
      auto call = [](const std::string& op, const std::string& directory) {
        return op + "(" + (directory.empty() ? "" : "\"" + directory + "\"") + ")";
      };
      throw std::logic_error("accelerate: process " + std::to_string(rank_) + " called " +
                             call(op_, argument) + " while process " + std::to_string(rank) + " called " +
                             call(their_op, their_argument) + " (from " +
                             watch::describe_code_location(theirs.substr(second + 1)) +
                             "): every process must make the same checkpoint call with the same directory");
    }
  }
}

// ---- The atomic save --------------------------------------------------------------------------------------

void FileWriter::write(const std::string& name, const std::string& bytes, bool own) {
  if (records_.count(name) != 0) {
    throw std::logic_error("accelerate: save_state: two parts of the checkpoint write the file '" + name +
                           "'");
  }
  write_file_durably(join_path(directory_, name), bytes);
  records_[name] = {bytes.size(), content_hash_hex(bytes), own ? rank_ : -1};
  kill_point(name);
}

std::string partial_of(const std::string& target) {
  return join_path(parent_path(target), "." + file_name(target) + ".partial");
}

void remove_checkpoint_directory(const std::string& directory) {
  const std::string doomed = join_path(parent_path(directory), "." + file_name(directory) + ".deleting");
  remove_tree(doomed);
  rename_path(directory, doomed);
  remove_tree(doomed);
}

void remove_leftovers(const std::string& root) {
  std::vector<std::string> leftovers;
  for (const auto& name : list_directory(root)) {
    auto ends_with = [&](const std::string& suffix) {
      return name.size() > suffix.size() &&
             name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    if (name.rfind(".checkpoint_", 0) == 0 && (ends_with(".partial") || ends_with(".deleting"))) {
      leftovers.push_back(join_path(root, name));
    }
  }
  for (const auto& path : leftovers) {
    remove_tree(path);
  }
}

namespace {

/// Moves the finished `partial` directory to `target` in one step (exchanging it with an older checkpoint
/// of the same name where the filesystem allows), then removes what it replaced.
void commit_directory(const std::string& partial, const std::string& target) {
  if (!path_exists(target)) {
    rename_path(partial, target);
    return;
  }
  if (::renameat2(AT_FDCWD, partial.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) {
    remove_tree(partial); // now the previous checkpoint
    return;
  }
  // No atomic exchange on this filesystem: the old checkpoint stays under a hidden name until the new one
  // is in place.
  const std::string previous = join_path(parent_path(target), "." + file_name(target) + ".deleting");
  remove_tree(previous);
  rename_path(target, previous);
  rename_path(partial, target);
  remove_tree(previous);
}

/// The main process's new partial directory, holding a probe file with a token the others must read back.
std::string prepare_partial(const std::string& partial) {
  remove_tree(partial);
  make_directories(partial);
  const std::string token = std::to_string(std::random_device{}()) + "@" + host_name();
  write_file_durably(join_path(partial, kProbeFile), token);
  return token;
}

/// Without a filesystem shared by every process, the others would write into directories nobody reads.
void check_sees_partial(const std::string& partial, const std::string& token, int rank) {
  const std::string probe = join_path(partial, kProbeFile);
  if (!path_exists(probe) || read_whole_file(probe) != token) {
    throw std::runtime_error(
        "accelerate: save_state: process " + std::to_string(rank) + " (host " + host_name() +
        ") does not see '" + partial + "', which process 0 (" + token.substr(token.find('@') + 1) +
        ") just created: checkpoints must go to a filesystem every process shares (NFS, Lustre, a shared "
        "volume), at the same path on every node. Save to such a directory");
  }
}

} // namespace

std::string save_atomically(Collective& collective, const SavePlan& plan) {
  std::string target, partial;
  try {
    collective.agree("preparing the directory", [&] {
      if (!collective.main()) {
        return;
      }
      target = plan.choose_target();
      partial = partial_of(target);
      const std::string token = prepare_partial(partial);
      collective.publish("target", target);
      collective.publish("probe", token);
    });
    if (!collective.main()) {
      target = collective.fetch("target");
      partial = partial_of(target);
    }

    collective.agree("checking that every process sees the directory", [&] {
      if (!collective.main()) {
        check_sees_partial(partial, collective.fetch("probe"), collective.rank());
      }
    });

    FileWriter writer(partial, collective.rank());
    collective.agree("writing files", [&] {
      plan.write_files(writer);
      if (!collective.main()) {
        std::map<std::string, FileRecord> own;
        for (const auto& [name, record] : writer.records()) {
          own.emplace(name, record);
        }
        collective.publish("files/" + std::to_string(collective.rank()), files_entry(own).dump());
      }
    });

    collective.agree("committing the checkpoint", [&] {
      if (!collective.main()) {
        return;
      }
      auto records = writer.records();
      for (int rank = 1; rank < collective.world(); ++rank) {
        for (const auto& [name, record] :
             records_of(Json::parse(collective.fetch("files/" + std::to_string(rank))))) {
          if (!records.emplace(name, record).second) {
            throw std::logic_error("accelerate: save_state: process " + std::to_string(rank) +
                                   " wrote the file '" + name + "', which another process wrote too");
          }
        }
      }
      remove_tree(join_path(partial, kProbeFile));
      writer.write(kMetadataFile, plan.metadata(records, target));
      sync_directory(partial);
      kill_point("rename");
      commit_directory(partial, target);
      sync_directory(parent_path(target));
      plan.after_commit(target);
    });
  } catch (...) {
    if (collective.main() && !partial.empty()) {
      try {
        remove_tree(partial); // the previous checkpoints were never touched
      } catch (const std::exception&) {
      }
    }
    throw;
  }
  return target;
}

} // namespace accelerate::detail
