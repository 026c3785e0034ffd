// lint/Facts.h: what the lint checks know about code distributed by hand: the models and loaders an
// accelerator prepared, the branches only some processes take, and which accelerator a fix can name.
#ifndef ACCELERATE_LINT_FACTS_H
#define ACCELERATE_LINT_FACTS_H

#include "clang/ASTMatchers/ASTMatchers.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <string>

namespace clang {
class ASTContext;
class CXXMemberCallExpr;
class Expr;
class FunctionDecl;
class Stmt;
class ValueDecl;
class VarDecl;
} // namespace clang

namespace accelerate::lint {

/// Matches a call of a member of `accelerate::Accelerator` named one of `Names`.
clang::ast_matchers::internal::BindableMatcher<clang::Stmt>
acceleratorCall(llvm::ArrayRef<llvm::StringRef> Names);

/// The methods of `accelerate::Accelerator` that tell processes apart: `is_main_process`,
/// `is_local_main_process`, `process_index`, `local_process_index`.
llvm::ArrayRef<llvm::StringRef> processIdentityMethods();

/// The call of `accelerator.prepare(...)` or `accelerator.prepare_model(...)` in the main file that prepares
/// `Model`: one that takes it (`model`, `*model`) as an argument; for a reference bound to a model, the
/// model's; for a function's parameter, the one that prepares the argument a call of the function in the
/// main file passes for it (a few calls deep). Null when no call prepares it.
const clang::CXXMemberCallExpr* preparingCall(const clang::ValueDecl& Model, clang::ASTContext& Context);

/// A prepared model (see preparingCall) that `E` is computed from: named in `E`, or in a value written to a
/// local variable `E` names (its initialiser, its assignments in the function), a few steps back. Null when
/// none.
const clang::ValueDecl* preparedModelReachedBy(const clang::Expr& E, clang::ASTContext& Context);

/// True when the main file prepares something with an accelerator: it calls `prepare`, `prepare_model` or
/// `prepare_data_loader` of an `accelerate::Accelerator`.
bool mainFileUsesAccelerator(clang::ASTContext& Context);

/// True when `Function`'s body calls a member of an `accelerate::Accelerator`.
bool callsAccelerator(const clang::FunctionDecl& Function, clang::ASTContext& Context);

/// The loader `E` is a batch of: `E` is, or is a member of (`batch.data`, `batch.target`), the variable of a
/// range-for loop over `*loader` or `loader` where `loader` was initialised by
/// `accelerator.prepare_data_loader(...)`; also through a local initialised from such an expression. Null
/// otherwise.
const clang::VarDecl* preparedLoaderOfBatch(const clang::Expr& E, clang::ASTContext& Context);

/// True when `E`'s value depends on which process evaluates it: it calls one of processIdentityMethods(), or
/// reads a local variable whose initialiser does (a few steps back).
bool dependsOnProcess(const clang::Expr& E, clang::ASTContext& Context);

/// The innermost `if`, loop or `?:` around `S` in its function (a lambda's body ends the search) whose
/// condition dependsOnProcess(), with `S` in its branches or body; null when none. `InElse` tells whether
/// `S` is in an `if`'s else branch (or the `?:`'s false arm).
const clang::Stmt* processBranchAround(const clang::Stmt& S, clang::ASTContext& Context,
                                       bool* InElse = nullptr);

/// True when `S` runs on some processes only: it is in a processBranchAround(), or after a statement of an
/// enclosing block that leaves on some processes (`if (!accelerator.is_main_process()) return;`), or it is in
/// a function of the main file every call of which (there is at least one) runs on some processes only.
bool runsOnSomeProcessesOnly(const clang::Stmt& S, clang::ASTContext& Context);

/// The text that names an accelerator at `At`, followed by its member access (`accelerator.`, `acc->`):
/// `Preferred` (the object of an accelerator call elsewhere, e.g. the prepare call) when it can be named
/// there, else an accelerator variable or parameter of the function declared before `At`, or a global one;
/// else `accelerate::Accelerator::current().`.
std::string acceleratorAt(const clang::Stmt& At, const clang::Expr* Preferred, clang::ASTContext& Context);

/// The source text of `E` as written (its token range), or "" when it cannot be read (a macro).
std::string sourceText(const clang::Expr& E, clang::ASTContext& Context);

} // namespace accelerate::lint

#endif // ACCELERATE_LINT_FACTS_H
