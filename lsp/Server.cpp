// lsp/Server.cpp: the language server's requests, documents and analyses.
#include "lsp/Server.h"

#include "lint/Run.h"
#include "lsp/CompileCommands.h"
#include "lsp/ParsedFile.h"
#include "lsp/Positions.h"
#include "rewriter/CheckCompiles.h"
#include "rewriter/PassRunner.h"
#include "rewriter/TextDiff.h"
#include "rewriter/ToolRunner.h"

#include "clang/Tooling/Core/Replacement.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

namespace accelerate::lsp {

using json = nlohmann::json;

namespace {

/// JSON-RPC's and LSP's error codes.
enum ErrorCode : int {
  ParseError = -32700,
  InvalidRequest = -32600,
  MethodNotFound = -32601,
  InvalidParams = -32602,
  InternalError = -32603,
  ServerNotInitialized = -32002,
  RequestCancelled = -32800,
  ContentModified = -32801,
  RequestFailed = -32803,
};

/// LSP's DiagnosticSeverity.
enum Severity : int { Error = 1, Warning = 2, Information = 3, Hint = 4 };

constexpr const char* DistributeTitle = "Distribute this training loop with accelerate";
constexpr const char* ExplainTitle = "Explain what the rewrite would do";
constexpr const char* DistributeCommand = "accelerate.distribute";
constexpr const char* ExplainCommand = "accelerate.explain";
constexpr const char* Source = "accel-lsp";

/// The path of a file:// URI, percent-decoded; empty for any other scheme.
std::string pathOfUri(llvm::StringRef Uri) {
  if (!Uri.consume_front("file://"))
    return "";
  std::string Path;
  for (size_t I = 0; I < Uri.size(); ++I) {
    unsigned Byte = 0;
    if (Uri[I] == '%' && I + 2 < Uri.size() && !Uri.substr(I + 1, 2).getAsInteger(16, Byte)) {
      Path += static_cast<char>(Byte);
      I += 2;
    } else {
      Path += Uri[I];
    }
  }
  return Path;
}

double secondsSince(std::chrono::steady_clock::time_point Start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - Start).count();
}

/// What the server keeps of the editor's buffer.
struct Document {
  std::string Uri;
  std::string Path;
  int64_t Version = 0;
  std::string Text;
};

/// Work for the worker thread.
struct Job {
  enum class Kind { Analyse, CodeAction, Execute } What = Kind::Analyse;
  json Id; ///< The request's id (not for Analyse).
  std::string Uri;
  int64_t Version = 0; ///< The document's version when the job was queued.
  json Params;
};

/// Everything the server knows of one version of one document: computed once, from its parse.
struct Analysis {
  int64_t Version = -1;
  std::shared_ptr<LineTable> Lines;
  std::string Warning; ///< About the compile command (a compiler that does not exist).
  std::string Refusal; ///< Why the file has no analysis (no compile command, it does not compile, ...).
  unsigned RefusalOffset = 0;
  std::vector<lint::LintFinding> Lint;
  std::optional<rewriter::FileRewrite> Rewrite;
  // For the rewrite's compile check, done when a code action first asks for it.
  std::shared_ptr<clang::CompilerInvocation> Invocation;
  llvm::IntrusiveRefCntPtr<llvm::vfs::FileSystem> Files;
  std::string MainPath;
  std::shared_ptr<rewriter::ParsePreamble> Preamble;
  bool Checked = false;
  std::string CheckFailure;
};

/// The end of the word (identifier) at `Offset`, for a diagnostic's range; `Offset` itself when none.
unsigned wordEnd(const std::string& Text, unsigned Offset) {
  unsigned End = Offset;
  while (End < Text.size() && (llvm::isAlnum(Text[End]) || Text[End] == '_'))
    ++End;
  return End;
}

} // namespace

class Server::Impl {
public:
  Impl(ServerOptions Options, Transport& Channel)
      : Options(std::move(Options)), Channel(Channel), Commands(this->Options.CompileCommandsDir) {}

