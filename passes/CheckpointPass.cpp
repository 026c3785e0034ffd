// passes/CheckpointPass.cpp: the rule that writes saved files from the main process only.
#include "passes/Pass.h"

#include "passes/Insertion.h"
#include "passes/Macros.h"
#include "passes/TrainingCode.h"

#include "clang/AST/ASTContext.h"
#include "clang/AST/ExprCXX.h"
#include "clang/AST/ParentMapContext.h"
#include "clang/AST/StmtCXX.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "clang/ASTMatchers/ASTMatchers.h"
#include "clang/Lex/Lexer.h"
#include "clang/Tooling/Transformer/Stencil.h"

namespace accelerate::passes {

// ---- The pass ------------------------------------------------------------------------------------------

/// In training and evaluation code, each `torch::save(...)` statement runs on the main process only, at the
/// user's path, so files that other tools read (the model, sample images, tensors for inspection) are written
/// once, not once per process; and where the training loop saves a model or an optimizer, a checkpoint that
/// resumes training is saved too, by every process (save_state is collective):
///
///   torch::save(model, "model.pt");  →  accelerator.save_state("checkpoint");
///                                        if (accelerator.is_main_process()) torch::save(model, "model.pt");
///   torch::save(samples, "s.pt");    →  if (accelerator.is_main_process()) torch::save(samples, "s.pt");
///
/// Every process holds the same weights after a synchronised step, so the main process's copy is the model.
/// `accelerator.save_state("checkpoint")` (models, optimizers, schedulers, RNG and data position; written to
/// a temporary directory, then renamed) goes before the first such save of its block. It is not added where a
/// condition on a tensor's value decides whether the save runs (a "best loss so far" on a local loss: the
/// processes could disagree, and a collective reached by some would wait forever), nor where the save is not
/// a statement of a block; the explanation says why. The guard alone takes no collective, so it is safe
/// anywhere.
PassRule checkpointPass();

/// Matches the saves checkpointPass() guards (the guard uses `accelerator`).
clang::ast_matchers::StatementMatcher guardedSave();
/// Matches `std::ofstream log(path);` in training code (or a helper it calls, isInTrainingHelper()), which
/// the pass opens without emptying the file on processes other than the main one (it uses `accelerator`).
clang::ast_matchers::StatementMatcher fileStreamOpenedByEveryProcess();
/// `std::fopen(path, "w")` (a mode that empties the file, or a mode computed from such ones) in training or
/// evaluation code or a helper it calls: a C file opened, and so emptied, by every process.
clang::ast_matchers::StatementMatcher cFileOpenedByEveryProcess();

/// Matches every statement checkpointPass() makes use `accelerator` (guardedSave(),
/// fileStreamOpenedByEveryProcess(), cFileOpenedByEveryProcess()): its registry row's
/// PassInfo::UsesAccelerator.
clang::ast_matchers::StatementMatcher checkpointUsesAccelerator();

namespace {

using namespace clang::ast_matchers;
using namespace clang::transformer;

constexpr char StatementId[] = "statement";
constexpr char PathId[] = "path";
constexpr char StreamId[] = "stream";
constexpr char ModeId[] = "mode";
constexpr char RunId[] = "run";
constexpr char FunctionId[] = "function";

constexpr char SaveState[] = "accelerator.save_state(\"checkpoint\");";

/// `torch::save(...)`, resolved or (in a template, where the lookup holds the function template) not yet.
auto savesWithTorch() {
  auto Save = functionDecl(hasName("::torch::save"));
  auto SaveTemplate = namedDecl(anyOf(Save, functionTemplateDecl(hasName("::torch::save"))));
  return callee(expr(
      ignoringImplicit(anyOf(declRefExpr(to(Save)), unresolvedLookupExpr(hasAnyDeclaration(SaveTemplate))))));
}

StatementMatcher torchSave() {
  return callExpr(savesWithTorch());
}

/// `torch::save(model_or_optimizer, ...)`: training state, not just a file.
StatementMatcher stateSave() {
  return callExpr(savesWithTorch(),
                  hasArgument(0, expr(hasType(qualType(anyOf(isModuleType(), isOptimizerType()))))));
}

AST_MATCHER(clang::Stmt, isInTrainingLoopMatcher) {
  return isInTrainingLoop(Node, Finder->getASTContext());
}

AST_MATCHER(clang::Stmt, isUnderTensorConditionMatcher) {
  return isUnderTensorCondition(Node, Finder->getASTContext());
}

/// The save is a statement of a block, and no earlier statement of that block saves a model or an optimizer:
/// one resumable checkpoint per group of saves.
AST_MATCHER(clang::Stmt, isFirstStateSaveOfBlock) {
  clang::ASTContext& Context = Finder->getASTContext();
  clang::DynTypedNodeList Parents = Context.getParents(Node);
  const clang::Stmt* Child = &Node;
  while (!Parents.empty() && Parents[0].get<clang::ExprWithCleanups>()) {
    Child = Parents[0].get<clang::Stmt>();
    Parents = Context.getParents(Parents[0]);
  }
  const auto* Block = Parents.empty() ? nullptr : Parents[0].get<clang::CompoundStmt>();
  if (!Block)
    return false;
  for (const clang::Stmt* Earlier : Block->body()) {
    // The block may hold the statement wrapped in ExprWithCleanups, which the parent map can skip.
    if (Earlier == Child || Earlier->getBeginLoc() == Node.getBeginLoc())
      return true;
    if (!match(traverse(clang::TK_AsIs, stmt(anyOf(stateSave(), hasDescendant(stateSave())))), *Earlier,
               Context)
             .empty())
      return false;
  }
  return true;
}

/// A call that writes a file of its own: an image writer (`cv::imwrite`, `save_image`, `write_image`), an
/// archive's `save_to`, a module's own `save` (a user model's `save(path)`, or libtorch's `save(archive)`
/// that fills an archive the main process then writes).
StatementMatcher fileWrite() {
  auto ImageWriter = callExpr(callee(functionDecl(hasAnyName("imwrite", "save_image", "write_image"))));
  auto ArchiveSave = cxxMemberCallExpr(
      callee(cxxMethodDecl(hasName("save_to"), ofClass(hasName("::torch::serialize::OutputArchive")))));
  auto ModuleSave = cxxMemberCallExpr(
      callee(cxxMethodDecl(hasName("save"))),
      on(expr(anyOf(hasType(isModuleType()), cxxOperatorCallExpr(hasOverloadedOperatorName("->"),
                                                                 hasArgument(0, hasType(isModuleType())))))));
  return expr(anyOf(ImageWriter, ArchiveSave, ModuleSave));
}

/// A save of a model or an optimizer in a training loop where the pass inserts
/// `accelerator.save_state("checkpoint")` (see checkpointPass()).
StatementMatcher checkpointedSave();

bool isLoop(const clang::Stmt& S) {
  return llvm::isa<clang::ForStmt, clang::CXXForRangeStmt, clang::WhileStmt, clang::DoStmt>(S);
}

/// The outermost loop around `S` in its function; null when `S` is in no loop, or in a lambda (whose loops
/// run when it is called, not where it is written).
const clang::Stmt* outermostLoop(const clang::Stmt& S, clang::ASTContext& Context) {
  const clang::Stmt* Outermost = nullptr;
  clang::DynTypedNodeList Parents = Context.getParents(S);
  while (!Parents.empty() && !Parents[0].get<clang::FunctionDecl>()) {
    if (Parents[0].get<clang::LambdaExpr>())
      return nullptr;
    if (const auto* Parent = Parents[0].get<clang::Stmt>(); Parent && isLoop(*Parent))
      Outermost = Parent;
    Parents = Context.getParents(Parents[0]);
  }
  return Outermost;
}

/// The training runs of the main file that save a resumable checkpoint: the outermost loop around each save
/// where the pass inserts save_state, each loop once, in source order.
std::vector<const clang::Stmt*> checkpointedRuns(clang::ASTContext& Context) {
  const clang::SourceManager& SM = Context.getSourceManager();
  std::vector<const clang::Stmt*> Runs;
  for (const clang::Decl* TopLevel : Context.getTranslationUnitDecl()->decls()) {
    if (!isInRewrittenFile(SM, TopLevel->getLocation()))
      continue;
    for (const BoundNodes& Found :
         match(traverse(clang::TK_IgnoreUnlessSpelledInSource,
                        decl(forEachDescendant(stmt(checkpointedSave()).bind("save")))),
               *TopLevel, Context))
      if (const clang::Stmt* Run = outermostLoop(*Found.getNodeAs<clang::Stmt>("save"), Context);
          Run && !llvm::is_contained(Runs, Run))
        Runs.push_back(Run);
  }
  llvm::sort(Runs, [&](const clang::Stmt* A, const clang::Stmt* B) {
    return SM.isBeforeInTranslationUnit(A->getBeginLoc(), B->getBeginLoc());
  });
  return Runs;
}

/// How the pass resumes a run: where the load goes and, for an epoch loop, the loader whose epoch it starts
/// from; or why it does not.
struct Resume {
  std::string Problem;                    ///< Empty: the load goes before the run.
  const clang::VarDecl* Epoch = nullptr;  ///< `for (int epoch = 1; ...)`: the loop variable ...
  const clang::VarDecl* Loader = nullptr; ///< ... that starts at 1 + loader->epoch().
};

/// The prepared loader a range-for reads directly (`for (auto& batch : *loader)`), declared before `Run` in
/// the same function; null otherwise.
const clang::VarDecl* preparedLoaderRead(const clang::CXXForRangeStmt& Loop, const clang::Stmt& Run,
                                         clang::ASTContext& Context) {
  const clang::VarDecl* Loader = iteratedLoader(Loop, Context);
  if (!Loader || namedDeclaration(Loop.getRangeInit()) != Loader || !isPreparedLoader(*Loader, Context))
    return nullptr;
  const clang::SourceManager& SM = Context.getSourceManager();
  const clang::FunctionDecl* Function = enclosingFunction(Run, Context);
  if (!Function || !Function->getBody() ||
      !SM.isBeforeInTranslationUnit(Loader->getEndLoc(), Run.getBeginLoc()) ||
      !SM.isBeforeInTranslationUnit(Function->getBody()->getBeginLoc(), Loader->getBeginLoc()))
    return nullptr;
  return Loader;
}

/// The variable a `for` loop counts with `++v`, `v++` or `v += 1`, declared in its init with `= value`, as
/// an integer, and written nowhere in its body.
const clang::VarDecl* countedVariable(const clang::ForStmt& Loop, clang::ASTContext& Context) {
  const auto* Init = llvm::dyn_cast_or_null<clang::DeclStmt>(Loop.getInit());
  const auto* Variable =
      Init && Init->isSingleDecl() ? llvm::dyn_cast<clang::VarDecl>(Init->getSingleDecl()) : nullptr;
  if (!Variable || !Variable->getInit() || Variable->getInitStyle() != clang::VarDecl::CInit ||
      !Variable->getType()->isIntegerType() || Variable->getType()->isBooleanType() || !Loop.getInc())
    return nullptr;
  const clang::Expr* Increment = Loop.getInc()->IgnoreUnlessSpelledInSource()->IgnoreParens();
  const clang::Expr* Target = nullptr;
  if (const auto* Unary = llvm::dyn_cast<clang::UnaryOperator>(Increment); Unary && Unary->isIncrementOp())
    Target = Unary->getSubExpr();
  if (const auto* Compound = llvm::dyn_cast<clang::CompoundAssignOperator>(Increment);
      Compound && Compound->getOpcode() == clang::BO_AddAssign)
    if (const auto* One = llvm::dyn_cast<clang::IntegerLiteral>(Compound->getRHS()->IgnoreParenImpCasts());
        One && One->getValue() == 1)
      Target = Compound->getLHS();
  if (!Target || namedDeclaration(Target) != Variable)
    return nullptr;
  auto Reference = ignoringParenImpCasts(declRefExpr(to(varDecl(equalsNode(Variable)))));
  auto Write = expr(anyOf(binaryOperator(isAssignmentOperator(), hasLHS(Reference)),
                          unaryOperator(hasAnyOperatorName("++", "--", "&"), hasUnaryOperand(Reference))));
  return containsMatch(Write, *Loop.getBody(), Context) ? nullptr : Variable;
}

/// True when a `break` ends `Loop` before its end: the loader's epoch then stays behind the epoch loop's.
bool leavesEarly(const clang::CXXForRangeStmt& Loop, clang::ASTContext& Context) {
  for (const BoundNodes& Found :
       match(traverse(clang::TK_AsIs, stmt(forEachDescendant(breakStmt().bind("break")))), *Loop.getBody(),
             Context)) {
    clang::DynTypedNodeList Parents = Context.getParents(*Found.getNodeAs<clang::Stmt>("break"));
    while (!Parents.empty()) {
      const auto* Parent = Parents[0].get<clang::Stmt>();
      if (Parent && (isLoop(*Parent) || llvm::isa<clang::SwitchStmt>(Parent))) {
        if (Parent == &Loop)
          return true;
        break;
      }
      Parents = Context.getParents(Parents[0]);
    }
  }
  return false;
}

/// True when a loop of the main file calls `Function`: a load at its start would run on every call.
bool isCalledInALoop(const clang::FunctionDecl& Function, clang::ASTContext& Context) {
  auto Call = callExpr(callee(functionDecl().bind("callee"))).bind("call");
  const clang::SourceManager& SM = Context.getSourceManager();
  for (const clang::Decl* TopLevel : Context.getTranslationUnitDecl()->decls()) {
    if (!isInRewrittenFile(SM, TopLevel->getLocation()))
      continue;
    for (const BoundNodes& Found :
         match(traverse(clang::TK_AsIs, decl(forEachDescendant(Call))), *TopLevel, Context)) {
      const auto* Callee = Found.getNodeAs<clang::FunctionDecl>("callee");
      if (const clang::FunctionDecl* Pattern = Callee->getTemplateInstantiationPattern())
        Callee = Pattern;
      if (Callee->getCanonicalDecl() != Function.getCanonicalDecl())
        continue;
      clang::DynTypedNodeList Parents = Context.getParents(*Found.getNodeAs<clang::Stmt>("call"));
      while (!Parents.empty() && !Parents[0].get<clang::FunctionDecl>()) {
        if (const auto* Parent = Parents[0].get<clang::Stmt>(); Parent && isLoop(*Parent))
          return true;
        Parents = Context.getParents(Parents[0]);
      }
    }
  }
  return false;
}

/// How the pass resumes `Run`, one of checkpointedRuns(): a loop over a prepared loader resumes where the
/// loader stopped (load_state restores its position); an epoch loop `for (int epoch = first; ...; ++epoch)`
/// whose body reads a prepared loader once, as a statement of its block, also starts at the loader's epoch.
Resume resumeOf(const clang::Stmt& Run, const std::vector<const clang::Stmt*>& Runs,
                clang::ASTContext& Context) {
  const clang::FunctionDecl* Function = enclosingFunction(Run, Context);
  for (const clang::Stmt* Other : Runs)
    if (Other != &Run && enclosingFunction(*Other, Context) == Function &&
        Context.getSourceManager().isBeforeInTranslationUnit(Other->getBeginLoc(), Run.getBeginLoc()))
      return {"later"};
  clang::DynTypedNodeList Parents = Context.getParents(Run);
  if (Parents.empty() || !Parents[0].get<clang::CompoundStmt>())
    return {"unbraced"};
  if (!Function || isCalledInALoop(*Function, Context))
    return {"called"};
  if (const auto* RangeFor = llvm::dyn_cast<clang::CXXForRangeStmt>(&Run))
    return preparedLoaderRead(*RangeFor, Run, Context) ? Resume{} : Resume{"shape"};
  const auto* For = llvm::dyn_cast<clang::ForStmt>(&Run);
  const auto* Body = For ? llvm::dyn_cast<clang::CompoundStmt>(For->getBody()) : nullptr;
  const clang::VarDecl* Epoch = For && Body ? countedVariable(*For, Context) : nullptr;
  if (!Epoch)
    return {"shape"};
  const clang::VarDecl* Loader = nullptr;
  for (const clang::Stmt* Statement : Body->body())
    if (const auto* RangeFor = llvm::dyn_cast<clang::CXXForRangeStmt>(Statement)) {
      const clang::VarDecl* Read = preparedLoaderRead(*RangeFor, Run, Context);
      if (!Read || Loader || leavesEarly(*RangeFor, Context))
        return {"shape"};
      Loader = Read;
    }
  if (!Loader)
    return {"shape"};
  auto NamesLoader = ignoringParenImpCasts(declRefExpr(to(varDecl(equalsNode(Loader)))));
  auto OtherRead = cxxForRangeStmt(hasRangeInit(ignoringParenImpCasts(
      anyOf(NamesLoader, cxxOperatorCallExpr(hasOverloadedOperatorName("*"), hasArgument(0, NamesLoader))))));
  unsigned Reads =
      match(traverse(clang::TK_AsIs, stmt(forEachDescendant(OtherRead.bind("read")))), *Body, Context).size();
  if (Reads != 1)
    return {"shape"};
  return {"", Epoch, Loader};
}

AST_MATCHER_P(clang::Stmt, isCheckpointedRun, std::string, Problem) {
  clang::ASTContext& Context = Finder->getASTContext();
  // Only an outermost loop that saves a model or an optimizer can be one; the file-wide search comes last.
  if (!isLoop(Node) || outermostLoop(Node, Context) || !containsMatch(stateSave(), Node, Context))
    return false;
  std::vector<const clang::Stmt*> Runs = checkpointedRuns(Context);
  return llvm::is_contained(Runs, &Node) && resumeOf(Node, Runs, Context).Problem == Problem;
}

std::string checkpointDirectory() {
  return "\"checkpoint\"";
}

/// `if (accelerate::restarted_with_checkpoint("checkpoint")) { accelerator.load_state("checkpoint"); }`;
/// with --resume, `accelerate::checkpoint_exists(...)`.
std::string loadStatement() {
  std::string Condition =
      passSettings().Resume ? "accelerate::checkpoint_exists" : "accelerate::restarted_with_checkpoint";
  return "if (" + Condition + "(" + checkpointDirectory() + ")) {\n  accelerator.load_state(" +
         checkpointDirectory() + ");\n}";
}

/// For an epoch loop, its first epoch moved on by the epochs the loaded loader has finished:
/// `for (int epoch = 1; ...)` → `for (int epoch = 1 + loader->epoch(); ...)` (0 → `loader->epoch()`).
EditGenerator epochStart() {
  return [](const MatchFinder::MatchResult& Result) -> llvm::Expected<llvm::SmallVector<Edit, 1>> {
    llvm::SmallVector<Edit, 1> Edits;
    const auto* Run = Result.Nodes.getNodeAs<clang::Stmt>(RunId);
    Resume How = resumeOf(*Run, checkpointedRuns(*Result.Context), *Result.Context);
    if (!How.Epoch)
      return Edits;
    const clang::Expr* First = How.Epoch->getInit()->IgnoreUnlessSpelledInSource();
    clang::CharSourceRange Range =
        clang::Lexer::makeFileCharRange(clang::CharSourceRange::getTokenRange(First->getSourceRange()),
                                        *Result.SourceManager, Result.Context->getLangOpts());
    if (Range.isInvalid())
      return Edits;
    std::string Text =
        clang::Lexer::getSourceText(Range, *Result.SourceManager, Result.Context->getLangOpts()).str();
    std::string Epochs = How.Loader->getNameAsString() + "->epoch()";
    const auto* Literal = llvm::dyn_cast<clang::IntegerLiteral>(First->IgnoreParens());
    Edit Change;
    Change.Range = Range;
    if (Literal && Literal->getValue() == 0)
      Change.Replacement = Epochs;
    else if (Literal || llvm::isa<clang::DeclRefExpr, clang::ParenExpr>(First))
      Change.Replacement = Text + " + " + Epochs;
    else
      Change.Replacement = "(" + Text + ") + " + Epochs;
    Edits.push_back(std::move(Change));
    return Edits;
  };
}

/// `main`, or in a file without one, the first function of the main file that trains: where a warning about
/// the whole file goes.
AST_MATCHER(clang::FunctionDecl, isFileAnchor) {
  clang::ASTContext& Context = Finder->getASTContext();
  const clang::SourceManager& SM = Context.getSourceManager();
  if (!Node.doesThisDeclarationHaveABody() || !SM.isWrittenInMainFile(SM.getExpansionLoc(Node.getLocation())))
    return false;
  if (Node.isMain())
    return true;
  if (mainFunctionOfMainFile(Context))
    return false;
  for (const clang::Decl* TopLevel : Context.getTranslationUnitDecl()->decls()) {
    const auto* Function = llvm::dyn_cast<clang::FunctionDecl>(TopLevel);
    if (Function && Function->doesThisDeclarationHaveABody() &&
        SM.isWrittenInMainFile(SM.getExpansionLoc(Function->getLocation())) &&
        isTrainingOrEvaluationFunction(*Function, Context))
      return Function == &Node;
  }
  return false;
}

/// The load, after registering the run's own step counter when it is a variable declared before the run
/// (`int step = 0; ... ++step;`): load_state then gives it back the value it had at the checkpoint, so what
/// counts by it (a checkpoint every N steps, the step a tracker logs at) goes on from there.
llvm::Expected<std::string> loadText(const MatchFinder::MatchResult& Result) {
  const auto* Run = Result.Nodes.getNodeAs<clang::Stmt>(RunId);
  std::string Text;
  if (std::optional<StepCounterFact> Counter = existingStepCounter(*Run, *Result.Context);
      Counter && Counter->Increment) {
    const std::string Name = Counter->Variable->getNameAsString();
    Text = "accelerator.register_counter(\"" + Name + "\", " + Name + ");\n";
  }
  return Text + loadStatement();
}

Stencil explainLoad() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Run = Result.Nodes.getNodeAs<clang::Stmt>(RunId);
    Resume How = resumeOf(*Run, checkpointedRuns(*Result.Context), *Result.Context);
    std::string Why =
        std::string(
            passSettings().Resume
                ? "with --resume, a run that finds the checkpoint save_state(\"checkpoint\") wrote "
                  "(a restart, or a new start of the job) continues from it"
                : "when the launcher restarts the job after a failure (TORCHELASTIC_RESTART_COUNT > 0: "
                  "accel launch --max_restarts, torchrun), the run continues from the checkpoint "
                  "save_state(\"checkpoint\") wrote, if one was written") +
        ": load_state (on every process) restores the models, optimizers, schedulers, RNG states and the "
        "prepared loader's position, so training continues at the batch after the checkpoint";
    if (How.Epoch)
      Why += "; the epoch loop starts at the loader's epoch (" + How.Loader->getNameAsString() +
             "->epoch(): 0 on a fresh start)";
    if (std::optional<StepCounterFact> Counter = existingStepCounter(*Run, *Result.Context);
        Counter && Counter->Increment)
      Why += "; the loop's counter '" + Counter->Variable->getNameAsString() +
             "' is registered, so load_state gives it back the value it had at the checkpoint";
    return Why;
  });
}

