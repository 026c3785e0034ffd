// rewriter/main.cpp: accel-rewrite's command line; the work is done in Driver.cpp.
#include "passes/Registry.h"
#include "rewriter/CheckCompiles.h"
#include "rewriter/Driver.h"

#include "clang/Tooling/CommonOptionsParser.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

namespace cl = llvm::cl;

static cl::OptionCategory Category("accel-rewrite options");
static cl::opt<std::string> OutputFile("o", cl::desc("Write the rewritten file to <file> instead of stdout"),
                                       cl::value_desc("file"), cl::cat(Category));
static cl::opt<bool> InPlace("i", cl::desc("Rewrite the input file in place (only if something changes)"),
                             cl::cat(Category));
static cl::opt<bool>
    Explain("explain", cl::desc("Print each change and note with file:line:col and its reason to stderr"),
            cl::cat(Category));
static cl::opt<bool> Check("check",
                           cl::desc("Write nothing; exit 1 when the file needs rewriting (a CI lint)"),
                           cl::cat(Category));
static cl::opt<bool> Diff("diff", cl::desc("Print a unified diff instead of the rewritten file"),
                          cl::cat(Category));
static cl::opt<std::string>
    ExportFixes("export-fixes", cl::desc("Write the edits to <file> as YAML for clang-apply-replacements"),
                cl::value_desc("file"), cl::cat(Category));
static cl::opt<bool> LineDirectives(
    "line-directives",
    cl::desc("Add #line directives so diagnostics in the rewritten file name the original file and line"),
    cl::cat(Category));
static cl::opt<std::string> DepFile("depfile",
                                    cl::desc("Write the files the rewrite read to <file> as a Makefile rule "
                                             "(for a build system's DEPFILE); needs -o or -i"),
                                    cl::value_desc("file"), cl::cat(Category));
static cl::list<std::string>
    OnlyPasses("passes",
               cl::desc("Run only these passes (comma-separated; see --list-passes); "
                        "passes that are off by default run when named here"),
               cl::CommaSeparated, cl::value_desc("name,..."), cl::cat(Category));
static cl::list<std::string>
    EnabledPasses("enable",
                  cl::desc("Also run these passes that are off by default (comma-separated), e.g. "
                           "--enable=fsdp-units"),
                  cl::CommaSeparated, cl::value_desc("name,..."), cl::cat(Category));
static cl::list<std::string> DisabledPasses("disable", cl::desc("Do not run these passes (comma-separated)"),
                                            cl::CommaSeparated, cl::value_desc("name,..."),
                                            cl::cat(Category));
static cl::list<std::string> LogWith(
    "log-with",
    cl::desc(
        "Log the training loop to these experiment trackers (comma-separated names, as "
        "AcceleratorOptions().log_with takes: tensorboard, mlflow, jsonl, csv, all, or a registered one); "
        "runs the tracking pass"),
    cl::CommaSeparated, cl::value_desc("name,..."), cl::cat(Category));
static cl::opt<bool> ProgressBar(
    "progress-bar",
    cl::desc("Show a progress bar over the training loop on the main process (accelerate::ProgressBar, over "
             "its step count or its data loader); runs the progress-bar pass"),
    cl::cat(Category));
static cl::opt<bool> Profile(
    "profile",
    cl::desc("Run the training loop under the profiler (accelerator.profile(), stepped after each optimizer "
             "step; each process writes a Chrome trace to ACCEL_PROFILE_DIR, default ./profile); runs the "
             "profile pass"),
    cl::cat(Category));
static cl::opt<std::string>
    ProjectName("project-name",
                cl::desc("With --log-with: the project init_trackers names, where the trackers write "
                         "(runs/<name>); default: the input file's stem"),
                cl::value_desc("name"), cl::cat(Category));
static cl::opt<bool> Resume(
    "resume",
    cl::desc("Load the checkpoint the training loop saves (accelerator.save_state(\"checkpoint\")) whenever "
             "it exists, not only when the launcher restarts the job"),
    cl::cat(Category));
static cl::list<std::string>
    Headers("headers",
            cl::desc("Also rewrite these headers of the project (comma-separated files, or directories for "
                     "every header under them; never system headers): with -i in place, with --output-dir "
                     "into the output directory"),
            cl::CommaSeparated, cl::value_desc("path,..."), cl::cat(Category));