  int run() {
    Worker = std::thread([this] { work(); });
    std::string Body, Problem;
    int Status = 1;
    while (true) {
      Transport::Read Got = Channel.read(Body, Problem, Options.MaxFileBytes * 8 + (1 << 20));
      if (Got == Transport::Read::End)
        break;
      if (Got == Transport::Read::Malformed) {
        log("dropped a malformed message: " + Problem);
        replyError(nullptr, InvalidRequest, "accel-lsp could not read a message: " + Problem);
        continue;
      }
      json Message = json::parse(Body, nullptr, /*allow_exceptions=*/false);
      if (Message.is_discarded() || !Message.is_object()) {
        log("dropped a message that is not a JSON object: " + Body.substr(0, 200));
        replyError(nullptr, ParseError,
                   "accel-lsp could not parse a message as JSON: '" + Body.substr(0, 80) +
                       (Body.size() > 80 ? "...'" : "'"));
        continue;
      }
      try {
        if (!handle(Message)) {
          Status = ShutDown ? 0 : 1;
          break;
        }
      } catch (const std::exception& Failure) {
        // A message of the right shape with wrong types inside (a string where a number goes).
        log(std::string("a message accel-lsp could not handle: ") + Failure.what());
        if (Message.contains("id") && Message.contains("method"))
          replyError(Message["id"], InvalidParams,
                     "accel-lsp could not handle '" + Message.value("method", std::string()) +
                         "': " + Failure.what());
      }
    }
    {
      std::lock_guard<std::mutex> Guard(Lock);
      Stopping = true;
    }
    Wake.notify_all();
    // A parse in progress cannot be interrupted; the process ends without waiting for it.
    Worker.detach();
    return Status;
  }

private:
  // ---- The reader thread: every message, in order. ----

  /// False when the server is to stop (`exit`).
  bool handle(const json& Message) {
    std::string Method = Message.value("method", std::string());
    bool IsRequest = Message.contains("id");
    json Id = IsRequest ? Message["id"] : json();
    json Params = Message.value("params", json::object());
    if (Method.empty()) {
      if (!IsRequest)
        replyError(nullptr, InvalidRequest, "a message with neither a method nor an id");
      // Otherwise a response to our own request (workspace/applyEdit): its result is the editor's business.
      return true;
    }
    if (Method == "exit")
      return false;
    if (Method == "initialize") {
      initialize(Id, Params);
      return true;
    }
    if (!Initialized) {
      if (IsRequest)
        replyError(Id, ServerNotInitialized, "accel-lsp has not been initialized: send 'initialize' first");
      return true;
    }
    if (ShutDown) {
      if (IsRequest)
        replyError(Id, InvalidRequest, "accel-lsp is shutting down: only 'exit' is taken after 'shutdown'");
      return true;
    }
    if (Method == "shutdown") {
      ShutDown = true;
      reply(Id, nullptr);
    } else if (Method == "initialized" || Method == "$/setTrace" ||
               Method == "workspace/didChangeConfiguration" || Method == "workspace/didChangeWatchedFiles") {
      // Nothing to do.
    } else if (Method == "$/cancelRequest") {
      std::lock_guard<std::mutex> Guard(Lock);
      Cancelled.insert(Params.at("id").dump());
    } else if (Method == "textDocument/didOpen") {
      const json& Item = Params.at("textDocument");
      update(Item.at("uri").get<std::string>(), Item.value("version", int64_t(0)),
             Item.at("text").get<std::string>(), /*Opened=*/true);
    } else if (Method == "textDocument/didChange") {
      changed(Params);
    } else if (Method == "textDocument/didSave") {
      std::string Uri = Params.at("textDocument").at("uri").get<std::string>();
      std::lock_guard<std::mutex> Guard(Lock);
      if (auto Found = Documents.find(Uri); Found != Documents.end()) {
        // The build may have changed with the file (a new compile_commands.json): analysed again.
        Reanalyse.insert(Uri);
        queue({Job::Kind::Analyse, nullptr, Uri, Found->second.Version, nullptr});
      }
    } else if (Method == "textDocument/didClose") {
      std::string Uri = Params.at("textDocument").at("uri").get<std::string>();
      {
        std::lock_guard<std::mutex> Guard(Lock);
        Documents.erase(Uri);
        Forget.insert(Uri);
      }
      Wake.notify_all();
      publish(Uri, std::nullopt, json::array());
    } else if (Method == "textDocument/codeAction" || Method == "workspace/executeCommand") {
      std::string Uri = Method == "textDocument/codeAction"
                            ? Params.at("textDocument").at("uri").get<std::string>()
                            : commandUri(Params);
      std::lock_guard<std::mutex> Guard(Lock);
      auto Found = Documents.find(Uri);
      if (Found == Documents.end()) {
        replyError(Id, InvalidParams,
                   "accel-lsp has no open document " + Uri + ": open it (textDocument/didOpen) first");
        return true;
      }
      queue({Method == "textDocument/codeAction" ? Job::Kind::CodeAction : Job::Kind::Execute, Id, Uri,
             Found->second.Version, Params});
    } else if (Method == "codeAction/resolve") {
      // Every action goes out whole (its edit computed): resolving it is giving it back.
      reply(Id, Params);
    } else if (IsRequest) {
      replyError(Id, MethodNotFound, "accel-lsp does not handle '" + Method + "'");
    } else {
      log("ignored the notification '" + Method + "'");
    }
    return true;
  }

