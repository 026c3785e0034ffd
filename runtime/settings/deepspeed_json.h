// DeepSpeed's own JSON config (`deepspeed_config_file`), read as Hugging Face Accelerate's DeepSpeedPlugin
// reads it: the one home of these rules for the runtime (runtime/settings/config.cpp) and for `accel launch`
// (tools/accel/LaunchSettings.cpp). DeepSpeed's keys become the option table's settings (zero_stage, the
// offload devices, gradient_accumulation_steps, gradient_clipping, mixed_precision); "auto" takes the value
// given elsewhere, else Accelerate's default; keys that only tune DeepSpeed's performance are accepted and
// noted; keys that would change results and are not built are refused with their JSON path. The standard
// library and nlohmann-json only: no torch, no yaml-cpp.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace accelerate::settings {

/// A value given outside the JSON (AcceleratorOptions, the environment, accel's flags) that a DeepSpeed
/// "auto" takes, and how messages name where it came from ("the environment", "--zero_stage 2").
struct GivenValue {
  std::string text;
  std::string origin;
};

/// One setting a DeepSpeed JSON decides, named as the option table names it.
struct DeepSpeedJsonSetting {
  std::string option; ///< zero_stage, offload_optimizer_device, offload_param_device, ...
  std::string text;   ///< the value, as text the option's parser reads ("2", "cpu", "1.0", "fp16")
  std::string origin; ///< "DeepSpeed config PATH, key zero_optimization.stage", and how "auto" was filled
  /// The file decides it (a value, or DeepSpeed's default where the key is absent), as it does in Accelerate
  /// whatever the environment says; false where "auto" took a given value or Accelerate's default.
  bool decided_by_file = true;
};

/// What a DeepSpeed JSON asks for.
struct DeepSpeedJson {
  std::string path;
  /// One per option of deepspeed_json_options(), in that order.
  std::vector<DeepSpeedJsonSetting> settings;
  /// Keys accepted without effect here, each "JSON.PATH: why" (tuning of DeepSpeed's performance,
  /// monitoring).
  std::vector<std::string> notes;

  /// The setting for `option`, or null.
  const DeepSpeedJsonSetting* find(const std::string& option) const;
};

/// The options a DeepSpeed JSON decides: zero_stage, offload_optimizer_device, offload_param_device,
/// gradient_accumulation_steps, gradient_clipping, mixed_precision.
const std::vector<std::string>& deepspeed_json_options();

/// The variable that names the file (Accelerate's launcher exports it) and the config key.
extern const char* const kDeepSpeedConfigFileVariable;
extern const char* const kDeepSpeedConfigFileKey;

/// Whether `text` names a file: not empty and not Accelerate's "none" (in any case).
bool names_deepspeed_json(const std::string& text);

/// Reads the DeepSpeed JSON at `path` (`named_by` says what named it, for the message when it cannot be read:
/// "deepspeed_config.deepspeed_config_file in config file f.yaml"). `given` maps options of
/// deepspeed_json_options() to the values given elsewhere, which "auto" takes; `world_size`, where known,
/// checks train_batch_size = train_micro_batch_size_per_gpu × gradient_accumulation_steps × world size, as
/// DeepSpeed does. Throws std::invalid_argument with one line, without a program's prefix, naming the file,
/// the JSON path
/// (`zero_optimization.offload_param.device`), the value and the fix: a file that cannot be read, malformed
/// JSON (with line and column), no `zero_optimization` (as Accelerate), a value of the wrong kind, and a key
/// that would change results and is not built (an `optimizer` or `scheduler` block, NVMe offload, a
/// loss-scale setting the runtime's scaler does not have, a key it does not know).
DeepSpeedJson read_deepspeed_json(const std::string& path, const std::string& named_by,
                                  const std::map<std::string, GivenValue>& given,
                                  std::optional<long long> world_size);
/// The same, from `text` already read.
DeepSpeedJson parse_deepspeed_json(const std::string& text, const std::string& path,
                                   const std::map<std::string, GivenValue>& given,
                                   std::optional<long long> world_size);

/// Where the DeepSpeed JSON comes from, what it must not be set beside, and what fills its "auto" values.
struct DeepSpeedJsonRequest {
  std::string path;     ///< the file; none where it is "" or "none"
  std::string named_by; ///< "ACCELERATE_DEEPSPEED_CONFIG_FILE in the environment", ...
  /// The config keys set that the JSON replaces (keys_replaced_by_deepspeed_json()), and where.
  std::vector<std::string> replaced_keys;
  std::string replaced_keys_origin;
  /// ACCELERATE_CONFIG_DS_FIELDS: the config file's DeepSpeed keys, as Accelerate's launcher exports them.
  std::string launcher_fields;
  std::map<std::string, GivenValue> given;
  std::optional<long long> world_size;

  /// ACCELERATE_DEEPSPEED_CONFIG_FILE's value: the file, where it names one.
  void named_in_environment(const std::string& text);
  /// The config file's deepspeed_config_file (the file, unless one is named already) and the keys it has that
  /// the JSON replaces; `label` is "config file PATH".
  void named_in_file(const std::string& text, const std::vector<std::string>& replaced,
                     const std::string& label);
  /// A value given for `option` elsewhere; ignored for an option the JSON does not decide.
  void give(const std::string& option, const std::string& text, const std::string& origin);
};

/// The JSON `request` names, read (read_deepspeed_json); nullopt where it names none. Throws
/// std::invalid_argument, its message beginning with `prefix`, for the JSON's problems and for config keys it
/// replaces set beside it, in the config file or in ACCELERATE_CONFIG_DS_FIELDS (Accelerate's refusal).
std::optional<DeepSpeedJson> read_requested_deepspeed_json(const DeepSpeedJsonRequest& request,
                                                           const std::string& prefix);

/// Throws std::invalid_argument ("<prefix><given> conflicts with <option>='<value>' (from <origin>): ...")
/// when `setting` is the file's own value and `text`, given elsewhere (named `given` in the message:
/// "--zero_stage 3"), is another.
void check_given_against(const DeepSpeedJsonSetting& setting, const std::string& text,
                         const std::string& given, const std::string& prefix);

/// Accelerate's config keys that a deepspeed_config_file replaces, with its names (its
/// DeepSpeedPlugin._deepspeed_config_checks): gradient_accumulation_steps, gradient_clipping, zero_stage, the
/// offload devices and NVMe paths, zero3_save_16bit_model (in deepspeed_config) and mixed_precision.
const std::vector<std::string>& keys_replaced_by_deepspeed_json();
/// Those of them a config file sets, by `is_set(dotted key)`: `deepspeed_config.<key>`, and `mixed_precision`
/// and `gradient_accumulation_steps` at the top level (the runtime reads the latter there too).
std::vector<std::string>
keys_replaced_by_deepspeed_json(const std::function<bool(const std::string&)>& is_set);

/// Accelerate's refusal of `keys` (some of keys_replaced_by_deepspeed_json()) set beside a
/// deepspeed_config_file, as one line: "deepspeed_config_file is set, so these config keys ... : [keys] ...".
std::string deepspeed_json_conflict(const std::vector<std::string>& keys);

/// Whether two texts of one setting are the same value: numbers compared as numbers ("1" and "1.0"), other
/// text exactly.
bool same_setting_text(const std::string& first, const std::string& second);

} // namespace accelerate::settings
