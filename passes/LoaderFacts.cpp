// passes/LoaderFacts.cpp: the facts module's data loaders (TrainingCode.h): the loader a loop reads, through
// parameters, training loaders, and the loaders the data-loader pass prepares.
#include "passes/FactsSupport.h"
#include "passes/Macros.h"
#include "passes/Pass.h"
#include "passes/Templates.h"
#include "passes/TrainingCode.h"

#include "clang/AST/ASTContext.h"
#include "clang/AST/DeclCXX.h"
#include "clang/AST/DeclTemplate.h"
#include "clang/AST/ExprCXX.h"
#include "clang/AST/StmtCXX.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "clang/Basic/SourceManager.h"
#include "clang/Lex/Lexer.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringSet.h"

#include <map>
#include <optional>

namespace accelerate::passes {
namespace {

using namespace clang::ast_matchers;
using namespace facts;

/// The loader variable an expression names (`*loader`, `loader`), when `make_data_loader` made it; through
/// local references to it (`auto& reader = *loader;`).
const clang::VarDecl* loaderVariable(const clang::Expr* Range, int Depth = 0) {
  const auto* Variable = llvm::dyn_cast_or_null<clang::VarDecl>(namedDeclaration(Range));
  if (!Variable || !Variable->getInit())
    return nullptr;
  const auto* Call = llvm::dyn_cast<clang::CallExpr>(Variable->getInit()->IgnoreUnlessSpelledInSource());
  const clang::FunctionDecl* Callee = Call ? Call->getDirectCallee() : nullptr;
  if (Callee && Callee->getQualifiedNameAsString() == "torch::data::make_data_loader")
    return Variable;
  if (Depth < 2 && Variable->hasLocalStorage() && Variable->getType()->isReferenceType())
    return loaderVariable(Variable->getInit(), Depth + 1);
  return nullptr;
}

/// How a `make_data_loader` call orders its samples, from its sampler template argument.

SamplerOrder samplerOrderOf(const clang::CallExpr& Call) {
  const clang::FunctionDecl* Callee = Call.getDirectCallee();
  const clang::TemplateArgumentList* Arguments = Callee ? Callee->getTemplateSpecializationArgs() : nullptr;
  if (!Arguments || Arguments->size() == 0 || Arguments->get(0).getKind() != clang::TemplateArgument::Type)
    return SamplerOrder::Other;
  const auto* Sampler = Arguments->get(0).getAsType()->getAsCXXRecordDecl();
  std::string Name = Sampler ? Sampler->getQualifiedNameAsString() : "";
  if (Name == "torch::data::samplers::RandomSampler")
    return SamplerOrder::Shuffled;
  if (Name == "torch::data::samplers::SequentialSampler")
    return SamplerOrder::Sequential;
  return SamplerOrder::Other;
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
std::string spelledTypeOf(clang::QualType Type, const clang::ASTContext& Context) {
  clang::PrintingPolicy Policy(Context.getLangOpts());
  Policy.SuppressTagKeyword = true;
  Policy.SuppressUnwrittenScope = true;
  return Type.getAsString(Policy);
}

/// True when the runtime's `accelerate::ToDevice` moves `Type` (see <accelerate/data.h>): tensors,
/// `torch::data::Example`, standard containers of such values, numbers, strings. Otherwise `Unsupported` is
/// the first type in it that no rule moves.
bool movableBatchOf(clang::QualType Type, const clang::ASTContext& Context, std::string& Unsupported,
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
    Unsupported = spelledTypeOf(Type, Context);
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
        !movableBatchOf(Argument.getAsType(), Context, Unsupported, Depth + 1))
      return false;
    if (Argument.getKind() == clang::TemplateArgument::Pack)
      for (const clang::TemplateArgument& Element : Argument.pack_elements())
        if (Element.getKind() == clang::TemplateArgument::Type &&
            !movableBatchOf(Element.getAsType(), Context, Unsupported, Depth + 1))
          return false;
  }
  return true;
}

/// The batch type a `make_data_loader(dataset, ...)` call's dataset makes, when it can be told.
clang::QualType batchTypeOfCall(const clang::CallExpr& Call, clang::ASTContext& Context) {
  if (Call.getNumArgs() == 0)
    return {};
  return memberTypeAlias(Call.getArg(0)->getType().getNonReferenceType()->getAsCXXRecordDecl(), "BatchType",
                         Context);
}

/// The loader's batches are of a type the runtime cannot move to a device.
AST_MATCHER(clang::CallExpr, hasUnmovableBatchImpl) {
  clang::ASTContext& Context = Finder->getASTContext();
  clang::QualType Batch = batchTypeOfCall(Node, Context);
  std::string Unsupported;
  return !Batch.isNull() && !movableBatchOf(Batch, Context, Unsupported);
}

/// The two-argument form (dataset, options) with the default or a standard sampler, over a dataset that is
/// not stateful: what prepare_data_loader can take.
AST_MATCHER(clang::CallExpr, isPreparableLoaderCallImpl) {
  const clang::FunctionDecl* Callee = Node.getDirectCallee();
  if (!Callee || Callee->getNumParams() != 2)
    return false;
  SamplerOrder Sampling = samplerOrderOf(Node);
  if (Sampling != SamplerOrder::Shuffled && Sampling != SamplerOrder::Sequential)
    return false;
  clang::ASTContext& Context = Finder->getASTContext();
  clang::QualType Batch = batchTypeOfCall(Node, Context);
  std::string Unsupported;
  return Batch.isNull() || movableBatchOf(Batch, Context, Unsupported);
}

AST_MATCHER(clang::VarDecl, isTrainingLoaderVariableImpl) {
  return isTrainingLoader(Node, Finder->getASTContext());
}

AST_MATCHER(clang::VarDecl, isDeclaredAutoImpl) {
  return Node.getType()->getContainedAutoType() != nullptr;
}

} // namespace