AST_MATCHER(clang::FunctionDecl, resumesWithoutCheckpoint) {
  return passSettings().Resume && mainFileTrains(Finder->getASTContext()) &&
         checkpointedRuns(Finder->getASTContext()).empty();
}

} // namespace

/// Training or evaluation code, or a helper it calls (a function that exports the model): the files written
/// there are written by every process.
auto writesForTraining() {
  return allOf(unless(isInMacroExpansion()), anyOf(isInTrainingOrEvaluationCode(), isInTrainingHelper()),
               unless(isInDistributedFunction()));
}

StatementMatcher guardedSave() {
  return expr(anyOf(torchSave(), fileWrite()), isWholeStatement(), writesForTraining()).bind(StatementId);
}

namespace {
StatementMatcher checkpointedSave() {
  return stmt(guardedSave(), stateSave(), isInTrainingLoopMatcher(), unless(isUnderTensorConditionMatcher()),
              isFirstStateSaveOfBlock());
}
} // namespace

/// `std::ofstream log("log.txt");`: a file stream opened, and so emptied, by every process.
StatementMatcher fileStreamOpenedByEveryProcess() {
  auto Stream = hasType(hasUnqualifiedDesugaredType(
      recordType(hasDeclaration(cxxRecordDecl(hasName("::std::basic_ofstream"))))));
  auto OpenedWithPathOnly = cxxConstructExpr(argumentCountIs(1), hasArgument(0, expr().bind(PathId)));
  return declStmt(hasSingleDecl(
                      varDecl(hasLocalStorage(), Stream, hasInitializer(ignoringImplicit(OpenedWithPathOnly)))
                          .bind(StreamId)),
                  writesForTraining())
      .bind(StatementId);
}

