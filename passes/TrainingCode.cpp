// passes/TrainingCode.cpp: the facts about the user's code that several passes share: types, where code is,
// backward calls, training loops and runs, calls (the other subjects: OptimizerFacts.cpp, LoaderFacts.cpp,
// ProcessShare.cpp).
#include "passes/TrainingCode.h"
#include "passes/FactsSupport.h"
#include "passes/Macros.h"
#include "passes/Pass.h"
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
using namespace facts;
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

namespace {

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
  TheTrainingHelperCache = TrainingHelperCache();
  TheRewrittenFiles = RewrittenFiles();
  facts::forgetOptimizerFacts();
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

// ---- Calls ----------------------------------------------------------------------------------------------

unsigned firstParameterArgument(const clang::CallExpr& Call) {
  return llvm::isa<clang::CXXOperatorCallExpr>(Call) &&
                 llvm::isa_and_nonnull<clang::CXXMethodDecl>(Call.getDirectCallee())
             ? 1
             : 0;
}

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
