// lsp/Server.h: accel-lsp, a language server over the rewrite library and the lint checks.
#ifndef ACCELERATE_LSP_SERVER_H
#define ACCELERATE_LSP_SERVER_H

#include "lsp/Transport.h"
#include "passes/Registry.h"

#include <memory>
#include <string>
#include <vector>

namespace accelerate::lsp {

struct ServerOptions {
  std::string CompileCommandsDir;       ///< --compile-commands-dir; empty: search as clangd does.
  std::string ResourceDir;              ///< Clang's resource directory, for the parse.
  std::string RuntimeIncludeDir;        ///< accelerate/accelerate.h, for the rewrite's compile check.
  size_t MaxFileBytes = 1 << 20;        ///< A larger document is not analysed (the editor is told why).
  std::vector<passes::PassInfo> Passes; ///< The passes of the rewrite: the registry's default ones.
};

/// The server: reads requests from a Transport, answers them and publishes diagnostics. Parsing and the
/// passes run on a worker thread, one document version at a time, so the reader keeps taking changes,
/// cancellations and `exit` while a parse runs; work for a version that a newer one superseded is skipped.
class Server {
public:
  Server(ServerOptions Options, Transport& Channel);
  ~Server();

  /// Serves until `exit` or the end of the input; returns the exit status LSP asks for (0 after `shutdown`,
  /// 1 otherwise).
  int run();

  class Impl;

private:
  std::unique_ptr<Impl> Self;
};

} // namespace accelerate::lsp

#endif // ACCELERATE_LSP_SERVER_H