namespace {

/// A mode of `fopen` that empties the file: "w", "wb", "w+".
AST_MATCHER(clang::StringLiteral, emptiesTheFile) {
  return Node.isOrdinary() && Node.getString().starts_with("w");
}

/// The mode of the `fopen` bound to ModeId, chosen by process: as written on the main process, append on the
/// others ("wb" becomes "ab", "w+" "a+"; a mode computed at run time appends with "a").
llvm::Expected<std::string> mainProcessMode(const MatchFinder::MatchResult& Result) {
  const auto* Mode = Result.Nodes.getNodeAs<clang::Expr>(ModeId);
  std::string Written =
      clang::Lexer::getSourceText(clang::CharSourceRange::getTokenRange(Mode->getSourceRange()),
                                  *Result.SourceManager, Result.Context->getLangOpts())
          .str();
  std::string Append = "\"a\"";
  if (const auto* Literal = llvm::dyn_cast<clang::StringLiteral>(Mode->IgnoreParenImpCasts()))
    Append = "\"a" + Literal->getString().drop_front().str() + "\"";
  else
    Written = "(" + Written + ")";
  return "accelerator.is_main_process() ? " + Written + " : " + Append;
}

} // namespace

/// `std::fopen(path, "w")`: a C file opened, and so emptied, by every process; bound to StatementId, its mode
/// to ModeId.
StatementMatcher cFileOpenedByEveryProcess() {
  auto Fopen = functionDecl(hasAnyName("::fopen", "::std::fopen"));
  auto Emptying = stringLiteral(emptiesTheFile());
  return callExpr(
             callee(expr(ignoringImplicit(declRefExpr(to(Fopen))))), argumentCountIs(2),
             hasArgument(1, expr(anyOf(ignoringImplicit(Emptying), hasDescendant(Emptying))).bind(ModeId)),
             writesForTraining())
      .bind(StatementId);
}

