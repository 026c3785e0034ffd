// The "tensorboard" tracker: TensorBoard event files, written without protobuf or torch.
//
// An event file is a TFRecord stream: each record is its length (uint64, little-endian), the masked CRC32C of
// those 8 bytes, the data, and the masked CRC32C of the data. Each record's data is one `tensorflow.Event`
// message, encoded here by hand in protobuf's wire format (the few fields TensorBoard reads):
//
//   Event           { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary         { repeated Value value = 1; }
//   Summary.Value   { string tag = 1; float simple_value = 2; TensorProto tensor = 8;
//                     SummaryMetadata metadata = 9; }
//   SummaryMetadata { PluginData plugin_data = 1; }   PluginData { string plugin_name = 1; }
//   TensorProto     { DataType dtype = 1 (DT_STRING = 7); TensorShapeProto tensor_shape = 2;
//                     repeated bytes string_val = 8; }
//   TensorShapeProto { repeated Dim dim = 2; }       Dim { int64 size = 1; }
//
// Numbers are scalars (`simple_value`, float32, as PyTorch's SummaryWriter writes them); texts and the run's
// configuration are the text plugin's string tensors. Generated protobuf code is not used: torch's headers
// bundle their own protobuf, and this unit stays free of both (test/tracking reads the files back with
// TensorBoard's own reader).
#include "common/durable_file.h"
#include "common/host_name.h"
#include "tracking/record_file.h"
#include "tracking/registry.h"

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

namespace accelerate::detail {
namespace {

// ---- CRC32C (Castagnoli), as TFRecord checksums its records --------------------------------------------

struct Crc32cTable {
  uint32_t entries[256];
  Crc32cTable() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t crc = i;
      for (int bit = 0; bit < 8; ++bit) {
        crc = (crc >> 1) ^ ((crc & 1u) ? 0x82F63B78u : 0u);
      }
      entries[i] = crc;
    }
  }
};

uint32_t crc32c(std::string_view data) {
  static const Crc32cTable table;
  uint32_t crc = 0xFFFFFFFFu;
  for (const char byte : data) {
    crc = table.entries[(crc ^ static_cast<uint8_t>(byte)) & 0xFFu] ^ (crc >> 8);
  }
  return crc ^ 0xFFFFFFFFu;
}

/// TFRecord's masked checksum: a CRC of data that holds CRCs is itself a poor checksum, hence the rotation.
uint32_t masked_crc32c(std::string_view data) {
  const uint32_t crc = crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

void append_little_endian(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) {
    out.push_back(static_cast<char>((value >> (8 * i)) & 0xFFu));
  }
}

/// One TFRecord: length, its checksum, the data, the data's checksum.
std::string tfrecord(std::string_view data) {
  std::string length;
  append_little_endian(length, data.size(), 8);
  std::string record = length;
  append_little_endian(record, masked_crc32c(length), 4);
  record.append(data);
  append_little_endian(record, masked_crc32c(data), 4);
  return record;
}

// ---- Protobuf wire format ------------------------------------------------------------------------------

enum WireType { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

class Message {
public:
  Message& varint_field(int field, uint64_t value) {
    key(field, kVarint);
    varint(value);
    return *this;
  }
  Message& double_field(int field, double value) {
    key(field, kFixed64);
    uint64_t bits;
    std::memcpy(&bits, &value, sizeof(bits));
    append_little_endian(bytes_, bits, 8);
    return *this;
  }
  Message& float_field(int field, float value) {
    key(field, kFixed32);
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof(bits));
    append_little_endian(bytes_, bits, 4);
    return *this;
  }
  Message& bytes_field(int field, std::string_view value) {
    key(field, kLengthDelimited);
    varint(value.size());
    bytes_.append(value);
    return *this;
  }
  Message& message_field(int field, const Message& message) { return bytes_field(field, message.bytes_); }
  const std::string& bytes() const { return bytes_; }

private:
  void key(int field, WireType type) { varint((static_cast<uint64_t>(field) << 3) | type); }
  void varint(uint64_t value) {
    while (value >= 0x80) {
      bytes_.push_back(static_cast<char>((value & 0x7F) | 0x80));
      value >>= 7;
    }
    bytes_.push_back(static_cast<char>(value));
  }
  std::string bytes_;
};

