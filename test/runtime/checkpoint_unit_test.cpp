// Single-process tests of checkpoints: the safetensors reader and writer, save_state/load_state round trips,
// automatic naming and pruning across a restart, and bad input that must fail clearly and lose nothing.
#include <accelerate/accelerate.h>
#include <accelerate/safetensors.h>

#include "../../runtime/checkpoint/safetensors.h"
#include "../../runtime/common/durable_file.h"
#include "../../runtime/transport/store_rendezvous.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/torch.h>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <thread>

namespace {

using accelerate::detail::join_path;
using accelerate::detail::list_directory;
using accelerate::detail::path_exists;

/// A fresh directory under the test's temporary folder, removed when the test ends. (The runtime's POSIX
/// helpers, not std::filesystem: see runtime/common/durable_file.h for why.)
class ScratchDirectory {
public:
  ScratchDirectory() {
    const auto* test = testing::UnitTest::GetInstance()->current_test_info();
    path_ = join_path(testing::TempDir(),
                      "accel-ckpt-" + std::string(test->name()) + "-" + std::to_string(::getpid()));
    accelerate::detail::remove_tree(path_);
    accelerate::detail::make_directories(path_);
  }
  ~ScratchDirectory() {
    try {
      accelerate::detail::remove_tree(path_);
    } catch (const std::exception&) {
    }
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return join_path(path_, name); }

private:
  std::string path_;
};

/// Copies the files of `from` (one level, as a checkpoint has) into a new directory `to`.
void copy_directory(const std::string& from, const std::string& to) {
  accelerate::detail::make_directories(to);
  for (const auto& name : list_directory(from)) {
    accelerate::detail::write_file_durably(join_path(to, name),
                                           accelerate::detail::read_whole_file(join_path(from, name)));
  }
}

/// Bitwise equality, for every dtype (torch::equal does not cover float8).
bool same_bytes(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) {
    return false;
  }
  auto x = a.contiguous();
  auto y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

std::map<std::string, torch::Tensor> every_dtype() {
  auto ramp = torch::arange(12, torch::kFloat64).reshape({3, 4}) / 7 - 0.5;
  return {
      {"f64", ramp},
      {"f32", ramp.to(torch::kFloat32)},
      {"f16", ramp.to(torch::kFloat16)},
      {"bf16", ramp.to(torch::kBFloat16)},
      {"f8_e4m3", torch::tensor({0.5, -1.0, 2.0, 448.0}).to(torch::kFloat8_e4m3fn)},
      {"f8_e5m2", torch::tensor({0.25, -3.0, 1024.0, 57344.0}).to(torch::kFloat8_e5m2)},
      {"i64", torch::arange(-2, 3, torch::kInt64)},
      {"i32", torch::arange(5, torch::kInt32)},
      {"i8", torch::tensor({-128, 0, 127}, torch::kInt8)},
      {"u8", torch::tensor({0, 255}, torch::kUInt8)},
      {"bool", torch::tensor({true, false, true})},
      {"scalar", torch::tensor(3.5)},
      {"empty", torch::empty({0, 3})},
  };
}

// ---- safetensors ------------------------------------------------------------------------------------------

TEST(Safetensors, RoundTripsEveryDtypeBitExactly) {
  ScratchDirectory dir;
  const auto tensors = every_dtype();
  accelerate::save_safetensors(tensors, dir / "all.safetensors", {{"format", "pt"}, {"note", "ünïcode"}});
  const auto loaded = accelerate::load_safetensors(dir / "all.safetensors");
  ASSERT_EQ(loaded.tensors.size(), tensors.size());
  for (const auto& [name, tensor] : tensors) {
    ASSERT_TRUE(loaded.tensors.count(name)) << name;
    EXPECT_TRUE(same_bytes(loaded.tensors.at(name), tensor)) << name;
  }
  EXPECT_EQ(loaded.metadata.at("format"), "pt");
  EXPECT_EQ(loaded.metadata.at("note"), "ünïcode");
}

TEST(Safetensors, StoresNonContiguousAndTiedTensorsByValue) {
  ScratchDirectory dir;
  auto base = torch::arange(12, torch::kFloat32).reshape({3, 4});
  auto transposed = base.t();            // a non-contiguous view
  auto strided = base.slice(1, 0, 4, 2); // every other column
  ASSERT_FALSE(transposed.is_contiguous());
  accelerate::save_safetensors(
      {{"embed.weight", base}, {"head.weight", base}, {"transposed", transposed}, {"strided", strided}},
      dir / "views.safetensors");
  const auto loaded = accelerate::load_safetensors(dir / "views.safetensors").tensors;
  EXPECT_TRUE(torch::equal(loaded.at("embed.weight"), base));
  EXPECT_TRUE(torch::equal(loaded.at("head.weight"), base));
  EXPECT_TRUE(torch::equal(loaded.at("transposed"), transposed));
  EXPECT_TRUE(torch::equal(loaded.at("strided"), strided));
  EXPECT_EQ(accelerate::detail::read_whole_file(dir / "views.safetensors").size() % 8, 0u);
}

TEST(Safetensors, FileLayoutFollowsTheSpecification) {
  const std::string bytes = accelerate::detail::encode_safetensors(
      {{"a_half", torch::ones({3}, torch::kFloat16)}, {"b_double", torch::ones({2}, torch::kFloat64)}}, {});
  uint64_t header_length = 0;
  std::memcpy(&header_length, bytes.data(), 8);
  EXPECT_EQ(header_length % 8, 0u) << "the header is padded to 8 bytes";
  const std::string header = bytes.substr(8, header_length);
  // Larger elements first, so every tensor starts at a multiple of its element size.
  EXPECT_LT(header.find("b_double"), header.find("a_half")) << header;
  EXPECT_NE(header.find("\"data_offsets\":[0,16]"), std::string::npos) << header;
  EXPECT_NE(header.find("\"data_offsets\":[16,22]"), std::string::npos) << header;
  EXPECT_EQ(bytes.size(), 8 + header_length + 22);
}

TEST(Safetensors, RejectsTruncatedCorruptAndUnknownInput) {
  ScratchDirectory dir;
  const std::string good = accelerate::detail::encode_safetensors({{"w", torch::ones({4, 4})}}, {});
  auto expect_error = [&](const std::string& bytes, const std::string& expected) {
    accelerate::detail::write_file_durably(dir / "bad.safetensors", bytes);
    try {
      accelerate::load_safetensors(dir / "bad.safetensors");
      ADD_FAILURE() << "no error; expected one mentioning '" << expected << "'";
    } catch (const std::runtime_error& error) {
      EXPECT_NE(std::string(error.what()).find(expected), std::string::npos) << error.what();
      EXPECT_NE(std::string(error.what()).find("bad.safetensors"), std::string::npos) << error.what();
    }
  };
  expect_error(good.substr(0, good.size() - 5),
               "needs bytes [0, 64) of the data section, but the file holds only 59");
  expect_error(good.substr(0, 6), "fewer than the 8-byte header length");
  std::string corrupt_header = good;
  corrupt_header[9] = '!';
  expect_error(corrupt_header, "does not parse");
  expect_error(good + "extra", "follow the header");
  const std::string unknown = accelerate::detail::encode_safetensors({{"w", torch::ones({2})}}, {});
  std::string renamed = unknown;
  renamed.replace(renamed.find("\"F32\""), 5, "\"X99\"");
  expect_error(renamed, "dtype X99");
  try {
    accelerate::load_safetensors(dir / "missing.safetensors");
    ADD_FAILURE() << "a missing file loaded";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find("No such file"), std::string::npos) << error.what();
  }
}