StatementMatcher checkpointUsesAccelerator() {
  return stmt(anyOf(guardedSave(), fileStreamOpenedByEveryProcess(), cFileOpenedByEveryProcess()));
}

PassRule checkpointPass() {
  auto Guard = guardStatement(StatementId, "accelerator.is_main_process()");
  auto StateSaveInLoop = stmt(guardedSave(), stateSave(), isInTrainingLoopMatcher());
  auto Kept =
      cat("every process holds the same weights, so the main process alone writes them, at this path");
  auto Run = [](std::string Problem) {
    return traverse(clang::TK_IgnoreUnlessSpelledInSource,
                    stmt(isCheckpointedRun(std::move(Problem))).bind(RunId));
  };
  auto ByHand =
      cat("load it by hand before the loop: if (accelerate::restarted_with_checkpoint(\"checkpoint\")) "
          "accelerator.load_state(\"checkpoint\");");
  return applyFirst<std::string>({
      makeRule(Run(""), flatten(insertBeforeStatement(RunId, run(loadText)), epochStart()), explainLoad()),
      makeRule(Run("later"), noopEdit(node(RunId)),
               cat("no load_state inserted before this training loop: an earlier loop of this function "
                   "saves the checkpoint too, and the load goes before the first one only (a restart cannot "
                   "tell which of the two loops wrote the checkpoint); resume this one by hand")),
      makeRule(
          Run("unbraced"), noopEdit(node(RunId)),
          cat("no load_state inserted: this training loop is the body of an if or a loop written without "
              "braces, where a load cannot go before it, so a restarted job would start it over; put it "
              "in braces { ... } and run again")),
      makeRule(Run("called"), noopEdit(node(RunId)),
               cat("no load_state inserted: a loop of this file calls this function, so a load before its "
                   "training loop would run again on every call; ",
                   ByHand, " (before the loop that calls this function)")),
      makeRule(
          Run("shape"), noopEdit(node(RunId)),
          cat("no load_state inserted: a restarted job would start this training loop over, and "
              "load_state restores the state but not this loop's counter; the pass resumes a loop over a "
              "prepared data loader (for (auto& batch : *loader), which continues at the next batch) or "
              "an epoch loop (for (int epoch = 0; ...; ++epoch)) whose block reads one once; ",
              ByHand,
              " and start the loop where the checkpoint stopped "
              "(accelerator.gradient_state()->optimizer_steps counts the steps taken)")),
      makeRule(
          traverse(clang::TK_IgnoreUnlessSpelledInSource,
                   functionDecl(isFileAnchor(), resumesWithoutCheckpoint()).bind(FunctionId)),
          noopEdit(name(FunctionId)),
          cat("--resume: nothing to resume from: no accelerator.save_state(\"checkpoint\") is inserted "
              "in this file (the pass saves a checkpoint where a training loop saves a model or an "
              "optimizer with torch::save, as a statement of a block and under no condition on a tensor), "
              "so no load_state is inserted either; save the model in the training loop, or drop "
              "--resume")),
      makeRule(
          traverse(clang::TK_IgnoreUnlessSpelledInSource,
                   stmt(StateSaveInLoop, unless(isUnderTensorConditionMatcher()), isFirstStateSaveOfBlock())),
          flatten(editList({insertBeforeStatement(StatementId, cat(SaveState))}), Guard),
          cat(Kept, "; accelerator.save_state(\"checkpoint\") before it saves, from every process, what "
                    "resumes training on any number of processes (models, optimizers, schedulers, RNG "
                    "states, the data position), replacing the last one atomically")),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource,
                        stmt(StateSaveInLoop, isUnderTensorConditionMatcher())),
               Guard,
               cat(Kept, "; no resumable checkpoint (accelerator.save_state) is added here: a condition on a "
                         "tensor's value decides whether this runs (directly, or through a number computed "
                         "from one, such as a best-so-far loss or accuracy), processes could disagree on it, "
                         "and save_state is collective; decide on a reduced value (accelerator.reduce) and "
                         "call save_state by hand")),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource, stmt(guardedSave(), stateSave())), Guard,
               Kept),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource, guardedSave()), Guard,
               cat("the main process alone writes this file, once per job instead of once per process")),
      makeRule(
          traverse(clang::TK_IgnoreUnlessSpelledInSource, fileStreamOpenedByEveryProcess()),
          insertAfter(node(PathId), cat(", accelerator.is_main_process() ? std::ios::out : std::ios::app")),
          cat("only the main process empties '", name(StreamId),
              "' when it opens it; the others open it without "
              "emptying it (append), so a process that starts late cannot wipe what the main process "
              "has written; the main process alone writes to it")),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource, cFileOpenedByEveryProcess()),
               changeTo(node(ModeId), run(mainProcessMode)),
               cat("only the main process empties this file when it opens it; the others open it to append, "
                   "so a process that starts late cannot wipe what the main process has written; the main "
                   "process alone writes to it")),
  });
}

/// The pass's row of the table (passes/Passes.def lists it; scripts/passes_table.py reads its texts).
PassInfo checkpointPassInfo() {
  return {"checkpoint", checkpointPass,
          "`torch::save(...)` in training code runs on the main process only; saving a model or optimizer in "
          "the "
          "training loop also saves a resumable `accelerator.save_state(...)`",
          /*OnByDefault=*/true, /*WhenNothingFound=*/{},
          /*LeavesAlone=*/
          "`save_state` under a tensor condition (explained); loops a restart cannot continue "
          "(warning)",
          /*TurnedOnBy=*/{}, /*UsesAccelerator=*/checkpointUsesAccelerator};
}

} // namespace accelerate::passes
