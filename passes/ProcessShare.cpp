// passes/ProcessShare.cpp: the facts module's numbers computed on this process's share of the data
// (TrainingCode.h): what a printed or reduced value derives from.
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

} // namespace accelerate::passes
