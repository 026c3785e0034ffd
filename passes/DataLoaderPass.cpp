// passes/DataLoaderPass.cpp: the rule that turns training loaders into prepared, distributed loaders.
#include "passes/Pass.h"

#include "passes/Macros.h"
#include "passes/TrainingCode.h"

#include "clang/AST/ASTContext.h"
#include "clang/AST/DeclTemplate.h"
#include "clang/AST/ExprCXX.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "clang/Lex/Lexer.h"
#include "clang/Tooling/Transformer/RangeSelector.h"
#include "clang/Tooling/Transformer/Stencil.h"
#include "llvm/ADT/STLExtras.h"

namespace accelerate::passes {

// ---- The pass ------------------------------------------------------------------------------------------

/// Rewrites the loaders a training loop reads into prepared loaders, which give each process its share of
/// every global batch, already on `accelerator.device()`:
///
///   auto loader = torch::data::make_data_loader(std::move(dataset), 64);
///     →  auto loader = accelerator.prepare_data_loader(std::move(dataset), 64);
///   auto loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(dataset, options);
///     →  auto loader = accelerator.prepare_data_loader(dataset,
///                                                      accelerate::DataLoaderOptions(options).shuffle(false));
///
/// `for (auto& batch : *loader)` keeps working. Loaders that only evaluation loops read are left alone: every
/// process evaluates the whole set, so metrics stay global. Loaders with an explicit sampler object or a
/// stateful dataset, and loaders declared with a type other than `auto`, are reported.
PassRule dataLoaderPass();

namespace {

using namespace clang::ast_matchers;
using namespace clang::transformer;

constexpr const char* StatementId = LoaderStatementId;
constexpr const char* LoaderId = LoaderVariableId;
constexpr const char* CallId = LoaderCallId;
constexpr const char* OptionsId = LoaderOptionsId;

/// The options argument of prepare_data_loader: as written (worker threads included), or for a sequential
/// loader wrapped to keep the order.
Stencil loaderArguments() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Call = Result.Nodes.getNodeAs<clang::CallExpr>(CallId);
    auto Arguments = callArgs(CallId)(Result);
    if (!Arguments)
      return Arguments.takeError();
    const clang::SourceManager& SM = *Result.SourceManager;
    const clang::LangOptions& LangOpts = Result.Context->getLangOpts();
    const auto* Options = Result.Nodes.getNodeAs<clang::Expr>(OptionsId);
    // Worker threads set in the options are kept: the prepared loader reads ahead on as many threads.
    if (samplerOrder(*Call) != SamplerOrder::Sequential)
      return clang::Lexer::getSourceText(*Arguments, SM, LangOpts).str();
    std::string Dataset =
        clang::Lexer::getSourceText(clang::CharSourceRange::getTokenRange(Call->getArg(0)->getSourceRange()),
                                    SM, LangOpts)
            .str();
    std::string Wrapped =
        Options ? clang::Lexer::getSourceText(
                      clang::CharSourceRange::getTokenRange(Options->getSourceRange()), SM, LangOpts)
                      .str()
                : "";
    return Dataset + ", accelerate::DataLoaderOptions(" + Wrapped + ").shuffle(false)";
  });
}

} // namespace

namespace {

/// True when a loop of the main file is seen to read `Loader` (directly or through parameters).
AST_MATCHER(clang::VarDecl, isReadByAVisibleLoop) {
  return isReadByLoop(Node, Finder->getASTContext());
}

/// `auto loader = torch::data::make_data_loader(...)` that no training loop reads: an evaluation loader when
/// a loop of the file reads it, else a loader whose reader this file does not show.
StatementMatcher untrainedLoaderDeclaration(bool Seen) {
  auto MakeDataLoader = callExpr(callee(functionDecl(hasName("::torch::data::make_data_loader"))));
  auto Reader = Seen ? varDecl(isReadByAVisibleLoop()) : varDecl(unless(isReadByAVisibleLoop()));
  return declStmt(
             hasSingleDecl(varDecl(hasInitializer(MakeDataLoader), unless(isTrainingLoaderVariable()), Reader)
                               .bind(LoaderId)),
             unless(isInMacroExpansion()), isInTrainingFile(), unless(isInDistributedFunction()))
      .bind(StatementId);
}

/// A data loader of static storage (namespace scope, a static member) that a training loop iterates
/// (staticTrainingLoader): made before main constructs the Accelerator.
AST_MATCHER(clang::VarDecl, isTrainedOnStatically) {
  return loopTrainingOnStaticLoader(Node, Finder->getASTContext()) != nullptr;
}

DeclarationMatcher staticTrainingLoaderDeclaration() {
  return varDecl(hasGlobalStorage(), unless(isStaticLocal()), isExpansionInRewrittenFile(),
                 isTrainedOnStatically())
      .bind(LoaderId);
}

/// Why a loader of static storage is refused, naming the loop that trains on it.
Stencil staticLoaderRefusal() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Loader = Result.Nodes.getNodeAs<clang::VarDecl>(LoaderId);
    const clang::Stmt* Loop = loopTrainingOnStaticLoader(*Loader, *Result.Context);
    const clang::FunctionDecl* Function = enclosingFunction(*Loop, *Result.Context);
    const std::string Name = Loader->getNameAsString();
    const unsigned Line = Result.SourceManager->getExpansionLineNumber(Loop->getBeginLoc());
    return std::string(RefusalMarker) + "data loader '" + Name +
           "' not prepared: it is a variable of static " +
           "storage, made before main constructs the Accelerator, so prepare_data_loader cannot be called " +
           "where it is declared, and each process would train on the whole dataset (in its own order when " +
           "shuffled) instead of its share in the loop of " +
           (Function ? "'" + Function->getNameAsString() + "' " : std::string()) + "(line " +
           std::to_string(Line) + "); declare it after `accelerate::Accelerator accelerator;` (in main or " +
           "in the function that trains on it), as `auto " + Name +
           " = accelerator.prepare_data_loader(dataset, options);`, and hand it to the loop";
  });
}

} // namespace

