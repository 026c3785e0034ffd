// passes/ProfilePass.cpp: the rule that runs the training loop under the profiler (`--profile`).
#include "passes/Pass.h"

#include "passes/Insertion.h"
#include "passes/Macros.h"
#include "passes/TrainingCode.h"

#include "clang/AST/ASTContext.h"
#include "clang/AST/ExprCXX.h"
#include "clang/AST/ParentMapContext.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "clang/ASTMatchers/ASTMatchers.h"
#include "clang/Basic/SourceManager.h"
#include "clang/Tooling/Transformer/Stencil.h"

namespace accelerate::passes {

// ---- The pass ------------------------------------------------------------------------------------------

/// Off by default; `accel-rewrite --profile` (`accelerate_target(... PROFILE)`) switches it on. Each training
/// run (the outermost training loop, as the tracking pass finds it) runs under `accelerator.profile()`,
/// stepped right after each optimizer step and stopped after the loop, which writes each process's Chrome
/// trace (`<profile_trace_dir>/profile_<process_index>.json`; the schedule and the directory come from the
/// `profile_schedule` and `profile_trace_dir` settings, ACCEL_PROFILE_SCHEDULE and ACCEL_PROFILE_DIR):
///
///     for (auto& batch : *loader) {         auto profiler = accelerator.profile();
///       ...                                 for (auto& batch : *loader) {
///       optimizer.step();              →      ...
///     }                                       optimizer.step();
///                                             profiler.step();
///                                           }
///                                           profiler.stop();
///
/// The profiler steps after the last optimizer step the innermost training loop's body calls (inside the
/// `if` that guards it, when one does), else after the body's last statement that trains (an optimizer step
/// in a function the loop calls). A run written without braces around it, or whose body is not a block, is
/// reported with the code to write by hand.
PassRule profilePass();

/// The runs the pass profiles, whose profiler comes from `accelerator` (PassInfo::UsesAccelerator).
clang::ast_matchers::StatementMatcher profiledTrainingRun();

namespace {

using namespace clang::ast_matchers;
using namespace clang::transformer;

constexpr char LoopId[] = "loop";

/// Where the profiler steps in a run, or why it cannot.
struct ProfilePlan {
  /// The statement `profiler.step();` goes after (null: the run is not supported, Reason says why).
  const clang::Stmt* StepAfter = nullptr;
  bool AfterOptimizerStep =
      false; ///< StepAfter is an optimizer step (else: the body's last training statement)
  std::string Reason;
};

bool inBlock(const clang::Stmt& S, clang::ASTContext& Context) {
  clang::DynTypedNodeList Parents = Context.getParents(S);
  return !Parents.empty() && Parents[0].get<clang::CompoundStmt>();
}

/// `Call` with the implicit nodes around it (a discarded result's temporary and cleanups).
const clang::Expr& withImplicitParents(const clang::Expr& Call, clang::ASTContext& Context) {
  const clang::Expr* Outer = &Call;
  while (true) {
    clang::DynTypedNodeList Parents = Context.getParents(*Outer);
    const auto* Parent = Parents.empty() ? nullptr : Parents[0].get<clang::Expr>();
    if (!Parent || !llvm::isa<clang::ExprWithCleanups, clang::CXXBindTemporaryExpr,
                              clang::MaterializeTemporaryExpr, clang::ImplicitCastExpr>(Parent))
      return *Outer;
    Outer = Parent;
  }
}

/// True when `Call` is a statement of its own: in a block, or the body of an `if`, an `else` or a loop.
bool isOwnStatement(const clang::Expr& Call, clang::ASTContext& Context) {
  clang::DynTypedNodeList Parents = Context.getParents(Call);
  if (Parents.empty())
    return false;
  if (Parents[0].get<clang::CompoundStmt>())
    return true;
  if (const auto* If = Parents[0].get<clang::IfStmt>())
    return If->getThen() == &Call || If->getElse() == &Call;
  if (const auto* Loop = Parents[0].get<clang::Stmt>())
    return isLoop(*Loop) && loopBody(*Loop) == &Call;
  return false;
}

/// True when `S` steps an optimizer or runs a backward pass, itself or in a function of the rewritten files
/// it calls (a statement that is itself the call `train_step(model, optimizer);` included).
bool trains(const clang::Stmt& S, clang::ASTContext& Context) {
  if (containsMatch(optimizerStep(), S, Context) || loopTrains(S, Context))
    return true;
  const clang::SourceManager& SM = Context.getSourceManager();
  auto Call = callExpr(callee(functionDecl(hasBody(stmt())).bind("callee")));
  for (const BoundNodes& Found :
       match(traverse(clang::TK_AsIs, stmt(eachOf(Call, forEachDescendant(Call)))), S, Context)) {
    const auto* Callee = Found.getNodeAs<clang::FunctionDecl>("callee");
    if (isInRewrittenFile(SM, Callee->getLocation()) &&
        (containsMatch(optimizerStep(), *Callee->getBody(), Context) ||
         loopTrains(*Callee->getBody(), Context)))
      return true;
  }
  return false;
}

ProfilePlan planFor(const clang::Stmt& Run, clang::ASTContext& Context) {
  ProfilePlan Plan;
  if (!inBlock(Run, Context)) {
    Plan.Reason = "this training loop is the body of an if or a loop written without braces, where the "
                  "profiler's declaration cannot go beside it; put it in braces { ... } and run again";
    return Plan;
  }
  const clang::Stmt* Body = loopBody(innermostTrainingLoop(Run, Context));
  // The last optimizer step the body calls as a statement of its own, in source order.
  const clang::SourceManager& SM = Context.getSourceManager();
  if (Body) {
    for (const BoundNodes& Found :
         match(traverse(clang::TK_AsIs, stmt(forEachDescendant(stmt(optimizerStep()).bind("step")))), *Body,
               Context)) {
      const clang::Expr* Call = &withImplicitParents(*Found.getNodeAs<clang::Expr>("step"), Context);
      std::vector<const clang::Stmt*> Loops = enclosingLoops(*Call, Context);
      if (Call->getBeginLoc().isMacroID() || !isOwnStatement(*Call, Context) || Loops.empty() ||
          Loops.front() != &innermostTrainingLoop(Run, Context))
        continue;
      if (!Plan.StepAfter ||
          SM.isBeforeInTranslationUnit(Plan.StepAfter->getBeginLoc(), Call->getBeginLoc())) {
        Plan.StepAfter = Call;
        Plan.AfterOptimizerStep = true;
      }
    }
  }
  if (Plan.StepAfter)
    return Plan;
  const auto* Block = llvm::dyn_cast_or_null<clang::CompoundStmt>(Body);
  if (Block)
    for (const clang::Stmt* Statement : Block->body())
      if (!Statement->getBeginLoc().isMacroID() && trains(*Statement, Context))
        Plan.StepAfter = Statement;
  if (!Plan.StepAfter)
    Plan.Reason = "the training loop's body is not a block where the profiler could step after the training "
                  "step; put it in braces { ... } and run again";
  return Plan;
}

/// The profiler's name in a run: `profiler`, else `train_profiler`, `profiler_2`, ..., free in its function
/// and not taken by the profiler of an earlier run of the function.
std::string profilerName(const clang::Stmt& Run, clang::ASTContext& Context) {
  const clang::FunctionDecl* Function = enclosingFunction(Run, Context);
  llvm::StringSet<> Taken = takenNames(*Function, Context);
  auto FreeName = [&] { return freeName(Taken, {"profiler", "train_profiler"}, "profiler"); };
  for (const clang::Stmt* Other : mainFileLoops(Context)) {
    const clang::FunctionDecl* Owner = enclosingFunction(*Other, Context);
    if (Other == &Run || !Owner || Owner->getCanonicalDecl() != Function->getCanonicalDecl() ||
        !isTrainingRun(*Other, Context) || !planFor(*Other, Context).StepAfter)
      continue;
    if (Context.getSourceManager().isBeforeInTranslationUnit(Other->getBeginLoc(), Run.getBeginLoc()))
      Taken.insert(FreeName());
  }
  return FreeName();
}

AST_MATCHER(clang::Stmt, isProfileOn) {
  return isPassEnabled("profile");
}

AST_MATCHER(clang::Stmt, isTrainingRunMatcher) {
  return isTrainingRun(Node, Finder->getASTContext());
}

AST_MATCHER_P(clang::Stmt, isProfilable, bool, Supported) {
  return (planFor(Node, Finder->getASTContext()).StepAfter != nullptr) == Supported;
}

StatementMatcher trainingRun(bool Supported) {
  return stmt(isProfileOn(), anyOf(forStmt(), cxxForRangeStmt(), whileStmt(), doStmt()),
              unless(isInMacroExpansion()), isInTrainingFile(), unless(isInDistributedFunction()),
              isTrainingRunMatcher(), isProfilable(Supported))
      .bind(LoopId);
}

Stencil profilerDeclaration() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Loop = Result.Nodes.getNodeAs<clang::Stmt>(LoopId);
    return "auto " + profilerName(*Loop, *Result.Context) + " = accelerator.profile();";
  });
}