static cl::opt<std::string>
    OutputDir("output-dir",
              cl::desc("Write each rewritten input file, and each header of --headers the inputs read, to "
                       "<dir>/<its path relative to --root>"),
              cl::value_desc("dir"), cl::cat(Category));
static cl::opt<std::string> Root("root",
                                 cl::desc("With --output-dir: the directory the output directory mirrors "
                                          "(default: the first input file's directory)"),
                                 cl::value_desc("dir"), cl::cat(Category));
static cl::opt<std::string> PreambleCache(
    "preamble-cache",
    cl::desc(
        "Keep the precompiled preamble of each input (its #include block, parsed once for the rewrite and "
        "its compile check) in <dir>, and reuse it in later runs while the flags, the #include lines and "
        "every header it read are unchanged (accelerate_target() keeps one in the build tree)"),
    cl::value_desc("dir"), cl::cat(Category));
static cl::opt<bool>
    NoPreamble("no-preamble",
               cl::desc("Parse each input and its rewrite whole, without a precompiled preamble "
                        "(slower; the output is the same)"),
               cl::cat(Category));
static cl::opt<bool> ListPasses("list-passes", cl::desc("List the passes, in the order they run, and exit"),
                                cl::cat(Category));
static cl::extrahelp CommonHelp(clang::tooling::CommonOptionsParser::HelpMessage);

static const char Overview[] =
    "rewrites a plain single-device libtorch training loop to use accelerate::Accelerator.\n\n"
    "  accel-rewrite FILE [-o OUT | -i | --diff | --check] [--explain] [-p BUILD_DIR] [-- compile flags]\n"
    "  accel-rewrite FILE... --headers=DIR [-i | --output-dir=OUT [--root=DIR] | --diff | --check] ...\n\n"
    "The rewritten file goes to stdout unless -o or -i is given. Nothing is written when FILE does not\n"
    "compile or when the rewritten text would not compile. Warnings name each site that was recognised but\n"
    "not rewritten, with the reason; a summary line counts them.\n";