SamplerOrder samplerOrder(const clang::CallExpr& Call) {
  return samplerOrderOf(Call);
}
clang::QualType batchTypeOf(const clang::CallExpr& Call, clang::ASTContext& Context) {
  return batchTypeOfCall(Call, Context);
}
bool movableBatch(clang::QualType Type, const clang::ASTContext& Context, std::string& Unsupported) {
  return movableBatchOf(Type, Context, Unsupported, 0);
}
std::string spelledType(clang::QualType Type, const clang::ASTContext& Context) {
  return spelledTypeOf(Type, Context);
}
clang::ast_matchers::internal::Matcher<clang::CallExpr> hasUnmovableBatch() {
  return hasUnmovableBatchImpl();
}
clang::ast_matchers::internal::Matcher<clang::VarDecl> isTrainingLoaderVariable() {
  return isTrainingLoaderVariableImpl();
}
clang::ast_matchers::internal::Matcher<clang::VarDecl> isDeclaredAuto() {
  return isDeclaredAutoImpl();
}

/// `auto loader = torch::data::make_data_loader...(...)`, alone in its declaration, read by a training loop.
StatementMatcher trainingLoaderDeclaration(clang::ast_matchers::internal::Matcher<clang::CallExpr> Call) {
  auto MakeDataLoader =
      callExpr(callee(functionDecl(hasName("::torch::data::make_data_loader"))),
               optionally(hasArgument(1, expr(unless(cxxDefaultArgExpr())).bind(LoaderOptionsId))), Call)
          .bind(LoaderCallId);
  return declStmt(hasSingleDecl(varDecl(hasInitializer(MakeDataLoader), isTrainingLoaderVariableImpl())
                                    .bind(LoaderVariableId)),
                  unless(isInMacroExpansion()), isInTrainingFile(), unless(isInDistributedFunction()))
      .bind(LoaderStatementId);
}

StatementMatcher preparedLoaderDeclaration() {
  return trainingLoaderDeclaration(isPreparableLoaderCallImpl());
}

bool isPreparedLoader(const clang::VarDecl& Loader, clang::ASTContext& Context) {
  if (!isPassEnabled("data-loader"))
    return false;
  const clang::Stmt* Declaration = nullptr;
  for (const clang::DynTypedNode& Parent : Context.getParents(Loader))
    Declaration = Parent.get<clang::DeclStmt>();
  return Declaration &&
         !match(traverse(clang::TK_IgnoreUnlessSpelledInSource,
                         declStmt(preparedLoaderDeclaration(), hasSingleDecl(varDecl(isDeclaredAutoImpl())))),
                *Declaration, Context)
              .empty();
}