Stencil profilerStop() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    return profilerName(*Result.Nodes.getNodeAs<clang::Stmt>(LoopId), *Result.Context) + ".stop();";
  });
}

/// `profiler.step();` after the optimizer step.
EditGenerator profilerStep() {
  return [](const MatchFinder::MatchResult& Result) -> llvm::Expected<llvm::SmallVector<Edit, 1>> {
    const auto* Loop = Result.Nodes.getNodeAs<clang::Stmt>(LoopId);
    return editsInsertingAfter(*planFor(*Loop, *Result.Context).StepAfter,
                               profilerName(*Loop, *Result.Context) + ".step();", *Result.Context);
  };
}

Stencil explainProfile() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Loop = Result.Nodes.getNodeAs<clang::Stmt>(LoopId);
    ProfilePlan Plan = planFor(*Loop, *Result.Context);
    return "the training loop runs under libtorch's profiler (accelerator.profile(), '" +
           profilerName(*Loop, *Result.Context) + "'), stepped " +
           (Plan.AfterOptimizerStep ? std::string("right after each optimizer step")
                                    : std::string("after each training step")) +
           " and stopped after the loop, which writes each process's Chrome trace to "
           "<profile_trace_dir>/profile_<process_index>.json (ACCEL_PROFILE_DIR, default ./profile; the "
           "schedule from ACCEL_PROFILE_SCHEDULE, \"wait,warmup,active,repeat\"; empty: every step recorded)";
  });
}