constexpr int kDataTypeString = 7; // tensorflow.DataType DT_STRING

Message scalar_value(const std::string& tag, double value) {
  return Message().bytes_field(1, tag).float_field(2, static_cast<float>(value));
}

/// A text as the text plugin stores it: a string tensor of shape [1].
Message text_value(const std::string& tag, const std::string& text) {
  const Message shape = Message().message_field(2, Message().varint_field(1, 1));
  const Message tensor =
      Message().varint_field(1, kDataTypeString).message_field(2, shape).bytes_field(8, text);
  const Message metadata = Message().message_field(1, Message().bytes_field(1, "text"));
  return Message().bytes_field(1, tag).message_field(8, tensor).message_field(9, metadata);
}

/// Markdown pipes and line ends would break the configuration's table.
std::string table_cell(const std::string& text) {
  std::string cell;
  for (const char c : text) {
    if (c == '|') {
      cell += "\\|";
    } else if (c == '\n' || c == '\r') {
      cell += ' ';
    } else {
      cell += c;
    }
  }
  return cell;
}

/// Writes `project_dir/project_name/events.out.tfevents.<seconds>.<host>.<pid>.<n>`, the name PyTorch's
/// SummaryWriter gives its files (TensorBoard reads files whose name holds "tfevents").
class TensorBoardTracker : public Tracker {
public:
  explicit TensorBoardTracker(const TrackerRun& run) {
    make_tracker_directory(run.directory);
    static std::atomic<int> files_opened{0};
    const double now = wall_time_now();
    const std::string name = "events.out.tfevents." + std::to_string(static_cast<long long>(now)) + "." +
                             host_name() + "." + std::to_string(::getpid()) + "." +
                             std::to_string(files_opened++);
    // A directory that already holds event files is a run started again (after a restart, or by hand).
    for (const std::string& entry : list_directory(run.directory)) {
      continues_ = continues_ || entry.find("tfevents") != std::string::npos;
    }
    file_ = std::make_unique<RecordFile>(run.directory + "/" + name, RecordFile::Mode::truncate);
    file_->write(tfrecord(Message().double_field(1, now).bytes_field(3, "brain.Event:2").bytes()));
  }

  void store_init_configuration(const TrackedValues& config) override {
    std::string table = "| name | value |\n|---|---|\n";
    for (const auto& value : config) {
      table += "| " + table_cell(value.name) + " | " +
               table_cell(value.is_number() ? number_text(value.number()) : value.text()) + " |\n";
    }
    Message summary;
    summary.message_field(1, text_value("config", table));
    write_event(0, summary);
  }

  void log(const TrackedValues& values, std::optional<int64_t> step) override {
    if (step && continues_ && !started_) {
      // A run started again at `step`: SessionLog START there makes TensorBoard drop what earlier
      // files of the directory hold at this step or later (the failed attempt's steps after its last
      // checkpoint), as PyTorch's SummaryWriter(purge_step=...) does, so a restarted run is one curve.
      started_ = true;
      constexpr int kSessionStart = 1; // tensorflow.SessionLog.START
      file_->write(tfrecord(Message()
                                .double_field(1, wall_time_now())
                                .varint_field(2, static_cast<uint64_t>(*step))
                                .message_field(6, Message().varint_field(1, kSessionStart))
                                .bytes()));
    }
    Message summary;
    for (const auto& value : values) {
      summary.message_field(1, value.is_number() ? scalar_value(value.name, value.number())
                                                 : text_value(value.name, value.text()));
    }
    write_event(step.value_or(0), summary);
  }

  void finish() override { file_->close(); }

private:
  /// One Event holding all the values of a call: one record, one write.
  void write_event(int64_t step, const Message& summary) {
    const Message event = Message()
                              .double_field(1, wall_time_now())
                              .varint_field(2, static_cast<uint64_t>(step))
                              .message_field(5, summary);
    file_->write(tfrecord(event.bytes()));
  }

  std::unique_ptr<RecordFile> file_;
  bool continues_ = false; ///< the directory held event files of an earlier start
  bool started_ = false;   ///< the START event of the run's first step is written
};

} // namespace

std::unique_ptr<Tracker> make_tensorboard_tracker(const TrackerRun& run) {
  return std::make_unique<TensorBoardTracker>(run);
}

} // namespace accelerate::detail