  void initialize(const json& Id, const json& Params) {
    if (Initialized) {
      replyError(Id, InvalidRequest, "accel-lsp is already initialized");
      return;
    }
    const json Capabilities = Params.value("capabilities", json::object());
    if (auto At = Capabilities.find("workspace"); At != Capabilities.end())
      if (auto Edit = At->find("workspaceEdit"); Edit != At->end())
        DocumentChanges = Edit->value("documentChanges", false);
    if (auto At = Capabilities.find("textDocument"); At != Capabilities.end())
      if (auto Action = At->find("codeAction"); Action != At->end())
        DisabledActions = Action->value("disabledSupport", false);
    // The workspace: its folders, else the root.
    if (Params.contains("workspaceFolders") && Params["workspaceFolders"].is_array())
      for (const json& Folder : Params["workspaceFolders"])
        if (std::string Path = pathOfUri(Folder.value("uri", std::string())); !Path.empty())
          Roots.push_back(Path);
    if (Roots.empty() && Params.contains("rootUri") && Params["rootUri"].is_string())
      if (std::string Path = pathOfUri(Params["rootUri"].get<std::string>()); !Path.empty())
        Roots.push_back(Path);
    if (Roots.empty() && Params.contains("rootPath") && Params["rootPath"].is_string())
      Roots.push_back(Params["rootPath"].get<std::string>());
    for (std::string& Root : Roots)
      while (Root.size() > 1 && Root.back() == '/')
        Root.pop_back();
    Initialized = true;
    reply(Id,
          {{"capabilities",
            {{"positionEncoding", "utf-16"},
             {"textDocumentSync", {{"openClose", true}, {"change", 1}, {"save", {{"includeText", false}}}}},
             {"codeActionProvider",
              {{"codeActionKinds", {"refactor.rewrite", "quickfix", "refactor"}}, {"resolveProvider", true}}},
             {"executeCommandProvider", {{"commands", {DistributeCommand, ExplainCommand}}}}}},
           {"serverInfo", {{"name", "accel-lsp"}, {"version", "0.1"}}}});
  }

  void changed(const json& Params) {
    const json& Identifier = Params.at("textDocument");
    std::string Uri = Identifier.at("uri").get<std::string>();
    std::string Text;
    {
      std::lock_guard<std::mutex> Guard(Lock);
      auto Found = Documents.find(Uri);
      if (Found == Documents.end()) {
        log("a change to " + Uri + ", which is not open, was ignored");
        return;
      }
      Text = Found->second.Text;
    }
    // Full text (what the server asks for), or ranges (a client that sends them anyway).
    for (const json& Change : Params.at("contentChanges")) {
      if (!Change.contains("range")) {
        Text = Change.at("text").get<std::string>();
        continue;
      }
      LineTable Lines(Text);
      const json& Range = Change["range"];
      unsigned Begin = Lines.offset(
          {Range["start"].at("line").get<unsigned>(), Range["start"].at("character").get<unsigned>()});
      unsigned End = Lines.offset(
          {Range["end"].at("line").get<unsigned>(), Range["end"].at("character").get<unsigned>()});
      Text.replace(Begin, std::max(Begin, End) - Begin, Change.at("text").get<std::string>());
    }
    update(Uri, Identifier.value("version", int64_t(0)), std::move(Text), /*Opened=*/false);
  }