Stencil whyNotProfiled() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Loop = Result.Nodes.getNodeAs<clang::Stmt>(LoopId);
    return "profiler not added: " + planFor(*Loop, *Result.Context).Reason +
           "; or write it by hand: 'auto profiler = accelerator.profile();' before the loop, "
           "'profiler.step();' after each optimizer step and 'profiler.stop();' after the loop";
  });
}

} // namespace

StatementMatcher profiledTrainingRun() {
  return trainingRun(true);
}

PassRule profilePass() {
  auto Include = edit(addInclude("accelerate/accelerate.h", IncludeFormat::Angled));
  return applyFirst<std::string>({
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource, trainingRun(true)),
               flatten(insertBeforeStatement(LoopId, profilerDeclaration()),
                       insertAfterStatement(LoopId, profilerStop()), profilerStep(), Include),
               explainProfile()),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource, trainingRun(false)), noopEdit(node(LoopId)),
               whyNotProfiled()),
  });
}

/// The pass's row of the table (passes/Passes.def lists it; scripts/passes_table.py reads its texts).
PassInfo profilePassInfo() {
  return {"profile",
          profilePass,
          "with `--profile`: the training loop runs under `accelerator.profile()` (libtorch's profiler), "
          "stepped "
          "after each optimizer step; each process writes a Chrome trace",
          /*OnByDefault=*/false,
          /*WhenNothingFound=*/{},
          /*LeavesAlone=*/"loops written without braces around them or their body (warnings)",
          /*TurnedOnBy=*/"`--profile`, `accelerate_target(... PROFILE)`",
          /*UsesAccelerator=*/profiledTrainingRun,
          /*UsesAcceleratorInMain=*/nullptr,
          /*AcceleratorOptions=*/nullptr,
          /*Setting=*/"--profile"};
}

} // namespace accelerate::passes
