// passes/TrainingCode.cpp: the facts about the user's code that several passes share.
#include "passes/TrainingCode.h"

#include "passes/BackwardPass.h"

#include "clang/AST/ASTContext.h"
#include "clang/AST/DeclCXX.h"
#include "clang/AST/DeclTemplate.h"
#include "clang/AST/ExprCXX.h"
#include "clang/AST/StmtCXX.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "clang/Basic/SourceManager.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"

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

/// Calls `Visit` with each top-level declaration written in the main file.
template <typename Callback> void forEachMainFileDecl(clang::ASTContext& Context, Callback Visit) {
  const clang::SourceManager& SM = Context.getSourceManager();
  for (clang::Decl* TopLevel : Context.getTranslationUnitDecl()->decls())
    if (SM.isWrittenInMainFile(SM.getExpansionLoc(TopLevel->getLocation())))
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
clang::ast_matchers::internal::Matcher<clang::QualType> isOptimizerType() {
  return isOptimizerTypeImpl();
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

std::vector<const clang::Expr*> modelsTrainedBy(const clang::Expr& OptimizerArguments,
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
  static thread_local int Depth = 0; // Vectors filled from vectors: a few levels, never a cycle.
  if (!Function || !Function->hasBody() || Depth > 2)
    return Models;
  struct DepthScope {
    DepthScope() { ++Depth; }
    ~DepthScope() { --Depth; }
  } Scope;
  auto Local = declRefExpr(to(varDecl(hasLocalStorage(), unless(hasType(isModuleType()))).bind("local")));
  for (const BoundNodes& Found : match(traverse(clang::TK_AsIs, expr(anyOf(Local, forEachDescendant(Local)))),
                                       OptimizerArguments, Context)) {
    const auto* Vector = Found.getNodeAs<clang::VarDecl>("local");
    auto Uses = declRefExpr(to(varDecl(equalsNode(Vector))));
    auto Filling = cxxForRangeStmt(hasRangeInit(expr().bind("range")), hasBody(hasDescendant(Uses)));
    for (const BoundNodes& Loop :
         match(traverse(clang::TK_AsIs, stmt(forEachDescendant(Filling))), *Function->getBody(), Context))
      for (const clang::Expr* Model : modelsTrainedBy(*Loop.getNodeAs<clang::Expr>("range"), Context))
        if (!llvm::is_contained(Seen, namedDeclaration(Model))) {
          Seen.push_back(namedDeclaration(Model));
          Models.push_back(Model);
        }
  }
  return Models;
}

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
  clang::DynTypedNodeList Above = Context.getParents(*Assignment);
  while (!Above.empty() && Above[0].get<clang::ExprWithCleanups>())
    Above = Context.getParents(Above[0]);
  return !Above.empty() && Above[0].get<clang::CompoundStmt>() ? Assignment : nullptr;
}

/// True when the prepare pass prepares the models of this construction: it initialises a local or (in a file
/// with main) a global declaration, or it is assigned to a smart pointer in a statement of its own.
bool isPreparedConstruction(const clang::Expr& Construction, clang::ASTContext& Context) {
  if (optimizerAssignment(Construction, Context))
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
  if (Variable->hasLocalStorage())
    return true;
  const clang::SourceManager& SM = Context.getSourceManager();
  for (const clang::Decl* TopLevel : Context.getTranslationUnitDecl()->decls())
    if (const auto* Function = llvm::dyn_cast<clang::FunctionDecl>(TopLevel))
      if (Function->isMain() && Function->hasBody() &&
          SM.isWrittenInMainFile(SM.getExpansionLoc(Function->getLocation())))
        return true;
  return false;
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

namespace {

/// A backward call in `S`, or in a function of the main file that `S` calls, `Depth` calls deep at most.
bool runsBackward(const clang::Stmt& S, clang::ASTContext& Context, int Depth) {
  auto DependentBackward = callExpr(callee(cxxDependentScopeMemberExpr(hasMemberName("backward"))));
  auto Backward = stmt(anyOf(rewritableBackwardCall(), DependentBackward));
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
    if (!SM.isWrittenInMainFile(SM.getExpansionLoc(Callee->getLocation())) || Callee->getBody() == &S)
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

} // namespace accelerate::passes