PassRule dataLoaderPass() {
  auto Prepared = declStmt(preparedLoaderDeclaration(), hasSingleDecl(varDecl(isDeclaredAuto())));
  auto Replacement = cat("accelerator.prepare_data_loader(", loaderArguments(), ")");
  return applyFirst<std::string>({
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource, staticTrainingLoaderDeclaration()),
               noopEdit(name(LoaderId)), staticLoaderRefusal()),
      makeRule(
          traverse(clang::TK_IgnoreUnlessSpelledInSource, Prepared), changeTo(node(CallId), Replacement),
          cat("accelerator.prepare_data_loader() gives each process its share of every global batch (the "
              "batch size is per process), on accelerator.device(), in an order drawn from the seed and "
              "the epoch that every process shares; `*",
              name(LoaderId),
              "` iterates as before (worker threads set in its options read batches ahead, in the same "
              "order)")),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource, preparedLoaderDeclaration()),
               noopEdit(node(StatementId)),
               cat("data loader '", name(LoaderId),
                   "' not rewritten: its declared type is not `auto`, and prepare_data_loader returns "
                   "another type; declare it `auto`")),
      makeRule(
          traverse(clang::TK_IgnoreUnlessSpelledInSource, untrainedLoaderDeclaration(/*Seen=*/true)),
          noopEdit(node(StatementId)),
          cat(std::string(NoteMarker), "data loader '", name(LoaderId),
              "' left as it is: no training loop reads it, so every process evaluates the whole set and the "
              "metrics computed from it are global without a reduction")),
      makeRule(
          traverse(clang::TK_IgnoreUnlessSpelledInSource, untrainedLoaderDeclaration(/*Seen=*/false)),
          noopEdit(node(StatementId)),
          cat("data loader '", name(LoaderId),
              "' not rewritten: no loop of this file is seen to read it (it goes to code this file does "
              "not show, or through a call the rewriter cannot follow); if that code trains on it, every "
              "process reads the whole dataset. Prepare it here by hand: "
              "`auto loader = accelerator.prepare_data_loader(dataset, options);`, and make what reads "
              "it take the prepared loader's type (a template or `auto&`)")),
      makeRule(
          traverse(clang::TK_IgnoreUnlessSpelledInSource, trainingLoaderDeclaration(hasUnmovableBatch())),
          noopEdit(node(StatementId)),
          cat("data loader '", name(LoaderId), "' not rewritten: ",
              run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
                const auto* Call = Result.Nodes.getNodeAs<clang::CallExpr>(CallId);
                clang::QualType Batch = batchTypeOf(*Call, *Result.Context);
                std::string Type;
                movableBatch(Batch, *Result.Context, Type);
                return "its batches are `" + spelledType(Batch, *Result.Context) +
                       "`, and the runtime does not know how to "
                       "move `" +
                       Type +
                       "` to a device; every process reads the whole dataset. Write the one "
                       "function it needs, `template <> struct accelerate::ToDevice<" +
                       Type + "> { static " + Type + " apply(" + Type +
                       " value, const torch::Device& device); };` (see "
                       "<accelerate/data.h>), then prepare the loader with "
                       "accelerator.prepare_data_loader(...)";
              }))),
      makeRule(
          traverse(clang::TK_IgnoreUnlessSpelledInSource, trainingLoaderDeclaration(callExpr())),
          noopEdit(node(StatementId)),
          cat("data loader '", name(LoaderId),
              "' not rewritten: prepare_data_loader takes a map-style dataset and options, with a random "
              "or sequential order; this one has its own sampler or a stateful dataset (wrap its loader "
              "with accelerate::prepare_iterable by hand); every process reads the whole dataset")),
  });
}

/// The pass's row of the table (passes/Passes.def lists it; scripts/passes_table.py reads its texts).
PassInfo dataLoaderPassInfo() {
  return {"data-loader", dataLoaderPass,
          "`torch::data::make_data_loader(...)` read by a training loop becomes "
          "`accelerator.prepare_data_loader(...)`",
          /*OnByDefault=*/true, /*WhenNothingFound=*/{},
          /*LeavesAlone=*/
          "evaluation loaders (note); own samplers, stateful datasets, non-`auto` declarations "
          "(warning); loaders of static storage (refusal: the file is left as it is)",
          /*TurnedOnBy=*/{}, /*UsesAccelerator=*/preparedLoaderDeclaration};
}

} // namespace accelerate::passes