// ---- save_state / load_state ------------------------------------------------------------------------------

struct Net : torch::nn::Module {
  explicit Net(int64_t hidden = 16) {
    fc1 = register_module("fc1", torch::nn::Linear(4, hidden));
    drop = register_module("drop", torch::nn::Dropout(0.2));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, 1));
    register_buffer("calls", torch::zeros({1}));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return fc2->forward(drop->forward(torch::tanh(fc1->forward(x))));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::Dropout drop{nullptr};
};

/// Sample i: 4 features drawn from a generator seeded by i, and the index as the target's second column.
struct Samples {
  explicit Samples(size_t size) : size_(size) {}
  std::pair<torch::Tensor, torch::Tensor> get_batch(const std::vector<size_t>& indices) {
    std::vector<torch::Tensor> x, y;
    for (auto index : indices) {
      auto generator = at::make_generator<at::CPUGeneratorImpl>(index);
      auto features = at::randn({4}, generator);
      x.push_back(features);
      y.push_back(torch::stack({features.sum().sin(), torch::tensor(static_cast<float>(index))}));
    }
    return {torch::stack(x), torch::stack(y)};
  }
  size_t size() const { return size_; }
  size_t size_;
};

/// A user object registered for checkpointing.
struct Counter {
  int64_t value = 0;
  void save(torch::serialize::OutputArchive& archive) const { archive.write("value", torch::tensor(value)); }
  void load(torch::serialize::InputArchive& archive) {
    torch::Tensor saved;
    archive.read("value", saved);
    value = saved.item<int64_t>();
  }
};

/// One training setup: everything save_state covers.
struct Training {
  explicit Training(accelerate::AcceleratorOptions options, int64_t hidden = 16, size_t batch_size = 3)
      : accelerator(options.cpu(true)), model(std::make_shared<Net>(hidden)) {
    accelerator.prepare(model);
    optimizer.emplace(accelerator.prepare(torch::optim::AdamW(model->parameters(), 1e-2)));
    scheduler.emplace(accelerator.prepare(torch::optim::StepLR(**optimizer, 2, 0.5)));
    loader = accelerator.prepare_data_loader(Samples(20), accelerate::DataLoaderOptions(batch_size));
    accelerator.register_for_checkpointing(counter);
  }

