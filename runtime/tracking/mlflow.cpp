// The "mlflow" tracker: a run on an MLflow tracking server, over MLflow's REST API (libcurl).
//
//   MLFLOW_TRACKING_URI     the server (http://host:5000); required, and "all" selects this tracker only when
//   set MLFLOW_EXPERIMENT_NAME  the experiment (created when missing); default: init_trackers' project_name
//   MLFLOW_RUN_ID           log to this existing run instead of creating one
//   MLFLOW_TAGS             a JSON object of tags for a new run (and a new experiment)
//   MLFLOW_NESTED_RUN       true: the new run is a child of MLFLOW_RUN_ID's run (mlflow.parentRunId)
//   MLFLOW_TRACKING_TOKEN, MLFLOW_TRACKING_USERNAME/PASSWORD, MLFLOW_TRACKING_INSECURE_TLS: MLflow's own
//
// `log` only queues: a background thread sends what is queued in runs/log-batch requests (at most 1,000
// metrics, 100 params and 100 tags each), so a slow or stopped server never slows a step. When the server
// does not answer (down, stopped, timing out) the thread prints one warning and appends each batch to
// `<project_dir>/<project_name>/mlflow-spool.jsonl`, one request body a line, tries again every few seconds,
// and when the server answers sends the spooled lines in order and removes the file; a run that ends while
// the server is away leaves the file, and the next start of a run in that directory sends it first. The run
// is created when the first value is sent, so a `load_state` between init_trackers and the first log
// continues the checkpoint's run (its id is the tracker's checkpoint_state) rather than starting a new one.
#include "common/host_name.h"
#include "tracking/record_file.h"
#include "tracking/registry.h"

#include <accelerate/logging.h>

#include <curl/curl.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace accelerate::detail {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// MLflow's limits (mlflow/utils/validation.py): per log-batch request, and a parameter value's length.
constexpr size_t kMaxMetricsPerBatch = 1000;
constexpr size_t kMaxParamsTagsPerBatch = 100;
constexpr size_t kMaxParamValueLength = 6000;
constexpr size_t kMaxKeyLength = 250;
// How long a request may take, how long to wait before asking a silent server again, and how long between
// sends: a step never waits for any of them.
constexpr long kConnectTimeoutMs = 2000;
constexpr long kRequestTimeoutMs = 5000;
constexpr auto kRetryInterval = std::chrono::seconds(3);
constexpr auto kSendInterval = std::chrono::milliseconds(500);

const Logger& mlflow_logger() {
  static const Logger logger = get_logger("accelerate.tracking.mlflow");
  return logger;
}

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

bool truthy(const std::string& text) {
  std::string lower;
  for (const char c : text) {
    lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return lower == "1" || lower == "true" || lower == "yes" || lower == "on";
}

int64_t now_ms() {
  return static_cast<int64_t>(wall_time_now() * 1000.0);
}

/// MLflow's rule for metric, param and tag names: letters, digits and `_ - . / : space`, at most 250.
bool valid_key(const std::string& key) {
  if (key.empty() || key.size() > kMaxKeyLength) {
    return false;
  }
  for (const char c : key) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == '/' ||
          c == ':' || c == ' ')) {
      return false;
    }
  }
  return true;
}

/// A metric's value as protobuf's JSON mapping reads a double: the number, or "NaN"/"Infinity"/"-Infinity".
Json metric_value(double value) {
  if (std::isnan(value)) {
    return "NaN";
  }
  if (std::isinf(value)) {
    return value > 0 ? "Infinity" : "-Infinity";
  }
  return value;
}

// ---- The settings ------------------------------------------------------------------------------------

struct Settings {
  std::string tracking_uri;
  std::string experiment_name;
  std::string run_id;
  Json tags = Json::object();
  bool nested = false;
  std::string token, username, password;
  bool insecure_tls = false;
};