  void update(const std::string& Uri, int64_t Version, std::string Text, bool Opened) {
    {
      std::lock_guard<std::mutex> Guard(Lock);
      Document& Doc = Documents[Uri];
      if (Opened)
        Forget.erase(Uri);
      Doc.Uri = Uri;
      Doc.Path = pathOfUri(Uri);
      Doc.Version = Version;
      Doc.Text = std::move(Text);
      queue({Job::Kind::Analyse, nullptr, Uri, Version, nullptr});
    }
  }

  static std::string commandUri(const json& Params) {
    const json Arguments = Params.value("arguments", json::array());
    if (!Arguments.empty() && Arguments[0].is_object())
      return Arguments[0].value("uri", std::string());
    return "";
  }

  /// With Lock held.
  void queue(Job Work) {
    Jobs.push_back(std::move(Work));
    Wake.notify_all();
  }

  // ---- Output. ----

  void send(const json& Message) {
    Channel.write(Message.dump(-1, ' ', false, json::error_handler_t::replace));
  }
  void reply(const json& Id, const json& Result) {
    send({{"jsonrpc", "2.0"}, {"id", Id}, {"result", Result}});
  }
  void replyError(const json& Id, int Code, const std::string& Message) {
    send({{"jsonrpc", "2.0"}, {"id", Id}, {"error", {{"code", Code}, {"message", Message}}}});
  }
  void notify(const std::string& Method, const json& Params) {
    send({{"jsonrpc", "2.0"}, {"method", Method}, {"params", Params}});
  }
  void showMessage(int Type, const std::string& Text) {
    notify("window/showMessage", {{"type", Type}, {"message", Text}});
  }
  void log(const std::string& Text) { llvm::errs() << "accel-lsp: " << Text << "\n"; }
  void publish(const std::string& Uri, std::optional<int64_t> Version, const json& Diagnostics) {
    json Params = {{"uri", Uri}, {"diagnostics", Diagnostics}};
    if (Version)
      Params["version"] = *Version;
    notify("textDocument/publishDiagnostics", Params);
  }

  // ---- The worker thread. ----

  void work() {
    while (true) {
      Job Next;
      Document Doc;
      bool Current = false, WasCancelled = false;
      {
        std::unique_lock<std::mutex> Guard(Lock);
        Wake.wait(Guard, [&] { return Stopping || !Jobs.empty() || !Forget.empty(); });
        if (Stopping)
          return;
        for (const std::string& Uri : Forget) {
          Analyses.erase(Uri);
          Preambles.erase(Uri);
        }
        Forget.clear();
        if (!Reanalyse.empty())
          Commands.forget();
        for (const std::string& Uri : Reanalyse)
          Analyses.erase(Uri);
        Reanalyse.clear();
        if (Jobs.empty())
          continue;
        Next = std::move(Jobs.front());
        Jobs.pop_front();
        auto Found = Documents.find(Next.Uri);
        if (Found != Documents.end()) {
          Doc = Found->second;
          Current = Doc.Version == Next.Version;
        }
        if (!Next.Id.is_null())
          WasCancelled = Cancelled.erase(Next.Id.dump()) > 0;
      }
      try {
        if (Next.What == Job::Kind::Analyse) {
          // A version that a newer one superseded is not worth a parse: the newer one's job follows.
          if (Current)
            publishAnalysis(Doc, analyse(Doc));
          continue;
        }
        if (WasCancelled) {
          replyError(Next.Id, RequestCancelled, "cancelled");
          continue;
        }
        if (Doc.Uri.empty()) {
          replyError(Next.Id, ContentModified,
                     "the document was closed before accel-lsp got to this request");
          continue;
        }
        if (!Current) {
          replyError(Next.Id, ContentModified,
                     "the document changed after this request was sent; ask again for the new text");
          continue;
        }
        if (Next.What == Job::Kind::CodeAction)
          reply(Next.Id, codeActions(Doc, Next.Params));
        else
          execute(Doc, Next);
      } catch (const std::exception& Failure) {
        log(std::string("internal error: ") + Failure.what());
        if (!Next.Id.is_null())
          replyError(Next.Id, InternalError, std::string("accel-lsp failed: ") + Failure.what());
      }
    }
  }

