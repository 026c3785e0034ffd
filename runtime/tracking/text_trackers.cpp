// The "jsonl" and "csv" trackers: metrics as text for scripts, one line per record.
//
//   metrics.jsonl  {"wall_time": 1733.5, "config": {"lr": 0.0003}}             (init_trackers' config)
//                  {"wall_time": 1733.6, "step": 3, "values": {"loss": 0.25}}  (one line per log call)
//   metrics.csv    wall_time,step,name,value                                    (one row per value)
//   config.csv     name,value                                                   (init_trackers' config)
//
// Numbers are the shortest text that reads back as the same double; JSON has no literal for NaN and the
// infinities, which are written as Python's json module reads them (NaN, Infinity, -Infinity). Both files are
// appended to, so a run started again in the same directory continues them; its first record at step N first
// drops the records of step N and later (an earlier attempt's steps after its last checkpoint), so no step is
// written twice.
#include "tracking/record_file.h"
#include "tracking/registry.h"

#include <charconv>
#include <cstdio>
#include <memory>
#include <string>

namespace accelerate::detail {
namespace {

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\r':
      out += "\\r";
      break;
    case '\t':
      out += "\\t";
      break;
    default:
      if (static_cast<unsigned char>(c) < 0x20) {
        char escaped[8];
        std::snprintf(escaped, sizeof(escaped), "\\u%04x", static_cast<unsigned>(c));
        out += escaped;
      } else {
        out += c;
      }
    }
  }
  return out + "\"";
}

std::string json_number(double value) {
  const std::string text = number_text(value);
  if (text == "nan") {
    return "NaN";
  }
  if (text == "inf") {
    return "Infinity";
  }
  return text == "-inf" ? "-Infinity" : text;
}

/// Whether `text` starts with a whole number >= `first` (a record's step; `null` and other text are not).
bool step_at_least(std::string_view text, int64_t first) {
  int64_t step = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), step);
  return error == std::errc() && end != text.data() && step >= first;
}

std::string json_object(const TrackedValues& values) {
  std::string out = "{";
  for (const auto& value : values) {
    out += (out.size() > 1 ? ", " : "") + json_string(value.name) + ": " +
           (value.is_number() ? json_number(value.number()) : json_string(value.text()));
  }
  return out + "}";
}

class JsonLinesTracker : public Tracker {
public:
  explicit JsonLinesTracker(const TrackerRun& run) {
    make_tracker_directory(run.directory);
    file_ = std::make_unique<RecordFile>(run.directory + "/metrics.jsonl", RecordFile::Mode::append);
  }
  void store_init_configuration(const TrackedValues& config) override {
    file_->write("{\"wall_time\": " + number_text(wall_time_now()) + ", \"config\": " + json_object(config) +
                 "}\n");
  }
  void log(const TrackedValues& values, std::optional<int64_t> step) override {
    if (step && !started_) {
      started_ = true;
      file_->keep_lines([first = *step](std::string_view line) {
        const auto at = line.find("\"step\": ");
        return at == std::string_view::npos || !step_at_least(line.substr(at + 8), first);
      });
    }
    file_->write("{\"wall_time\": " + number_text(wall_time_now()) +
                 ", \"step\": " + (step ? std::to_string(*step) : std::string("null")) +
                 ", \"values\": " + json_object(values) + "}\n");
  }
  void finish() override { file_->close(); }

private:
  std::unique_ptr<RecordFile> file_;
  bool started_ = false; ///< the records from this run's first step on were dropped
};

/// RFC 4180: a field with a comma, a quote or a line end is quoted, its quotes doubled.
std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) {
    return text;
  }
  std::string out = "\"";
  for (const char c : text) {
    out += c == '"' ? std::string("\"\"") : std::string(1, c);
  }
  return out + "\"";
}

std::string csv_value(const TrackedValue& value) {
  return value.is_number() ? number_text(value.number()) : csv_field(value.text());
}

class CsvTracker : public Tracker {
public:
  explicit CsvTracker(const TrackerRun& run) : directory_(run.directory) {
    make_tracker_directory(directory_);
    file_ = std::make_unique<RecordFile>(directory_ + "/metrics.csv", RecordFile::Mode::append);
    if (file_->empty()) {
      file_->write("wall_time,step,name,value\n");
    }
  }
  void store_init_configuration(const TrackedValues& config) override {
    std::string rows = "name,value\n";
    for (const auto& value : config) {
      rows += csv_field(value.name) + "," + csv_value(value) + "\n";
    }
    RecordFile(directory_ + "/config.csv", RecordFile::Mode::truncate).write(rows);
  }
  void log(const TrackedValues& values, std::optional<int64_t> step) override {
    if (step && !started_) {
      started_ = true;
      file_->keep_lines([first = *step](std::string_view line) {
        const auto comma = line.find(',');
        return comma == std::string_view::npos || !step_at_least(line.substr(comma + 1), first);
      });
    }
    const std::string prefix =
        number_text(wall_time_now()) + "," + (step ? std::to_string(*step) : std::string()) + ",";
    std::string rows;
    for (const auto& value : values) {
      rows += prefix + csv_field(value.name) + "," + csv_value(value) + "\n";
    }
    file_->write(rows);
  }
  void finish() override { file_->close(); }

private:
  std::string directory_;
  std::unique_ptr<RecordFile> file_;
  bool started_ = false; ///< the rows from this run's first step on were dropped
};

} // namespace

std::unique_ptr<Tracker> make_jsonl_tracker(const TrackerRun& run) {
  return std::make_unique<JsonLinesTracker>(run);
}

std::unique_ptr<Tracker> make_csv_tracker(const TrackerRun& run) {
  return std::make_unique<CsvTracker>(run);
}

} // namespace accelerate::detail
