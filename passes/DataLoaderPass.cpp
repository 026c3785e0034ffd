// passes/DataLoaderPass.cpp: the rule that turns training loaders into prepared, distributed loaders.
#include "passes/DataLoaderPass.h"

#include "passes/Macros.h"
#include "passes/TrainingCode.h"

#include "clang/AST/ASTContext.h"
#include "clang/AST/DeclTemplate.h"
#include "clang/AST/ExprCXX.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "clang/Lex/Lexer.h"
#include "clang/Tooling/Transformer/RangeSelector.h"
#include "clang/Tooling/Transformer/Stencil.h"

namespace accelerate::passes {
namespace {

using namespace clang::ast_matchers;
using namespace clang::transformer;

constexpr char StatementId[] = "statement";
constexpr char LoaderId[] = "loader";
constexpr char CallId[] = "call";
constexpr char OptionsId[] = "options";

/// How a `make_data_loader` call orders its samples, from its sampler template argument.
enum class Order { Shuffled, Sequential, Other };

Order samplerOrder(const clang::CallExpr& Call) {
  const clang::FunctionDecl* Callee = Call.getDirectCallee();
  const clang::TemplateArgumentList* Arguments = Callee ? Callee->getTemplateSpecializationArgs() : nullptr;
  if (!Arguments || Arguments->size() == 0 || Arguments->get(0).getKind() != clang::TemplateArgument::Type)
    return Order::Other;
  const auto* Sampler = Arguments->get(0).getAsType()->getAsCXXRecordDecl();
  std::string Name = Sampler ? Sampler->getQualifiedNameAsString() : "";
  if (Name == "torch::data::samplers::RandomSampler")
    return Order::Shuffled;
  if (Name == "torch::data::samplers::SequentialSampler")
    return Order::Sequential;
  return Order::Other;
}

/// The two-argument form (dataset, options) with the default or a standard sampler, over a dataset that is
/// not stateful: what prepare_data_loader can take.
AST_MATCHER(clang::CallExpr, isPreparableLoaderCall) {
  const clang::FunctionDecl* Callee = Node.getDirectCallee();
  if (!Callee || Callee->getNumParams() != 2)
    return false;
  Order Sampling = samplerOrder(Node);
  return Sampling == Order::Shuffled || Sampling == Order::Sequential;
}

AST_MATCHER(clang::VarDecl, isTrainingLoaderVariable) {
  return isTrainingLoader(Node, Finder->getASTContext());
}

AST_MATCHER(clang::VarDecl, isDeclaredAuto) {
  return Node.getType()->getContainedAutoType() != nullptr;
}

/// `auto loader = torch::data::make_data_loader...(...)`, alone in its declaration, read by a training loop.
StatementMatcher trainingLoaderDeclaration(clang::ast_matchers::internal::Matcher<clang::CallExpr> Call) {
  auto MakeDataLoader =
      callExpr(callee(functionDecl(hasName("::torch::data::make_data_loader"))),
               optionally(hasArgument(1, expr(unless(cxxDefaultArgExpr())).bind(OptionsId))), Call)
          .bind(CallId);
  return declStmt(hasSingleDecl(
                      varDecl(hasInitializer(MakeDataLoader), isTrainingLoaderVariable()).bind(LoaderId)),
                  unless(isInMacroExpansion()), isInTrainingFile(), unless(isInDistributedFunction()))
      .bind(StatementId);
}

/// The options argument of prepare_data_loader: as written, or for a sequential loader wrapped to keep the
/// order.
Stencil loaderArguments() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Call = Result.Nodes.getNodeAs<clang::CallExpr>(CallId);
    auto Arguments = callArgs(CallId)(Result);
    if (!Arguments)
      return Arguments.takeError();
    const clang::SourceManager& SM = *Result.SourceManager;
    const clang::LangOptions& LangOpts = Result.Context->getLangOpts();
    if (samplerOrder(*Call) != Order::Sequential)
      return clang::Lexer::getSourceText(*Arguments, SM, LangOpts).str();
    std::string Dataset =
        clang::Lexer::getSourceText(clang::CharSourceRange::getTokenRange(Call->getArg(0)->getSourceRange()),
                                    SM, LangOpts)
            .str();
    const auto* Options = Result.Nodes.getNodeAs<clang::Expr>(OptionsId);
    std::string Wrapped =
        Options ? clang::Lexer::getSourceText(
                      clang::CharSourceRange::getTokenRange(Options->getSourceRange()), SM, LangOpts)
                      .str()
                : "";
    return Dataset + ", accelerate::DataLoaderOptions(" + Wrapped + ").shuffle(false)";
  });
}

} // namespace

StatementMatcher preparedLoaderDeclaration() {
  return trainingLoaderDeclaration(isPreparableLoaderCall());
}

bool isPreparedLoader(const clang::VarDecl& Loader, clang::ASTContext& Context) {
  if (!isPassEnabled("data-loader"))
    return false;
  const clang::Stmt* Declaration = nullptr;
  for (const clang::DynTypedNode& Parent : Context.getParents(Loader))
    Declaration = Parent.get<clang::DeclStmt>();
  return Declaration &&
         !match(traverse(clang::TK_IgnoreUnlessSpelledInSource,
                         declStmt(preparedLoaderDeclaration(), hasSingleDecl(varDecl(isDeclaredAuto())))),
                *Declaration, Context)
              .empty();
}

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

} // namespace

PassRule dataLoaderPass() {
  auto Prepared = declStmt(preparedLoaderDeclaration(), hasSingleDecl(varDecl(isDeclaredAuto())));
  auto Replacement = cat("accelerator.prepare_data_loader(", loaderArguments(), ")");
  return applyFirst<std::string>({
      makeRule(
          traverse(clang::TK_IgnoreUnlessSpelledInSource, Prepared), changeTo(node(CallId), Replacement),
          cat("accelerator.prepare_data_loader() gives each process its share of every global batch (the "
              "batch size is per process), on accelerator.device(), in an order drawn from the seed and "
              "the epoch that every process shares; `*",
              name(LoaderId), "` iterates as before")),
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
          traverse(clang::TK_IgnoreUnlessSpelledInSource, trainingLoaderDeclaration(callExpr())),
          noopEdit(node(StatementId)),
          cat("data loader '", name(LoaderId),
              "' not rewritten: prepare_data_loader takes a map-style dataset and options, with a random "
              "or sequential order; this one has its own sampler or a stateful dataset (wrap its loader "
              "with accelerate::prepare_iterable by hand); every process reads the whole dataset")),
  });
}

} // namespace accelerate::passes