  bool inWorkspace(const std::string& Path) const {
    if (Roots.empty())
      return true;
    return llvm::any_of(Roots, [&](const std::string& Root) {
      return Root == "/" || Path == Root || llvm::StringRef(Path).starts_with(Root + "/");
    });
  }

  /// The analysis of the document's version: the one kept when it is that version's, else a new one.
  Analysis& analyse(const Document& Doc) {
    Analysis& Kept = Analyses[Doc.Uri];
    if (Kept.Version == Doc.Version && Kept.Lines && Kept.Lines->text() == Doc.Text)
      return Kept;
    Kept = Analysis();
    Analysis& A = Kept;
    A.Version = Doc.Version;
    A.Lines = std::make_shared<LineTable>(Doc.Text);
    auto Start = std::chrono::steady_clock::now();
    if (Doc.Path.empty()) {
      A.Refusal = "accel-lsp analyses files on disk (file:// URIs), not " + Doc.Uri;
      return A;
    }
    if (!inWorkspace(Doc.Path)) {
      A.Refusal = "this file is outside the workspace (" + llvm::join(Roots, ", ") +
                  "), so accel-lsp does not analyse it; open its project's folder as the workspace";
      return A;
    }
    if (Doc.Text.size() > Options.MaxFileBytes) {
      A.Refusal = "this file is " + std::to_string(Doc.Text.size()) + " bytes, over accel-lsp's limit of " +
                  std::to_string(Options.MaxFileBytes) +
                  " bytes, so it is not analysed; start accel-lsp with --max-file-bytes=N to raise the limit";
      return A;
    }
    llvm::Expected<FoundCommand> Found = Commands.find(Doc.Path);
    if (!Found) {
      A.Refusal = llvm::toString(Found.takeError());
      return A;
    }
    A.Warning = Found->Warning;
    // The runtime's include directory last, as accel-rewrite's parses have it: the preamble ends with its
    // header, which the rewrite adds (rewriter::RuntimeHeaderTrailer).
    std::vector<std::string> CommandLine = rewriter::commandLineFor(
        Found->Command, rewriter::CompileFlags{Options.ResourceDir, {"-I" + Options.RuntimeIncludeDir}});
    llvm::Expected<std::unique_ptr<ParsedFile>> Parsed = ParsedFile::parse(
        CommandLine, Found->Command.Directory, Doc.Text, rewriter::RuntimeHeaderTrailer, Preambles[Doc.Uri]);
    if (!Parsed) {
      A.Refusal = llvm::toString(Parsed.takeError());
      return A;
    }
    ParsedFile& File = **Parsed;
    double ParseSeconds = secondsSince(Start);
    if (File.hasErrors()) {
      const FirstError& Error = File.firstError();
      A.Refusal = "this buffer does not compile (" + (Error.Text.empty() ? "see the compiler" : Error.Text) +
                  "), so accel-lsp runs no check and offers no rewrite; fix the error first";
      A.RefusalOffset = Error.InMainFile ? Error.Offset : 0;
    } else {
      A.Lint = lint::runLintChecks(File.context());
      llvm::Expected<rewriter::FileRewrite> Rewrite =
          rewriter::rewriteParsedFile(File.context(), Options.Passes);
      if (Rewrite)
        A.Rewrite = std::move(*Rewrite);
      else
        A.Refusal = "accel-rewrite's passes failed on this file: " + llvm::toString(Rewrite.takeError());
    }
    A.Invocation = std::make_shared<clang::CompilerInvocation>(File.invocation());
    A.Files = File.files();
    A.MainPath = File.mainPath();
    A.Preamble = Preambles[Doc.Uri].Preamble;
    log(llvm::formatv("{0} version {1}: parsed in {2:f2} s ({3}), analysed in {4:f2} s", Doc.Path,
                      Doc.Version, ParseSeconds, File.builtPreamble() ? "preamble built" : "preamble reused",
                      secondsSince(Start))
            .str());
    return A;
  }

  json range(const LineTable& Lines, unsigned Begin, unsigned End) const {
    Position From = Lines.position(Begin), To = Lines.position(End);
    return {{"start", {{"line", From.Line}, {"character", From.Character}}},
            {"end", {{"line", To.Line}, {"character", To.Character}}}};
  }