  /// Trains `steps` optimizer steps, calling `after_step(k)` after the k-th inside the loop (where a training
  /// program saves its checkpoints); returns the sample indices of each step. Passes start where the loader
  /// stands: a pass left with `break` starts its epoch over, one resumed by load_state continues.
  std::vector<std::vector<int64_t>> train(int steps, const std::function<void(int)>& after_step = nullptr) {
    std::vector<std::vector<int64_t>> seen;
    int done = 0;
    while (done < steps) {
      for (auto& [x, y] : *loader) {
        optimizer->zero_grad();
        auto out = model->forward(x) + 1e-3 * torch::randn({x.size(0), 1});
        accelerator.backward(torch::mse_loss(out, y.slice(1, 0, 1)));
        optimizer->step();
        scheduler->step();
        ++counter.value;
        seen.emplace_back();
        for (int64_t i = 0; i < y.size(0); ++i) {
          seen.back().push_back(static_cast<int64_t>(y[i][1].item<float>()));
        }
        if (after_step) {
          after_step(++done);
        } else {
          ++done;
        }
        if (done == steps) {
          break;
        }
      }
    }
    return seen;
  }

  std::vector<torch::Tensor> snapshot() {
    std::vector<torch::Tensor> values;
    for (const auto& p : model->parameters()) {
      values.push_back(p.detach().clone());
    }
    for (auto& group : optimizer->param_groups()) {
      for (auto& p : group.params()) {
        auto& state = static_cast<torch::optim::AdamWParamState&>(
            *optimizer->unwrap().state().at(p.unsafeGetTensorImpl()));
        values.push_back(state.exp_avg().clone());
        values.push_back(state.exp_avg_sq().clone());
        values.push_back(torch::tensor(state.step()));
      }
    }
    values.push_back(torch::tensor(optimizer->param_groups()[0].options().get_lr(), torch::kFloat64));
    return values;
  }

  accelerate::Accelerator accelerator;
  std::shared_ptr<Net> model;
  std::optional<accelerate::Optimizer> optimizer;
  std::optional<accelerate::Scheduler> scheduler;
  std::unique_ptr<accelerate::DataLoader<Samples>> loader;
  Counter counter;
};

void expect_same(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(same_bytes(a[i], b[i])) << "tensor " << i << " differs";
  }
}

TEST(Checkpoint, ResumingRepeatsTrainingBitForBit) {
  ScratchDirectory dir;
  Training run(accelerate::AcceleratorOptions().seed(3));
  // Saved mid-epoch (20 samples / 3 per batch = 7 batches), then 6 more steps that cross into epoch 1.
  auto batches = run.train(11, [&](int step) {
    if (step == 5) {
      EXPECT_EQ(run.accelerator.save_state(dir / "ckpt"), dir / "ckpt");
    }
  });
  const std::vector<std::vector<int64_t>> expected_batches(batches.begin() + 5, batches.end());
  const auto expected_state = run.snapshot();
  const auto expected_counter = run.counter.value;
  const auto expected_steps = run.scheduler->steps();

  Training resumed(accelerate::AcceleratorOptions().seed(99)); // another seed: everything must come back
  resumed.accelerator.load_state(dir / "ckpt");
  EXPECT_EQ(resumed.counter.value, 5);
  EXPECT_EQ(resumed.accelerator.gradient_state()->optimizer_steps, 5);
  EXPECT_EQ(resumed.loader->state().batches_consumed, 5u);
  EXPECT_EQ(resumed.train(6), expected_batches);
  expect_same(resumed.snapshot(), expected_state);
  EXPECT_EQ(resumed.counter.value, expected_counter);
  EXPECT_EQ(resumed.scheduler->steps(), expected_steps);
}

TEST(Checkpoint, RegisteredCountersComeBackWhicheverCallComesFirst) {
  ScratchDirectory dir;
  Training run(accelerate::AcceleratorOptions().seed(4));
  int64_t step = 0;
  int epoch = 0;
  run.accelerator.register_counter("step", step);
  run.accelerator.register_counter("epoch", epoch);
  run.train(3);
  step = 3;
  epoch = 1;
  run.accelerator.save_state(dir / "ckpt");

  Training resumed(accelerate::AcceleratorOptions().seed(5));
  int64_t registered_before = 0;
  resumed.accelerator.register_counter("step", registered_before);
  resumed.accelerator.load_state(dir / "ckpt");
  EXPECT_EQ(registered_before, 3); // load_state sets it
  int registered_after = 0;
  resumed.accelerator.register_counter("epoch", registered_after);
  EXPECT_EQ(registered_after, 1); // registered after the load: takes the loaded value at once
  int unsaved = 7;
  resumed.accelerator.register_counter("not_in_the_checkpoint", unsaved);
  EXPECT_EQ(unsaved, 7); // a name the checkpoint lacks is left as it is
  // A name registered again replaces the earlier registration: the new variable is what is saved.
  int64_t replacement = 0;
  resumed.accelerator.register_counter("step", replacement);
  EXPECT_EQ(replacement, 3);
  replacement = 9;
  registered_before = 100;
  resumed.accelerator.save_state(dir / "again");

  Training third(accelerate::AcceleratorOptions().seed(6));
  int64_t loaded = 0;
  third.accelerator.register_counter("step", loaded);
  third.accelerator.load_state(dir / "again");
  EXPECT_EQ(loaded, 9);
}

