// passes/OptimizerFacts.cpp: the facts module's optimizers (TrainingCode.h): where they are made, the models
// they train, optimizer members and containers of optimizers.
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
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringSet.h"

#include <map>
#include <optional>

namespace accelerate::passes {

using namespace clang::ast_matchers;
using namespace facts;

std::vector<const clang::Expr*> optimizerConstructions(clang::ASTContext& Context) {
  auto Construction =
      expr(anyOf(cxxConstructExpr(hasType(isOptimizerType()),
                                  unless(hasDeclaration(
                                      cxxConstructorDecl(anyOf(isCopyConstructor(), isMoveConstructor()))))),
                 callExpr(callee(functionDecl(hasAnyName("::std::make_shared", "::std::make_unique"))),
                          hasType(isOptimizerType()))))
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
    const bool Optimizer = !match(qualType(isOptimizerType()), Type, Context).empty();
    const bool Scheduler = !Optimizer && !match(qualType(isSchedulerType()), Type, Context).empty();
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
    if (match(qualType(anyOf(isOptimizerType(), isSchedulerType())), Variable->getType(), Context).empty())
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

} // namespace

namespace facts {
void forgetOptimizerFacts() {
  TheMemberOptimizerCache = MemberOptimizerCache();
  TheOptimizerContainerCache = OptimizerContainerCache();
  TheModelsTrainedByCache = ModelsTrainedByCache();
}
} // namespace facts

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
    auto Field = fieldDecl(hasType(qualType(isOptimizerType()))).bind("field");
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
  if (match(qualType(isOptimizerType()), Element, Context).empty())
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

} // namespace accelerate::passes