  json diagnostic(const LineTable& Lines, unsigned Begin, unsigned End, int Level, const std::string& Message,
                  const std::string& Code = "") const {
    json Out = {
        {"range", range(Lines, Begin, End)}, {"severity", Level}, {"source", Source}, {"message", Message}};
    if (!Code.empty())
      Out["code"] = Code;
    return Out;
  }

  json diagnostics(const Document& Doc, const Analysis& A) const {
    const LineTable& Lines = *A.Lines;
    json Out = json::array();
    if (!A.Warning.empty())
      Out.push_back(diagnostic(Lines, 0, 0, Warning, A.Warning));
    if (!A.Refusal.empty())
      Out.push_back(
          diagnostic(Lines, A.RefusalOffset, wordEnd(Doc.Text, A.RefusalOffset), Warning, A.Refusal));
    for (const lint::LintFinding& Found : A.Lint)
      Out.push_back(diagnostic(Lines, Found.Offset, wordEnd(Doc.Text, Found.Offset),
                               Found.IsNote ? Information : Warning, Found.Message,
                               "accelerate-" + Found.Check));
    if (!A.Rewrite)
      return Out;
    const rewriter::FileRewrite& Rewrite = *A.Rewrite;
    for (const rewriter::Finding& Found : Rewrite.Findings) {
      bool Here = Found.File == Rewrite.File;
      unsigned At = Here ? Found.Offset : Rewrite.shownAt();
      if (Found.What == rewriter::Finding::Kind::NotRewritten)
        Out.push_back(diagnostic(
            Lines, At, wordEnd(Doc.Text, At), Warning,
            (Here ? "" : Found.File + ":" + std::to_string(Found.Line) + ": ") + Found.Message, Found.Pass));
      else if (Found.What == rewriter::Finding::Kind::OutsideMainFile)
        Out.push_back(diagnostic(
            Lines, At, wordEnd(Doc.Text, At), Warning,
            Found.File + ":" + std::to_string(Found.Line) +
                ": not rewritten: the rewrite changes this file only, "
                "not that header; run accel-rewrite with --headers to rewrite it, or change it by hand: " +
                llvm::join(Found.Edits, "; ") + " (pass '" + Found.Pass + "': " + Found.Message + ")",
            Found.Pass));
    }
    if (Rewrite.Rewritten != Rewrite.Original) {
      unsigned At = Rewrite.shownAt(), Changes = Rewrite.changes(), Left = Rewrite.sitesLeft();
      std::string What = Rewrite.TrainingRuns.empty() ? "training code" : "training loop";
      std::string Message = "this " + What + " runs on one device; the code action '" + DistributeTitle +
                            "' distributes it (" + std::to_string(Changes) +
                            (Changes == 1 ? " change" : " changes") + " by accel-rewrite's passes)";
      if (Left)
        Message += ", once the " + std::to_string(Left) + (Left == 1 ? " site" : " sites") +
                   " it cannot rewrite (the other warnings) are changed by hand";
      Out.push_back(
          diagnostic(Lines, At, wordEnd(Doc.Text, At), Information, Message, "accelerate-distribute-loop"));
    }
    return Out;
  }

  void publishAnalysis(const Document& Doc, const Analysis& A) {
    publish(Doc.Uri, Doc.Version, diagnostics(Doc, A));
  }