TEST(Checkpoint, AProgressBarGoesOnFromWhereTheCheckpointLeftIt) {
  ScratchDirectory dir;
  // A bar over a step count, registered as accel-rewrite --progress-bar registers it, saved after 3 steps.
  Training run(accelerate::AcceleratorOptions().seed(4));
  accelerate::ProgressBar bar(10, "train");
  ASSERT_TRUE(bar.shown()); // one process: the local main one, which shows it
  run.accelerator.register_counter("progress", bar);
  run.train(3, [&](int step) {
    bar.update();
    if (step == 3) {
      run.accelerator.save_state(dir / "ckpt");
    }
  });

  // load_state puts it back at its count, whether it was registered before the load or after.
  Training resumed(accelerate::AcceleratorOptions().seed(5));
  accelerate::ProgressBar before(10, "train");
  resumed.accelerator.register_counter("progress", before);
  resumed.accelerator.load_state(dir / "ckpt");
  EXPECT_EQ(before.count(), 3);
  accelerate::ProgressBar after(10, "train");
  resumed.accelerator.register_counter("progress", after);
  EXPECT_EQ(after.count(), 3);
  after.update();
  EXPECT_EQ(after.count(), 4);
  // A bar that is gone (a function's, which returned while the job's accelerator lives on) is saved at its
  // last count: the registration holds its state, never the bar itself.
  {
    accelerate::ProgressBar gone(10, "train");
    resumed.accelerator.register_counter("gone", gone);
    gone.update(2);
  }
  const std::string saved = resumed.accelerator.save_state(dir / "again");
  const auto metadata =
      nlohmann::json::parse(accelerate::detail::read_whole_file(join_path(saved, "metadata.json")));
  EXPECT_EQ(metadata["counters"]["gone"], 2);
  EXPECT_EQ(metadata["counters"]["progress"], 4);

  // A bar over the prepared loader, which load_state resumed after the 3 batches of the 7 of an epoch that
  // the checkpoint had consumed: it starts at 3 and ends at 7; the next pass starts at 0.
  std::vector<int64_t> counts;
  auto resumed_pass = accelerate::progress_bar(*resumed.loader, "epoch 0");
  for (auto& batch : resumed_pass) {
    (void)batch;
    counts.push_back(resumed_pass.bar().count());
  }
  EXPECT_EQ(counts, (std::vector<int64_t>{3, 4, 5, 6}));
  EXPECT_EQ(resumed_pass.bar().count(), 7);
  EXPECT_EQ(resumed.loader->pass_start(), 3u);
  counts.clear();
  auto next_pass = accelerate::progress_bar(*resumed.loader, "epoch 1");
  for (auto& batch : next_pass) {
    (void)batch;
    counts.push_back(next_pass.bar().count());
  }
  EXPECT_EQ(counts, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(next_pass.bar().count(), 7);
}

TEST(Checkpoint, LayoutAndMetadataAreDocumented) {
  ScratchDirectory dir;
  Training run(accelerate::AcceleratorOptions().seed(1));
  run.train(2);
  const std::string saved = run.accelerator.save_state(dir / "ckpt");
  for (const char* name : {"metadata.json", "model.safetensors", "optimizer.bin", "random_states_0.bin",
                           "custom_checkpoint_0.bin"}) {
    EXPECT_TRUE(path_exists(join_path(saved, name))) << name;
  }
  std::ifstream in(join_path(saved, "metadata.json"));
  const std::string metadata((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const char* key : {"\"format_version\": 2", "\"world_size\": 1", "\"parallel_strategy\": \"ddp\"",
                          "\"mixed_precision\": \"no\"", "\"step\": 2", "\"torch_version\": \"2.11.0\"",
                          "\"batches_consumed\": 2", "\"step_count\": 2"}) {
    EXPECT_NE(metadata.find(key), std::string::npos) << key << " in\n" << metadata;
  }
  // The model file is plain safetensors with the unwrapped module's names.
  const auto model = accelerate::load_safetensors(join_path(saved, "model.safetensors"));
  EXPECT_EQ(model.tensors.size(), 5u); // fc1.weight, fc1.bias, fc2.weight, fc2.bias, calls
  EXPECT_TRUE(torch::equal(model.tensors.at("fc1.weight"), run.model->fc1->weight));
}

TEST(Checkpoint, TotalLimitKeepsTheNewestTwoAcrossARestart) {
  ScratchDirectory dir;
  auto options = [&] {
    return accelerate::AcceleratorOptions()
        .project_dir(dir.path())
        .automatic_checkpoint_naming(true)
        .total_limit(2)
        .seed(5);
  };
  auto names = [&] { return list_directory(dir / "checkpoints"); };
  {
    Training run(options());
    for (int i = 0; i < 5; ++i) {
      run.train(1);
      EXPECT_EQ(run.accelerator.save_state(), dir / ("checkpoints/checkpoint_" + std::to_string(i)));
    }
    EXPECT_EQ(names(), (std::vector<std::string>{"checkpoint_3", "checkpoint_4", "latest"}));
  }
  {
    Training restarted(options()); // a new process: the counter comes back from the checkpoint
    restarted.accelerator.load_state();
    EXPECT_EQ(restarted.accelerator.gradient_state()->optimizer_steps, 5);
    restarted.train(1);
    EXPECT_EQ(restarted.accelerator.save_state(), dir / "checkpoints/checkpoint_5");
    EXPECT_EQ(names(), (std::vector<std::string>{"checkpoint_4", "checkpoint_5", "latest"}));
  }
  {
    Training fresh(options()); // a restart that does not load still never overwrites a checkpoint
    EXPECT_EQ(fresh.accelerator.save_state(), dir / "checkpoints/checkpoint_6");
    EXPECT_EQ(names(), (std::vector<std::string>{"checkpoint_5", "checkpoint_6", "latest"}));
  }
}

TEST(Checkpoint, InterruptedSaveIsIgnoredAndCleanedUp) {
  ScratchDirectory dir;
  auto options = accelerate::AcceleratorOptions().project_dir(dir.path()).seed(2);
  Training run(options);
  run.train(2);
  run.accelerator.save_state();
  const auto state = run.snapshot();
  // What a SIGKILL in the middle of the next save leaves behind (test/checkpoint kills real processes).
  const std::string partial = dir / "checkpoints/.checkpoint_1.partial";
  accelerate::detail::make_directories(partial);
  accelerate::detail::write_file_durably(join_path(partial, "model.safetensors"), "half a file");
  run.train(2);
  run.accelerator.load_state();
  expect_same(run.snapshot(), state);
  EXPECT_EQ(run.accelerator.save_state(), dir / "checkpoints/checkpoint_1");
  EXPECT_FALSE(path_exists(partial));
}

TEST(Checkpoint, SavingTwiceToOneDirectoryReplacesItWhole) {
  ScratchDirectory dir;
  Training run(accelerate::AcceleratorOptions().seed(4));
  run.train(1);
  run.accelerator.save_state(dir / "ckpt");
  run.train(2);
  const auto state = run.snapshot();
  run.accelerator.save_state(dir / "ckpt/"); // the same directory, spelled with a trailing slash
  run.train(1);
  run.accelerator.load_state(dir / "ckpt");
  expect_same(run.snapshot(), state);
  EXPECT_EQ(list_directory(dir.path()), std::vector<std::string>{"ckpt"});
}

/// Runs `call`, which must throw an exception whose message contains each of `expected`.
template <typename Call> void expect_error(Call&& call, std::initializer_list<std::string> expected) {
  try {
    call();
    ADD_FAILURE() << "no error";
  } catch (const std::exception& error) {
    for (const auto& text : expected) {
      EXPECT_NE(std::string(error.what()).find(text), std::string::npos)
          << "'" << text << "' not in: " << error.what();
    }
  }
}

TEST(Checkpoint, BadInputFailsClearlyAndLosesNothing) {
  ScratchDirectory dir;
  Training run(accelerate::AcceleratorOptions().seed(6));
  run.train(2);
  const std::string good = run.accelerator.save_state(dir / "good");
  run.train(1);
  const auto before = run.snapshot();
  auto copy = [&](const std::string& name) {
    copy_directory(good, dir / name);
    return dir / name;
  };
  auto rewrite = [](const std::string& file, const std::function<void(std::string&)>& change) {
    std::string bytes = accelerate::detail::read_whole_file(file);
    change(bytes);
    accelerate::detail::write_file_durably(file, bytes);
  };

  expect_error([&] { run.accelerator.load_state(dir / "nowhere"); },
               {"'" + (dir / "nowhere") + "' does not exist"});

  const auto truncated = copy("truncated");
  rewrite(join_path(truncated, "optimizer.bin"), [](std::string& bytes) { bytes.resize(bytes.size() / 2); });
  expect_error([&] { run.accelerator.load_state(truncated); },
               {"is damaged", "'optimizer.bin' holds", "truncated", "load an earlier checkpoint"});

  const auto corrupt = copy("corrupt");
  rewrite(join_path(corrupt, "model.safetensors"),
          [](std::string& bytes) { bytes[bytes.size() - 3] ^= 0x40; });
  expect_error([&] { run.accelerator.load_state(corrupt); },
               {"'model.safetensors' has content hash", "corrupt"});

  const auto future = copy("future");
  rewrite(join_path(future, "metadata.json"), [](std::string& text) {
    text.replace(text.find("\"format_version\": 2"), 19, "\"format_version\": 7");
  });
  expect_error([&] { run.accelerator.load_state(future); },
               {"format version 7", "reads format versions up to 2", "newer accelerate-cpp"});

  {
    Training other(accelerate::AcceleratorOptions().seed(6), /*hidden=*/8);
    const std::string other_checkpoint = other.accelerator.save_state(dir / "other");
    expect_error([&] { run.accelerator.load_state(other_checkpoint); },
                 {"holds another model", "different shapes", "fc1.weight: checkpoint [8, 4], model [16, 4]",
                  "fc2.weight: checkpoint [1, 8], model [1, 16]"});
  }
  accelerate::detail::make_directories(dir / "plain");
  expect_error([&] { run.accelerator.load_state(dir / "plain"); }, {"has no metadata.json"});

  expect_same(run.snapshot(), before); // none of the failed loads changed anything
  run.accelerator.load_state(good);
  EXPECT_EQ(run.accelerator.gradient_state()->optimizer_steps, 2);
}

TEST(Checkpoint, ExistingDirectoryThatIsNoCheckpointIsNotOverwritten) {
  ScratchDirectory dir;
  Training run(accelerate::AcceleratorOptions().seed(7));
  accelerate::detail::make_directories(dir / "results");
  accelerate::detail::write_file_durably(dir / "results/notes.txt", "keep me");
  expect_error([&] { run.accelerator.save_state(dir / "results"); },
               {"exists and is not a checkpoint", "Choose a new or empty directory"});
  EXPECT_EQ(accelerate::detail::read_whole_file(dir / "results/notes.txt"), "keep me");
}

TEST(Checkpoint, LoadingWithoutAnyCheckpointExplains) {
  ScratchDirectory dir;
  Training run(accelerate::AcceleratorOptions().seed(8));
  expect_error([&] { run.accelerator.load_state(); }, {"no project_dir is set"});
  Training with_project(accelerate::AcceleratorOptions().project_dir(dir.path()));
  expect_error([&] { with_project.accelerator.load_state(); }, {"no checkpoint found under"});
}

TEST(Checkpoint, SaveModelWritesSafetensorsAndALibtorchArchive) {
  ScratchDirectory dir;
  Training run(accelerate::AcceleratorOptions().seed(9));
  run.accelerator.save_model(*run.model, dir / "export");
  const auto weights = accelerate::load_safetensors(dir / "export/model.safetensors");
  EXPECT_EQ(weights.metadata.at("format"), "pt");
  EXPECT_TRUE(torch::equal(weights.tensors.at("fc2.weight"), run.model->fc2->weight));
  auto copy = std::make_shared<Net>();
  torch::serialize::InputArchive archive;
  archive.load_from(dir / "export/model.pt");
  copy->load(archive);
  EXPECT_TRUE(torch::equal(copy->fc1->weight, run.model->fc1->weight));
}

TEST(Checkpoint, SaveModelShardsAboveMaxShardSizeAndAFailedSaveKeepsThePreviousFiles) {
  ScratchDirectory dir;
  Training run(accelerate::AcceleratorOptions().seed(9));
  const std::string out = dir / "export";
  // By name: calls (4 bytes), fc1.bias (64), fc1.weight (256: a file of its own), fc2.bias (4), fc2.weight
  // (64).
  run.accelerator.save_model(*run.model, out, accelerate::SaveModelOptions().max_shard_size(100));
  const std::vector<std::string> sharded = {
      "model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
      "model-00003-of-00003.safetensors", "model.pt", "model.safetensors.index.json"};
  auto files = [&] {
    auto names = list_directory(out);
    std::sort(names.begin(), names.end());
    return names;
  };
  ASSERT_EQ(files(), sharded);
  const auto index = nlohmann::json::parse(accelerate::detail::read_whole_file(join_path(out, sharded[4])));
  EXPECT_EQ(index.at("metadata").at("total_size"), 4 + 64 + 256 + 4 + 64);
  EXPECT_EQ(index.at("weight_map").at("fc1.weight"), sharded[0]);
  EXPECT_EQ(index.at("weight_map").at("fc2.weight"), sharded[2]);
  EXPECT_TRUE(torch::equal(accelerate::load_safetensors(join_path(out, sharded[2])).tensors.at("fc2.weight"),
                           run.model->fc2->weight));

  // A save that fails while writing (the second shard's temporary name is taken by a directory) leaves the
  // previous save's files as they were, and no temporary file behind.
  std::map<std::string, std::string> before;
  for (const auto& name : sharded) {
    before[name] = accelerate::detail::read_whole_file(join_path(out, name));
  }
  const std::string blocker =
      join_path(out, ".model-00002-of-00003.safetensors.tmp-" + std::to_string(::getpid()));
  accelerate::detail::make_directories(blocker);
  torch::NoGradGuard no_grad;
  run.model->fc2->weight.add_(1.0);
  EXPECT_THROW(
      run.accelerator.save_model(*run.model, out, accelerate::SaveModelOptions().max_shard_size("100")),
      std::runtime_error);
  accelerate::detail::remove_tree(blocker);
  ASSERT_EQ(files(), sharded);
  for (const auto& name : sharded) {
    EXPECT_EQ(accelerate::detail::read_whole_file(join_path(out, name)), before[name]) << name;
  }

  // One file again: the shards and the index of the previous save go.
  run.accelerator.save_model(*run.model, out);
  EXPECT_EQ(files(), (std::vector<std::string>{"model.pt", "model.safetensors"}));
  EXPECT_TRUE(
      torch::equal(accelerate::load_safetensors(join_path(out, "model.safetensors")).tensors.at("fc2.weight"),
                   run.model->fc2->weight));

  auto message_of = [&](const accelerate::SaveModelOptions& options) {
    try {
      run.accelerator.save_model(*run.model, out, options);
    } catch (const std::invalid_argument& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message_of(accelerate::SaveModelOptions().safe_serialization(false))
                .find("Drop .safe_serialization(false)"),
            std::string::npos);
  EXPECT_NE(message_of(accelerate::SaveModelOptions().max_shard_size("ten")).find("max_shard_size is 'ten'"),
            std::string::npos);
}

TEST(Checkpoint, MetadataRecordsTheStrategyAndTheProcessOfEachOwnFile) {
  ScratchDirectory dir;
  Training run(accelerate::AcceleratorOptions().seed(10));
  run.train(1);
  const std::string saved = run.accelerator.save_state(dir / "ckpt");
  const auto metadata =
      nlohmann::json::parse(accelerate::detail::read_whole_file(join_path(saved, "metadata.json")));
  EXPECT_EQ(metadata.at("parallel_strategy"), "ddp");
  EXPECT_EQ(metadata.at("world_size"), 1);
  // Each process's own file names the process that wrote it; the checkpoint's shared files name none.
  EXPECT_EQ(metadata.at("files").at("random_states_0.bin").at("rank"), 0);
  EXPECT_FALSE(metadata.at("files").at("model.safetensors").contains("rank"));
  EXPECT_FALSE(metadata.at("files").at("optimizer.bin").contains("rank"));
}

TEST(Checkpoint, ACheckpointOfAnotherParallelStrategyIsRefused) {
  ScratchDirectory dir;
  Training run(accelerate::AcceleratorOptions().seed(11));
  run.train(1);
  const std::string saved = run.accelerator.save_state(dir / "ckpt");
  const std::string path = join_path(saved, "metadata.json");
  std::string text = accelerate::detail::read_whole_file(path);
  text.replace(text.find("\"parallel_strategy\": \"ddp\""), 26, "\"parallel_strategy\": \"pipeline\"");
  accelerate::detail::write_file_durably(path, text);
  run.train(1);
  const auto before = run.snapshot();
  expect_error(
      [&] { run.accelerator.load_state(saved); },
      {"written with the parallel strategy 'pipeline' on 1 process(es)", "this program trains with 'ddp'"});
  expect_same(run.snapshot(), before);
}

TEST(Checkpoint, AFailureWhileRestoringUndoesEveryPart) {
  ScratchDirectory dir;
  Training run(accelerate::AcceleratorOptions().seed(12));
  run.train(2, [&](int step) {
    if (step == 2) {
      run.accelerator.save_state(dir / "ckpt"); // 2 batches of 3 samples into the epoch
    }
  });
  // Another program state, whose loader's global batch of 4 cannot resume after 6 samples: its position is
  // refused while restoring, after the step counters, the weights, the optimizer and the scheduler were.
  Training other(accelerate::AcceleratorOptions().seed(13), /*hidden=*/16, /*batch_size=*/4);
  other.train(3);
  const auto before = other.snapshot();
  const auto position = other.loader->state();
  const auto scheduler_steps = other.scheduler->steps();
  const auto counter = other.counter.value;
  const auto generator = at::detail::getDefaultCPUGenerator().get_state();
  expect_error([&] { other.accelerator.load_state(dir / "ckpt"); }, {"does not divide it"});
  expect_same(other.snapshot(), before);
  EXPECT_EQ(other.scheduler->steps(), scheduler_steps);
  EXPECT_EQ(other.accelerator.gradient_state()->optimizer_steps, 3);
  EXPECT_EQ(other.counter.value, counter);
  EXPECT_EQ(other.loader->state().epoch, position.epoch);
  EXPECT_EQ(other.loader->state().batches_consumed, position.batches_consumed);
  EXPECT_TRUE(torch::equal(at::detail::getDefaultCPUGenerator().get_state(), generator));
}

TEST(Checkpoint, WithoutAutomaticNamingADirectoryIsRequired) {
  ScratchDirectory dir;
  Training run(accelerate::AcceleratorOptions().project_dir(dir.path()).automatic_checkpoint_naming(false));
  for (auto call : {std::function<void()>([&] { run.accelerator.save_state(); }),
                    std::function<void()>([&] { run.accelerator.load_state(); })}) {
    try {
      call();
      ADD_FAILURE() << "no error";
    } catch (const std::invalid_argument& error) {
      EXPECT_NE(std::string(error.what()).find("automatic_checkpoint_naming is off; pass a directory"),
                std::string::npos)
          << error.what();
      EXPECT_NE(std::string(error.what()).find("automatic_checkpoint_naming(true)"), std::string::npos)
          << error.what();
    }
  }
  EXPECT_FALSE(path_exists(dir / "checkpoints"));
  run.train(1);
  const std::string saved = run.accelerator.save_state(dir / "explicit"); // an explicit directory still works
  run.accelerator.load_state(saved);
  EXPECT_EQ(run.accelerator.gradient_state()->optimizer_steps, 1);
}

TEST(Checkpoint, WithAutomaticNamingNoDirectoryNamesTheNextCheckpoint) {
  ScratchDirectory dir;
  Training run(accelerate::AcceleratorOptions().project_dir(dir.path()).automatic_checkpoint_naming(true));
  run.train(1);
  EXPECT_EQ(run.accelerator.save_state(), dir / "checkpoints/checkpoint_0");
  run.train(1);
  run.accelerator.load_state();
  EXPECT_EQ(run.accelerator.gradient_state()->optimizer_steps, 1);
}

// ---- The store rendezvous (runtime/transport/store_rendezvous.h)
// --------------------------------------------------------

TEST(StoreRendezvous, EveryProcessGetsEveryValueInRankOrder) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  const accelerate::detail::RendezvousKeys keys{"meet/", "meet-abort"};
  std::vector<std::string> values[3];
  std::vector<std::thread> processes;
  for (int rank = 0; rank < 3; ++rank) {
    processes.emplace_back([&, rank] {
      values[rank] = accelerate::detail::store_rendezvous<std::runtime_error>(
          *store, keys, rank, 3, "value of " + std::to_string(rank), std::chrono::seconds(10),
          [](const accelerate::detail::Absentees&) { return std::string("unexpected"); },
          [](const std::string&) { return std::string("unexpected"); });
    });
  }
  for (auto& process : processes) {
    process.join();
  }
  for (const auto& seen : values) {
    EXPECT_EQ(seen, (std::vector<std::string>{"value of 0", "value of 1", "value of 2"}));
  }
}

TEST(StoreRendezvous, AMissingProcessIsNamedAndALateOneLearnsWhy) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  const accelerate::detail::RendezvousKeys keys{"meet/", "meet-abort"};
  auto explain = [](const accelerate::detail::Absentees& absent) {
    std::string text = "missing";
    for (int rank : absent.missing) {
      text += " " + std::to_string(rank);
    }
    text += ", present";
    for (int rank : absent.present) {
      text += " " + std::to_string(rank);
    }
    return text;
  };
  auto late = [](const std::string& reason) { return "late: " + reason; };
  // Processes 0 and 2 of 3 arrive; process 1 does not within the timeout.
  std::string failures[3];
  std::vector<std::thread> processes;
  for (int rank : {0, 2}) {
    processes.emplace_back([&, rank] {
      failures[rank] = accelerate::detail::meet_through_store(*store, keys, rank, 3, "x",
                                                              std::chrono::milliseconds(300), explain, late)
                           .failure;
    });
  }
  for (auto& process : processes) {
    process.join();
  }
  EXPECT_EQ(failures[0], "missing 1, present 0 2");
  EXPECT_EQ(failures[2], "missing 1, present 0 2");
  // Process 1 arrives after they gave up: it fails at once with their explanation, as the exception asked
  // for.
  const auto start = std::chrono::steady_clock::now();
  expect_error(
      [&] {
        accelerate::detail::store_rendezvous<std::logic_error>(*store, keys, 1, 3, "x",
                                                               std::chrono::seconds(10), explain, late);
      },
      {"late: missing 1, present 0 2"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

} // namespace
