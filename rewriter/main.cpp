// rewriter/main.cpp: accel-rewrite's command line; the work is done in Driver.cpp.
#include "passes/Registry.h"
#include "rewriter/Driver.h"

#include "clang/Tooling/CommonOptionsParser.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/raw_ostream.h"

namespace cl = llvm::cl;

static cl::OptionCategory Category("accel-rewrite options");
static cl::opt<std::string> OutputFile("o", cl::desc("Write the rewritten file to <file> instead of stdout"),
                                       cl::value_desc("file"), cl::cat(Category));
static cl::opt<bool> InPlace("i", cl::desc("Rewrite the input file in place (only if something changes)"),
                             cl::cat(Category));
static cl::opt<bool> Explain("explain",
                             cl::desc("Print each change with file:line:col and its reason to stderr"),
                             cl::cat(Category));
static cl::opt<bool> ListPasses("list-passes", cl::desc("List the passes, in the order they run, and exit"),
                                cl::cat(Category));
static cl::extrahelp CommonHelp(clang::tooling::CommonOptionsParser::HelpMessage);

static const char Overview[] =
    "rewrites a plain single-device libtorch training loop to use accelerate::Accelerator.\n\n"
    "  accel-rewrite FILE [-o OUT | -i] [--explain] [-p BUILD_DIR] [-- compile flags]\n\n"
    "The rewritten file goes to stdout unless -o or -i is given. Nothing is written when FILE does not\n"
    "compile or when the rewritten text would not compile.\n";

int main(int argc, const char** argv) {
  llvm::InitLLVM Init(argc, argv);
  auto Parser = clang::tooling::CommonOptionsParser::create(argc, argv, Category, cl::ZeroOrMore, Overview);
  if (!Parser) {
    llvm::errs() << Parser.takeError();
    return 1;
  }
  if (ListPasses) {
    for (const accelerate::passes::PassInfo& Pass : accelerate::passes::allPasses())
      llvm::outs() << Pass.Name << ": " << Pass.Summary << "\n";
    return 0;
  }
  const std::vector<std::string>& Files = Parser->getSourcePathList();
  if (Files.size() != 1) {
    llvm::errs() << "accel-rewrite: expected one input file (got " << Files.size()
                 << "); run accel-rewrite once per file, see --help\n";
    return 1;
  }
  if (InPlace && !OutputFile.empty()) {
    llvm::errs() << "accel-rewrite: -i and -o were both given; use -i to rewrite " << Files.front()
                 << " in place, or -o FILE to write the result elsewhere\n";
    return 1;
  }

  static int AddressInThisBinary;
  accelerate::rewriter::DriverOptions Options;
  Options.InputFile = Files.front();
  Options.OutputFile = OutputFile;
  Options.InPlace = InPlace;
  Options.Explain = Explain;
  Options.ResourceDir = ACCEL_CLANG_RESOURCE_DIR;
  Options.RuntimeIncludeDir = accelerate::rewriter::findRuntimeIncludeDir(
      llvm::sys::fs::getMainExecutable(argv[0], &AddressInThisBinary), ACCEL_RUNTIME_INCLUDE_DIR);
  return accelerate::rewriter::runDriver(Parser->getCompilations(), Options);
}
