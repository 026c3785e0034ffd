// lsp/Transport.h: LSP's base protocol over a pair of streams: messages framed by a Content-Length header.
#ifndef ACCELERATE_LSP_TRANSPORT_H
#define ACCELERATE_LSP_TRANSPORT_H

#include <cstdio>
#include <mutex>
#include <string>

namespace accelerate::lsp {

class Transport {
public:
  Transport(std::FILE* In, std::FILE* Out) : In(In), Out(Out) {}

  enum class Read {
    Message,   ///< `Body` holds one message's content.
    Malformed, ///< The header was not one LSP allows; `Problem` says how. The stream goes on after it.
    End,       ///< The input ended.
  };
  /// Reads the next message. A body longer than `MaxBytes` is read and dropped (Malformed).
  Read read(std::string& Body, std::string& Problem, size_t MaxBytes);

  /// Writes one message; safe from any thread.
  void write(const std::string& Body);

private:
  std::FILE* In;
  std::FILE* Out;
  std::mutex Writing;
};

} // namespace accelerate::lsp

#endif // ACCELERATE_LSP_TRANSPORT_H
