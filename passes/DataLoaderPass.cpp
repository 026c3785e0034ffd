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
#include "llvm/ADT/STLExtras.h"

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

/// The type a class (or one of its bases) names `Name` (`BatchType`), when it is a type alias.
clang::QualType memberTypeAlias(const clang::CXXRecordDecl* Record, llvm::StringRef Name,
                                clang::ASTContext& Context, int Depth = 0) {
  if (!Record || Depth > 8)
    return {};
  Record = Record->getDefinition();
  if (!Record)
    return {};
  for (const clang::NamedDecl* Found : Record->lookup(&Context.Idents.get(Name)))
    if (const auto* Alias = llvm::dyn_cast<clang::TypedefNameDecl>(Found))
      return Alias->getUnderlyingType();
  for (const clang::CXXBaseSpecifier& Base : Record->bases()) {
    clang::QualType Type = memberTypeAlias(Base.getType()->getAsCXXRecordDecl(), Name, Context, Depth + 1);
    if (!Type.isNull())
      return Type;
  }
  return {};
}

/// `Type` as a user writes it: `std::vector<torch::data::Example<at::Tensor, Labels>>`, without `class`, or
/// an anonymous namespace.
std::string spelled(clang::QualType Type, const clang::ASTContext& Context) {
  clang::PrintingPolicy Policy(Context.getLangOpts());
  Policy.SuppressTagKeyword = true;
  Policy.SuppressUnwrittenScope = true;
  return Type.getAsString(Policy);
}

/// True when the runtime's `accelerate::ToDevice` moves `Type` (see <accelerate/data.h>): tensors,
/// `torch::data::Example`, standard containers of such values, numbers, strings. Otherwise `Unsupported` is
/// the first type in it that no rule moves.
bool movableBatch(clang::QualType Type, const clang::ASTContext& Context, std::string& Unsupported,
                  int Depth = 0) {
  Type = Type.getNonReferenceType().getCanonicalType().getUnqualifiedType();
  if (Type->isArithmeticType() || Type->isEnumeralType() || Depth > 8)
    return true;
  const auto* Record = Type->getAsCXXRecordDecl();
  std::string Name = Record ? Record->getQualifiedNameAsString() : "";
  if (Name == "at::Tensor" || Name == "torch::data::example::NoTarget" ||
      (Record && Record->isInStdNamespace() && Record->getName() == "basic_string"))
    return true;
  const auto* Specialization = llvm::dyn_cast_or_null<clang::ClassTemplateSpecializationDecl>(Record);
  bool Container = Name == "torch::data::Example" ||
                   (Record && Record->isInStdNamespace() &&
                    llvm::is_contained(llvm::ArrayRef<llvm::StringRef>{"vector", "array", "tuple", "pair",
                                                                       "optional", "map", "unordered_map"},
                                       Record->getName()));
  if (!Specialization || !Container) {
    Unsupported = spelled(Type, Context);
    return false;
  }
  const clang::TemplateArgumentList& Arguments = Specialization->getTemplateArgs();
  bool Map = Record->getName() == "map" || Record->getName() == "unordered_map";
  for (unsigned I = 0; I < Arguments.size(); ++I) {
    const clang::TemplateArgument& Argument = Arguments[I];
    if (Map && I != 1)
      continue; // keys stay; comparators, hashes and allocators are not moved
    if (Record->getName() == "vector" && I > 0)
      continue;
    if (Argument.getKind() == clang::TemplateArgument::Type &&
        !movableBatch(Argument.getAsType(), Context, Unsupported, Depth + 1))
      return false;
    if (Argument.getKind() == clang::TemplateArgument::Pack)
      for (const clang::TemplateArgument& Element : Argument.pack_elements())
        if (Element.getKind() == clang::TemplateArgument::Type &&
            !movableBatch(Element.getAsType(), Context, Unsupported, Depth + 1))
          return false;
  }
  return true;
}

/// The batch type a `make_data_loader(dataset, ...)` call's dataset makes, when it can be told.
clang::QualType batchTypeOf(const clang::CallExpr& Call, clang::ASTContext& Context) {
  if (Call.getNumArgs() == 0)
    return {};
  return memberTypeAlias(Call.getArg(0)->getType().getNonReferenceType()->getAsCXXRecordDecl(), "BatchType",
                         Context);
}

/// The loader's batches are of a type the runtime cannot move to a device.
AST_MATCHER(clang::CallExpr, hasUnmovableBatch) {
  clang::ASTContext& Context = Finder->getASTContext();
  clang::QualType Batch = batchTypeOf(Node, Context);
  std::string Unsupported;
  return !Batch.isNull() && !movableBatch(Batch, Context, Unsupported);
}

/// The two-argument form (dataset, options) with the default or a standard sampler, over a dataset that is
/// not stateful: what prepare_data_loader can take.
AST_MATCHER(clang::CallExpr, isPreparableLoaderCall) {
  const clang::FunctionDecl* Callee = Node.getDirectCallee();
  if (!Callee || Callee->getNumParams() != 2)
    return false;
  Order Sampling = samplerOrder(Node);
  if (Sampling != Order::Shuffled && Sampling != Order::Sequential)
    return false;
  clang::ASTContext& Context = Finder->getASTContext();
  clang::QualType Batch = batchTypeOf(Node, Context);
  std::string Unsupported;
  return Batch.isNull() || movableBatch(Batch, Context, Unsupported);
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
    if (samplerOrder(*Call) != Order::Sequential)
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
                return "its batches are `" + spelled(Batch, *Result.Context) +
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

} // namespace accelerate::passes