Settings read_settings(const TrackerRun& run) {
  Settings settings;
  settings.tracking_uri = environment("MLFLOW_TRACKING_URI");
  while (!settings.tracking_uri.empty() && settings.tracking_uri.back() == '/') {
    settings.tracking_uri.pop_back();
  }
  if (settings.tracking_uri.empty()) {
    throw std::invalid_argument(
        "MLFLOW_TRACKING_URI is not set: set it to the MLflow tracking server's address, "
        "e.g. MLFLOW_TRACKING_URI=http://127.0.0.1:5000 (start one with `mlflow server`)");
  }
  if (settings.tracking_uri.rfind("http://", 0) != 0 && settings.tracking_uri.rfind("https://", 0) != 0) {
    throw std::invalid_argument(
        "MLFLOW_TRACKING_URI is '" + settings.tracking_uri +
        "': this tracker talks to a tracking server over HTTP; set it to the server's "
        "http:// or https:// address (a local file or database store is not supported)");
  }
  settings.experiment_name = environment("MLFLOW_EXPERIMENT_NAME");
  if (settings.experiment_name.empty()) {
    settings.experiment_name = run.project_name.empty() ? "Default" : run.project_name;
  }
  settings.run_id = environment("MLFLOW_RUN_ID");
  if (const std::string tags = environment("MLFLOW_TAGS"); !tags.empty()) {
    Json parsed;
    try {
      parsed = Json::parse(tags);
    } catch (const Json::exception& error) {
      throw std::invalid_argument("MLFLOW_TAGS is not JSON (" + std::string(error.what()) +
                                  "); set it to an object, e.g. MLFLOW_TAGS='{\"team\": \"vision\"}'");
    }
    if (!parsed.is_object()) {
      throw std::invalid_argument("MLFLOW_TAGS is " + tags +
                                  ", not a JSON object; set it to e.g. MLFLOW_TAGS='{\"team\": \"vision\"}'");
    }
    for (auto& [key, value] : parsed.items()) {
      settings.tags[key] = value.is_string() ? value.get<std::string>() : value.dump();
    }
  }
  settings.nested = truthy(environment("MLFLOW_NESTED_RUN"));
  settings.token = environment("MLFLOW_TRACKING_TOKEN");
  settings.username = environment("MLFLOW_TRACKING_USERNAME");
  settings.password = environment("MLFLOW_TRACKING_PASSWORD");
  settings.insecure_tls = truthy(environment("MLFLOW_TRACKING_INSECURE_TLS"));
  return settings;
}

// ---- HTTP --------------------------------------------------------------------------------------------

/// What a request got: `status` 0 when no answer came (refused, timed out), with `error` saying why.
struct Response {
  long status = 0;
  std::string body;
  std::string error;

  bool ok() const { return status >= 200 && status < 300; }
  /// No answer, or the server failed (5xx, 429): worth sending again later. Any other error is the
  /// request's own (a bad value) and sending it again would fail the same way.
  bool transient() const { return status == 0 || status >= 500 || status == 429; }
  /// MLflow's error_code ("RESOURCE_DOES_NOT_EXIST"), when the body holds one.
  std::string error_code() const {
    try {
      const Json json = Json::parse(body);
      return json.value("error_code", "");
    } catch (const Json::exception&) {
      return "";
    }
  }
  std::string describe() const {
    if (status == 0) {
      return error;
    }
    std::string text = "HTTP " + std::to_string(status);
    try {
      const Json json = Json::parse(body);
      if (json.contains("message")) {
        return text + ": " + json.value("error_code", "") + " " + json["message"].get<std::string>();
      }
    } catch (const Json::exception&) {
    }
    return text + (body.empty() ? "" : ": " + body.substr(0, 300));
  }
};

size_t append_body(char* data, size_t size, size_t count, void* out) {
  static_cast<std::string*>(out)->append(data, size * count);
  return size * count;
}