namespace {

int usageError(const llvm::Twine& Message) {
  llvm::errs() << "accel-rewrite: " << Message << "\n";
  return 1;
}

/// Why `Path` cannot be a source file to rewrite (a folder, an empty file, binary data, unreadable), or ""
/// when it may be one. A missing file is left to the driver, which names it.
std::string notASourceFile(const std::string& Path) {
  namespace fs = llvm::sys::fs;
  fs::file_status Status;
  if (fs::status(Path, Status))
    return "";
  if (fs::is_directory(Status))
    return "'" + Path +
           "' is a directory, not a source file; give the .cpp files of the training loop (e.g. " + Path +
           "/train.cpp)";
  if (!fs::is_regular_file(Status))
    return "'" + Path +
           "' is not a regular file (a device, socket or pipe); give the .cpp files of the "
           "training loop";
  auto Buffer = llvm::MemoryBuffer::getFile(Path, /*IsText=*/false, /*RequiresNullTerminator=*/false);
  if (!Buffer)
    return "cannot read '" + Path + "': " + Buffer.getError().message();
  llvm::StringRef Text = (*Buffer)->getBuffer();
  if (Text.trim().empty())
    return "'" + Path + "' is empty: there is no training loop in it to rewrite";
  const size_t Nul = Text.take_front(1 << 20).find('\0');
  if (Nul != llvm::StringRef::npos)
    return "'" + Path + "' is not a source file: it holds binary data (a NUL byte at offset " +
           std::to_string(Nul) + "); give the .cpp files of the training loop";
  return "";
}

/// How a setting a pass needs is given, for the message of a pass named without it.
llvm::StringRef settingUsage(llvm::StringRef Setting) {
  static const std::pair<llvm::StringRef, llvm::StringRef> Usages[] = {
      {"--log-with", "--log-with=NAME,... (the trackers to log to, e.g. --log-with=tensorboard)"},
      {"--progress-bar", "--progress-bar (it adds the bar only when asked to)"},
      {"--profile", "--profile (it adds the profiler only when asked to)"},
  };
  for (const auto& [Flag, Usage] : Usages)
    if (Flag == Setting)
      return Usage;
  return Setting;
}

/// The passes to run (passes::selectPasses): the default ones, or exactly those named by --passes, plus
/// --enable and the passes --log-with, --progress-bar and --profile turn on, minus --disable. A problem is a
/// usage error that names the fix.
bool selectPasses(std::vector<accelerate::passes::PassInfo>& Selected) {
  using accelerate::passes::PassRequestProblem;
  accelerate::passes::PassRequest Request{{OnlyPasses.begin(), OnlyPasses.end()},
                                          {EnabledPasses.begin(), EnabledPasses.end()},
                                          {DisabledPasses.begin(), DisabledPasses.end()},
                                          {}};
  if (!LogWith.empty())
    Request.Settings.push_back("--log-with");
  if (ProgressBar)
    Request.Settings.push_back("--progress-bar");
  if (Profile)
    Request.Settings.push_back("--profile");
  auto Chosen = accelerate::passes::selectPasses(Request);
  if (auto* Passes = std::get_if<std::vector<accelerate::passes::PassInfo>>(&Chosen)) {
    Selected = std::move(*Passes);
    return true;
  }
  const PassRequestProblem& Problem = std::get<PassRequestProblem>(Chosen);
  switch (Problem.What) {
  case PassRequestProblem::Kind::UnknownPass:
    usageError("unknown pass '" + Problem.Name + "' (known: " + accelerate::passes::knownPassNames() + ")");
    break;
  case PassRequestProblem::Kind::SettingButDisabled:
    usageError(Problem.Pass->Setting + " needs the " + Problem.Name + " pass, and --disable=" + Problem.Name +
               " leaves it out; drop one of them");
    break;
  case PassRequestProblem::Kind::EnabledAndDisabled:
    usageError("--enable and --disable both name the pass '" + Problem.Name + "'; drop one of them");
    break;
  case PassRequestProblem::Kind::NeedsItsSetting:
    usageError("the " + Problem.Name + " pass needs " + settingUsage(Problem.Pass->Setting));
    break;
  }
  return false;
}

/// The tracker names of --log-with, checked: each one non-empty, and written as it is into a C++ string
/// literal. Whether a tracker of that name exists is the runtime's to say (a program may register its own):
/// `init_trackers` names the unknown ones and the known ones.
bool trackerNames(std::vector<std::string>& Names) {
  if (LogWith.getNumOccurrences() > 0 && LogWith.empty())
    LogWith.push_back("");
  for (const std::string& Name : LogWith) {
    if (Name.empty()) {
      usageError("--log-with got an empty tracker name; give the trackers to log to, comma-separated, e.g. "
                 "--log-with=tensorboard or --log-with=tensorboard,jsonl");
      return false;
    }
    if (llvm::any_of(Name, [](char C) { return C < ' ' || C > '~' || C == '"' || C == '\\'; })) {
      usageError("--log-with: '" + Name +
                 "' is not a tracker name (printable ASCII without quotes or "
                 "backslashes)");
      return false;
    }
    if (!llvm::is_contained(Names, Name))
      Names.push_back(Name);
  }
  return true;
}

/// --project-name, checked: it needs --log-with, and becomes a directory name and a C++ string literal.
bool projectName(std::string& Name) {
  if (ProjectName.getNumOccurrences() == 0)
    return true;
  if (LogWith.empty()) {
    usageError("--project-name names the project of the trackers of --log-with; give --log-with too");
    return false;
  }
  if (ProjectName.empty() || ProjectName == "." || ProjectName == ".." ||
      llvm::any_of(ProjectName,
                   [](char C) { return C < ' ' || C > '~' || C == '"' || C == '\\' || C == '/'; })) {
    usageError("--project-name: '" + ProjectName +
               "' is not a project name (a directory name: printable ASCII "
               "without quotes, backslashes or '/')");
    return false;
  }
  Name = ProjectName;
  return true;
}

/// --resume, checked: the checkpoint pass inserts the load it changes.
bool resume(const std::vector<accelerate::passes::PassInfo>& Selected, bool& Out) {
  if (Resume && !llvm::any_of(Selected, [](const auto& Pass) { return Pass.Name == "checkpoint"; })) {
    usageError(
        "--resume loads the checkpoint the checkpoint pass saves, and the passes chosen leave that pass "
        "out (--disable=checkpoint, or --passes without it); drop --resume or run the checkpoint pass");
    return false;
  }
  Out = Resume;
  return true;
}

} // namespace