namespace {

/// The loader every call of `Parameter`'s function passes for it: a loader variable, or a parameter of the
/// calling function that is itself such a loader (`fit(model, *loader)` → `run_epoch(model, loader)`), up to
/// `Depth` calls up. Calls made in template instantiations count for the template. Null when a call passes
/// anything else, or nothing calls the function.
const clang::VarDecl* loaderPassedFor(const clang::ParmVarDecl& Parameter, clang::ASTContext& Context,
                                      int Depth = 0) {
  const auto* Function = llvm::dyn_cast<clang::FunctionDecl>(Parameter.getDeclContext());
  if (!Function || Depth < 0)
    return nullptr;
  unsigned Index = Parameter.getFunctionScopeIndex();
  const clang::VarDecl* Loader = nullptr;
  bool AllCallsPassLoaders = true, AnyCall = false;
  for (const clang::CallExpr* Call :
       allInMainFile<clang::CallExpr>(callExpr().bind("call"), "call", Context)) {
    const clang::FunctionDecl* Callee = Call->getDirectCallee();
    if (!Callee)
      continue;
    const clang::FunctionDecl* Pattern = Callee->getTemplateInstantiationPattern();
    if (Callee->getCanonicalDecl() != Function->getCanonicalDecl() &&
        (!Pattern || Pattern->getCanonicalDecl() != Function->getCanonicalDecl()))
      continue;
    if (Index >= Call->getNumArgs())
      continue;
    AnyCall = true;
    const clang::VarDecl* Passed = loaderVariable(Call->getArg(Index));
    if (!Passed)
      if (const auto* Forwarded =
              llvm::dyn_cast_or_null<clang::ParmVarDecl>(namedDeclaration(Call->getArg(Index))))
        if (Forwarded != &Parameter)
          Passed = loaderPassedFor(*Forwarded, Context, Depth - 1);
    AllCallsPassLoaders = AllCallsPassLoaders && Passed;
    if (!Loader)
      Loader = Passed;
  }
  return AnyCall && AllCallsPassLoaders ? Loader : nullptr;
}

} // namespace

const clang::VarDecl* iteratedLoader(const clang::Stmt& RangeFor, clang::ASTContext& Context) {
  const auto* Loop = llvm::dyn_cast<clang::CXXForRangeStmt>(&RangeFor);
  if (!Loop || !Loop->getRangeInit())
    return nullptr;
  if (const clang::VarDecl* Loader = loaderVariable(Loop->getRangeInit()))
    return Loader;
  // `for (auto& batch : data_loader)` in `train(..., DataLoader& data_loader, ...)`: the loader every call of
  // the function passes, directly or through the parameters of up to three callers.
  const auto* Parameter = llvm::dyn_cast_or_null<clang::ParmVarDecl>(namedDeclaration(Loop->getRangeInit()));
  return Parameter ? loaderPassedFor(*Parameter, Context, 3) : nullptr;
}

bool isReadByLoop(const clang::VarDecl& Loader, clang::ASTContext& Context) {
  for (const clang::Stmt* Loop : allInMainFile<clang::Stmt>(cxxForRangeStmt().bind("loop"), "loop", Context))
    if (iteratedLoader(*Loop, Context) == &Loader)
      return true;
  return false;
}

bool isTrainingLoader(const clang::VarDecl& Loader, clang::ASTContext& Context) {
  for (const clang::Stmt* Loop : allInMainFile<clang::Stmt>(cxxForRangeStmt().bind("loop"), "loop", Context))
    if (iteratedLoader(*Loop, Context) == &Loader && loopTrains(*Loop, Context))
      return true;
  return false;
}

const clang::VarDecl* staticTrainingLoader(const clang::Stmt& Loop, clang::ASTContext& Context) {
  const clang::VarDecl* Loader = iteratedLoader(Loop, Context);
  if (!Loader || !Loader->hasGlobalStorage() || Loader->isStaticLocal() || !loopTrains(Loop, Context))
    return nullptr;
  return Loader;
}

const clang::Stmt* loopTrainingOnStaticLoader(const clang::VarDecl& Loader, clang::ASTContext& Context) {
  for (const clang::Stmt* Loop : allInMainFile<clang::Stmt>(cxxForRangeStmt().bind("loop"), "loop", Context))
    if (staticTrainingLoader(*Loop, Context) == &Loader)
      return Loop;
  return nullptr;
}

} // namespace accelerate::passes