/// One connection to the server, reused between requests; used by one thread at a time.
class Http {
public:
  explicit Http(const Settings& settings) : settings_(settings) {
    static std::once_flag global;
    std::call_once(global, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
    curl_ = curl_easy_init();
    if (curl_ == nullptr) {
      throw std::runtime_error("libcurl could not start (curl_easy_init failed)");
    }
    headers_ = curl_slist_append(headers_, "Content-Type: application/json");
    if (!settings.token.empty()) {
      headers_ = curl_slist_append(headers_, ("Authorization: Bearer " + settings.token).c_str());
    }
  }
  ~Http() {
    curl_slist_free_all(headers_);
    curl_easy_cleanup(curl_);
  }
  Http(const Http&) = delete;
  Http& operator=(const Http&) = delete;

  Response get(const std::string& endpoint, const std::string& query) {
    return request(endpoint + "?" + query, nullptr);
  }
  Response post(const std::string& endpoint, const Json& body) {
    const std::string text = body.dump();
    return request(endpoint, &text);
  }
  std::string escape(const std::string& text) {
    char* escaped = curl_easy_escape(curl_, text.c_str(), static_cast<int>(text.size()));
    std::string out = escaped ? escaped : "";
    curl_free(escaped);
    return out;
  }

private:
  Response request(const std::string& endpoint, const std::string* body) {
    Response response;
    char error[CURL_ERROR_SIZE] = {};
    const std::string url = settings_.tracking_uri + "/api/2.0/mlflow/" + endpoint;
    curl_easy_reset(curl_);
    curl_easy_setopt(curl_, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl_, CURLOPT_NOSIGNAL, 1L); // timeouts without SIGALRM: this is a worker thread
    curl_easy_setopt(curl_, CURLOPT_CONNECTTIMEOUT_MS, kConnectTimeoutMs);
    curl_easy_setopt(curl_, CURLOPT_TIMEOUT_MS, kRequestTimeoutMs);
    curl_easy_setopt(curl_, CURLOPT_HTTPHEADER, headers_);
    curl_easy_setopt(curl_, CURLOPT_WRITEFUNCTION, append_body);
    curl_easy_setopt(curl_, CURLOPT_WRITEDATA, &response.body);
    curl_easy_setopt(curl_, CURLOPT_ERRORBUFFER, error);
    curl_easy_setopt(curl_, CURLOPT_USERAGENT, "accelerate-cpp");
    if (!settings_.username.empty()) {
      curl_easy_setopt(curl_, CURLOPT_HTTPAUTH, CURLAUTH_BASIC);
      curl_easy_setopt(curl_, CURLOPT_USERNAME, settings_.username.c_str());
      curl_easy_setopt(curl_, CURLOPT_PASSWORD, settings_.password.c_str());
    }
    if (settings_.insecure_tls) {
      curl_easy_setopt(curl_, CURLOPT_SSL_VERIFYPEER, 0L);
      curl_easy_setopt(curl_, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    if (body != nullptr) {
      curl_easy_setopt(curl_, CURLOPT_POST, 1L);
      curl_easy_setopt(curl_, CURLOPT_POSTFIELDS, body->c_str());
      curl_easy_setopt(curl_, CURLOPT_POSTFIELDSIZE, static_cast<long>(body->size()));
    }
    const CURLcode code = curl_easy_perform(curl_);
    if (code != CURLE_OK) {
      response.error = error[0] != '\0' ? error : curl_easy_strerror(code);
      response.body.clear();
      return response;
    }
    curl_easy_getinfo(curl_, CURLINFO_RESPONSE_CODE, &response.status);
    return response;
  }

  const Settings& settings_;
  CURL* curl_ = nullptr;
  curl_slist* headers_ = nullptr;
};

/// A request the server refused for its own content (HTTP 4xx): reported once, not sent again.
struct Refused : std::runtime_error {
  using std::runtime_error::runtime_error;
};
/// No answer, or a server error: the request is kept and sent again later.
struct Unreachable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// ---- The tracker -------------------------------------------------------------------------------------

std::string host_user() {
  if (const char* user = std::getenv("USER"); user && *user) {
    return user;
  }
  if (const char* login = ::getlogin(); login && *login) {
    return login;
  }
  return "unknown";
}

/// A mark no other start of a tracker shares: host, process and time.
std::string start_token() {
  return host_name() + ":" + std::to_string(::getpid()) + ":" +
         std::to_string(std::chrono::system_clock::now().time_since_epoch().count());
}

std::string program_path() {
  char path[4096] = {};
  const ssize_t length = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
  return length > 0 ? std::string(path, static_cast<size_t>(length)) : "accelerate-cpp";
}

class MlflowTracker : public Tracker {
public:
  explicit MlflowTracker(const TrackerRun& run)
      : settings_(read_settings(run)), spool_path_(run.directory + "/mlflow-spool.jsonl"), http_(settings_) {
    run_id_ = settings_.run_id;
    if (settings_.nested && settings_.run_id.empty()) {
      mlflow_logger().warning("MLFLOW_NESTED_RUN is set but MLFLOW_RUN_ID names no parent run: the run is "
                              "created at the top level (set MLFLOW_RUN_ID to the parent run's id)");
    }
    if (settings_.nested) {
      parent_run_id_ = settings_.run_id; // the new run is the parent's child; it is created, not continued
      run_id_.clear();
    }
    sender_ = std::thread([this] { send_loop(); });
  }

  ~MlflowTracker() override { stop(/*finished=*/false); }

  void store_init_configuration(const TrackedValues& config) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (broken_) {
      return;
    }
    for (const auto& value : config) {
      if (!usable_key(value.name, "parameter")) {
        continue;
      }
      std::string text = value.is_number() ? number_text(value.number()) : value.text();
      if (text.size() > kMaxParamValueLength) {
        mlflow_logger().warning("the configuration value '", value.name, "' is ", text.size(),
                                " characters long; MLflow keeps at most ", kMaxParamValueLength,
                                ", so it is logged cut to that length");
        text.resize(kMaxParamValueLength);
      }
      params_.push_back({{"key", value.name}, {"value", text}});
    }
    wake_.notify_one();
  }

  void log(const TrackedValues& values, std::optional<int64_t> step) override {
    const int64_t timestamp = now_ms();
    std::lock_guard<std::mutex> lock(mutex_);
    if (broken_) {
      return;
    }
    for (const auto& value : values) {
      if (!value.is_number()) {
        if (warned_texts_.insert(value.name).second) {
          mlflow_logger().warning("'", value.name,
                                  "' is a text; MLflow's metrics are numbers only, so it is left out of the "
                                  "mlflow tracker (the other trackers log it; reported once per name)");
        }
        continue;
      }
      if (!usable_key(value.name, "metric")) {
        continue;
      }
      metrics_.push_back({{"key", value.name},
                          {"value", metric_value(value.number())},
                          {"timestamp", timestamp},
                          {"step", step.value_or(0)}});
    }
    logged_ = true;
    if (metrics_.size() >= kMaxMetricsPerBatch) {
      wake_.notify_one();
    }
  }

  void finish() override { stop(/*finished=*/true); }

  std::string checkpoint_state() override {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!broken_ && !stopping_) {
      // save_state records the run's id, and what was logged before the checkpoint must not be lost with a
      // crash after it: the sender creates the run if needed and sends (or spools) what is queued now; this
      // waits for that, at most one attempt's timeouts.
      want_run_ = true;
      wake_.notify_one();
      const int64_t attempts = run_attempts_;
      run_attempted_.wait_for(lock, std::chrono::milliseconds(kConnectTimeoutMs + 2 * kRequestTimeoutMs),
                              [&] { return broken_ || run_attempts_ > attempts; });
    }
    if (run_id_.empty()) {
      return {};
    }
    return Json{{"run_id", run_id_}, {"experiment_id", experiment_id_}}.dump();
  }

  void load_checkpoint_state(const std::string& state) override {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string saved;
    try {
      saved = Json::parse(state).value("run_id", "");
    } catch (const Json::exception&) {
      mlflow_logger().warning("the checkpoint's mlflow entry is not the tracker's JSON (", state,
                              "); the run goes on in ", run_id_.empty() ? "a new run" : "run " + run_id_);
      return;
    }
    if (saved.empty() || saved == run_id_) {
      return;
    }
    if (run_created_) {
      mlflow_logger().warning("load_state continues MLflow run ", saved,
                              "; what was logged before it went to run ", run_id_,
                              " (call load_state before the first accelerator.log to keep one run)");
    }
    run_id_ = saved;
    run_created_ = false;
    continued_ = true;
    parent_run_id_.clear();
  }

private:
  /// One request body the sender thread sends: a log-batch, or an update ending the run.
  struct Request {
    Json body;
    bool update = false;
  };

  std::string current_run_id() {
    std::lock_guard<std::mutex> lock(mutex_);
    return run_id_;
  }

  bool usable_key(const std::string& key, const char* what) {
    if (valid_key(key)) {
      return true;
    }
    if (warned_keys_.insert(key).second) {
      mlflow_logger().warning("'", key, "' cannot name an MLflow ", what,
                              ": MLflow allows letters, digits, '_', '-', '.', '/', ':' and spaces, at most ",
                              kMaxKeyLength,
                              " characters. It is left out of the mlflow tracker (reported once)");
    }
    return false;
  }

  void stop(bool finished) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) {
        return;
      }
      stopping_ = true;
      finished_ = finished;
    }
    wake_.notify_one();
    if (sender_.joinable()) {
      sender_.join();
    }
  }

  /// What is queued, as log-batch bodies within MLflow's limits (params first, in their own requests: a
  /// parameter the run already holds with another value fails its whole request).
  std::vector<Request> take_queued() {
    std::vector<Request> requests;
    for (size_t start = 0; start < params_.size(); start += kMaxParamsTagsPerBatch) {
      Json batch = Json::array();
      for (size_t i = start; i < std::min(params_.size(), start + kMaxParamsTagsPerBatch); ++i) {
        batch.push_back(params_[i]);
      }
      requests.push_back({Json{{"params", batch}}, false});
    }
    for (size_t start = 0; start < metrics_.size(); start += kMaxMetricsPerBatch) {
      Json batch = Json::array();
      for (size_t i = start; i < std::min(metrics_.size(), start + kMaxMetricsPerBatch); ++i) {
        batch.push_back(std::move(metrics_[i]));
      }
      requests.push_back({Json{{"metrics", batch}}, false});
    }
    params_.clear();
    metrics_.clear();
    return requests;
  }

  void send_loop() {
    try {
      replay_spool(); // what an earlier start left
      std::unique_lock<std::mutex> lock(mutex_);
      while (true) {
        wake_.wait_for(lock, kSendInterval,
                       [&] { return stopping_ || want_run_ || metrics_.size() >= kMaxMetricsPerBatch; });
        const bool stopping = stopping_;
        const bool want_run = want_run_;
        want_run_ = false;
        // The run is created once there is a value to log (after a load_state that may name the run), or when
        // save_state asks for its id and for what is queued.
        const bool ready = logged_ || stopping || want_run;
        std::vector<Request> requests;
        if (ready) {
          requests = take_queued();
        }
        if (stopping && finished_) {
          requests.push_back({Json{{"status", "FINISHED"}, {"end_time", now_ms()}}, true});
        }
        lock.unlock();
        if (want_run && requests.empty() && !offline_) {
          try {
            ensure_run();
          } catch (const Unreachable& error) {
            go_offline(error.what());
          }
        }
        deliver(requests, stopping);
        lock.lock();
        if (want_run) {
          ++run_attempts_;
          run_attempted_.notify_all();
        }
        if (stopping) {
          break;
        }
      }
    } catch (const std::exception& error) {
      // Nothing else can report it: this is the sender thread. From now on `log` keeps nothing.
      mlflow_logger().warning("the mlflow tracker stopped: ", error.what(), ". Training goes on without it");
      std::lock_guard<std::mutex> lock(mutex_);
      broken_ = true;
      run_attempted_.notify_all();
      params_.clear();
      metrics_.clear();
    }
  }

  /// Sends `requests` in order. While the server does not answer they are appended to the spool; once the
  /// retry interval has passed (or at the `last` call, once more), the spool is sent first, then they are.
  void deliver(std::vector<Request>& requests, bool last) {
    if (offline_) {
      if (Clock::now() < next_retry_ && !last) {
        spool(requests);
        return;
      }
      replay_spool(); // online again when all of it was sent
      if (offline_) {
        spool(requests);
        return;
      }
    }
    for (size_t i = 0; i < requests.size(); ++i) {
      try {
        send(requests[i]);
      } catch (const Unreachable& error) {
        go_offline(error.what());
        std::vector<Request> rest(requests.begin() + static_cast<std::ptrdiff_t>(i), requests.end());
        spool(rest);
        return;
      } catch (const Refused& error) {
        report_refused(error.what());
      }
    }
  }

  void go_offline(const std::string& why) {
    offline_ = true;
    next_retry_ = Clock::now() + kRetryInterval;
    if (!warned_offline_) {
      warned_offline_ = true;
      mlflow_logger().warning("the MLflow server at ", settings_.tracking_uri, " does not answer (", why,
                              "). Training goes on; what is logged is kept in ", spool_path_,
                              " and sent when the server answers again (or at the next start of this run)");
    }
  }

  void report_refused(const std::string& why) {
    if (refusals_reported_ < 3) {
      ++refusals_reported_;
      mlflow_logger().warning("the MLflow server refused values of run ", current_run_id(), ": ", why,
                              ". They are left out; training goes on");
    }
  }

  /// Sends one request, creating (or continuing) the run first. Throws Unreachable or Refused.
  void send(Request& request) {
    ensure_run();
    request.body["run_id"] = current_run_id();
    const Response response = http_.post(request.update ? "runs/update" : "runs/log-batch", request.body);
    if (response.ok()) {
      return;
    }
    if (response.transient()) {
      throw Unreachable(response.describe());
    }
    throw Refused(response.describe());
  }

  void ensure_run() {
    std::string run_id, parent;
    bool continued;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (run_created_) {
        return;
      }
      run_id = run_id_;
      parent = parent_run_id_;
      continued = continued_;
    }
    if (!run_id.empty()) {
      // An existing run (MLFLOW_RUN_ID, or the checkpoint's): running again.
      const Response response = http_.post("runs/update", Json{{"run_id", run_id}, {"status", "RUNNING"}});
      if (!response.ok()) {
        if (response.transient()) {
          throw Unreachable(response.describe());
        }
        throw std::runtime_error("the run " + run_id + " cannot be continued (" + response.describe() +
                                 "); " + (continued ? "the checkpoint names it" : "MLFLOW_RUN_ID names it") +
                                 ": check that it exists on " + settings_.tracking_uri);
      }
      std::lock_guard<std::mutex> lock(mutex_);
      run_created_ = true;
      return;
    }
    std::string experiment;
    const std::string created = create_run(parent, experiment);
    std::lock_guard<std::mutex> lock(mutex_);
    run_id_ = created;
    experiment_id_ = experiment;
    run_created_ = true;
    mlflow_logger().info("logging to MLflow run ", created, " in experiment '", settings_.experiment_name,
                         "' (", settings_.tracking_uri, "/#/experiments/", experiment, "/runs/", created,
                         ")");
  }

  /// A new run in the experiment (created when missing), a child of `parent` when one is given; its id.
  std::string create_run(const std::string& parent, std::string& experiment) {
    experiment = experiment_id();
    Json tags = Json::array();
    Json given = settings_.tags;
    given["mlflow.user"] = host_user();
    given["mlflow.source.name"] = program_path();
    given["mlflow.source.type"] = "LOCAL";
    if (!parent.empty()) {
      given["mlflow.parentRunId"] = parent;
    }
    for (auto& [key, value] : given.items()) {
      tags.push_back({{"key", key}, {"value", value}});
    }
    const Response response = http_.post(
        "runs/create", Json{{"experiment_id", experiment}, {"start_time", now_ms()}, {"tags", tags}});
    if (!response.ok()) {
      if (response.transient()) {
        throw Unreachable(response.describe());
      }
      throw std::runtime_error("the server refused to create a run in experiment '" +
                               settings_.experiment_name + "': " + response.describe());
    }
    const std::string created = Json::parse(response.body)["run"]["info"].value("run_id", "");
    if (created.empty()) {
      throw std::runtime_error("runs/create answered without a run id: " + response.body.substr(0, 300));
    }
    return created;
  }

  std::string experiment_id() {
    for (int attempt = 0; attempt < 2; ++attempt) {
      const Response found =
          http_.get("experiments/get-by-name", "experiment_name=" + http_.escape(settings_.experiment_name));
      if (found.ok()) {
        return Json::parse(found.body)["experiment"].value("experiment_id", "");
      }
      if (found.transient()) {
        throw Unreachable(found.describe());
      }
      if (found.error_code() != "RESOURCE_DOES_NOT_EXIST") {
        throw std::runtime_error("the server could not look up experiment '" + settings_.experiment_name +
                                 "': " + found.describe());
      }
      Json body{{"name", settings_.experiment_name}};
      if (!settings_.tags.empty()) {
        Json tags = Json::array();
        for (auto& [key, value] : settings_.tags.items()) {
          tags.push_back({{"key", key}, {"value", value}});
        }
        body["tags"] = tags;
      }
      const Response created = http_.post("experiments/create", body);
      if (created.ok()) {
        return Json::parse(created.body).value("experiment_id", "");
      }
      if (created.transient()) {
        throw Unreachable(created.describe());
      }
      if (created.error_code() != "RESOURCE_ALREADY_EXISTS") { // else another job created it: look it up
        throw std::runtime_error("the server could not create experiment '" + settings_.experiment_name +
                                 "': " + created.describe());
      }
    }
    throw std::runtime_error("experiment '" + settings_.experiment_name +
                             "' could be neither found nor created");
  }

  // ---- The spool: one request body a line, the run id in each (empty: the run this start creates)

  void spool(const std::vector<Request>& requests) {
    if (requests.empty()) {
      return;
    }
    std::string lines;
    for (const auto& request : requests) {
      Json line = request.body;
      if (!line.contains("run_id")) {
        std::lock_guard<std::mutex> lock(mutex_);
        line["run_id"] = run_created_ ? run_id_ : "";
      }
      line["update"] = request.update;
      line["start"] = start_;
      lines += line.dump() + "\n";
    }
    try {
      make_tracker_directory(spool_path_.substr(0, spool_path_.rfind('/')));
      RecordFile file(spool_path_, RecordFile::Mode::append);
      file.write(lines);
      file.close();
    } catch (const std::exception& error) {
      mlflow_logger().warning("the mlflow tracker could not keep ", requests.size(), " request(s) in ",
                              spool_path_, ": ", error.what(), "; those values are lost");
    }
  }

  /// Sends the spool's lines in order; on the first that gets no answer, keeps it and the lines after it.
  void replay_spool() {
    std::ifstream in(spool_path_);
    if (!in) {
      offline_ = false;
      return;
    }
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) {
      if (!line.empty()) {
        lines.push_back(line);
      }
    }
    in.close();
    size_t sent = 0;
    for (; sent < lines.size(); ++sent) {
      Json line;
      try {
        line = Json::parse(lines[sent]);
      } catch (const Json::exception&) {
        continue; // a line cut by a kill: nothing to send
      }
      Request request{line, line.value("update", false)};
      request.body.erase("update");
      request.body.erase("start");
      std::string run_id = line.value("run_id", "");
      const std::string start = line.value("start", "");
      try {
        if (run_id.empty() && start == start_) { // this start's, before its run existed
          request.body.erase("run_id");
          send(request);
        } else {                // a run of its own: sent there, and this start's run is not created for it
          if (run_id.empty()) { // an earlier start that never reached the server: a run of its own
            auto& created = earlier_runs_[start];
            if (created.empty()) {
              std::string experiment;
              created = create_run("", experiment);
              mlflow_logger().info("values an earlier start kept in ", spool_path_,
                                   " go to the new MLflow run ", created);
            }
            run_id = created;
          }
          request.body["run_id"] = run_id;
          const Response response =
              http_.post(request.update ? "runs/update" : "runs/log-batch", request.body);
          if (!response.ok() && response.transient()) {
            throw Unreachable(response.describe());
          }
          if (!response.ok()) {
            report_refused(response.describe());
          }
        }
      } catch (const Unreachable& error) {
        go_offline(error.what());
        break;
      } catch (const Refused& error) {
        report_refused(error.what());
      }
    }
    if (sent == lines.size()) {
      std::remove(spool_path_.c_str());
      if (offline_ || !lines.empty()) {
        mlflow_logger().info("the MLflow server at ", settings_.tracking_uri, " answers: the ", lines.size(),
                             " request(s) kept in ", spool_path_, " were sent");
      }
      offline_ = false;
      return;
    }
    std::string rest;
    for (size_t i = sent; i < lines.size(); ++i) {
      rest += lines[i] + "\n";
    }
    try {
      RecordFile file(spool_path_, RecordFile::Mode::truncate);
      file.write(rest);
      file.close();
    } catch (const std::exception& error) {
      mlflow_logger().warning("the mlflow tracker could not rewrite ", spool_path_, ": ", error.what());
    }
  }

  const Settings settings_;
  const std::string spool_path_;
  Http http_; // the sender thread's only

  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<Json> params_;
  std::vector<Json> metrics_;
  std::set<std::string> warned_texts_, warned_keys_;
  bool logged_ = false;
  bool want_run_ = false; ///< checkpoint_state waits for the run's id and for what is queued to be sent
  int64_t run_attempts_ = 0;
  std::condition_variable run_attempted_;
  bool broken_ = false; ///< the sender thread stopped for good
  bool stopping_ = false;
  bool finished_ = false;
  std::string run_id_, experiment_id_, parent_run_id_; // guarded by mutex_
  bool run_created_ = false;
  bool continued_ = false;

  // The sender thread's own.
  std::atomic<bool> offline_{false}; // read by checkpoint_state
  bool warned_offline_ = false;
  int refusals_reported_ = 0;
  Clock::time_point next_retry_{};
  /// This start's mark on its spooled lines; the runs made for earlier starts' lines that had none.
  const std::string start_ = start_token();
  std::map<std::string, std::string> earlier_runs_;
  std::thread sender_;
};

} // namespace

std::unique_ptr<Tracker> make_mlflow_tracker(const TrackerRun& run) {
  return std::make_unique<MlflowTracker>(run);
}

bool mlflow_tracker_configured() {
  return !environment("MLFLOW_TRACKING_URI").empty();
}

} // namespace accelerate::detail
