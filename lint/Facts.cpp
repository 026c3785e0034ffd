// lint/Facts.cpp: what the lint checks know about code distributed by hand (see Facts.h).
#include "lint/Facts.h"

#include "passes/TrainingCode.h"

#include "clang/AST/ASTContext.h"
#include "clang/AST/Decl.h"
#include "clang/AST/DeclCXX.h"
#include "clang/AST/Expr.h"
#include "clang/AST/ExprCXX.h"
#include "clang/AST/ParentMapContext.h"
#include "clang/AST/Stmt.h"
#include "clang/AST/StmtCXX.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "clang/Basic/SourceManager.h"
#include "clang/Lex/Lexer.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"

namespace accelerate::lint {
namespace {

using namespace clang::ast_matchers;

constexpr int MaxDepth = 4;

auto acceleratorClass() {
  return cxxRecordDecl(hasName("::accelerate::Accelerator"));
}

/// Every node `Matcher` matches in the top-level declarations written in the main file, bound to `Id`.
template <typename NodeType, typename MatcherType>
std::vector<const NodeType*> allInMainFile(const MatcherType& Matcher, llvm::StringRef Id,
                                           clang::ASTContext& Context) {
  std::vector<const NodeType*> Result;
  const clang::SourceManager& SM = Context.getSourceManager();
  for (clang::Decl* TopLevel : Context.getTranslationUnitDecl()->decls()) {
    if (!SM.isWrittenInMainFile(SM.getExpansionLoc(TopLevel->getLocation())))
      continue;
    for (const BoundNodes& Found :
         match(traverse(clang::TK_AsIs, decl(forEachDescendant(Matcher))), *TopLevel, Context))
      if (const auto* Node = Found.getNodeAs<NodeType>(Id))
        Result.push_back(Node);
  }
  return Result;
}

std::vector<const clang::CXXMemberCallExpr*> prepareCalls(clang::ASTContext& Context) {
  static const llvm::StringRef Names[] = {"prepare", "prepare_model"};
  return allInMainFile<clang::CXXMemberCallExpr>(acceleratorCall(Names).bind("prepare"), "prepare", Context);
}

bool sameDecl(const clang::ValueDecl* A, const clang::ValueDecl* B) {
  return A && B && A->getCanonicalDecl() == B->getCanonicalDecl();
}

const clang::CXXMemberCallExpr* preparingCallOf(const clang::ValueDecl& Model, clang::ASTContext& Context,
                                                const std::vector<const clang::CXXMemberCallExpr*>& Prepares,
                                                int Depth) {
  for (const clang::CXXMemberCallExpr* Prepare : Prepares)
    for (const clang::Expr* Argument : Prepare->arguments())
      if (sameDecl(passes::namedDeclaration(Argument), &Model))
        return Prepare;
  if (Depth >= MaxDepth)
    return nullptr;
  // `auto& net = model;`
  if (const auto* Variable = llvm::dyn_cast<clang::VarDecl>(&Model);
      Variable && !llvm::isa<clang::ParmVarDecl>(Variable) && Variable->getType()->isReferenceType() &&
      Variable->getInit())
    if (const clang::ValueDecl* Bound = passes::namedDeclaration(Variable->getInit()))
      return preparingCallOf(*Bound, Context, Prepares, Depth + 1);
  // A parameter: the model the calls of its function pass for it.
  const auto* Parameter = llvm::dyn_cast<clang::ParmVarDecl>(&Model);
  if (!Parameter)
    return nullptr;
  const auto* Function = llvm::dyn_cast<clang::FunctionDecl>(Parameter->getDeclContext());
  if (!Function)
    return nullptr;
  unsigned Index = Parameter->getFunctionScopeIndex();
  const clang::FunctionDecl* Canonical = Function->getCanonicalDecl();
  for (const clang::CallExpr* Call :
       allInMainFile<clang::CallExpr>(callExpr(callee(functionDecl())).bind("call"), "call", Context)) {
    const clang::FunctionDecl* Callee = Call->getDirectCallee();
    if (!Callee)
      continue;
    if (const clang::FunctionDecl* Pattern = Callee->getTemplateInstantiationPattern())
      Callee = Pattern;
    if (Callee->getCanonicalDecl() != Canonical || llvm::isa<clang::CXXOperatorCallExpr>(Call) ||
        Index >= Call->getNumArgs())
      continue;
    if (const clang::ValueDecl* Passed = passes::namedDeclaration(Call->getArg(Index)))
      if (const clang::CXXMemberCallExpr* Prepare = preparingCallOf(*Passed, Context, Prepares, Depth + 1))
        return Prepare;
  }
  return nullptr;
}

const clang::ValueDecl* preparedModelIn(const clang::Stmt& S, const clang::FunctionDecl* Function,
                                        clang::ASTContext& Context,
                                        const std::vector<const clang::CXXMemberCallExpr*>& Prepares,
                                        llvm::SmallPtrSetImpl<const clang::VarDecl*>& Seen, int Depth) {
  auto Named =
      expr(anyOf(declRefExpr(to(valueDecl().bind("decl"))), memberExpr(member(fieldDecl().bind("decl")))));
  std::vector<const clang::VarDecl*> Locals;
  for (const BoundNodes& Found :
       match(traverse(clang::TK_AsIs, stmt(anyOf(findAll(Named), Named))), S, Context)) {
    const auto* Decl = Found.getNodeAs<clang::ValueDecl>("decl");
    if (match(qualType(passes::isModuleType()), Decl->getType(), Context).empty()) {
      if (const auto* Variable = llvm::dyn_cast<clang::VarDecl>(Decl);
          Variable && Variable->hasLocalStorage() && !llvm::isa<clang::ParmVarDecl>(Variable))
        Locals.push_back(Variable);
      continue;
    }
    if (preparingCallOf(*Decl, Context, Prepares, 0))
      return Decl;
  }
  if (Depth >= MaxDepth || !Function)
    return nullptr;
  std::vector<std::pair<const clang::VarDecl*, const clang::Expr*>> Writes;
  for (const clang::VarDecl* Local : Locals) {
    if (!Seen.insert(Local).second)
      continue;
    if (Writes.empty())
      Writes = passes::variableWrites(*Function, Context);
    for (const auto& [Variable, Value] : Writes)
      if (Variable == Local)
        if (const clang::ValueDecl* Model =
                preparedModelIn(*Value, Function, Context, Prepares, Seen, Depth + 1))
          return Model;
  }
  return nullptr;
}

/// A range-for loop's variable: the loop.
const clang::CXXForRangeStmt* loopOfVariable(const clang::VarDecl& Variable, clang::ASTContext& Context) {
  for (const clang::DynTypedNode& Parent : Context.getParents(Variable))
    if (const auto* Declaration = Parent.get<clang::DeclStmt>())
      for (const clang::DynTypedNode& Grand : Context.getParents(*Declaration))
        if (const auto* Loop = Grand.get<clang::CXXForRangeStmt>())
          if (Loop->getLoopVariable() == &Variable)
            return Loop;
  return nullptr;
}

const clang::VarDecl* preparedLoaderOfBatchAt(const clang::Expr& E, clang::ASTContext& Context, int Depth) {
  const clang::Expr* Object = E.IgnoreParenImpCasts();
  if (const auto* Member = llvm::dyn_cast<clang::MemberExpr>(Object);
      Member && llvm::isa<clang::FieldDecl>(Member->getMemberDecl()) && !Member->isArrow())
    Object = Member->getBase()->IgnoreParenImpCasts();
  const auto* Reference = llvm::dyn_cast<clang::DeclRefExpr>(Object);
  const auto* Variable = Reference ? llvm::dyn_cast<clang::VarDecl>(Reference->getDecl()) : nullptr;
  if (!Variable || !Variable->hasLocalStorage() || llvm::isa<clang::ParmVarDecl>(Variable))
    return nullptr;
  if (const clang::CXXForRangeStmt* Loop = loopOfVariable(*Variable, Context)) {
    const auto* Loader =
        llvm::dyn_cast_or_null<clang::VarDecl>(passes::namedDeclaration(Loop->getRangeInit()));
    if (!Loader || !Loader->getInit())
      return nullptr;
    static const llvm::StringRef Names[] = {"prepare_data_loader"};
    return match(traverse(clang::TK_AsIs, expr(ignoringImplicit(acceleratorCall(Names)))),
                 *Loader->getInit()->IgnoreUnlessSpelledInSource(), Context)
                   .empty()
               ? nullptr
               : Loader;
  }
  // `auto& images = batch.data;`
  if (Depth < 2 && Variable->getInit())
    return preparedLoaderOfBatchAt(*Variable->getInit(), Context, Depth + 1);
  return nullptr;
}

bool dependsOnProcessAt(const clang::Expr& E, clang::ASTContext& Context, int Depth) {
  if (passes::containsMatch(acceleratorCall(processIdentityMethods()), E, Context))
    return true;
  if (Depth >= MaxDepth)
    return false;
  for (const BoundNodes& Found :
       match(traverse(clang::TK_AsIs, findAll(declRefExpr(to(varDecl().bind("v"))))), E, Context)) {
    const auto* Variable = Found.getNodeAs<clang::VarDecl>("v");
    if (Variable->hasLocalStorage() && !llvm::isa<clang::ParmVarDecl>(Variable) && Variable->getInit() &&
        dependsOnProcessAt(*Variable->getInit(), Context, Depth + 1))
      return true;
  }
  return false;
}

/// True when `S` leaves the enclosing block: a return, continue, break or throw, or a block that ends in one.
bool leaves(const clang::Stmt* S) {
  if (const auto* Block = llvm::dyn_cast_or_null<clang::CompoundStmt>(S))
    S = Block->body_empty() ? nullptr : Block->body_back();
  return S && (llvm::isa<clang::ReturnStmt>(S) || llvm::isa<clang::ContinueStmt>(S) ||
               llvm::isa<clang::BreakStmt>(S) || llvm::isa<clang::CXXThrowExpr>(S));
}

/// True when a statement of a block around `S`, before it, leaves on some processes only.
bool afterProcessExit(const clang::Stmt& S, clang::ASTContext& Context) {
  clang::DynTypedNode Node = clang::DynTypedNode::create(S);
  while (true) {
    clang::DynTypedNodeList Parents = Context.getParents(Node);
    if (Parents.empty() || Parents[0].get<clang::FunctionDecl>() || Parents[0].get<clang::LambdaExpr>())
      return false;
    if (const auto* Block = Parents[0].get<clang::CompoundStmt>()) {
      for (const clang::Stmt* Earlier : Block->body()) {
        if (Earlier == Node.get<clang::Stmt>())
          break;
        const auto* If = llvm::dyn_cast<clang::IfStmt>(Earlier);
        if (If && If->getCond() && leaves(If->getThen()) && !If->getElse() &&
            dependsOnProcessAt(*If->getCond(), Context, 0))
          return true;
      }
    }
    Node = Parents[0];
  }
}

bool runsOnSomeProcessesOnlyAt(const clang::Stmt& S, clang::ASTContext& Context, int Depth) {
  if (processBranchAround(S, Context) || afterProcessExit(S, Context))
    return true;
  const clang::FunctionDecl* Function = passes::enclosingFunction(S, Context);
  if (!Function || Depth >= 2)
    return false;
  const clang::FunctionDecl* Canonical = Function->getCanonicalDecl();
  bool Called = false;
  for (const clang::CallExpr* Call :
       allInMainFile<clang::CallExpr>(callExpr(callee(functionDecl())).bind("call"), "call", Context)) {
    const clang::FunctionDecl* Callee = Call->getDirectCallee();
    if (!Callee || Callee->getCanonicalDecl() != Canonical)
      continue;
    if (!runsOnSomeProcessesOnlyAt(*Call, Context, Depth + 1))
      return false;
    Called = true;
  }
  return Called;
}

bool isAcceleratorType(clang::QualType Type) {
  Type = Type.getNonReferenceType();
  if (const clang::Type* Pointee = Type->getPointeeType().getTypePtrOrNull())
    Type = clang::QualType(Pointee, 0);
  const auto* Record = Type->getAsCXXRecordDecl();
  return Record && Record->getQualifiedNameAsString() == "accelerate::Accelerator";
}

std::string accessorOf(const clang::ValueDecl& Variable) {
  return Variable.getNameAsString() +
         (Variable.getType().getNonReferenceType()->isPointerType() ? "->" : ".");
}

} // namespace

internal::BindableMatcher<clang::Stmt> acceleratorCall(llvm::ArrayRef<llvm::StringRef> Names) {
  return cxxMemberCallExpr(callee(cxxMethodDecl(hasAnyName(Names), ofClass(acceleratorClass()))));
}

llvm::ArrayRef<llvm::StringRef> processIdentityMethods() {
  static const llvm::StringRef Names[] = {"is_main_process", "is_local_main_process", "process_index",
                                          "local_process_index"};
  return Names;
}

const clang::CXXMemberCallExpr* preparingCall(const clang::ValueDecl& Model, clang::ASTContext& Context) {
  return preparingCallOf(Model, Context, prepareCalls(Context), 0);
}

const clang::ValueDecl* preparedModelReachedBy(const clang::Expr& E, clang::ASTContext& Context) {
  std::vector<const clang::CXXMemberCallExpr*> Prepares = prepareCalls(Context);
  if (Prepares.empty())
    return nullptr;
  llvm::SmallPtrSet<const clang::VarDecl*, 8> Seen;
  return preparedModelIn(E, passes::enclosingFunction(E, Context), Context, Prepares, Seen, 0);
}

bool mainFileUsesAccelerator(clang::ASTContext& Context) {
  static const llvm::StringRef Names[] = {"prepare", "prepare_model", "prepare_data_loader"};
  return !allInMainFile<clang::CXXMemberCallExpr>(acceleratorCall(Names).bind("call"), "call", Context)
              .empty();
}

bool callsAccelerator(const clang::FunctionDecl& Function, clang::ASTContext& Context) {
  auto Call = cxxMemberCallExpr(callee(cxxMethodDecl(ofClass(acceleratorClass()))));
  return Function.hasBody() && passes::containsMatch(Call, *Function.getBody(), Context);
}

const clang::VarDecl* preparedLoaderOfBatch(const clang::Expr& E, clang::ASTContext& Context) {
  return preparedLoaderOfBatchAt(E, Context, 0);
}

bool dependsOnProcess(const clang::Expr& E, clang::ASTContext& Context) {
  return dependsOnProcessAt(E, Context, 0);
}

const clang::Stmt* processBranchAround(const clang::Stmt& S, clang::ASTContext& Context, bool* InElse) {
  clang::DynTypedNode Node = clang::DynTypedNode::create(S);
  while (true) {
    clang::DynTypedNodeList Parents = Context.getParents(Node);
    if (Parents.empty() || Parents[0].get<clang::FunctionDecl>() || Parents[0].get<clang::LambdaExpr>())
      return nullptr;
    const clang::Stmt* Child = Node.get<clang::Stmt>();
    const clang::Stmt* Parent = Parents[0].get<clang::Stmt>();
    const clang::Expr* Condition = nullptr;
    bool Else = false;
    if (const auto* If = llvm::dyn_cast_or_null<clang::IfStmt>(Parent)) {
      if (Child && (Child == If->getThen() || Child == If->getElse())) {
        Condition = If->getCond();
        Else = Child == If->getElse();
      }
    } else if (const auto* While = llvm::dyn_cast_or_null<clang::WhileStmt>(Parent)) {
      if (Child && Child == While->getBody())
        Condition = While->getCond();
    } else if (const auto* For = llvm::dyn_cast_or_null<clang::ForStmt>(Parent)) {
      if (Child && Child == For->getBody())
        Condition = For->getCond();
    } else if (const auto* Conditional = llvm::dyn_cast_or_null<clang::ConditionalOperator>(Parent)) {
      if (Child && (Child == Conditional->getTrueExpr() || Child == Conditional->getFalseExpr())) {
        Condition = Conditional->getCond();
        Else = Child == Conditional->getFalseExpr();
      }
    }
    if (Condition && dependsOnProcess(*Condition, Context)) {
      if (InElse)
        *InElse = Else;
      return Parent;
    }
    Node = Parents[0];
  }
}

bool runsOnSomeProcessesOnly(const clang::Stmt& S, clang::ASTContext& Context) {
  return runsOnSomeProcessesOnlyAt(S, Context, 0);
}

std::string acceleratorAt(const clang::Stmt& At, const clang::Expr* Preferred, clang::ASTContext& Context) {
  const clang::SourceManager& SM = Context.getSourceManager();
  const clang::FunctionDecl* Function = passes::enclosingFunction(At, Context);
  auto DeclaredBefore = [&](const clang::Decl& Declaration) {
    return SM.isBeforeInTranslationUnit(Declaration.getLocation(), At.getBeginLoc());
  };
  auto Visible = [&](const clang::VarDecl& Variable) {
    if (!DeclaredBefore(Variable))
      return false;
    if (!Variable.hasLocalStorage())
      return !Variable.isStaticLocal() && Variable.getDeclContext()->isFileContext();
    const auto* Owner = llvm::dyn_cast<clang::FunctionDecl>(Variable.getDeclContext());
    return Owner && Function && Owner->getCanonicalDecl() == Function->getCanonicalDecl();
  };
  if (Preferred) {
    const clang::Expr* Object = Preferred->IgnoreParenImpCasts();
    if (const auto* Reference = llvm::dyn_cast<clang::DeclRefExpr>(Object)) {
      if (const auto* Variable = llvm::dyn_cast<clang::VarDecl>(Reference->getDecl());
          Variable && Visible(*Variable))
        return accessorOf(*Variable);
    } else if (const auto* Call = llvm::dyn_cast<clang::CallExpr>(Object)) {
      // `accelerate::Accelerator::current().prepare(model)`: the same call works anywhere.
      const clang::FunctionDecl* Callee = Call->getDirectCallee();
      if (Callee && Callee->getQualifiedNameAsString() == "accelerate::Accelerator::current")
        return "accelerate::Accelerator::current().";
    } else if (const auto* Member = llvm::dyn_cast<clang::MemberExpr>(Object)) {
      // A member of the class whose method holds `At`.
      const auto* Method = llvm::dyn_cast_or_null<clang::CXXMethodDecl>(Function);
      const auto* Field = llvm::dyn_cast<clang::FieldDecl>(Member->getMemberDecl());
      if (Method && !Method->isStatic() && Field && Member->isImplicitAccess() &&
          Field->getParent()->getCanonicalDecl() == Method->getParent()->getCanonicalDecl())
        return accessorOf(*Field);
    }
  }
  // An accelerator the function declares or takes, the last one declared before `At`.
  if (Function && Function->hasBody()) {
    const clang::VarDecl* Found = nullptr;
    for (const clang::ParmVarDecl* Parameter : Function->parameters())
      if (isAcceleratorType(Parameter->getType()))
        Found = Parameter;
    auto Local = varDecl(hasLocalStorage()).bind("v");
    for (const BoundNodes& Match :
         match(traverse(clang::TK_AsIs, findAll(declStmt(has(Local)))), *Function->getBody(), Context)) {
      const auto* Variable = Match.getNodeAs<clang::VarDecl>("v");
      if (isAcceleratorType(Variable->getType()) && Visible(*Variable) &&
          (!Found || SM.isBeforeInTranslationUnit(Found->getLocation(), Variable->getLocation())))
        Found = Variable;
    }
    if (Found)
      return accessorOf(*Found);
  }
  for (const clang::Decl* TopLevel : Context.getTranslationUnitDecl()->decls())
    if (const auto* Variable = llvm::dyn_cast<clang::VarDecl>(TopLevel);
        Variable && SM.isWrittenInMainFile(SM.getExpansionLoc(Variable->getLocation())) &&
        isAcceleratorType(Variable->getType()) && Visible(*Variable))
      return accessorOf(*Variable);
  return "accelerate::Accelerator::current().";
}

std::string sourceText(const clang::Expr& E, clang::ASTContext& Context) {
  clang::CharSourceRange Range =
      clang::Lexer::makeFileCharRange(clang::CharSourceRange::getTokenRange(E.getSourceRange()),
                                      Context.getSourceManager(), Context.getLangOpts());
  if (Range.isInvalid())
    return "";
  return clang::Lexer::getSourceText(Range, Context.getSourceManager(), Context.getLangOpts()).str();
}

} // namespace accelerate::lint
