// passes/TrainingCode.cpp: the facts about the user's code that several passes share.
#include "passes/TrainingCode.h"

#include "passes/DataLoaderPass.h"
#include "passes/Macros.h"
#include "passes/Registry.h"
#include "passes/Templates.h"

#include "clang/AST/ASTContext.h"
#include "clang/AST/DeclCXX.h"
#include "clang/AST/DeclTemplate.h"
#include "clang/AST/ExprCXX.h"
#include "clang/AST/StmtCXX.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "clang/Basic/SourceManager.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringSet.h"

#include <map>
#include <optional>

namespace accelerate::passes {
namespace {

using namespace clang::ast_matchers;

/// The class a type names, through references, pointers, `std::shared_ptr<T>` and `std::unique_ptr<T>`.
const clang::CXXRecordDecl* underlyingRecord(clang::QualType Type) {
  if (Type.isNull())
    return nullptr;
  Type = Type.getNonReferenceType();
  if (Type->isPointerType())
    Type = Type->getPointeeType();
  const auto* Record = Type->getAsCXXRecordDecl();
  if (const auto* Specialization = llvm::dyn_cast_or_null<clang::ClassTemplateSpecializationDecl>(Record)) {
    std::string Name = Specialization->getQualifiedNameAsString();
    if ((Name == "std::shared_ptr" || Name == "std::unique_ptr") &&
        Specialization->getTemplateArgs().size() > 0 &&
        Specialization->getTemplateArgs()[0].getKind() == clang::TemplateArgument::Type)
      return Specialization->getTemplateArgs()[0].getAsType()->getAsCXXRecordDecl();
  }
  return Record;
}

/// True when `Record` is, or derives from, the class `QualifiedName` (or a specialization of the class
/// template of that name).
bool isOrDerivesFrom(const clang::CXXRecordDecl* Record, llvm::StringRef QualifiedName) {
  if (!Record)
    return false;
  Record = Record->getDefinition() ? Record->getDefinition() : Record;
  if (Record->getQualifiedNameAsString() == QualifiedName)
    return true;
  if (!Record->hasDefinition())
    return false;
  for (const clang::CXXBaseSpecifier& Base : Record->bases())
    if (isOrDerivesFrom(Base.getType()->getAsCXXRecordDecl(), QualifiedName))
      return true;
  return false;
}

AST_MATCHER(clang::QualType, isModuleTypeImpl) {
  const clang::CXXRecordDecl* Record = underlyingRecord(Node);
  return isOrDerivesFrom(Record, "torch::nn::Module") || isOrDerivesFrom(Record, "torch::nn::ModuleHolder");
}

AST_MATCHER(clang::QualType, isOptimizerTypeImpl) {
  return isOrDerivesFrom(underlyingRecord(Node), "torch::optim::Optimizer");
}

AST_MATCHER(clang::QualType, isSchedulerTypeImpl) {
  return isOrDerivesFrom(underlyingRecord(Node), "torch::optim::LRScheduler");
}

AST_MATCHER(clang::QualType, isDeviceTypeImpl) {
  clang::QualType Type = Node.getNonReferenceType().getUnqualifiedType().getCanonicalType();
  if (const auto* Enum = Type->getAs<clang::EnumType>())
    return Enum->getDecl()->getQualifiedNameAsString() == "c10::DeviceType";
  const auto* Record = Type->getAsCXXRecordDecl();
  return Record && Record->getQualifiedNameAsString() == "c10::Device";
}

/// Which files of the current parse the rewrite changes (isInRewrittenFile), by file.
struct RewrittenFiles {
  const clang::SourceManager* SM = nullptr;
  llvm::DenseMap<clang::FileID, bool> IsRewritten;
};
RewrittenFiles TheRewrittenFiles;

AST_MATCHER(clang::Decl, isExpansionInRewrittenFileImpl) {
  return isInRewrittenFile(Finder->getASTContext().getSourceManager(), Node.getLocation());
}

/// Calls `Visit` with each top-level declaration written in a file the rewrite changes: the main file and
/// the project headers it may change.
template <typename Callback> void forEachMainFileDecl(clang::ASTContext& Context, Callback Visit) {
  const clang::SourceManager& SM = Context.getSourceManager();
  for (clang::Decl* TopLevel : Context.getTranslationUnitDecl()->decls())
    if (isInRewrittenFile(SM, TopLevel->getLocation()))
      Visit(*TopLevel);
}

/// True when `Matcher` (a Decl or Stmt matcher) matches in the main file, top-level declarations included.
template <typename MatcherType> bool mainFileHas(const MatcherType& Matcher, clang::ASTContext& Context) {
  bool Found = false;
  forEachMainFileDecl(Context, [&](clang::Decl& TopLevel) {
    Found = Found ||
            !match(traverse(clang::TK_AsIs, decl(hasDescendant(Matcher))), TopLevel, Context).empty() ||
            !match(traverse(clang::TK_AsIs, Matcher), TopLevel, Context).empty();
  });
  return Found;
}

/// Every node `Matcher` matches in the main file, bound to `Id`.
template <typename NodeType, typename MatcherType>
std::vector<const NodeType*> allInMainFile(const MatcherType& Matcher, llvm::StringRef Id,
                                           clang::ASTContext& Context) {
  std::vector<const NodeType*> Result;
  forEachMainFileDecl(Context, [&](clang::Decl& TopLevel) {
    for (const BoundNodes& Found :
         match(traverse(clang::TK_AsIs, decl(forEachDescendant(Matcher))), TopLevel, Context))
      Result.push_back(Found.getNodeAs<NodeType>(Id));
  });
  return Result;
}

AST_MATCHER(clang::Decl, inFileWithMainImpl) {
  return mainFunctionOfMainFile(Finder->getASTContext()) != nullptr;
}

AST_MATCHER(clang::CallExpr, tensorBackwardInEveryInstantiationImpl) {
  clang::ASTContext& Context = Finder->getASTContext();
  return holdsInEveryInstantiation(Node, Context, [&](const clang::Stmt& Instantiated) {
    return !match(traverse(clang::TK_AsIs, tensorBackwardCall()), Instantiated, Context).empty();
  });
}

AST_MATCHER(clang::Stmt, inTrainingFileImpl) {
  return mainFileTrains(Finder->getASTContext());
}

AST_MATCHER(clang::Stmt, inTrainingOrEvaluationCodeImpl) {
  clang::ASTContext& Context = Finder->getASTContext();
  const clang::FunctionDecl* Function = enclosingFunction(Node, Context);
  return Function && mainFileTrains(Context) && isTrainingOrEvaluationFunction(*Function, Context);
}

AST_MATCHER(clang::Stmt, inDistributedFunctionImpl) {
  clang::ASTContext& Context = Finder->getASTContext();
  const clang::FunctionDecl* Function = enclosingFunction(Node, Context);
  return Function && isDistributedFunction(*Function, Context);
}

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

} // namespace

clang::ast_matchers::internal::Matcher<clang::QualType> isModuleType() {
  return isModuleTypeImpl();
}
clang::ast_matchers::internal::Matcher<clang::Decl> isModuleClass() {
  return cxxRecordDecl(isSameOrDerivedFrom("::torch::nn::Module"), unless(hasName("::torch::nn::Module")));
}
clang::ast_matchers::internal::Matcher<clang::QualType> isOptimizerType() {
  return isOptimizerTypeImpl();
}
std::string realPathOf(clang::FileEntryRef File) {
  llvm::StringRef Real = File.getFileEntry().tryGetRealPathName();
  return (Real.empty() ? File.getName() : Real).str();
}

std::optional<llvm::StringRef> pathBelow(llvm::StringRef Path, llvm::StringRef Directory) {
  if (!Path.consume_front(Directory) || (!Directory.ends_with("/") && !Path.consume_front("/")) ||
      Path.empty())
    return std::nullopt;
  return Path;
}

bool isInRewrittenFile(const clang::SourceManager& SM, clang::SourceLocation Loc) {
  Loc = SM.getExpansionLoc(Loc);
  if (Loc.isInvalid())
    return false;
  clang::FileID File = SM.getFileID(Loc);
  if (File == SM.getMainFileID())
    return true;
  if (passSettings().Headers.empty())
    return false;
  if (TheRewrittenFiles.SM != &SM) {
    TheRewrittenFiles = RewrittenFiles();
    TheRewrittenFiles.SM = &SM;
  }
  auto [Entry, Inserted] = TheRewrittenFiles.IsRewritten.try_emplace(File, false);
  if (Inserted) {
    auto Ref = SM.getFileEntryRefForID(File);
    std::string Path = Ref ? realPathOf(*Ref) : std::string();
    Entry->second = Ref && !SM.isInSystemHeader(Loc) &&
                    llvm::any_of(passSettings().Headers, [&](const std::string& Header) {
                      return Path == Header || pathBelow(Path, Header);
                    });
  }
  return Entry->second;
}

clang::ast_matchers::internal::Matcher<clang::Decl> isExpansionInRewrittenFile() {
  return isExpansionInRewrittenFileImpl();
}

clang::ast_matchers::internal::Matcher<clang::QualType> isSchedulerType() {
  return isSchedulerTypeImpl();
}
clang::ast_matchers::internal::Matcher<clang::QualType> isDeviceType() {
  return isDeviceTypeImpl();
}

const clang::FunctionDecl* enclosingFunction(const clang::Stmt& S, clang::ASTContext& Context) {
  clang::DynTypedNodeList Parents = Context.getParents(S);
  while (!Parents.empty()) {
    if (const auto* Function = Parents[0].get<clang::FunctionDecl>()) {
      const auto* Method = llvm::dyn_cast<clang::CXXMethodDecl>(Function);
      if (!Method || !Method->getParent()->isLambda())
        return Function;
    }
    Parents = Context.getParents(Parents[0]);
  }
  return nullptr;
}

bool mainFileTrains(clang::ASTContext& Context) {
  auto Optimizer = qualType(isOptimizerTypeImpl());
  return mainFileHas(declaratorDecl(hasType(Optimizer)), Context) ||
         mainFileHas(expr(hasType(Optimizer)), Context);
}

const clang::FunctionDecl* mainFunctionOfMainFile(clang::ASTContext& Context) {
  const clang::SourceManager& SM = Context.getSourceManager();
  for (const clang::Decl* TopLevel : Context.getTranslationUnitDecl()->decls())
    if (const auto* Function = llvm::dyn_cast<clang::FunctionDecl>(TopLevel))
      if (Function->isMain() && Function->hasBody() &&
          SM.isWrittenInMainFile(SM.getExpansionLoc(Function->getLocation())))
        return Function;
  return nullptr;
}

clang::ast_matchers::internal::Matcher<clang::Decl> isInFileWithMain() {
  return inFileWithMainImpl();
}

clang::ast_matchers::internal::Matcher<clang::Stmt> isInTrainingFile() {
  return inTrainingFileImpl();
}

bool isDistributedFunction(const clang::FunctionDecl& Function, clang::ASTContext& Context) {
  if (!Function.hasBody())
    return false;
  auto RuntimeOrC10d = callExpr(callee(functionDecl(matchesName("^::(accelerate|c10d)::"))));
  return !match(traverse(clang::TK_AsIs, stmt(hasDescendant(RuntimeOrC10d))), *Function.getBody(), Context)
              .empty();
}

clang::ast_matchers::internal::Matcher<clang::Stmt> isInDistributedFunction() {
  return inDistributedFunctionImpl();
}

const clang::ValueDecl* namedDeclaration(const clang::Expr* E) {
  while (E) {
    E = E->IgnoreUnlessSpelledInSource()->IgnoreParens();
    if (const auto* Reference = llvm::dyn_cast<clang::DeclRefExpr>(E))
      return Reference->getDecl();
    if (const auto* Member = llvm::dyn_cast<clang::MemberExpr>(E))
      return Member->getMemberDecl();
    if (const auto* Unary = llvm::dyn_cast<clang::UnaryOperator>(E)) {
      if (Unary->getOpcode() != clang::UO_Deref)
        return nullptr;
      E = Unary->getSubExpr();
      continue;
    }
    if (const auto* Operator = llvm::dyn_cast<clang::CXXOperatorCallExpr>(E)) {
      if (Operator->getOperator() != clang::OO_Star || Operator->getNumArgs() != 1)
        return nullptr;
      E = Operator->getArg(0);
      continue;
    }
    if (const auto* Call = llvm::dyn_cast<clang::CXXMemberCallExpr>(E)) {
      const auto* Method = Call->getMethodDecl();
      if (!Method || Method->getName() != "get" || Call->getNumArgs() != 0)
        return nullptr;
      E = Call->getImplicitObjectArgument();
      continue;
    }
    return nullptr;
  }
  return nullptr;
}

std::vector<const clang::Expr*> optimizerConstructions(clang::ASTContext& Context) {
  auto Construction =
      expr(anyOf(cxxConstructExpr(hasType(isOptimizerTypeImpl()),
                                  unless(hasDeclaration(
                                      cxxConstructorDecl(anyOf(isCopyConstructor(), isMoveConstructor()))))),
                 callExpr(callee(functionDecl(hasAnyName("::std::make_shared", "::std::make_unique"))),
                          hasType(isOptimizerTypeImpl()))))
          .bind("construction");
  return allInMainFile<clang::Expr>(Construction, "construction", Context);
}

namespace {

/// How deep modelsTrainedBy follows vectors filled from vectors: a few levels, never a cycle.
thread_local int ModelsTrainedByDepth = 0;

/// modelsTrainedBy's answers for one parse, by expression and depth (the matchers ask about one optimizer
/// many times, and each answer follows the same vectors through the function again).
struct ModelsTrainedByCache {
  const clang::ASTContext* Context = nullptr;
  const clang::TranslationUnitDecl* Unit = nullptr;
  llvm::DenseMap<std::pair<const clang::Expr*, int>, std::vector<const clang::Expr*>> Models;
};
thread_local ModelsTrainedByCache TheModelsTrainedByCache;

std::vector<const clang::Expr*> modelsTrainedByUncached(const clang::Expr& OptimizerArguments,
                                                        clang::ASTContext& Context);

} // namespace

std::vector<const clang::Expr*> modelsTrainedBy(const clang::Expr& OptimizerArguments,
                                                clang::ASTContext& Context) {
  ModelsTrainedByCache& Cache = TheModelsTrainedByCache;
  if (Cache.Context != &Context || Cache.Unit != Context.getTranslationUnitDecl()) {
    Cache = ModelsTrainedByCache();
    Cache.Context = &Context;
    Cache.Unit = Context.getTranslationUnitDecl();
  }
  // A nested answer is cut at its depth: it is kept for that depth only.
  const std::pair<const clang::Expr*, int> Key{&OptimizerArguments, ModelsTrainedByDepth};
  if (auto Found = Cache.Models.find(Key); Found != Cache.Models.end())
    return Found->second;
  std::vector<const clang::Expr*> Models = modelsTrainedByUncached(OptimizerArguments, Context);
  Cache.Models[Key] = Models;
  return Models;
}

namespace {

std::vector<const clang::Expr*> modelsTrainedByUncached(const clang::Expr& OptimizerArguments,
                                                        clang::ASTContext& Context) {
  auto Parameters =
      cxxMemberCallExpr(
          callee(cxxMethodDecl(hasName("parameters"),
                               ofClass(cxxRecordDecl(isSameOrDerivedFrom("::torch::nn::Module"))))))
          .bind("parameters");
  // In a template, `model->parameters()` on a model of dependent type.
  auto DependentParameters =
      callExpr(callee(cxxDependentScopeMemberExpr(hasMemberName("parameters")).bind("dependent")));
  std::vector<const clang::ValueDecl*> Seen;
  std::vector<const clang::Expr*> Models;
  for (const BoundNodes& Found :
       match(traverse(clang::TK_AsIs, findAll(stmt(anyOf(Parameters, DependentParameters)))),
             OptimizerArguments, Context)) {
    const clang::Expr* Object = nullptr;
    if (const auto* Call = Found.getNodeAs<clang::CXXMemberCallExpr>("parameters"))
      Object = Call->getImplicitObjectArgument()->IgnoreImplicit();
    else if (const auto* Member = Found.getNodeAs<clang::CXXDependentScopeMemberExpr>("dependent"))
      Object = Member->isImplicitAccess() ? nullptr : Member->getBase()->IgnoreImplicit();
    if (!Object)
      continue;
    // `model->parameters()` on a holder or smart pointer calls `operator->` on the model.
    if (const auto* Arrow = llvm::dyn_cast<clang::CXXOperatorCallExpr>(Object))
      if (Arrow->getOperator() == clang::OO_Arrow)
        Object = Arrow->getArg(0);
    const clang::ValueDecl* Model = namedDeclaration(Object);
    if (Model && !llvm::is_contained(Seen, Model)) {
      Seen.push_back(Model);
      Models.push_back(Object);
    }
  }
  // `std::vector<Tensor> params; for (auto& p : model->parameters()) if (p.requires_grad())
  // params.push_back(p);` then `Adam(params, ...)`: the models whose parameters a loop over them puts in a
  // local the arguments name.
  const clang::FunctionDecl* Function = enclosingFunction(OptimizerArguments, Context);
  if (!Function || !Function->hasBody() || ModelsTrainedByDepth > 2)
    return Models;
  struct DepthScope {
    DepthScope() { ++ModelsTrainedByDepth; }
    ~DepthScope() { --ModelsTrainedByDepth; }
  } Scope;
  auto Local = declRefExpr(to(varDecl(hasLocalStorage(), unless(hasType(isModuleType()))).bind("local")));
  auto Add = [&](const clang::Expr& Source) {
    for (const clang::Expr* Model : modelsTrainedBy(Source, Context))
      if (!llvm::is_contained(Seen, namedDeclaration(Model))) {
        Seen.push_back(namedDeclaration(Model));
        Models.push_back(Model);
      }
  };
  for (const BoundNodes& Found : match(traverse(clang::TK_AsIs, expr(anyOf(Local, forEachDescendant(Local)))),
                                       OptimizerArguments, Context)) {
    const auto* Vector = Found.getNodeAs<clang::VarDecl>("local");
    auto Uses = declRefExpr(to(varDecl(equalsNode(Vector))));
    // Filled from its initializer (`std::vector<Tensor> params = encoder->parameters();`), ...
    if (Vector->getInit())
      Add(*Vector->getInit());
    // ... by a loop over a model's parameters, ...
    auto Filling = cxxForRangeStmt(hasRangeInit(expr().bind("range")), hasBody(hasDescendant(Uses)));
    for (const BoundNodes& Loop :
         match(traverse(clang::TK_AsIs, stmt(forEachDescendant(Filling))), *Function->getBody(), Context))
      Add(*Loop.getNodeAs<clang::Expr>("range"));
    // ... or by a call on it or an assignment to it (`params.insert(params.end(), head->parameters().begin(),
    // head->parameters().end())`, `params = model->parameters()`).
    auto Changing = expr(anyOf(cxxMemberCallExpr(on(ignoringParenImpCasts(Uses))),
                               cxxOperatorCallExpr(hasArgument(0, ignoringParenImpCasts(Uses)))))
                        .bind("changing");
    for (const BoundNodes& Change :
         match(traverse(clang::TK_AsIs, stmt(forEachDescendant(Changing))), *Function->getBody(), Context))
      Add(*Change.getNodeAs<clang::Expr>("changing"));
  }
  return Models;
}

/// True when the statement is a statement of its own in a block (through the cleanups around it).
bool isBlockStatement(const clang::Expr& E, clang::ASTContext& Context) {
  clang::DynTypedNodeList Parents = Context.getParents(E);
  while (!Parents.empty() && Parents[0].get<clang::ExprWithCleanups>())
    Parents = Context.getParents(Parents[0]);
  return !Parents.empty() && Parents[0].get<clang::CompoundStmt>();
}

} // namespace

const clang::Stmt* optimizerAssignment(const clang::Expr& Construction, clang::ASTContext& Context) {
  clang::DynTypedNodeList Parents = Context.getParents(Construction);
  while (!Parents.empty() &&
         (Parents[0].get<clang::ImplicitCastExpr>() || Parents[0].get<clang::CXXBindTemporaryExpr>() ||
          Parents[0].get<clang::MaterializeTemporaryExpr>() || Parents[0].get<clang::CXXConstructExpr>() ||
          Parents[0].get<clang::ExprWithCleanups>()))
    Parents = Context.getParents(Parents[0]);
  const auto* Assignment = Parents.empty() ? nullptr : Parents[0].get<clang::CXXOperatorCallExpr>();
  if (!Assignment || Assignment->getOperator() != clang::OO_Equal)
    return nullptr;
  return isBlockStatement(*Assignment, Context) ? Assignment : nullptr;
}

bool isSplitPreparedDeclaration(const clang::DeclStmt& Statement, clang::ASTContext& Context,
                                std::string* Why) {
  if (Statement.isSingleDecl())
    return false;
  auto Refuse = [&](const clang::NamedDecl& Declarator, llvm::StringRef Reason) {
    if (Why)
      *Why = "'" + Declarator.getNameAsString() + "' " + Reason.str();
    return false;
  };
  bool Any = false;
  for (const clang::Decl* Declaration : Statement.decls()) {
    const auto* Variable = llvm::dyn_cast<clang::VarDecl>(Declaration);
    if (!Variable)
      return false;
    clang::QualType Type = Variable->getType();
    const bool Optimizer = !match(qualType(isOptimizerTypeImpl()), Type, Context).empty();
    const bool Scheduler = !Optimizer && !match(qualType(isSchedulerTypeImpl()), Type, Context).empty();
    if (!Optimizer && !Scheduler)
      continue; // Another declarator of the same statement (`T a(...), *p = &a;` is not made here).
    Any = true;
    if (Type->isReferenceType() || Type->isPointerType() || !Type->getAsCXXRecordDecl())
      return Refuse(*Variable, "is a pointer or a reference");
    if (!Variable->hasLocalStorage() || Variable->isStaticLocal())
      return Refuse(*Variable, "is not a local variable");
    const auto* Construct = llvm::dyn_cast_or_null<clang::CXXConstructExpr>(
        Variable->getInit() ? Variable->getInit()->IgnoreImplicit() : nullptr);
    if (!Construct || Construct->getConstructor()->isCopyOrMoveConstructor() ||
        Construct->getParenOrBraceRange().isInvalid() || Variable->getInitStyle() == clang::VarDecl::CInit)
      return Refuse(*Variable, "is not constructed in place with its arguments (`T name(args)`)");
    if (Optimizer && modelsTrainedBy(*Construct, Context).empty())
      return Refuse(*Variable,
                    "takes no model's parameters() (loose tensors, or a vector built elsewhere), so "
                    "no model is known whose gradients to synchronise");
  }
  if (!Any)
    return false;
  // Each declarator is an optimizer or a scheduler: anything else would change type with the split.
  for (const clang::Decl* Declaration : Statement.decls()) {
    const auto* Variable = llvm::cast<clang::VarDecl>(Declaration);
    if (match(qualType(anyOf(isOptimizerTypeImpl(), isSchedulerTypeImpl())), Variable->getType(), Context)
            .empty())
      return Refuse(*Variable, "is declared with them and is neither an optimizer nor a scheduler");
  }
  return true;
}

bool isPreparedConstruction(const clang::Expr& Construction, clang::ASTContext& Context) {
  if (optimizerAssignment(Construction, Context) || preparedMemberBuiltBy(Construction, Context) ||
      preparedContainerFilledBy(Construction, Context))
    return true;
  clang::DynTypedNodeList Parents = Context.getParents(Construction);
  while (!Parents.empty() &&
         (Parents[0].get<clang::ImplicitCastExpr>() || Parents[0].get<clang::ExprWithCleanups>() ||
          Parents[0].get<clang::CXXBindTemporaryExpr>() ||
          Parents[0].get<clang::MaterializeTemporaryExpr>() || Parents[0].get<clang::CXXConstructExpr>()))
    Parents = Context.getParents(Parents[0]);
  const auto* Variable = Parents.empty() ? nullptr : Parents[0].get<clang::VarDecl>();
  if (!Variable)
    return false;
  // Declared with others in one statement: prepared only when the pass splits it.
  for (const clang::DynTypedNode& Parent : Context.getParents(*Variable))
    if (const auto* Statement = Parent.get<clang::DeclStmt>())
      if (!Statement->isSingleDecl() && !isSplitPreparedDeclaration(*Statement, Context))
        return false;
  return Variable->hasLocalStorage() || mainFunctionOfMainFile(Context);
}

namespace {

/// `E` without the implicit nodes around a value: casts, temporaries, cleanups, parentheses and the
/// constructor call that only converts or moves (a `std::unique_ptr` made from `std::make_unique`'s result).
const clang::Expr* withoutImplicit(const clang::Expr* E) {
  while (E) {
    const clang::Expr* Inner = E->IgnoreImplicit()->IgnoreParens();
    if (const auto* Construct = llvm::dyn_cast<clang::CXXConstructExpr>(Inner))
      if (Construct->getNumArgs() == 1 && !llvm::isa<clang::CXXTemporaryObjectExpr>(Construct) &&
          (Construct->getConstructor()->isCopyOrMoveConstructor() ||
           Construct->getConstructor()->isConvertingConstructor(/*AllowExplicit=*/false)) &&
          !Construct->getParenOrBraceRange().isValid())
        Inner = Construct->getArg(0)->IgnoreImplicit()->IgnoreParens();
    if (Inner == E)
      return E;
    E = Inner;
  }
  return E;
}

/// The parent of `E` that is not an implicit node or parentheses (null at the top).
const clang::DynTypedNode* spelledParent(const clang::Expr& E, clang::ASTContext& Context,
                                         clang::DynTypedNode& Storage) {
  clang::DynTypedNodeList Parents = Context.getParents(E);
  while (!Parents.empty()) {
    const auto* Parent = Parents[0].get<clang::Expr>();
    if (!Parent ||
        !(llvm::isa<clang::ImplicitCastExpr>(Parent) || llvm::isa<clang::ParenExpr>(Parent) ||
          llvm::isa<clang::MaterializeTemporaryExpr>(Parent) ||
          llvm::isa<clang::CXXBindTemporaryExpr>(Parent) || llvm::isa<clang::ExprWithCleanups>(Parent))) {
      Storage = Parents[0];
      return &Storage;
    }
    Parents = Context.getParents(*Parent);
  }
  return nullptr;
}

/// The optimizer a build site makes: `new T(args)`, `std::make_unique<T>(args)` or
/// `std::make_shared<T>(args)` (a pointer-like member), or `T(args)` (a member held by value); with the
/// construction it holds.
std::optional<MemberOptimizerBuild> buildSite(const clang::Expr* Value, bool ByValue) {
  Value = withoutImplicit(Value);
  if (!Value)
    return std::nullopt;
  MemberOptimizerBuild Build;
  if (ByValue) {
    const auto* Construct = llvm::dyn_cast<clang::CXXConstructExpr>(Value);
    if (!Construct || Construct->getConstructor()->isCopyOrMoveConstructor())
      return std::nullopt;
    Build.Construction = Build.Made = Construct;
    return Build;
  }
  if (const auto* New = llvm::dyn_cast<clang::CXXNewExpr>(Value)) {
    const clang::CXXConstructExpr* Construct = New->getConstructExpr();
    if (!Construct || New->isArray() || !New->getAllocatedTypeSourceInfo())
      return std::nullopt;
    Build.Construction = Construct;
    Build.Made = New;
    return Build;
  }
  if (const auto* Call = llvm::dyn_cast<clang::CallExpr>(Value)) {
    const clang::FunctionDecl* Callee = Call->getDirectCallee();
    std::string Name = Callee ? Callee->getQualifiedNameAsString() : "";
    if (Name != "std::make_shared" && Name != "std::make_unique")
      return std::nullopt;
    Build.Construction = Build.Made = Call;
    return Build;
  }
  return std::nullopt;
}

/// True when `E` initialises a pointer or smart pointer to null: `{}`, `{nullptr}`, `nullptr`, `NULL`, `0`.
bool isNullInitialiser(const clang::Expr* E, clang::ASTContext& Context) {
  if (!E)
    return false;
  E = E->IgnoreImplicit()->IgnoreParens();
  if (const auto* List = llvm::dyn_cast<clang::InitListExpr>(E))
    return List->getNumInits() == 0 ||
           (List->getNumInits() == 1 && isNullInitialiser(List->getInit(0), Context));
  if (llvm::isa<clang::ImplicitValueInitExpr>(E))
    return true;
  if (const auto* Construct = llvm::dyn_cast<clang::CXXConstructExpr>(E)) {
    if (Construct->getNumArgs() == 0)
      return true;
    return Construct->getNumArgs() == 1 && !Construct->getConstructor()->isCopyOrMoveConstructor() &&
           isNullInitialiser(Construct->getArg(0), Context);
  }
  return !E->isValueDependent() &&
         E->isNullPointerConstant(Context, clang::Expr::NPC_ValueDependentIsNotNull) !=
             clang::Expr::NPCK_NotNull;
}

/// Line `Where` is on, for messages.
unsigned lineOf(clang::SourceLocation Where, const clang::SourceManager& SM) {
  return SM.getSpellingLineNumber(SM.getExpansionLoc(Where));
}

/// The member functions a prepared optimizer shares with libtorch's.
bool isSharedOptimizerMember(llvm::StringRef Name) {
  return Name == "step" || Name == "zero_grad" || Name == "param_groups";
}

/// True when `E` (of an optimizer type) is used as a `torch::optim::Optimizer&` (a scheduler's argument,
/// say), which a prepared optimizer converts to; or it is what torch::save / torch::load take.
bool isUsedAsLibtorchOptimizer(const clang::Expr& E, clang::ASTContext& Context) {
  clang::DynTypedNodeList Parents = Context.getParents(E);
  while (!Parents.empty()) {
    if (const auto* Cast = Parents[0].get<clang::ImplicitCastExpr>()) {
      const clang::CXXRecordDecl* Record = Cast->getType()->getAsCXXRecordDecl();
      if ((Cast->getCastKind() == clang::CK_DerivedToBase ||
           Cast->getCastKind() == clang::CK_UncheckedDerivedToBase) &&
          Record && Record->getQualifiedNameAsString() == "torch::optim::Optimizer")
        return true;
      Parents = Context.getParents(*Cast);
      continue;
    }
    if (const auto* Paren = Parents[0].get<clang::ParenExpr>()) {
      Parents = Context.getParents(*Paren);
      continue;
    }
    break;
  }
  if (Parents.empty())
    return false;
  // The parameter `E` is passed for (the parent map may hide the implicit cast to the base class when the
  // caller's traversal ignores implicit nodes): a `torch::optim::Optimizer&`.
  auto TakesLibtorchOptimizer = [&](const clang::FunctionDecl* Callee,
                                    llvm::ArrayRef<const clang::Expr*> Args, unsigned Shift) {
    if (!Callee)
      return false;
    for (unsigned I = 0; I < Args.size(); ++I) {
      if (Args[I]->IgnoreImplicit()->IgnoreParens() != E.IgnoreParens() || I < Shift ||
          I - Shift >= Callee->getNumParams())
        continue;
      clang::QualType Type = Callee->getParamDecl(I - Shift)->getType();
      const clang::CXXRecordDecl* Record =
          Type->isLValueReferenceType() ? Type.getNonReferenceType()->getAsCXXRecordDecl() : nullptr;
      if (Record && Record->getQualifiedNameAsString() == "torch::optim::Optimizer")
        return true;
    }
    return false;
  };
  if (const auto* Construct = Parents[0].get<clang::CXXConstructExpr>())
    return TakesLibtorchOptimizer(Construct->getConstructor(),
                                  llvm::ArrayRef(Construct->getArgs(), Construct->getNumArgs()), 0);
  if (const auto* Call = Parents[0].get<clang::CallExpr>()) {
    const clang::FunctionDecl* Callee = Call->getDirectCallee();
    std::string Name = Callee ? Callee->getQualifiedNameAsString() : "";
    if ((Name == "torch::save" || Name == "torch::load") && Call->getNumArgs() > 0 &&
        Call->getArg(0)->IgnoreImplicit()->IgnoreParens() == E.IgnoreParens())
      return true;
    const unsigned Shift =
        llvm::isa<clang::CXXOperatorCallExpr>(Call) && llvm::isa_and_nonnull<clang::CXXMethodDecl>(Callee)
            ? 1
            : 0;
    return TakesLibtorchOptimizer(Callee, llvm::ArrayRef(Call->getArgs(), Call->getNumArgs()), Shift);
  }
  return false;
}

enum class Holding { Object, RawPointer, SmartPointer, Other };

Holding holdingOf(const clang::FieldDecl& Field) {
  clang::QualType Type = Field.getType().getCanonicalType();
  if (Type->isReferenceType())
    return Holding::Other;
  if (Type->isPointerType())
    return Holding::RawPointer;
  const auto* Record = Type->getAsCXXRecordDecl();
  std::string Name = Record ? Record->getQualifiedNameAsString() : "";
  if (Name == "std::unique_ptr" || Name == "std::shared_ptr")
    return Holding::SmartPointer;
  return Record ? Holding::Object : Holding::Other;
}

/// Where the member is built and how it is used, or why a prepared optimizer cannot take its place.
MemberOptimizer analyseMemberOptimizer(const clang::FieldDecl& Field, clang::ASTContext& Context) {
  const clang::SourceManager& SM = Context.getSourceManager();
  MemberOptimizer Result;
  Result.Field = &Field;
  std::string Name = "'" + Field.getParent()->getNameAsString() + "::" + Field.getNameAsString() + "'";
  auto Refuse = [&](std::string Why) {
    Result.Problem = std::move(Why);
    Result.Builds.clear();
    Result.Deletes.clear();
    return Result;
  };
  const Holding Held = holdingOf(Field);
  if (Held == Holding::Other)
    return Refuse("it is a reference to an optimizer made elsewhere; prepare the optimizer where it is made");
  if (Field.getParent()->isDependentContext())
    return Refuse("it is a member of a class template, whose members accel-rewrite does not retype; make "
                  "it an accelerate::Optimizer and prepare it by hand");
  // `torch::optim::Adam *a, *b;`: the type is written once for both.
  for (const clang::FieldDecl* Other : Field.getParent()->fields())
    if (Other != &Field && Other->getBeginLoc() == Field.getBeginLoc())
      return Refuse("it is declared in one declaration with '" + Other->getNameAsString() +
                    "'; declare each optimizer member on its own");
  if (Field.getBeginLoc().isMacroID() || Field.getLocation().isMacroID())
    return Refuse("it is declared by a macro");
  const bool ByValue = Held == Holding::Object;
  auto AddBuild = [&](const clang::Expr* Value, const clang::Expr* Statement) {
    std::optional<MemberOptimizerBuild> Build = buildSite(Value, ByValue);
    if (!Build)
      return false;
    Build->Statement = Statement;
    Result.Builds.push_back(*Build);
    return true;
  };
  bool InitialisedWhereDeclared = false;
  if (const clang::Expr* Initializer = Field.getInClassInitializer();
      Initializer && !ByValue && isNullInitialiser(Initializer, Context)) {
    // `torch::optim::Adam* opt{};` / `= nullptr;`: built later.
    const bool Braced = Field.getInClassInitStyle() == clang::ICIS_ListInit;
    Result.NullInitialisers.push_back({Initializer->getSourceRange(), Braced ? "{}" : "std::nullopt"});
  } else if (Initializer) {
    if (!AddBuild(Initializer, nullptr))
      return Refuse("its initialiser at line " + std::to_string(lineOf(Initializer->getBeginLoc(), SM)) +
                    " is not `new T(...)`, `std::make_unique<T>(...)` or `std::make_shared<T>(...)` of an "
                    "optimizer type T");
    InitialisedWhereDeclared = true;
  }
  bool EveryConstructorInitialises = !InitialisedWhereDeclared;
  const auto* Class = llvm::dyn_cast<clang::CXXRecordDecl>(Field.getParent());
  if (!Class)
    return Refuse("it is a member of a C struct");
  for (const clang::CXXConstructorDecl* Constructor : Class->ctors()) {
    if (Constructor->isImplicit() || Constructor->isCopyOrMoveConstructor())
      continue;
    const clang::CXXConstructorDecl* Definition = Constructor;
    if (const clang::FunctionDecl* Defined = Constructor->getDefinition())
      Definition = llvm::cast<clang::CXXConstructorDecl>(Defined);
    if (Definition != Constructor && !Constructor->isThisDeclarationADefinition())
      continue; // Visited at its definition.
    bool Initialises = false;
    for (const clang::CXXCtorInitializer* Init : Definition->inits()) {
      if (Init->getMember() != &Field || !Init->isWritten())
        continue;
      if (!ByValue && isNullInitialiser(Init->getInit(), Context)) {
        // `opt_(nullptr)` / `opt_{}`: built later.
        const bool Braced = Init->getLParenLoc().isValid() &&
                            *SM.getCharacterData(SM.getExpansionLoc(Init->getLParenLoc())) == '{';
        Result.NullInitialisers.push_back(
            {{Init->getLParenLoc(), Init->getRParenLoc()}, Braced ? "{}" : "(std::nullopt)"});
        continue;
      }
      if (!AddBuild(Init->getInit(), nullptr))
        return Refuse("its initialiser at line " + std::to_string(lineOf(Init->getSourceLocation(), SM)) +
                      " is not `new T(...)`, `std::make_unique<T>(...)` or `std::make_shared<T>(...)` of an "
                      "optimizer type T");
      Initialises = true;
    }
    EveryConstructorInitialises = EveryConstructorInitialises && Initialises;
  }
  // Every use of the member in the main file.
  auto Use = memberExpr(member(equalsNode(&Field))).bind("use");
  std::vector<const clang::MemberExpr*> Uses = allInMainFile<clang::MemberExpr>(Use, "use", Context);
  for (const clang::MemberExpr* Member : Uses) {
    const unsigned Line = lineOf(Member->getBeginLoc(), SM);
    auto Unsupported = [&](llvm::StringRef What) {
      return Refuse("it is " + What.str() + " at line " + std::to_string(Line) +
                    ", which a prepared optimizer (accelerate::Optimizer) does not support; keep to step(), "
                    "zero_grad(), param_groups() and passing it as a torch::optim::Optimizer&, or prepare it "
                    "by hand");
    };
    if (Member->getBeginLoc().isMacroID())
      return Refuse("it is used in a macro at line " + std::to_string(Line));
    clang::DynTypedNode Storage;
    const clang::DynTypedNode* Parent = spelledParent(*Member, Context, Storage);
    const auto* ParentExpr = Parent ? Parent->get<clang::Expr>() : nullptr;
    // `member->step()` (raw pointer) / `member.step()` (by value).
    if (const auto* Access = llvm::dyn_cast_or_null<clang::MemberExpr>(ParentExpr)) {
      if (Access->isArrow() == (Held == Holding::RawPointer) && Held != Holding::SmartPointer &&
          isSharedOptimizerMember(Access->getMemberNameInfo().getAsString()))
        continue;
      if (Held == Holding::SmartPointer) {
        std::string Called = Access->getMemberNameInfo().getAsString();
        // `member.reset(new T(...));`
        clang::DynTypedNode Above;
        const clang::DynTypedNode* Next = spelledParent(*Access, Context, Above);
        const auto* Call = Next ? Next->get<clang::CXXMemberCallExpr>() : nullptr;
        if (Called == "reset" && Call && Call->getNumArgs() == 1 && isBlockStatement(*Call, Context)) {
          if (AddBuild(Call->getArg(0), Call))
            continue;
          return Unsupported("reset to something other than `new T(...)` of an optimizer type T");
        }
        return Unsupported("used through its smart pointer's '" + Called + "'");
      }
      return Unsupported("used through a member other than step(), zero_grad() and param_groups()");
    }
    if (const auto* Operator = llvm::dyn_cast_or_null<clang::CXXOperatorCallExpr>(ParentExpr)) {
      // `member->step()` on a smart pointer.
      if (Held == Holding::SmartPointer && Operator->getOperator() == clang::OO_Arrow) {
        clang::DynTypedNode Above;
        const clang::DynTypedNode* Next = spelledParent(*Operator, Context, Above);
        const auto* Access = Next ? Next->get<clang::MemberExpr>() : nullptr;
        if (Access && isSharedOptimizerMember(Access->getMemberNameInfo().getAsString()))
          continue;
        return Unsupported("used through a member other than step(), zero_grad() and param_groups()");
      }
      if (Held == Holding::SmartPointer && Operator->getOperator() == clang::OO_Star) {
        if (isUsedAsLibtorchOptimizer(*Operator, Context))
          continue;
        return Unsupported("dereferenced for something other than a torch::optim::Optimizer&");
      }
      // `member = std::make_unique<T>(...);`
      if (Held == Holding::SmartPointer && Operator->getOperator() == clang::OO_Equal &&
          Operator->getArg(0)->IgnoreParenImpCasts() == Member && isBlockStatement(*Operator, Context)) {
        if (AddBuild(Operator->getArg(1), Operator))
          continue;
        return Unsupported("assigned something other than `std::make_unique<T>(...)`, "
                           "`std::make_shared<T>(...)` of an optimizer type T");
      }
      return Unsupported("used with an operator");
    }
    if (const auto* Unary = llvm::dyn_cast_or_null<clang::UnaryOperator>(ParentExpr)) {
      if (Held == Holding::RawPointer && Unary->getOpcode() == clang::UO_Deref &&
          isUsedAsLibtorchOptimizer(*Unary, Context))
        continue;
      return Unsupported(Unary->getOpcode() == clang::UO_Deref
                             ? "dereferenced for something other than a torch::optim::Optimizer&"
                             : "used with an operator");
    }
    if (const auto* Binary = llvm::dyn_cast_or_null<clang::BinaryOperator>(ParentExpr)) {
      // `member = new T(...);`
      if (Held == Holding::RawPointer && Binary->getOpcode() == clang::BO_Assign &&
          Binary->getLHS()->IgnoreParenImpCasts() == Member && isBlockStatement(*Binary, Context)) {
        if (AddBuild(Binary->getRHS(), Binary))
          continue;
        return Unsupported("assigned something other than `new T(...)` of an optimizer type T");
      }
      return Unsupported("used with an operator");
    }
    if (const auto* Delete = Parent ? Parent->get<clang::CXXDeleteExpr>() : nullptr) {
      if (Held == Holding::RawPointer && isBlockStatement(*Delete, Context)) {
        Result.Deletes.push_back(Delete);
        continue;
      }
      return Unsupported("deleted inside a larger statement");
    }
    // A member held by value, passed as a torch::optim::Optimizer&.
    if (ByValue && isUsedAsLibtorchOptimizer(*Member, Context))
      continue;
    return Unsupported("used as a value");
  }
  if (Result.Builds.empty())
    return Refuse("no initialiser or assignment of it in this file makes an optimizer (it is built where "
                  "accel-rewrite cannot see it); prepare it where it is built: "
                  "`accelerator.prepare(model)` before, `accelerator.prepare(optimizer)` for it");
  for (const MemberOptimizerBuild& Build : Result.Builds)
    if (modelsTrainedBy(*Build.Construction, Context).empty())
      return Refuse("the optimizer built at line " + std::to_string(lineOf(Build.Made->getBeginLoc(), SM)) +
                    " takes no model's parameters(), so no model is known whose gradients to synchronise");
  if (ByValue && llvm::any_of(Result.Builds, [](const MemberOptimizerBuild& B) { return B.Statement; }))
    return Refuse("it is held by value and assigned in a function body");
  const bool BuiltLater =
      llvm::any_of(Result.Builds, [](const MemberOptimizerBuild& B) { return B.Statement; });
  Result.Optional = !ByValue && !InitialisedWhereDeclared &&
                    (BuiltLater || !EveryConstructorInitialises || !Result.NullInitialisers.empty());
  return Result;
}

} // namespace

namespace {

/// What the passes learnt about the optimizer members of one parse: the passes ask again and again.
struct MemberOptimizerCache {
  const clang::ASTContext* Context = nullptr;
  const clang::TranslationUnitDecl* Unit = nullptr;
  std::optional<std::vector<const clang::FieldDecl*>> Members;
  std::map<const clang::FieldDecl*, MemberOptimizer> Facts;
};

thread_local MemberOptimizerCache TheMemberOptimizerCache;

MemberOptimizerCache& memberOptimizerCache(clang::ASTContext& Context) {
  MemberOptimizerCache& Cache = TheMemberOptimizerCache;
  if (Cache.Context != &Context || Cache.Unit != Context.getTranslationUnitDecl())
    Cache = MemberOptimizerCache{&Context, Context.getTranslationUnitDecl(), std::nullopt, {}};
  return Cache;
}

/// The containers' facts for one parse.
struct OptimizerContainerCache {
  const clang::ASTContext* Context = nullptr;
  const clang::TranslationUnitDecl* Unit = nullptr;
  std::optional<std::vector<OptimizerContainer>> Containers;
};

thread_local OptimizerContainerCache TheOptimizerContainerCache;

/// The helpers of training code for one parse (see isTrainingHelper).
struct TrainingHelperCache {
  const clang::ASTContext* Context = nullptr;
  const clang::TranslationUnitDecl* Unit = nullptr;
  std::optional<llvm::SmallPtrSet<const clang::FunctionDecl*, 8>> Helpers;
};

thread_local TrainingHelperCache TheTrainingHelperCache;

/// The functions of the rewritten files with a body that `Body` calls (their templates' patterns, as
/// canonical declarations).
std::vector<const clang::FunctionDecl*> calledFunctions(const clang::Stmt& Body, clang::ASTContext& Context) {
  std::vector<const clang::FunctionDecl*> Called;
  auto Call = callExpr(callee(functionDecl().bind("callee")));
  for (const BoundNodes& Found :
       match(traverse(clang::TK_AsIs, stmt(forEachDescendant(Call))), Body, Context)) {
    const auto* Callee = Found.getNodeAs<clang::FunctionDecl>("callee");
    if (const clang::FunctionDecl* Pattern = Callee->getTemplateInstantiationPattern())
      Callee = Pattern;
    const clang::FunctionDecl* Definition = nullptr;
    if (Callee->hasBody(Definition) &&
        isInRewrittenFile(Context.getSourceManager(), Definition->getLocation()))
      Called.push_back(Definition->getCanonicalDecl());
  }
  return Called;
}

} // namespace

bool isTrainingHelper(const clang::FunctionDecl& Function, clang::ASTContext& Context) {
  TrainingHelperCache& Cache = TheTrainingHelperCache;
  if (Cache.Context != &Context || Cache.Unit != Context.getTranslationUnitDecl())
    Cache = TrainingHelperCache{&Context, Context.getTranslationUnitDecl(), std::nullopt};
  if (!Cache.Helpers) {
    Cache.Helpers.emplace();
    if (mainFileTrains(Context)) {
      auto Defined = functionDecl(isDefinition()).bind("function");
      std::vector<const clang::FunctionDecl*> Training;
      forEachMainFileDecl(Context, [&](clang::Decl& TopLevel) {
        for (const BoundNodes& Found :
             match(traverse(clang::TK_AsIs, decl(anyOf(Defined, forEachDescendant(Defined)))), TopLevel,
                   Context))
          if (const auto* Function = Found.getNodeAs<clang::FunctionDecl>("function");
              isTrainingOrEvaluationFunction(*Function, Context))
            Training.push_back(Function);
      });
      // Two calls deep, as loopTrains follows them.
      std::vector<const clang::FunctionDecl*> Callers = Training;
      for (int Depth = 0; Depth < 2; ++Depth) {
        std::vector<const clang::FunctionDecl*> Next;
        for (const clang::FunctionDecl* Caller : Callers)
          for (const clang::FunctionDecl* Callee : calledFunctions(*Caller->getBody(), Context)) {
            const clang::FunctionDecl* Definition = nullptr;
            Callee->hasBody(Definition);
            if (!isTrainingOrEvaluationFunction(*Definition, Context) && Cache.Helpers->insert(Callee).second)
              Next.push_back(Definition);
          }
        Callers = std::move(Next);
      }
    }
  }
  const clang::FunctionDecl* Pattern = Function.getTemplateInstantiationPattern();
  return Cache.Helpers->contains((Pattern ? Pattern : &Function)->getCanonicalDecl());
}

void forgetTrainingCodeFacts() {
  TheMemberOptimizerCache = MemberOptimizerCache();
  TheOptimizerContainerCache = OptimizerContainerCache();
  TheTrainingHelperCache = TrainingHelperCache();
  TheRewrittenFiles = RewrittenFiles();
  TheModelsTrainedByCache = ModelsTrainedByCache();
}

const MemberOptimizer& memberOptimizer(const clang::FieldDecl& Field, clang::ASTContext& Context) {
  MemberOptimizerCache& Cache = memberOptimizerCache(Context);
  auto Found = Cache.Facts.find(&Field);
  if (Found == Cache.Facts.end())
    Found = Cache.Facts.emplace(&Field, analyseMemberOptimizer(Field, Context)).first;
  return Found->second;
}

std::vector<const MemberOptimizer*> preparedMemberOptimizers(clang::ASTContext& Context) {
  MemberOptimizerCache& Cache = memberOptimizerCache(Context);
  if (!Cache.Members) {
    auto Field = fieldDecl(hasType(qualType(isOptimizerTypeImpl()))).bind("field");
    Cache.Members = allInMainFile<clang::FieldDecl>(Field, "field", Context);
  }
  std::vector<const MemberOptimizer*> Result;
  for (const clang::FieldDecl* Member : *Cache.Members) {
    const MemberOptimizer& Facts = memberOptimizer(*Member, Context);
    if (Facts.Problem.empty())
      Result.push_back(&Facts);
  }
  return Result;
}

const MemberOptimizer* preparedMemberBuiltBy(const clang::Expr& Construction, clang::ASTContext& Context) {
  for (const MemberOptimizer* Member : preparedMemberOptimizers(Context))
    for (const MemberOptimizerBuild& Build : Member->Builds)
      if (Build.Construction == &Construction)
        return Member;
  return nullptr;
}

namespace {

/// The template argument of a container type that holds its elements: a sequence's first, a map's second.
/// Null for any other type.
const clang::TemplateSpecializationType* containerTemplate(clang::QualType Type, bool& IsMap) {
  const auto* Specialization = Type->getAs<clang::TemplateSpecializationType>();
  if (!Specialization)
    return nullptr;
  const clang::TemplateDecl* Template = Specialization->getTemplateName().getAsTemplateDecl();
  const std::string Name = Template ? Template->getQualifiedNameAsString() : "";
  IsMap = Name == "std::map" || Name == "std::unordered_map";
  if (IsMap || Name == "std::vector" || Name == "std::deque" || Name == "std::list")
    return Specialization;
  return nullptr;
}

/// How a container element holds its optimizer, or Holding::Other when it does not hold one.
Holding elementHolding(clang::QualType Element, clang::ASTContext& Context) {
  if (match(qualType(isOptimizerTypeImpl()), Element, Context).empty())
    return Holding::Other;
  clang::QualType Type = Element.getCanonicalType();
  if (Type->isReferenceType())
    return Holding::Other;
  if (Type->isPointerType())
    return Holding::RawPointer;
  const auto* Record = Type->getAsCXXRecordDecl();
  const std::string Name = Record ? Record->getQualifiedNameAsString() : "";
  if (Name == "std::unique_ptr" || Name == "std::shared_ptr")
    return Holding::SmartPointer;
  return Record ? Holding::Object : Holding::Other;
}

/// True when `Element` (an element of the container: `C[i]`, a range-for variable's use) is used as a
/// prepared optimizer can be: `->step()` / `->zero_grad()` / `->param_groups()` (`.` by value), or `*element`
/// passed as a torch::optim::Optimizer&.
bool isSupportedElementUse(const clang::Expr& Element, Holding Held, clang::ASTContext& Context) {
  clang::DynTypedNode Storage;
  const clang::DynTypedNode* Parent = spelledParent(Element, Context, Storage);
  const auto* ParentExpr = Parent ? Parent->get<clang::Expr>() : nullptr;
  if (const auto* Access = llvm::dyn_cast_or_null<clang::MemberExpr>(ParentExpr))
    return Held != Holding::SmartPointer && Access->isArrow() == (Held == Holding::RawPointer) &&
           isSharedOptimizerMember(Access->getMemberNameInfo().getAsString());
  if (const auto* Operator = llvm::dyn_cast_or_null<clang::CXXOperatorCallExpr>(ParentExpr)) {
    if (Held == Holding::SmartPointer && Operator->getOperator() == clang::OO_Arrow) {
      clang::DynTypedNode Above;
      const clang::DynTypedNode* Next = spelledParent(*Operator, Context, Above);
      const auto* Access = Next ? Next->get<clang::MemberExpr>() : nullptr;
      return Access && isSharedOptimizerMember(Access->getMemberNameInfo().getAsString());
    }
    if (Held == Holding::SmartPointer && Operator->getOperator() == clang::OO_Star)
      return isUsedAsLibtorchOptimizer(*Operator, Context);
    return false;
  }
  if (const auto* Unary = llvm::dyn_cast_or_null<clang::UnaryOperator>(ParentExpr))
    return Held == Holding::RawPointer && Unary->getOpcode() == clang::UO_Deref &&
           isUsedAsLibtorchOptimizer(*Unary, Context);
  return Held == Holding::Object && isUsedAsLibtorchOptimizer(Element, Context);
}

OptimizerContainer analyseOptimizerContainer(const clang::VarDecl& Variable, clang::ASTContext& Context) {
  const clang::SourceManager& SM = Context.getSourceManager();
  OptimizerContainer Result;
  Result.Variable = &Variable;
  auto Refuse = [&](std::string Why) {
    Result.Problem = std::move(Why);
    Result.Fills.clear();
    return Result;
  };
  bool IsMap = false;
  const clang::TemplateSpecializationType* Container = containerTemplate(Variable.getType(), IsMap);
  const auto Arguments = Container->template_arguments();
  const unsigned ElementIndex = IsMap ? 1 : 0;
  Result.Map = IsMap;
  const Holding Held = elementHolding(Arguments[ElementIndex].getAsType(), Context);
  // The element type as written: `std::vector<std::unique_ptr<torch::optim::Optimizer>> opts;`.
  clang::TypeLoc Written = Variable.getTypeSourceInfo()->getTypeLoc().getUnqualifiedLoc();
  if (auto Elaborated = Written.getAs<clang::ElaboratedTypeLoc>())
    Written = Elaborated.getNamedTypeLoc();
  auto Specialization = Written.getAs<clang::TemplateSpecializationTypeLoc>();
  if (!Specialization || Specialization.getNumArgs() <= ElementIndex)
    return Refuse("its type is not written out (`auto`, an alias): the element type the prepared optimizers "
                  "need cannot be written in its place");
  Result.ElementType = Specialization.getArgLoc(ElementIndex).getSourceRange();
  if (Result.ElementType.isInvalid() || Result.ElementType.getBegin().isMacroID())
    return Refuse("its element type is written by a macro");
  if (Variable.getInit()) {
    const auto* Construct = llvm::dyn_cast<clang::CXXConstructExpr>(Variable.getInit()->IgnoreImplicit());
    if (!Construct || Construct->getNumArgs() != 0)
      return Refuse("it is initialised with elements or another container; fill it with push_back or "
                    "emplace_back of `std::make_unique<T>(...)` instead");
  }
  const clang::FunctionDecl* Function = nullptr;
  for (const clang::DynTypedNode& Parent : Context.getParents(Variable))
    if (const auto* Statement = Parent.get<clang::DeclStmt>())
      Function = enclosingFunction(*Statement, Context);
  if (!Function || !Function->getBody())
    return Refuse("it is not a local variable of a function");
  auto AddFill = [&](const clang::Expr* Value, const clang::Expr* Statement) {
    std::optional<MemberOptimizerBuild> Build = buildSite(Value, Held == Holding::Object);
    if (!Build)
      return false;
    Build->Statement = Statement;
    Result.Fills.push_back(*Build);
    return true;
  };
  auto Uses =
      match(traverse(clang::TK_AsIs,
                     decl(forEachDescendant(declRefExpr(to(varDecl(equalsNode(&Variable)))).bind("use")))),
            *Function, Context);
  for (const BoundNodes& Found : Uses) {
    const auto* Use = Found.getNodeAs<clang::DeclRefExpr>("use");
    const unsigned Line = lineOf(Use->getBeginLoc(), SM);
    auto Unsupported = [&](llvm::StringRef What) {
      return Refuse(
          "it is " + What.str() + " at line " + std::to_string(Line) +
          ", which a container of prepared optimizers (accelerate::Optimizer) does not support; keep "
          "to filling it with push_back / emplace_back of `std::make_unique<T>(...)`, iterating it "
          "and step(), zero_grad(), param_groups() on its elements, or prepare them by hand");
    };
    if (Use->getBeginLoc().isMacroID())
      return Refuse("it is used in a macro at line " + std::to_string(Line));
    clang::DynTypedNode Storage;
    const clang::DynTypedNode* Parent = spelledParent(*Use, Context, Storage);
    if (!Parent)
      return Unsupported("used");
    // `for (auto& optimizer : optimizers)`: every use of the variable is an element's. Seen with implicit
    // nodes, the container initialises the loop's hidden `__range` variable.
    const clang::CXXForRangeStmt* RangeFor = Parent->get<clang::CXXForRangeStmt>();
    if (const auto* Hidden = Parent->get<clang::VarDecl>(); Hidden && Hidden->isImplicit())
      for (const clang::DynTypedNode& Above : Context.getParents(*Hidden))
        if (const auto* Statement = Above.get<clang::DeclStmt>())
          for (const clang::DynTypedNode& Loop : Context.getParents(*Statement))
            if (const auto* Found = Loop.get<clang::CXXForRangeStmt>();
                Found && Found->getRangeStmt() == Statement)
              RangeFor = Found;
    if (RangeFor) {
      const clang::VarDecl* Element = RangeFor->getLoopVariable();
      if (IsMap || !Element->getType()->isReferenceType())
        return Unsupported(IsMap ? "iterated (a map's elements are pairs)" : "iterated by value");
      auto ElementUses = match(
          traverse(clang::TK_AsIs,
                   stmt(forEachDescendant(declRefExpr(to(varDecl(equalsNode(Element)))).bind("element")))),
          *RangeFor->getBody(), Context);
      for (const BoundNodes& ElementUse : ElementUses)
        if (!isSupportedElementUse(*ElementUse.getNodeAs<clang::DeclRefExpr>("element"), Held, Context))
          return Unsupported("iterated, its element used other than through step(), zero_grad() and "
                             "param_groups(),");
      continue;
    }
    const auto* ParentExpr = Parent->get<clang::Expr>();
    if (const auto* Access = llvm::dyn_cast_or_null<clang::MemberExpr>(ParentExpr)) {
      const std::string Called = Access->getMemberNameInfo().getAsString();
      clang::DynTypedNode Above;
      const clang::DynTypedNode* Next = spelledParent(*Access, Context, Above);
      const auto* Call = Next ? Next->get<clang::CXXMemberCallExpr>() : nullptr;
      if (!Call)
        return Unsupported("used through '" + Called + "'");
      if ((Called == "push_back" || Called == "emplace_back") && !IsMap && Call->getNumArgs() == 1) {
        if (!isBlockStatement(*Call, Context))
          return Unsupported("filled inside a larger expression");
        if (!AddFill(Call->getArg(0), Call))
          return Unsupported("filled with something other than `new T(...)`, `std::make_unique<T>(...)` or "
                             "`std::make_shared<T>(...)` of an optimizer type T");
        continue;
      }
      if (Called == "emplace" && IsMap && Call->getNumArgs() == 2 && isBlockStatement(*Call, Context)) {
        if (!AddFill(Call->getArg(1), Call))
          return Unsupported(
              "filled with something other than `std::make_unique<T>(...)` of an optimizer type T");
        continue;
      }
      if (Called == "size" || Called == "empty" || Called == "reserve")
        continue;
      if (Called == "at" && Call->getNumArgs() == 1) {
        if (!isSupportedElementUse(*Call, Held, Context))
          return Unsupported(
              "an element of it used other than through step(), zero_grad() and param_groups(),");
        continue;
      }
      return Unsupported("used through '" + Called + "'");
    }
    if (const auto* Operator = llvm::dyn_cast_or_null<clang::CXXOperatorCallExpr>(ParentExpr)) {
      if (Operator->getOperator() == clang::OO_Subscript && Operator->getArg(0)->IgnoreImplicit() == Use) {
        // `optimizers["g"] = std::make_unique<T>(...)` in a map.
        clang::DynTypedNode Above;
        const clang::DynTypedNode* Next = spelledParent(*Operator, Context, Above);
        const auto* Assign = Next ? Next->get<clang::CXXOperatorCallExpr>() : nullptr;
        const auto* RawAssign = Next ? Next->get<clang::BinaryOperator>() : nullptr;
        const clang::Expr* Assigned = nullptr;
        const clang::Expr* Statement = nullptr;
        if (Assign && Assign->getOperator() == clang::OO_Equal &&
            Assign->getArg(0)->IgnoreImplicit() == Operator) {
          Assigned = Assign->getArg(1);
          Statement = Assign;
        } else if (RawAssign && RawAssign->getOpcode() == clang::BO_Assign &&
                   RawAssign->getLHS()->IgnoreImplicit() == Operator) {
          Assigned = RawAssign->getRHS();
          Statement = RawAssign;
        }
        if (Assigned) {
          if (!isBlockStatement(*Statement, Context))
            return Unsupported("assigned inside a larger expression");
          if (!AddFill(Assigned, Statement))
            return Unsupported("assigned something other than `new T(...)`, `std::make_unique<T>(...)` or "
                               "`std::make_shared<T>(...)` of an optimizer type T");
          continue;
        }
        if (!isSupportedElementUse(*Operator, Held, Context))
          return Unsupported(
              "an element of it used other than through step(), zero_grad() and param_groups(),");
        continue;
      }
    }
    return Unsupported("used as a value");
  }
  if (Result.Fills.empty())
    return Refuse("nothing in its function fills it with an optimizer made there");
  for (const MemberOptimizerBuild& Fill : Result.Fills)
    if (modelsTrainedBy(*Fill.Construction, Context).empty())
      return Refuse("the optimizer added at line " + std::to_string(lineOf(Fill.Made->getBeginLoc(), SM)) +
                    " takes no model's parameters(), so no model is known whose gradients to synchronise");
  return Result;
}

AST_MATCHER(clang::VarDecl, isOptimizerContainer) {
  bool IsMap = false;
  const clang::TemplateSpecializationType* Container = containerTemplate(Node.getType(), IsMap);
  if (!Container || Container->template_arguments().size() <= (IsMap ? 1u : 0u))
    return false;
  const clang::TemplateArgument& Element = Container->template_arguments()[IsMap ? 1 : 0];
  return Element.getKind() == clang::TemplateArgument::Type &&
         elementHolding(Element.getAsType(), Finder->getASTContext()) != Holding::Other;
}

} // namespace

std::vector<const OptimizerContainer*> optimizerContainers(clang::ASTContext& Context) {
  OptimizerContainerCache& Cache = TheOptimizerContainerCache;
  if (Cache.Context != &Context || Cache.Unit != Context.getTranslationUnitDecl() || !Cache.Containers) {
    Cache = OptimizerContainerCache{&Context, Context.getTranslationUnitDecl(),
                                    std::vector<OptimizerContainer>()};
    auto Container =
        varDecl(hasLocalStorage(), unless(parmVarDecl()), isOptimizerContainer()).bind("container");
    for (const clang::VarDecl* Variable : allInMainFile<clang::VarDecl>(Container, "container", Context))
      if (!Variable->getDeclContext()->isDependentContext())
        Cache.Containers->push_back(analyseOptimizerContainer(*Variable, Context));
  }
  std::vector<const OptimizerContainer*> Result;
  for (const OptimizerContainer& Container : *Cache.Containers)
    Result.push_back(&Container);
  return Result;
}

const OptimizerContainer* preparedContainerFilledBy(const clang::Expr& Construction,
                                                    clang::ASTContext& Context) {
  for (const OptimizerContainer* Container : optimizerContainers(Context))
    if (Container->Problem.empty())
      for (const MemberOptimizerBuild& Fill : Container->Fills)
        if (Fill.Construction == &Construction)
          return Container;
  return nullptr;
}

bool isTrainedModel(const clang::ValueDecl& Model, clang::ASTContext& Context) {
  for (const clang::Expr* Construction : optimizerConstructions(Context))
    for (const clang::Expr* Trained : isPreparedConstruction(*Construction, Context)
                                          ? modelsTrainedBy(*Construction, Context)
                                          : std::vector<const clang::Expr*>())
      if (namedDeclaration(Trained) == &Model)
        return true;
  return false;
}

StatementMatcher tensorBackwardCall() {
  auto TensorClass = cxxRecordDecl(isSameOrDerivedFrom(hasAnyName("::at::Tensor", "::at::TensorBase")));
  return cxxMemberCallExpr(callee(cxxMethodDecl(hasName("backward"), ofClass(TensorClass))),
                           unless(isExpansionInSystemHeader()));
}

StatementMatcher dependentBackwardCall() {
  return callExpr(callee(cxxDependentScopeMemberExpr(hasMemberName("backward"), hasObjectExpression(expr()))),
                  isDependentCall(), unless(isExpansionInSystemHeader()));
}

clang::ast_matchers::internal::Matcher<clang::CallExpr> isTensorBackwardInEveryInstantiation() {
  return tensorBackwardInEveryInstantiationImpl();
}

StatementMatcher autogradBackwardCall() {
  return callExpr(callee(functionDecl(hasName("::torch::autograd::backward"))),
                  unless(isExpansionInSystemHeader()));
}

std::vector<const clang::Expr*> autogradBackwardLosses(const clang::CallExpr& Call,
                                                       clang::ASTContext& Context) {
  if (Call.getNumArgs() == 0)
    return {};
  for (unsigned I = 1; I < Call.getNumArgs(); ++I)
    if (!llvm::isa<clang::CXXDefaultArgExpr>(Call.getArg(I)))
      return {};
  auto Lists =
      match(traverse(clang::TK_AsIs, findAll(initListExpr().bind("list"))), *Call.getArg(0), Context);
  if (Lists.empty())
    return {};
  std::vector<const clang::Expr*> Losses;
  for (const clang::Expr* Init : Lists.front().getNodeAs<clang::InitListExpr>("list")->inits())
    Losses.push_back(Init->IgnoreUnlessSpelledInSource());
  return Losses;
}

StatementMatcher trainingBackwardCall() {
  return stmt(anyOf(cxxMemberCallExpr(tensorBackwardCall()),
                    callExpr(dependentBackwardCall(), isTensorBackwardInEveryInstantiation()),
                    autogradBackwardCall()),
              unless(isInMacroExpansion()), isInTrainingFile(), unless(isInDistributedFunction()));
}

namespace {

/// A backward call in `S`, or in a function of the main file that `S` calls, `Depth` calls deep at most.
bool runsBackward(const clang::Stmt& S, clang::ASTContext& Context, int Depth) {
  auto DependentBackward = callExpr(callee(cxxDependentScopeMemberExpr(hasMemberName("backward"))));
  auto Backward = stmt(anyOf(trainingBackwardCall(), DependentBackward));
  if (!match(traverse(clang::TK_AsIs, stmt(hasDescendant(Backward))), S, Context).empty())
    return true;
  if (Depth == 0)
    return false;
  const clang::SourceManager& SM = Context.getSourceManager();
  auto Call = callExpr(callee(functionDecl(hasBody(stmt())).bind("callee")));
  for (const BoundNodes& Found : match(traverse(clang::TK_AsIs, stmt(forEachDescendant(Call))), S, Context)) {
    const auto* Callee = Found.getNodeAs<clang::FunctionDecl>("callee");
    if (const clang::FunctionDecl* Pattern = Callee->getTemplateInstantiationPattern())
      Callee = Pattern;
    if (!isInRewrittenFile(SM, Callee->getLocation()) || Callee->getBody() == &S)
      continue;
    if (runsBackward(*Callee->getBody(), Context, Depth - 1))
      return true;
  }
  return false;
}

} // namespace

bool loopTrains(const clang::Stmt& Loop, clang::ASTContext& Context) {
  return runsBackward(Loop, Context, /*Depth=*/2);
}

namespace {

/// The loader every call of `Parameter`'s function passes for it: a loader variable, or a parameter of the
/// calling function that is itself such a loader (`fit(model, *loader)` → `run_epoch(model, loader)`), up to
/// `Depth` calls up. Calls made in template instantiations count for the template. Null when a call passes
/// anything else, or nothing calls the function.
const clang::VarDecl* loaderPassedFor(const clang::ParmVarDecl& Parameter, clang::ASTContext& Context,
                                      int Depth) {
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

namespace {

/// A number read from a tensor: `loss.item<float>()`, `loss.item().toFloat()`, or in a template
/// `loss.template item<float>()`.
StatementMatcher itemRead() {
  return expr(anyOf(cxxMemberCallExpr(callee(cxxMethodDecl(hasName("item")))),
                    callExpr(callee(cxxDependentScopeMemberExpr(hasMemberName("item"))))));
}

/// The variables of `Function` (its locals, and the globals it writes) whose value comes from a tensor's:
/// initialised or assigned (`=`, `+=`, ...) anywhere in the function from a number read from a tensor, or
/// from another such variable, to a fixpoint. `running += loss.item<float>(); avg = running / n;` makes
/// both `running` and `avg` per-process values.
llvm::SmallPtrSet<const clang::VarDecl*, 8> tensorDerivedVariables(const clang::FunctionDecl& Function,
                                                                   clang::ASTContext& Context) {
  llvm::SmallPtrSet<const clang::VarDecl*, 8> Derived;
  if (!Function.hasBody())
    return Derived;
  std::vector<std::pair<const clang::VarDecl*, const clang::Expr*>> Writes =
      variableWrites(Function, Context);
  auto ReadsTensor = expr(anyOf(itemRead(), hasDescendant(itemRead())));
  for (bool Changed = true; Changed;) {
    Changed = false;
    for (const auto& [Variable, Value] : Writes) {
      if (Derived.contains(Variable))
        continue;
      bool FromTensor = !match(traverse(clang::TK_AsIs, ReadsTensor), *Value, Context).empty();
      for (const BoundNodes& Read :
           match(traverse(clang::TK_AsIs, findAll(declRefExpr(to(varDecl().bind("read"))))), *Value, Context))
        FromTensor = FromTensor || Derived.contains(Read.getNodeAs<clang::VarDecl>("read"));
      if (FromTensor) {
        Derived.insert(Variable);
        Changed = true;
      }
    }
  }
  return Derived;
}

} // namespace

bool containsMatch(const StatementMatcher& Matcher, const clang::Stmt& S, clang::ASTContext& Context) {
  return !match(traverse(clang::TK_AsIs, stmt(anyOf(Matcher, hasDescendant(Matcher)))), S, Context).empty();
}

std::vector<std::pair<const clang::VarDecl*, const clang::Expr*>>
variableWrites(const clang::FunctionDecl& Function, clang::ASTContext& Context) {
  std::vector<std::pair<const clang::VarDecl*, const clang::Expr*>> Writes;
  if (!Function.hasBody())
    return Writes;
  for (const BoundNodes& Found :
       match(stmt(forEachDescendant(varDecl(hasInitializer(expr().bind("value"))).bind("variable"))),
             *Function.getBody(), Context))
    Writes.emplace_back(Found.getNodeAs<clang::VarDecl>("variable"), Found.getNodeAs<clang::Expr>("value"));
  auto Target = ignoringParenImpCasts(declRefExpr(to(varDecl().bind("variable"))));
  for (const BoundNodes& Found :
       match(findAll(expr(
                 anyOf(binaryOperator(isAssignmentOperator(), hasLHS(Target), hasRHS(expr().bind("value"))),
                       cxxOperatorCallExpr(isAssignmentOperator(), hasArgument(0, Target),
                                           hasArgument(1, expr().bind("value")))))),
             *Function.getBody(), Context))
    Writes.emplace_back(Found.getNodeAs<clang::VarDecl>("variable"), Found.getNodeAs<clang::Expr>("value"));
  return Writes;
}

bool isUnderTensorCondition(const clang::Stmt& S, clang::ASTContext& Context) {
  // A tensor, a dependent value, a number read from a tensor, or a variable that holds one.
  auto TensorValue = expr(anyOf(declRefExpr(hasType(cxxRecordDecl(isSameOrDerivedFrom("::at::TensorBase")))),
                                declRefExpr(isTypeDependent()), cxxDependentScopeMemberExpr(), itemRead()));
  const clang::FunctionDecl* Function = enclosingFunction(S, Context);
  std::optional<llvm::SmallPtrSet<const clang::VarDecl*, 8>> Derived;
  clang::DynTypedNodeList Parents = Context.getParents(S);
  while (!Parents.empty() && !Parents[0].get<clang::FunctionDecl>()) {
    const clang::Expr* Condition = nullptr;
    if (const auto* If = Parents[0].get<clang::IfStmt>())
      Condition = If->getCond();
    else if (const auto* While = Parents[0].get<clang::WhileStmt>())
      Condition = While->getCond();
    else if (const auto* For = Parents[0].get<clang::ForStmt>())
      Condition = For->getCond();
    if (Condition) {
      if (!match(traverse(clang::TK_AsIs, expr(anyOf(TensorValue, hasDescendant(TensorValue)))), *Condition,
                 Context)
               .empty())
        return true;
      if (Function && !Derived)
        Derived = tensorDerivedVariables(*Function, Context);
      if (Derived)
        for (const BoundNodes& Read :
             match(traverse(clang::TK_AsIs, findAll(declRefExpr(to(varDecl().bind("read"))))), *Condition,
                   Context))
          if (Derived->contains(Read.getNodeAs<clang::VarDecl>("read")))
            return true;
    }
    Parents = Context.getParents(Parents[0]);
  }
  return false;
}

bool isInTrainingLoop(const clang::Stmt& S, clang::ASTContext& Context) {
  clang::DynTypedNodeList Parents = Context.getParents(S);
  while (!Parents.empty() && !Parents[0].get<clang::FunctionDecl>()) {
    const auto* Loop = Parents[0].get<clang::Stmt>();
    if (Loop &&
        (llvm::isa<clang::ForStmt>(Loop) || llvm::isa<clang::CXXForRangeStmt>(Loop) ||
         llvm::isa<clang::WhileStmt>(Loop) || llvm::isa<clang::DoStmt>(Loop)) &&
        loopTrains(*Loop, Context))
      return true;
    Parents = Context.getParents(Parents[0]);
  }
  return false;
}

StatementMatcher optimizerStep() {
  return cxxMemberCallExpr(callee(cxxMethodDecl(
      hasName("step"), ofClass(cxxRecordDecl(isSameOrDerivedFrom("::torch::optim::Optimizer"))))));
}

bool isTrainingOrEvaluationFunction(const clang::FunctionDecl& Function, clang::ASTContext& Context) {
  if (!Function.hasBody())
    return false;
  if (Function.isMain())
    return true;
  const clang::Stmt& Body = *Function.getBody();
  if (loopTrains(Body, Context))
    return true;
  auto Guard = varDecl(hasType(cxxRecordDecl(hasName("::torch::NoGradGuard"))));
  // A function that makes an optimizer sets training up, and hands it to the code that runs it.
  auto MakesOptimizer = stmt(anyOf(declStmt(has(varDecl(hasType(isOptimizerType())))),
                                   cxxConstructExpr(hasType(isOptimizerType()))));
  if (!match(traverse(clang::TK_AsIs, stmt(hasDescendant(stmt(
                                          anyOf(optimizerStep(), declStmt(has(Guard)), MakesOptimizer))))),
             Body, Context)
           .empty())
    return true;
  for (const BoundNodes& Found : match(
           traverse(clang::TK_AsIs, stmt(forEachDescendant(cxxForRangeStmt().bind("loop")))), Body, Context))
    if (iteratedLoader(*Found.getNodeAs<clang::Stmt>("loop"), Context))
      return true;
  return false;
}

clang::ast_matchers::internal::Matcher<clang::Stmt> isInTrainingOrEvaluationCode() {
  return inTrainingOrEvaluationCodeImpl();
}

namespace {
AST_MATCHER(clang::Stmt, inTrainingHelperImpl) {
  clang::ASTContext& Context = Finder->getASTContext();
  const clang::FunctionDecl* Function = enclosingFunction(Node, Context);
  return Function && isTrainingHelper(*Function, Context);
}
} // namespace

clang::ast_matchers::internal::Matcher<clang::Stmt> isInTrainingHelper() {
  return inTrainingHelperImpl();
}

// ---- Numbers computed on this process's share of the data ------------------------------------------------

namespace {

bool isConstantValue(const clang::Expr& E, clang::ASTContext& Context) {
  return !E.isValueDependent() && E.isEvaluatable(Context);
}

} // namespace

StatementMatcher perProcessRead() {
  auto Tensor = ofClass(cxxRecordDecl(isSameOrDerivedFrom("::at::TensorBase")));
  return expr(anyOf(cxxMemberCallExpr(callee(cxxMethodDecl(hasName("item")))),
                    cxxMemberCallExpr(callee(cxxMethodDecl(hasAnyName("size", "numel"), Tensor))),
                    callExpr(callee(cxxDependentScopeMemberExpr(
                        anyOf(hasMemberName("item"), hasMemberName("size"), hasMemberName("numel")))))));
}

namespace {

/// A sum or a count: `.sum()`, `torch::sum`, a tensor's size, `count_nonzero`.
StatementMatcher sumOrCount() {
  auto Tensor = ofClass(cxxRecordDecl(isSameOrDerivedFrom("::at::TensorBase")));
  return expr(anyOf(
      cxxMemberCallExpr(callee(cxxMethodDecl(hasAnyName("sum", "size", "numel", "count_nonzero"), Tensor))),
      callExpr(callee(functionDecl(
          hasAnyName("::at::sum", "::torch::sum", "::at::count_nonzero", "::torch::count_nonzero")))),
      callExpr(callee(cxxDependentScopeMemberExpr(
          anyOf(hasMemberName("sum"), hasMemberName("size"), hasMemberName("numel")))))));
}

} // namespace

namespace {

/// Where a value of training code comes from: the same on every process (module parameters, constants, an
/// unprepared loader's batches), this process's share of a prepared loader's data, or a source the pass
/// cannot see (a tensor parameter, member or global).
enum class Origin { Alike, Share, Unseen };

Origin join(Origin A, Origin B) {
  if (A == Origin::Share || B == Origin::Share)
    return Origin::Share;
  return A == Origin::Unseen || B == Origin::Unseen ? Origin::Unseen : Origin::Alike;
}

/// The origins of the values `Function` reads, found by following its locals' writes (data flow, within the
/// function).
class Origins {
public:
  Origins(const clang::FunctionDecl& Function, clang::ASTContext& Context)
      : Function(Function), Context(Context), Writes(variableWrites(Function, Context)) {}

  /// The origin of `E`: the join of the origins of every variable and member it reads.
  Origin of(const clang::Expr& E) {
    Origin Result = Origin::Alike;
    auto Reference = declRefExpr().bind("reference");
    for (const BoundNodes& Found :
         match(traverse(clang::TK_AsIs, expr(anyOf(Reference, forEachDescendant(Reference)))), E, Context)) {
      const clang::ValueDecl* Read = Found.getNodeAs<clang::DeclRefExpr>("reference")->getDecl();
      if (const auto* Binding = llvm::dyn_cast<clang::BindingDecl>(Read))
        Read = Binding->getDecomposedDecl();
      if (const auto* Variable = llvm::dyn_cast_or_null<clang::VarDecl>(Read))
        Result = join(Result, of(*Variable));
    }
    auto Member = memberExpr(has(ignoringParenImpCasts(cxxThisExpr())), member(fieldDecl().bind("field")));
    for (const BoundNodes& Found :
         match(traverse(clang::TK_AsIs, expr(anyOf(Member, forEachDescendant(Member)))), E, Context))
      Result = join(Result, ofType(Found.getNodeAs<clang::FieldDecl>("field")->getType()));
    return Result;
  }

private:
  /// A parameter, member or global: a model or an optimizer is alike on every process (prepare makes it so),
  /// so is a number or a constant; anything else (a tensor, a batch) is not seen.
  Origin ofType(clang::QualType Type) {
    if (Type->isArithmeticType() || Type.isConstQualified() ||
        !match(qualType(anyOf(isModuleType(), isOptimizerType())), Type, Context).empty())
      return Origin::Alike;
    return Origin::Unseen;
  }

  Origin of(const clang::VarDecl& Variable) {
    if (auto Known = Memo.find(&Variable); Known != Memo.end())
      return Known->second;
    // A value written from itself (`total += ...`), or from a variable written from it, adds nothing by that
    // read; a result that leaned on a variable still being followed is not kept (it may yet become a share).
    if (auto* Open = llvm::find(Following, &Variable); Open != Following.end()) {
      LowestOpen = std::min<size_t>(LowestOpen, Open - Following.begin());
      return Origin::Alike;
    }
    size_t Index = Following.size(), Outer = LowestOpen;
    Following.push_back(&Variable);
    LowestOpen = SIZE_MAX;
    Origin Result = compute(Variable);
    Following.pop_back();
    if (LowestOpen >= Index) {
      Memo[&Variable] = Result;
      LowestOpen = Outer;
    } else {
      LowestOpen = std::min(LowestOpen, Outer);
    }
    return Result;
  }

  Origin compute(const clang::VarDecl& Variable) {
    if (llvm::isa<clang::ParmVarDecl>(Variable) || !Variable.hasLocalStorage())
      return ofType(Variable.getType());
    if (isPreparedLoader(Variable, Context))
      return Origin::Share;
    // The element of a range-for: a loader's batch, or an element of what it iterates.
    for (const BoundNodes& Found :
         match(traverse(clang::TK_AsIs,
                        stmt(forEachDescendant(
                            cxxForRangeStmt(hasLoopVariable(varDecl(equalsNode(&Variable)))).bind("loop")))),
               *Function.getBody(), Context)) {
      const auto* Loop = Found.getNodeAs<clang::CXXForRangeStmt>("loop");
      if (const clang::VarDecl* Loader = iteratedLoader(*Loop, Context))
        return isPreparedLoader(*Loader, Context) ? Origin::Share : Origin::Alike;
      return Loop->getRangeInit() ? of(*Loop->getRangeInit()) : Origin::Unseen;
    }
    Origin Result = Origin::Alike;
    for (const auto& [Written, Value] : Writes)
      if (Written == &Variable)
        Result = join(Result, of(*Value));
    // Filled in place: `total.add_(loss)`, `losses.push_back(loss)`.
    auto Filled =
        cxxMemberCallExpr(
            on(ignoringParenImpCasts(declRefExpr(to(varDecl(equalsNode(&Variable)))))),
            callee(cxxMethodDecl(anyOf(
                matchesName("_$"), hasAnyName("push_back", "emplace_back", "insert", "emplace", "append")))))
            .bind("fill");
    for (const BoundNodes& Found :
         match(traverse(clang::TK_AsIs, stmt(forEachDescendant(Filled))), *Function.getBody(), Context))
      for (const clang::Expr* Argument : Found.getNodeAs<clang::CXXMemberCallExpr>("fill")->arguments())
        Result = join(Result, of(*Argument));
    return Result;
  }

  const clang::FunctionDecl& Function;
  clang::ASTContext& Context;
  std::vector<std::pair<const clang::VarDecl*, const clang::Expr*>> Writes;
  llvm::DenseMap<const clang::VarDecl*, Origin> Memo;
  llvm::SmallVector<const clang::VarDecl*, 8> Following;
  size_t LowestOpen = SIZE_MAX;
};

} // namespace

bool readsProcessShare(const clang::Expr& E, const clang::FunctionDecl& Function,
                       clang::ASTContext& Context) {
  if (!Function.hasBody())
    return false;
  std::optional<Origins> Sources;
  auto Read = expr(perProcessRead()).bind("read");
  for (const BoundNodes& Found :
       match(traverse(clang::TK_AsIs, expr(anyOf(Read, forEachDescendant(Read)))), E, Context)) {
    if (!Sources)
      Sources.emplace(Function, Context);
    if (Sources->of(*Found.getNodeAs<clang::Expr>("read")) != Origin::Alike)
      return true;
  }
  return false;
}

Share shareOf(const clang::VarDecl& Variable, const clang::FunctionDecl& Function, clang::ASTContext& Context,
              int Depth) {
  if (Depth > 4)
    return Share::Unknown;
  if (!Variable.hasLocalStorage() || llvm::isa<clang::ParmVarDecl>(Variable) ||
      !Variable.getType()->isArithmeticType() || !Function.hasBody())
    return Share::None;
  Share Result = Share::None;
  for (const auto& [Written, Write] : variableWrites(Function, Context)) {
    if (Written != &Variable)
      continue;
    if (isConstantValue(*Write, Context))
      continue;
    // Another local computed from the share (a ratio, a copy) cannot be reduced by kind.
    for (const BoundNodes& Read :
         match(traverse(clang::TK_AsIs, findAll(declRefExpr(to(varDecl().bind("read"))))), *Write, Context)) {
      const auto* Other = Read.getNodeAs<clang::VarDecl>("read");
      if (Other != &Variable && Other->hasLocalStorage() && !llvm::isa<clang::ParmVarDecl>(Other) &&
          Other->getType()->isArithmeticType() &&
          shareOf(*Other, Function, Context, Depth + 1) != Share::None)
        return Share::Unknown;
    }
    if (!readsProcessShare(*Write, Function, Context))
      continue;
    Share Kind = containsMatch(sumOrCount(), *Write, Context) ? Share::Sum : Share::Mean;
    if (Result != Share::None && Result != Kind)
      return Share::Unknown;
    Result = Kind;
  }
  return Result;
}

bool readsShardedData(const clang::FunctionDecl& Function, clang::ASTContext& Context) {
  if (!Function.hasBody())
    return false;
  for (const BoundNodes& Found :
       match(traverse(clang::TK_AsIs, stmt(forEachDescendant(cxxForRangeStmt().bind("loop")))),
             *Function.getBody(), Context))
    if (const clang::VarDecl* Loader = iteratedLoader(*Found.getNodeAs<clang::Stmt>("loop"), Context))
      if (isPreparedLoader(*Loader, Context))
        return true;
  return false;
}

std::vector<std::pair<const clang::DeclRefExpr*, Share>>
shareReads(const clang::Expr& E, const clang::FunctionDecl& Function, clang::ASTContext& Context) {
  std::vector<std::pair<const clang::DeclRefExpr*, Share>> Uses;
  auto Use = declRefExpr(to(varDecl())).bind("use");
  for (const BoundNodes& Found :
       match(traverse(clang::TK_AsIs, stmt(anyOf(Use, forEachDescendant(Use)))), E, Context)) {
    const auto* Read = Found.getNodeAs<clang::DeclRefExpr>("use");
    if (Share Kind = shareOf(*llvm::cast<clang::VarDecl>(Read->getDecl()), Function, Context);
        Kind != Share::None)
      Uses.emplace_back(Read, Kind);
  }
  return Uses;
}

// ---- Calls ----------------------------------------------------------------------------------------------

clang::ast_matchers::internal::Matcher<clang::Stmt> dependentReference() {
  return expr(anyOf(unresolvedLookupExpr(), cxxDependentScopeMemberExpr(), unresolvedMemberExpr()))
      .bind("dependent");
}

std::string spelledName(const clang::Expr& Unresolved) {
  if (const auto* Lookup = llvm::dyn_cast<clang::OverloadExpr>(&Unresolved))
    return Lookup->getName().getAsString();
  if (const auto* Member = llvm::dyn_cast<clang::CXXDependentScopeMemberExpr>(&Unresolved))
    return Member->getMember().getAsString();
  return "";
}

bool isNamed(const clang::FunctionDecl& Function, llvm::StringRef Name) {
  return Function.getDeclName().isIdentifier() && Function.getName() == Name;
}

bool callsAnyOf(const clang::Stmt& S, llvm::ArrayRef<const clang::FunctionDecl*> Targets,
                clang::ASTContext& Context, int Depth) {
  for (const BoundNodes& Found :
       match(traverse(clang::TK_AsIs, stmt(forEachDescendant(dependentReference()))), S, Context)) {
    const std::string Spelled = spelledName(*Found.getNodeAs<clang::Expr>("dependent"));
    if (llvm::any_of(Targets, [&](const clang::FunctionDecl* Target) { return isNamed(*Target, Spelled); }))
      return true;
  }
  auto Call = callExpr(callee(functionDecl().bind("callee")));
  for (const BoundNodes& Found : match(traverse(clang::TK_AsIs, stmt(forEachDescendant(Call))), S, Context)) {
    const auto* Callee = Found.getNodeAs<clang::FunctionDecl>("callee");
    if (const clang::FunctionDecl* Pattern = Callee->getTemplateInstantiationPattern())
      Callee = Pattern;
    if (llvm::any_of(Targets, [&](const clang::FunctionDecl* Target) {
          return Target->getCanonicalDecl() == Callee->getCanonicalDecl();
        }))
      return true;
    // A function calling itself is not followed into.
    if (Depth > 0 && Callee->hasBody() && Callee->getBody() != &S &&
        isInRewrittenFile(Context.getSourceManager(), Callee->getLocation()) &&
        callsAnyOf(*Callee->getBody(), Targets, Context, Depth - 1))
      return true;
  }
  return false;
}

// ---- Training runs --------------------------------------------------------------------------------

namespace {

bool isInLambda(const clang::Stmt& S, clang::ASTContext& Context) {
  clang::DynTypedNodeList Parents = Context.getParents(S);
  while (!Parents.empty() && !Parents[0].get<clang::FunctionDecl>()) {
    if (Parents[0].get<clang::LambdaExpr>())
      return true;
    Parents = Context.getParents(Parents[0]);
  }
  return false;
}

bool isIntegerVariable(const clang::VarDecl* Variable) {
  return Variable && Variable->hasLocalStorage() && !llvm::isa<clang::ParmVarDecl>(Variable) &&
         Variable->getType()->isIntegerType() && !Variable->getType()->isBooleanType();
}

/// The variable `S` adds one to, as a statement: `++n`, `n++`, `n += 1`.
const clang::VarDecl* incrementedVariable(const clang::Stmt* S) {
  const auto* E = llvm::dyn_cast_or_null<clang::Expr>(S);
  if (!E)
    return nullptr;
  E = E->IgnoreUnlessSpelledInSource()->IgnoreParens();
  const clang::Expr* Target = nullptr;
  if (const auto* Unary = llvm::dyn_cast<clang::UnaryOperator>(E); Unary && Unary->isIncrementOp())
    Target = Unary->getSubExpr();
  if (const auto* Compound = llvm::dyn_cast<clang::CompoundAssignOperator>(E);
      Compound && Compound->getOpcode() == clang::BO_AddAssign)
    if (const auto* One = llvm::dyn_cast<clang::IntegerLiteral>(Compound->getRHS()->IgnoreParenImpCasts());
        One && One->getValue() == 1)
      Target = Compound->getLHS();
  if (!Target)
    return nullptr;
  const auto* Reference = llvm::dyn_cast<clang::DeclRefExpr>(Target->IgnoreParenImpCasts());
  const auto* Variable = Reference ? llvm::dyn_cast<clang::VarDecl>(Reference->getDecl()) : nullptr;
  return isIntegerVariable(Variable) ? Variable : nullptr;
}

} // namespace

bool isLoop(const clang::Stmt& S) {
  return llvm::isa<clang::ForStmt, clang::CXXForRangeStmt, clang::WhileStmt, clang::DoStmt>(S);
}

std::vector<const clang::Stmt*> enclosingLoops(const clang::Stmt& S, clang::ASTContext& Context) {
  std::vector<const clang::Stmt*> Loops;
  clang::DynTypedNodeList Parents = Context.getParents(S);
  while (!Parents.empty() && !Parents[0].get<clang::FunctionDecl>() && !Parents[0].get<clang::LambdaExpr>()) {
    if (const auto* Parent = Parents[0].get<clang::Stmt>(); Parent && isLoop(*Parent))
      Loops.push_back(Parent);
    Parents = Context.getParents(Parents[0]);
  }
  return Loops;
}

std::vector<const clang::Stmt*> mainFileLoops(clang::ASTContext& Context) {
  const clang::SourceManager& SM = Context.getSourceManager();
  auto Loop = stmt(anyOf(forStmt(), cxxForRangeStmt(), whileStmt(), doStmt())).bind("loop");
  std::vector<const clang::Stmt*> Loops;
  for (const clang::Decl* TopLevel : Context.getTranslationUnitDecl()->decls()) {
    if (!SM.isWrittenInMainFile(SM.getExpansionLoc(TopLevel->getLocation())))
      continue;
    for (const BoundNodes& Found :
         match(traverse(clang::TK_IgnoreUnlessSpelledInSource, decl(forEachDescendant(Loop))), *TopLevel,
               Context))
      Loops.push_back(Found.getNodeAs<clang::Stmt>("loop"));
  }
  return Loops;
}

bool isTrainingRun(const clang::Stmt& Loop, clang::ASTContext& Context) {
  if (!isLoop(Loop) || isInLambda(Loop, Context) || !loopTrains(Loop, Context))
    return false;
  for (const clang::Stmt* Outer : enclosingLoops(Loop, Context))
    if (loopTrains(*Outer, Context))
      return false;
  const clang::FunctionDecl* Function = enclosingFunction(Loop, Context);
  if (!Function)
    return false;
  for (const clang::Stmt* Other : mainFileLoops(Context)) {
    const clang::FunctionDecl* Caller = enclosingFunction(*Other, Context);
    if (Caller && Caller->getCanonicalDecl() != Function->getCanonicalDecl() && loopTrains(*Other, Context) &&
        callsAnyOf(*Other, {Function}, Context, /*Depth=*/2))
      return false;
  }
  return true;
}

std::vector<const clang::Stmt*> trainingLoopsOf(const clang::Stmt& Run, clang::ASTContext& Context) {
  std::vector<const clang::Stmt*> Loops{&Run};
  auto Loop = stmt(anyOf(forStmt(), cxxForRangeStmt(), whileStmt(), doStmt())).bind("loop");
  while (true) {
    const clang::Stmt* Inner = nullptr;
    for (const BoundNodes& Found :
         match(traverse(clang::TK_IgnoreUnlessSpelledInSource, stmt(forEachDescendant(Loop))), *Loops.back(),
               Context)) {
      const auto* Candidate = Found.getNodeAs<clang::Stmt>("loop");
      if (!isInLambda(*Candidate, Context) && loopTrains(*Candidate, Context)) {
        Inner = Candidate;
        break;
      }
    }
    if (!Inner)
      return Loops;
    Loops.push_back(Inner);
  }
}

const clang::Stmt& innermostTrainingLoop(const clang::Stmt& Run, clang::ASTContext& Context) {
  return *trainingLoopsOf(Run, Context).back();
}

const clang::Stmt* loopBody(const clang::Stmt& Loop) {
  if (const auto* For = llvm::dyn_cast<clang::ForStmt>(&Loop))
    return For->getBody();
  if (const auto* RangeFor = llvm::dyn_cast<clang::CXXForRangeStmt>(&Loop))
    return RangeFor->getBody();
  if (const auto* While = llvm::dyn_cast<clang::WhileStmt>(&Loop))
    return While->getBody();
  if (const auto* Do = llvm::dyn_cast<clang::DoStmt>(&Loop))
    return Do->getBody();
  return nullptr;
}

unsigned writesIn(const clang::Stmt& Loop, const clang::VarDecl& Variable, clang::ASTContext& Context) {
  auto Target = ignoringParenImpCasts(declRefExpr(to(varDecl(equalsNode(&Variable)))));
  auto Write = expr(anyOf(binaryOperator(isAssignmentOperator(), hasLHS(Target)),
                          unaryOperator(hasAnyOperatorName("++", "--"), hasUnaryOperand(Target))));
  return match(traverse(clang::TK_IgnoreUnlessSpelledInSource, stmt(forEachDescendant(Write.bind("write")))),
               Loop, Context)
      .size();
}

const clang::VarDecl* forLoopCounter(const clang::Stmt& Loop) {
  const auto* For = llvm::dyn_cast<clang::ForStmt>(&Loop);
  const auto* Init = For ? llvm::dyn_cast_or_null<clang::DeclStmt>(For->getInit()) : nullptr;
  const auto* Variable =
      Init && Init->isSingleDecl() ? llvm::dyn_cast<clang::VarDecl>(Init->getSingleDecl()) : nullptr;
  return Variable && incrementedVariable(For->getInc()) == Variable ? Variable : nullptr;
}

std::optional<StepCounterFact> existingStepCounter(const clang::Stmt& Run, clang::ASTContext& Context) {
  const clang::Stmt& Inner = innermostTrainingLoop(Run, Context);
  if (&Inner == &Run)
    if (const clang::VarDecl* Variable = forLoopCounter(Run))
      return StepCounterFact{Variable, nullptr};
  const auto* Block = llvm::dyn_cast_or_null<clang::CompoundStmt>(loopBody(Inner));
  if (!Block)
    return std::nullopt;
  const clang::SourceManager& SM = Context.getSourceManager();
  for (const clang::Stmt* Statement : Block->body()) {
    const clang::VarDecl* Variable = incrementedVariable(Statement);
    // `if (++step % 10 == 0)`: the condition runs on every step too.
    if (const auto* If = llvm::dyn_cast<clang::IfStmt>(Statement); If && !Variable)
      for (const BoundNodes& Found :
           match(traverse(clang::TK_IgnoreUnlessSpelledInSource,
                          expr(anyOf(unaryOperator(hasOperatorName("++")).bind("increment"),
                                     hasDescendant(unaryOperator(hasOperatorName("++")).bind("increment"))))),
                 *If->getCond(), Context))
        if ((Variable = incrementedVariable(Found.getNodeAs<clang::Stmt>("increment"))))
          break;
    if (Variable && SM.isBeforeInTranslationUnit(Variable->getLocation(), Run.getBeginLoc()) &&
        writesIn(Run, *Variable, Context) == 1)
      return StepCounterFact{Variable, Statement};
  }
  return std::nullopt;
}

std::string freeName(const llvm::StringSet<>& Taken, std::initializer_list<const char*> Preferred,
                     llvm::StringRef Stem) {
  for (const char* Name : Preferred)
    if (!Taken.contains(Name))
      return Name;
  for (int Suffix = 2;; ++Suffix)
    if (std::string Name = Stem.str() + "_" + std::to_string(Suffix); !Taken.contains(Name))
      return Name;
}

llvm::StringSet<> takenNames(const clang::FunctionDecl& Function, clang::ASTContext& Context) {
  llvm::StringSet<> Taken;
  for (const clang::ParmVarDecl* Parameter : Function.parameters())
    Taken.insert(Parameter->getName());
  for (const BoundNodes& Found :
       match(traverse(clang::TK_AsIs, stmt(forEachDescendant(namedDecl().bind("named")))),
             *Function.getBody(), Context))
    if (const auto* Named = Found.getNodeAs<clang::NamedDecl>("named"); Named->getDeclName().isIdentifier())
      Taken.insert(Named->getName());
  const clang::SourceManager& SM = Context.getSourceManager();
  for (const clang::Decl* TopLevel : Context.getTranslationUnitDecl()->decls())
    if (const auto* Named = llvm::dyn_cast<clang::NamedDecl>(TopLevel))
      if (Named->getDeclName().isIdentifier() &&
          SM.isWrittenInMainFile(SM.getExpansionLoc(TopLevel->getLocation())))
        Taken.insert(Named->getName());
  return Taken;
}

} // namespace accelerate::passes