int main(int argc, const char** argv) {
  llvm::InitLLVM Init(argc, argv);
  auto Parser = clang::tooling::CommonOptionsParser::create(argc, argv, Category, cl::ZeroOrMore, Overview);
  if (!Parser) {
    llvm::errs() << Parser.takeError();
    return 1;
  }
  if (ListPasses) {
    for (const accelerate::passes::PassInfo& Pass : accelerate::passes::allPasses())
      llvm::outs() << Pass.Name << ": " << Pass.Summary << (Pass.OnByDefault ? "" : " [off by default]")
                   << "\n";
    return 0;
  }
  const std::vector<std::string>& Files = Parser->getSourcePathList();
  if (Files.empty())
    return usageError("expected an input file; see --help");
  if (InPlace && !OutputFile.empty())
    return usageError("-i and -o were both given; use -i to rewrite " + Files.front() +
                      " in place, or -o FILE to write the result elsewhere");
  unsigned Modes = InPlace + !OutputFile.empty() + !OutputDir.empty() + Diff + Check;
  if (Modes > 1)
    return usageError("choose one of -o, -i, --output-dir, --diff and --check");
  if (Files.size() > 1 && (Modes == 0 || !OutputFile.empty()))
    return usageError("got " + llvm::Twine(Files.size()) +
                      " input files, and -o or standard output holds one; rewrite several files with -i, "
                      "--output-dir=DIR, --diff or --check, or run accel-rewrite once per file");
  if (Files.size() > 1 && !ExportFixes.empty())
    return usageError("--export-fixes writes the edits of one input file; run accel-rewrite once per file");
  if (LineDirectives && (InPlace || Diff || Check))
    return usageError("--line-directives is for a rewritten copy (stdout, -o FILE or --output-dir), not for "
                      "-i, --diff or --check");
  if (!DepFile.empty() && !InPlace && OutputFile.empty() && OutputDir.empty())
    return usageError("--depfile needs -o FILE, --output-dir or -i: the rule it writes names the output");
  if (NoPreamble && !PreambleCache.empty())
    return usageError(
        "--no-preamble parses without a preamble, so there is none to keep in --preamble-cache; "
        "give one of them");
  if (!Root.empty() && OutputDir.empty())
    return usageError("--root is the directory --output-dir mirrors; give --output-dir too");
  for (const std::string& File : Files) {
    const std::string Problem = notASourceFile(File);
    if (!Problem.empty()) {
      llvm::errs() << "accel-rewrite: error: " << Problem << "; nothing was written\n";
      return 2;
    }
  }
  if (Headers.getNumOccurrences() > 0 &&
      llvm::any_of(Headers, [](const std::string& H) { return H.empty(); }))
    return usageError("--headers got an empty path; give the project's headers or their directory, e.g. "
                      "--headers=include or --headers=model.h,data.h");

  accelerate::rewriter::DriverOptions Options;
  if (!trackerNames(Options.Settings.LogWith) || !projectName(Options.Settings.ProjectName) ||
      !selectPasses(Options.Passes) || !resume(Options.Passes, Options.Settings.Resume))
    return 1;
  Options.Settings.ProgressBar = ProgressBar;
  static int AddressInThisBinary;
  Options.InputFiles = Files;
  Options.Headers = Headers;
  Options.OutputDir = OutputDir;
  Options.Root = Root;
  Options.OutputFile = OutputFile;
  Options.InPlace = InPlace;
  Options.Explain = Explain;
  Options.Check = Check;
  Options.Diff = Diff;
  Options.LineDirectives = LineDirectives;
  Options.ExportFixes = ExportFixes;
  Options.DepFile = DepFile;
  Options.Preamble = !NoPreamble;
  Options.PreambleCache = PreambleCache;
  Options.ResourceDir = ACCEL_CLANG_RESOURCE_DIR;
  Options.RuntimeIncludeDir = accelerate::rewriter::findRuntimeIncludeDir(
      llvm::sys::fs::getMainExecutable(argv[0], &AddressInThisBinary), ACCEL_RUNTIME_INCLUDE_DIR);
  return accelerate::rewriter::runDriver(Parser->getCompilations(), Options);
}