  /// Why the rewrite is not offered, or "" when it is. Runs the compile check the first time.
  std::string distributeRefusal(Analysis& A) {
    if (!A.Refusal.empty())
      return A.Refusal;
    const rewriter::FileRewrite& Rewrite = *A.Rewrite;
    if (Rewrite.Rewritten == Rewrite.Original)
      return "nothing to do: accel-rewrite's passes find nothing to change in this file (its training "
             "already "
             "runs with accelerate, or it has no training loop)";
    if (unsigned Left = Rewrite.sitesLeft())
      return std::to_string(Left) + (Left == 1 ? " site needs a change" : " sites need changes") +
             " that accel-rewrite cannot make (see the warnings); change " + (Left == 1 ? "it" : "them") +
             " by hand, then distribute the loop";
    if (!A.Checked) {
      auto Start = std::chrono::steady_clock::now();
      bool Reused = false;
      llvm::Error Compiles =
          rewriter::checkCompilesWith(*A.Invocation, A.Files, A.MainPath, Rewrite.Rewritten,
                                      Options.RuntimeIncludeDir, A.Preamble.get(), Rewrite.Original, &Reused);
      llvm::handleAllErrors(
          std::move(Compiles),
          [&](const rewriter::CompileError& Compile) {
            // The check compiled the rewritten text as A.MainPath: its lines moved by those the rewrite
            // inserted above them, so the error is given at the line of the buffer.
            auto IsMain = [&A](llvm::StringRef Name) {
              return Name == A.MainPath || llvm::sys::fs::equivalent(Name, A.MainPath);
            };
            A.CheckFailure = rewriter::atOriginalLines(Compile.firstError(),
                                                       {{Rewrite.Original, Rewrite.Rewritten, IsMain}});
          },
          [&](const llvm::ErrorInfoBase& Other) { A.CheckFailure = Other.message(); });
      A.Checked = true;
      log(llvm::formatv("{0}: the rewrite's compile check took {1:f2} s ({2})", A.MainPath,
                        secondsSince(Start), Reused ? "preamble reused" : "without the preamble")
              .str());
    }
    if (!A.CheckFailure.empty())
      return "the rewritten file would not compile: " + A.CheckFailure +
             " (run accel-rewrite --explain on the file for every diagnostic)";
    return "";
  }

  /// The rewrite's edits as a WorkspaceEdit of the document's version: exactly the replacements
  /// accel-rewrite applies, in its order.
  json workspaceEdit(const Document& Doc, const LineTable& Lines,
                     llvm::ArrayRef<clang::tooling::Replacement> Edits) const {
    clang::tooling::Replacements Merged;
    for (const clang::tooling::Replacement& Edit : Edits)
      if (llvm::Error Err = Merged.add(Edit))
        throw std::runtime_error("the rewrite's edits overlap: " + llvm::toString(std::move(Err)));
    json TextEdits = json::array();
    for (const clang::tooling::Replacement& Edit : Merged)
      TextEdits.push_back({{"range", range(Lines, Edit.getOffset(), Edit.getOffset() + Edit.getLength())},
                           {"newText", Edit.getReplacementText().str()}});
    if (DocumentChanges)
      return {{"documentChanges",
               {{{"textDocument", {{"uri", Doc.Uri}, {"version", Doc.Version}}}, {"edits", TextEdits}}}}};
    return {{"changes", {{Doc.Uri, TextEdits}}}};
  }

  json distributeEdit(const Document& Doc, const Analysis& A) const {
    std::vector<clang::tooling::Replacement> Edits;
    for (const rewriter::PlannedEdit& Edit : A.Rewrite->Edits)
      Edits.push_back(Edit.Replacement);
    return workspaceEdit(Doc, *A.Lines, Edits);
  }

  std::string explanation(const Document& Doc, const Analysis& A) const {
    if (!A.Rewrite)
      return "accel-lsp has no rewrite to explain for " + Doc.Path + ": " + A.Refusal;
    std::string Out;
    for (const rewriter::Finding& Found : A.Rewrite->Findings)
      if (Found.What != rewriter::Finding::Kind::OutsideMainFile)
        Out += rewriter::describeFinding(Found) + "\n";
      else
        Out += Found.File + ":" + std::to_string(Found.Line) + ":" + std::to_string(Found.Column) +
               ": warning: not rewritten (a header the rewrite does not change): " +
               llvm::join(Found.Edits, "; ") + " [" + Found.Pass + "]\n";
    unsigned Changes = A.Rewrite->changes(), Left = A.Rewrite->sitesLeft();
    Out += "accel-rewrite: " + A.Rewrite->File + ": " + std::to_string(Changes) +
           (Changes == 1 ? " change" : " changes") + ", " + std::to_string(Left) + " not rewritten";
    return Out;
  }

  json codeActions(const Document& Doc, const json& Params) {
    Analysis& A = analyse(Doc);
    json Actions = json::array();
    // The lint checks' fixes on the lines asked about (an editor asks with the cursor's place, anywhere on
    // the line of the diagnostic).
    const json& Range = Params.at("range");
    unsigned FirstLine = Range["start"].at("line").get<unsigned>(),
             LastLine = Range["end"].at("line").get<unsigned>();
    for (const lint::LintFinding& Found : A.Lint) {
      unsigned FoundEnd = wordEnd(Doc.Text, Found.Offset);
      if (!Found.Fix || A.Lines->position(FoundEnd).Line < FirstLine ||
          A.Lines->position(Found.Offset).Line > LastLine)
        continue;
      Actions.push_back({{"title", "Fix: " + Found.Message.substr(0, Found.Message.find(';'))},
                         {"kind", "quickfix"},
                         {"diagnostics",
                          {diagnostic(*A.Lines, Found.Offset, FoundEnd, Warning, Found.Message,
                                      "accelerate-" + Found.Check)}},
                         {"edit", workspaceEdit(Doc, *A.Lines, *Found.Fix)}});
    }
    std::string Refusal = distributeRefusal(A);
    if (Refusal.empty())
      Actions.push_back({{"title", DistributeTitle},
                         {"kind", "refactor.rewrite"},
                         {"isPreferred", true},
                         {"edit", distributeEdit(Doc, A)}});
    else if (DisabledActions)
      Actions.push_back(
          {{"title", DistributeTitle}, {"kind", "refactor.rewrite"}, {"disabled", {{"reason", Refusal}}}});
    if (A.Rewrite)
      Actions.push_back({{"title", ExplainTitle},
                         {"kind", "refactor"},
                         {"command",
                          {{"title", ExplainTitle},
                           {"command", ExplainCommand},
                           {"arguments", {{{"uri", Doc.Uri}, {"version", Doc.Version}}}}}}});
    return Actions;
  }

  void execute(const Document& Doc, const Job& Work) {
    std::string Command = Work.Params.value("command", std::string());
    const json Arguments = Work.Params.value("arguments", json::array());
    if (Command != DistributeCommand && Command != ExplainCommand) {
      replyError(Work.Id, InvalidParams,
                 "accel-lsp has no command '" + Command + "' (it has " + DistributeCommand + " and " +
                     ExplainCommand + ")");
      return;
    }
    // The version the command was offered for, when it says.
    if (!Arguments.empty() && Arguments[0].contains("version") && Arguments[0]["version"] != Doc.Version) {
      replyError(Work.Id, ContentModified,
                 "the document changed since this command was offered; nothing was applied: ask for the code "
                 "actions again");
      return;
    }
    Analysis& A = analyse(Doc);
    if (Command == ExplainCommand) {
      std::string Text = explanation(Doc, A);
      showMessage(Information, Text);
      reply(Work.Id, Text);
      return;
    }
    std::string Refusal = distributeRefusal(A);
    if (!Refusal.empty()) {
      showMessage(Warning, "accel-lsp: " + Refusal);
      replyError(Work.Id, RequestFailed, Refusal);
      return;
    }
    send({{"jsonrpc", "2.0"},
          {"id", "accel-lsp-apply-" + std::to_string(++Applied)},
          {"method", "workspace/applyEdit"},
          {"params", {{"label", DistributeTitle}, {"edit", distributeEdit(Doc, A)}}}});
    reply(Work.Id, nullptr);
  }

  ServerOptions Options;
  Transport& Channel;
  CompileCommands Commands;

  // The reader's own state.
  bool Initialized = false, ShutDown = false;
  bool DocumentChanges = false, DisabledActions = false;
  std::vector<std::string> Roots;

  // Shared between the reader and the worker, under Lock.
  std::mutex Lock;
  std::condition_variable Wake;
  std::map<std::string, Document> Documents;
  std::deque<Job> Jobs;
  std::set<std::string> Cancelled; ///< Ids (as JSON text) of requests the client cancelled.
  std::set<std::string> Forget;    ///< Documents closed: their analyses and preambles go.
  std::set<std::string> Reanalyse; ///< Documents saved: analysed again, with the databases read again.
  bool Stopping = false;

  // The worker's own state.
  std::map<std::string, Analysis> Analyses;
  std::map<std::string, PreambleCache> Preambles;
  unsigned Applied = 0;
  std::thread Worker;
};

Server::Server(ServerOptions Options, Transport& Channel)
    : Self(std::make_unique<Impl>(std::move(Options), Channel)) {}

Server::~Server() = default;

int Server::run() {
  return Self->run();
}

} // namespace accelerate::lsp
