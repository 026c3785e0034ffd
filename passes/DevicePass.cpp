// passes/DevicePass.cpp: the rule that hands device choice and placement to the accelerator.
#include "passes/Pass.h"

#include "passes/Insertion.h"
#include "passes/Macros.h"
#include "passes/TrainingCode.h"

#include "clang/AST/ASTContext.h"
#include "clang/AST/ExprCXX.h"
#include "clang/AST/StmtCXX.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "clang/ASTMatchers/ASTMatchers.h"
#include "clang/Lex/Lexer.h"
#include "clang/Tooling/Transformer/RangeSelector.h"
#include "clang/Tooling/Transformer/Stencil.h"

namespace accelerate::passes {

// ---- The pass ------------------------------------------------------------------------------------------

/// Device placement:
///
///   torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
///     →  torch::Device device = accelerator.device();          (also `= torch::kCUDA`, a DeviceType, `auto`)
///   device = torch::kCUDA;                   →  device = accelerator.device();
///   model->to(device);                       →  (removed: prepare places a model its optimizer trains)
///   batch.data.to(device)                    →  batch.data   (a prepared loader's batch is on the device)
///   std::get<0>(batch).cuda()                →  std::get<0>(batch)
///   x.cuda()                                 →  x.to(accelerator.device())
///   x.to(torch::kCUDA)                       →  x.to(accelerator.device())
///   batch.data.to(device, torch::kFloat)     →  batch.data.to(torch::kFloat)
///
/// Moves to the CPU (`.cpu()`, `.to(torch::kCPU)`), dtype conversions, moves of models that are only
/// evaluated and tensors made with `.device(device)` stay: `device` is now the accelerator's. A device
/// declared explicitly on the CPU (and never set to CUDA) stays as it is.
PassRule devicePass();

/// Matches what devicePass() rewrites into a use of `accelerator`.
clang::ast_matchers::StatementMatcher deviceSiteUsingAccelerator();

namespace {

using namespace clang::ast_matchers;
using namespace clang::transformer;

constexpr char StatementId[] = "statement";
constexpr char VariableId[] = "variable";
constexpr char CallId[] = "call";
constexpr char ObjectId[] = "object";
constexpr char ArgumentId[] = "argument";
constexpr char DtypeId[] = "dtype";
constexpr char ValueId[] = "value";
constexpr char ConditionId[] = "condition";

constexpr char AcceleratorDevice[] = "accelerator.device()";

AST_MATCHER(clang::StringLiteral, isCudaString) {
  return Node.getCharByteWidth() == 1 && Node.getString().starts_with("cuda");
}
AST_MATCHER(clang::StringLiteral, isCpuString) {
  return Node.getCharByteWidth() == 1 && Node.getString().starts_with("cpu");
}

/// An expression that names CUDA: the constant, a "cuda" string, a CUDA availability check.
StatementMatcher cudaMention() {
  return stmt(anyOf(declRefExpr(to(varDecl(hasName("::c10::kCUDA")))),
                    declRefExpr(to(enumConstantDecl(hasName("::c10::DeviceType::CUDA")))),
                    stringLiteral(isCudaString()),
                    callExpr(callee(functionDecl(hasName("::torch::cuda::is_available"))))));
}

/// An expression that names the CPU.
StatementMatcher cpuMention() {
  return stmt(anyOf(declRefExpr(to(varDecl(hasName("::c10::kCPU")))),
                    declRefExpr(to(enumConstantDecl(hasName("::c10::DeviceType::CPU")))),
                    stringLiteral(isCpuString())));
}

/// A device variable that training uses: declared or set from CUDA, from a check, from another device, or
/// from anything but an explicit CPU device. `torch::Device cpu(torch::kCPU)` is not one.
AST_MATCHER(clang::VarDecl, isTrainingDevice) {
  clang::ASTContext& Context = Finder->getASTContext();
  const clang::Expr* Init = Node.getInit();
  if (!Init)
    return false;
  auto DeviceVariable = declRefExpr(to(varDecl(hasLocalStorage(), hasType(isDeviceType()))));
  bool ExplicitCpu = containsMatch(cpuMention(), *Init, Context) &&
                     !containsMatch(cudaMention(), *Init, Context) &&
                     !containsMatch(DeviceVariable, *Init, Context);
  if (!ExplicitCpu)
    return true;
  // `torch::Device device(torch::kCPU); if (torch::cuda::is_available()) device = torch::kCUDA;`
  const clang::FunctionDecl* Function = enclosingFunction(*Init, Context);
  if (!Function || !Function->hasBody())
    return false;
  auto Target = declRefExpr(to(varDecl(equalsNode(&Node))));
  auto Assignment =
      stmt(anyOf(binaryOperator(isAssignmentOperator(), hasLHS(ignoringParenImpCasts(Target)),
                                hasRHS(hasDescendant(cudaMention()))),
                 cxxOperatorCallExpr(hasOverloadedOperatorName("="), hasArgument(0, Target),
                                     hasArgument(1, anyOf(cudaMention(), hasDescendant(cudaMention()))))));
  return containsMatch(Assignment, *Function->getBody(), Context);
}

/// The argument names the CPU and nothing else.
AST_MATCHER(clang::Expr, isCpuDevice) {
  clang::ASTContext& Context = Finder->getASTContext();
  return containsMatch(cpuMention(), Node, Context) && !containsMatch(cudaMention(), Node, Context);
}

/// `torch::kCUDA`, `"cuda"`, `torch::Device(torch::kCUDA)`: a CUDA device written as a constant.
AST_MATCHER(clang::Expr, isCudaConstant) {
  clang::ASTContext& Context = Finder->getASTContext();
  const clang::Expr* E = Node.IgnoreUnlessSpelledInSource();
  if (!match(traverse(clang::TK_AsIs, cudaMention()), *E, Context).empty())
    return true;
  const auto* Construct = llvm::dyn_cast<clang::CXXConstructExpr>(E);
  if (!Construct)
    if (const auto* Cast = llvm::dyn_cast<clang::CXXFunctionalCastExpr>(E))
      Construct = llvm::dyn_cast<clang::CXXConstructExpr>(Cast->getSubExpr()->IgnoreImplicit());
  return Construct && Construct->getNumArgs() > 0 &&
         !match(traverse(clang::TK_AsIs, cudaMention()), *Construct->getArg(0)->IgnoreUnlessSpelledInSource(),
                Context)
              .empty();
}

/// The range-for loop whose variable `Variable` is. The parent map has the loop variable's DeclStmt between
/// them, or not, depending on the traversal in force.
const clang::CXXForRangeStmt* loopDeclaring(const clang::VarDecl& Variable, clang::ASTContext& Context) {
  for (const clang::DynTypedNode& Parent : Context.getParents(Variable)) {
    const auto* Loop = Parent.get<clang::CXXForRangeStmt>();
    if (const auto* Statement = Parent.get<clang::DeclStmt>())
      for (const clang::DynTypedNode& Grandparent : Context.getParents(*Statement))
        Loop = Loop ? Loop : Grandparent.get<clang::CXXForRangeStmt>();
    if (Loop && Loop->getLoopVariable() == &Variable)
      return Loop;
  }
  return nullptr;
}

/// The variable a reference names: a local, or the variable a structured binding decomposes.
const clang::VarDecl* referencedVariable(const clang::DeclRefExpr& Reference) {
  if (const auto* Binding = llvm::dyn_cast<clang::BindingDecl>(Reference.getDecl()))
    return llvm::dyn_cast_or_null<clang::VarDecl>(Binding->getDecomposedDecl());
  return llvm::dyn_cast<clang::VarDecl>(Reference.getDecl());
}

/// How batchValue follows a tensor back to a loader's batch.
struct BatchTrace {
  /// Which loaders count: prepared ones, or those that are not.
  bool Prepared;
  /// Through an operator whose tensor operands all are such batches (`batch.data / 255.0`).
  bool ThroughOperators;
  /// A move to a device (`.to(device)`, `.cuda()`) ends the trace, as a move to the CPU always does.
  bool StopAtDeviceMoves;
};

/// True when the tensor `E` computes is a batch of a loader `Trace` accepts, or a value that stays one: the
/// loop variable of a loop over such a loader or a structured binding of it, a member of it (`batch.data`),
/// `std::get<I>` of it, a tensor method of such a tensor (`.view(...)`, `.to(torch::kFloat)`) other than a
/// move to the CPU (or, with StopAtDeviceMoves, any move), an operator whose tensor operands all are (with
/// ThroughOperators), or a local of class type initialised from one. Only the tensor's own value counts:
/// `torch::randn({batch.data.size(0), 16})` is a new tensor, on the CPU, whatever its shape came from.
bool batchValue(const clang::Expr& Expression, clang::ASTContext& Context, const BatchTrace& Trace,
                int Depth = 0) {
  if (Depth > 12)
    return false;
  auto Follow = [&](const clang::Expr& Next) { return batchValue(Next, Context, Trace, Depth + 1); };
  const clang::Expr* E = Expression.IgnoreUnlessSpelledInSource()->IgnoreParens();
  if (const auto* Construct = llvm::dyn_cast<clang::CXXConstructExpr>(E))
    return Construct->getNumArgs() == 1 && Follow(*Construct->getArg(0));
  if (const auto* Reference = llvm::dyn_cast<clang::DeclRefExpr>(E)) {
    const clang::VarDecl* Variable = referencedVariable(*Reference);
    if (!Variable)
      return false;
    if (const clang::CXXForRangeStmt* Loop = loopDeclaring(*Variable, Context)) {
      const clang::VarDecl* Loader = iteratedLoader(*Loop, Context);
      return Loader && isPreparedLoader(*Loader, Context) == Trace.Prepared;
    }
    // A local that holds a tensor or a batch (not an `int64_t n = batch.data.size(0)`), set once.
    return Variable->hasLocalStorage() && Variable->getInit() &&
           Variable->getType().getNonReferenceType()->isRecordType() && Follow(*Variable->getInit());
  }
  if (const auto* Member = llvm::dyn_cast<clang::MemberExpr>(E))
    return Follow(*Member->getBase());
  if (const auto* Call = llvm::dyn_cast<clang::CXXMemberCallExpr>(E)) {
    const clang::CXXMethodDecl* Method = Call->getMethodDecl();
    if (!Method || !E->getType()->isRecordType() || !Call->getImplicitObjectArgument() ||
        Method->getName() == "cpu" || (Trace.StopAtDeviceMoves && Method->getName() == "cuda"))
      return false;
    if (Method->getName() == "to" && Call->getNumArgs() > 0) {
      const clang::Expr& Target = *Call->getArg(0)->IgnoreUnlessSpelledInSource();
      if (!match(expr(isCpuDevice()), Target, Context).empty() ||
          (Trace.StopAtDeviceMoves &&
           !match(expr(anyOf(hasType(isDeviceType()), stringLiteral())), Target, Context).empty()))
        return false;
    }
    return Follow(*Call->getImplicitObjectArgument());
  }
  if (const auto* Operator = llvm::dyn_cast<clang::CXXOperatorCallExpr>(E)) {
    if (!Trace.ThroughOperators)
      return false;
    bool AnyTensor = false;
    for (const clang::Expr* Argument : Operator->arguments()) {
      if (!Argument->getType().getNonReferenceType()->isRecordType())
        continue; // a scalar operand: `batch.data / 255.0`
      if (!Follow(*Argument))
        return false;
      AnyTensor = true;
    }
    return AnyTensor;
  }
  if (const auto* Call = llvm::dyn_cast<clang::CallExpr>(E)) {
    const clang::FunctionDecl* Callee = Call->getDirectCallee();
    return Callee && Callee->getQualifiedNameAsString() == "std::get" && Call->getNumArgs() == 1 &&
           Follow(*Call->getArg(0));
  }
  return false;
}

/// A batch of a prepared loader, or a value computed from it on its device (batchValue).
bool derivesFromPreparedBatch(const clang::Expr& E, clang::ASTContext& Context) {
  return batchValue(E, Context,
                    BatchTrace{/*Prepared=*/true, /*ThroughOperators=*/true,
                               /*StopAtDeviceMoves=*/false});
}

/// A batch of a loader that is not prepared (its batches stay on the CPU), read as it is or through members
/// and methods, not moved since (batchValue).
bool readsUnpreparedBatch(const clang::Expr& E, clang::ASTContext& Context) {
  return batchValue(E, Context,
                    BatchTrace{/*Prepared=*/false, /*ThroughOperators=*/false,
                               /*StopAtDeviceMoves=*/true});
}

AST_MATCHER(clang::Expr, isFromPreparedBatch) {
  return derivesFromPreparedBatch(Node, Finder->getASTContext());
}

/// `model->forward(x)`, `model(x)`, `(*model)(x)` on a model that prepare places on the accelerator's device.
bool isTrainedModelCall(const clang::Stmt& S, clang::ASTContext& Context) {
  const clang::Expr* Object = nullptr;
  if (const auto* Call = llvm::dyn_cast<clang::CXXMemberCallExpr>(&S)) {
    Object = Call->getImplicitObjectArgument()->IgnoreImplicit();
    if (const auto* Arrow = llvm::dyn_cast<clang::CXXOperatorCallExpr>(Object))
      if (Arrow->getOperator() == clang::OO_Arrow)
        Object = Arrow->getArg(0);
  } else if (const auto* Operator = llvm::dyn_cast<clang::CXXOperatorCallExpr>(&S)) {
    if (Operator->getOperator() == clang::OO_Call && Operator->getNumArgs() > 0)
      Object = Operator->getArg(0);
  }
  const clang::ValueDecl* Model = Object ? namedDeclaration(Object) : nullptr;
  return Model && isPassEnabled("prepare") && isTrainedModel(*Model, Context);
}

AST_MATCHER(clang::Stmt, isTrainedModelCallMatcher) {
  return isTrainedModelCall(Node, Finder->getASTContext());
}

/// True when the value of `E` reaches a prepared model's call: as (part of) one of its arguments, or through
/// the local it initialises.
bool feedsTrainedModel(const clang::Expr& E, clang::ASTContext& Context, bool ThroughVariable = true) {
  const clang::Stmt* Current = &E;
  for (int Depth = 0; Depth < 16; ++Depth) {
    clang::DynTypedNodeList Parents = Context.getParents(*Current);
    if (Parents.empty())
      return false;
    if (const auto* Variable = Parents[0].get<clang::VarDecl>()) {
      if (!ThroughVariable || !Variable->hasLocalStorage())
        return false;
      const clang::FunctionDecl* Function = enclosingFunction(E, Context);
      if (!Function || !Function->hasBody())
        return false;
      auto Use = declRefExpr(to(varDecl(equalsNode(Variable)))).bind("use");
      for (const BoundNodes& Found :
           match(traverse(clang::TK_AsIs, stmt(forEachDescendant(Use))), *Function->getBody(), Context))
        if (feedsTrainedModel(*Found.getNodeAs<clang::Expr>("use"), Context, false))
          return true;
      return false;
    }
    const auto* Parent = Parents[0].get<clang::Stmt>();
    if (!Parent || !llvm::isa<clang::Expr>(Parent))
      return false;
    if (isTrainedModelCall(*Parent, Context))
      return true;
    Current = Parent;
  }
  return false;
}

/// `at::Tensor` or another class derived from `at::TensorBase`.
bool isTensorClass(const clang::CXXRecordDecl& Record) {
  if (Record.getQualifiedNameAsString() == "at::TensorBase")
    return true;
  const clang::CXXRecordDecl* Definition = Record.getDefinition();
  if (!Definition)
    return false;
  for (const clang::CXXBaseSpecifier& Base : Definition->bases())
    if (const clang::CXXRecordDecl* Parent = Base.getType()->getAsCXXRecordDecl())
      if (isTensorClass(*Parent))
        return true;
  return false;
}

/// A tensor of an unprepared loader's batch (readsUnpreparedBatch) handed to a call, in a function that calls
/// a prepared model (whose parameters prepare moves to accelerator.device()). Without a move, on a GPU the
/// forward pass or the loss meets a CPU tensor. Only what a `.to(...)` can follow as written (a name, a
/// member, a method call), passed where a moved copy binds (not a `Tensor&`), and not to `operator<<`.
bool isUnplacedBatchArgument(const clang::Expr& Read, clang::ASTContext& Context) {
  // (A ParenListExpr, in a template, has no type at all.)
  if (!isPassEnabled("prepare") ||
      !llvm::isa<clang::DeclRefExpr, clang::MemberExpr, clang::CXXMemberCallExpr>(&Read) ||
      Read.getType().isNull() || Read.getType()->isDependentType())
    return false;
  const auto* Record = Read.getType()->getAsCXXRecordDecl();
  if (!Record || !isTensorClass(*Record) || !readsUnpreparedBatch(Read, Context))
    return false;
  // An argument of a call: the parent, past the implicit copy or conversion.
  const clang::Stmt* Current = &Read;
  const clang::CallExpr* Call = nullptr;
  for (int Depth = 0; Depth < 4 && !Call; ++Depth) {
    clang::DynTypedNodeList Parents = Context.getParents(*Current);
    if (Parents.empty())
      return false;
    Call = Parents[0].get<clang::CallExpr>();
    if (Call)
      break;
    const auto* Parent = Parents[0].get<clang::Expr>();
    if (!Parent || !llvm::isa<clang::ImplicitCastExpr, clang::CXXConstructExpr,
                              clang::MaterializeTemporaryExpr, clang::CXXBindTemporaryExpr>(Parent))
      return false;
    Current = Parent;
  }
  const clang::FunctionDecl* Callee = Call ? Call->getDirectCallee() : nullptr;
  if (!Callee || Current == Call->getCallee() || Callee->getOverloadedOperator() == clang::OO_LessLess)
    return false;
  const unsigned Shift = firstParameterArgument(*Call);
  bool IsArgument = false;
  for (unsigned I = Shift; I < Call->getNumArgs(); ++I) {
    if (Call->getArg(I) != Current && Call->getArg(I)->IgnoreUnlessSpelledInSource() !=
                                          llvm::cast<clang::Expr>(Current)->IgnoreUnlessSpelledInSource())
      continue;
    IsArgument = true;
    if (I - Shift < Callee->getNumParams()) {
      clang::QualType Parameter = Callee->getParamDecl(I - Shift)->getType();
      if (Parameter->isLValueReferenceType() && !Parameter->getPointeeType().isConstQualified())
        return false; // `Tensor&`: a moved copy would not bind, and the callee may write to it
    }
  }
  // Already moved further out: `torch::ones_like(batch.data).to(device)`, `(batch.data / 255.0).cuda()`.
  const clang::Stmt* Inner = Call;
  for (int Depth = 0; Depth < 12; ++Depth) {
    clang::DynTypedNodeList Parents = Context.getParents(*Inner);
    const auto* Parent = Parents.empty() ? nullptr : Parents[0].get<clang::Expr>();
    if (!Parent)
      break;
    if (const auto* Move = llvm::dyn_cast<clang::CXXMemberCallExpr>(Parent))
      if (const clang::CXXMethodDecl* Method = Move->getMethodDecl())
        if (Move->getCallee()->IgnoreParenImpCasts() == Inner &&
            (Method->getName() == "cuda" || (Method->getName() == "to" && Move->getNumArgs() > 0 &&
                                             !match(expr(anyOf(hasType(isDeviceType()), stringLiteral())),
                                                    *Move->getArg(0)->IgnoreUnlessSpelledInSource(), Context)
                                                  .empty())))
          return false;
    Inner = Parent;
  }
  const clang::FunctionDecl* Function = enclosingFunction(Read, Context);
  return IsArgument && Function && Function->hasBody() &&
         !match(traverse(clang::TK_AsIs,
                         stmt(hasDescendant(stmt(anyOf(cxxMemberCallExpr(), cxxOperatorCallExpr()),
                                                 isTrainedModelCallMatcher())))),
                *Function->getBody(), Context)
              .empty();
}

AST_MATCHER(clang::Expr, isUnplacedBatchRead) {
  return isUnplacedBatchArgument(Node, Finder->getASTContext());
}

/// The module a member call is made on, through `->` on a holder or smart pointer, is prepared.
AST_MATCHER(clang::CXXMemberCallExpr, isOnTrainedModel) {
  return isTrainedModelCall(Node, Finder->getASTContext());
}

AST_MATCHER(clang::Expr, feedsPreparedModel) {
  return feedsTrainedModel(Node, Finder->getASTContext());
}

AST_MATCHER(clang::Stmt, isStatementInBlock) {
  clang::DynTypedNodeList Parents = Finder->getASTContext().getParents(Node);
  while (!Parents.empty() &&
         (Parents[0].get<clang::ExprWithCleanups>() || Parents[0].get<clang::ImplicitCastExpr>()))
    Parents = Finder->getASTContext().getParents(Parents[0]);
  return !Parents.empty() && Parents[0].get<clang::CompoundStmt>();
}

auto inScope() {
  return allOf(unless(isInMacroExpansion()), isInTrainingFile(), unless(isInDistributedFunction()));
}

auto tensorMethod(llvm::StringRef Name) {
  return callee(
      cxxMethodDecl(hasName(Name), ofClass(cxxRecordDecl(isSameOrDerivedFrom("::at::TensorBase")))));
}
auto moduleMethod(llvm::StringRef Name) {
  return callee(
      cxxMethodDecl(hasName(Name), ofClass(cxxRecordDecl(isSameOrDerivedFrom("::torch::nn::Module")))));
}

/// `x.to(device)` and `x.to(device, dtype)`: a move that names a device (not the CPU), with no other explicit
/// argument but a dtype.
StatementMatcher tensorMoveToDevice() {
  auto DeviceArgument = expr(anyOf(hasType(isDeviceType()), stringLiteral()), unless(isCpuDevice()));
  return cxxMemberCallExpr(
      tensorMethod("to"), on(expr().bind(ObjectId)), hasArgument(0, DeviceArgument.bind(ArgumentId)),
      anyOf(argumentCountIs(1), hasArgument(1, cxxDefaultArgExpr()),
            hasArgument(1, expr(hasType(enumDecl(hasName("::c10::ScalarType")))).bind(DtypeId))),
      anyOf(argumentCountIs(1), argumentCountIs(2), hasArgument(2, cxxDefaultArgExpr())));
}

StatementMatcher tensorCuda() {
  return cxxMemberCallExpr(tensorMethod("cuda"), on(expr().bind(ObjectId)));
}

/// `batch.data.to(torch::kCPU)` / `.cpu()` of a prepared loader's batch that a prepared model then reads.
StatementMatcher cpuMoveIntoPreparedModel() {
  return cxxMemberCallExpr(
             anyOf(tensorMethod("cpu"), cxxMemberCallExpr(tensorMethod("to"), hasArgument(0, isCpuDevice()))),
             on(isFromPreparedBatch()), feedsPreparedModel())
      .bind(CallId);
}

/// `batch.data` of a loader that is not prepared, handed to a call where a prepared model trains.
StatementMatcher unplacedBatchRead() {
  return expr(isUnplacedBatchRead()).bind(ObjectId);
}

/// `model->to(device)` as a statement of its own: one device argument, nothing else.
StatementMatcher trainedModelMove() {
  return cxxMemberCallExpr(
             moduleMethod("to"), isOnTrainedModel(),
             hasArgument(0, expr(anyOf(hasType(isDeviceType()), stringLiteral()), unless(isCpuDevice()))),
             anyOf(argumentCountIs(1), hasArgument(1, cxxDefaultArgExpr())), isStatementInBlock())
      .bind(CallId);
}

/// A CUDA constant as the device argument of a move or of `TensorOptions::device`.
StatementMatcher cudaConstantArgument() {
  auto Move = cxxMemberCallExpr(
      anyOf(tensorMethod("to"), moduleMethod("to"),
            callee(cxxMethodDecl(hasName("device"), ofClass(hasName("::c10::TensorOptions"))))),
      hasArgument(0, expr(isCudaConstant()).bind(ArgumentId)));
  return stmt(Move, unless(trainedModelMove()),
              unless(cxxMemberCallExpr(tensorMoveToDevice(), on(isFromPreparedBatch()))))
      .bind(CallId);
}

/// Every use of the device variable is an argument of a move this pass removes (a prepared model's, a
/// prepared batch's): after the rewrite nothing reads it, so its declaration goes too (no unused-variable
/// warning).
AST_MATCHER(clang::VarDecl, isOnlyUsedInRemovedMoves) {
  clang::ASTContext& Context = Finder->getASTContext();
  const clang::FunctionDecl* Function =
      Node.getInit() ? enclosingFunction(*Node.getInit(), Context) : nullptr;
  if (!Function || !Function->hasBody())
    return false;
  auto Removed = traverse(
      clang::TK_IgnoreUnlessSpelledInSource,
      stmt(anyOf(trainedModelMove(), cxxMemberCallExpr(tensorMoveToDevice(), on(isFromPreparedBatch())))));
  auto Use = declRefExpr(to(varDecl(equalsNode(&Node)))).bind("use");
  bool AnyUse = false;
  for (const BoundNodes& Found :
       match(traverse(clang::TK_AsIs, stmt(forEachDescendant(Use))), *Function->getBody(), Context)) {
    AnyUse = true;
    // The call the use is an argument of: up through implicit conversions (Device to TensorOptions).
    clang::DynTypedNodeList Parents = Context.getParents(*Found.getNodeAs<clang::Stmt>("use"));
    const clang::CXXMemberCallExpr* Call = nullptr;
    for (int Depth = 0; Depth < 6 && !Parents.empty() && !Call; ++Depth) {
      Call = Parents[0].get<clang::CXXMemberCallExpr>();
      if (!Call && !Parents[0].get<clang::ImplicitCastExpr>() && !Parents[0].get<clang::CXXConstructExpr>() &&
          !Parents[0].get<clang::MaterializeTemporaryExpr>() &&
          !Parents[0].get<clang::CXXBindTemporaryExpr>())
        break;
      Parents = Context.getParents(Parents[0]);
    }
    if (!Call || match(Removed, *Call, Context).empty())
      return false;
  }
  return AnyUse;
}

StatementMatcher deviceDeclaration() {
  return declStmt(
             hasSingleDecl(
                 varDecl(hasLocalStorage(), hasType(isDeviceType()), isTrainingDevice()).bind(VariableId)))
      .bind(StatementId);
}

StatementMatcher deviceAssignment() {
  auto Target = declRefExpr(to(varDecl(hasLocalStorage(), hasType(isDeviceType()), isTrainingDevice())));
  auto NotYet = unless(cxxMemberCallExpr(
      callee(cxxMethodDecl(hasName("device"), ofClass(hasName("::accelerate::Accelerator"))))));
  return stmt(anyOf(binaryOperator(isAssignmentOperator(), hasLHS(ignoringParenImpCasts(Target)),
                                   hasRHS(expr(NotYet).bind(ValueId))),
                    cxxOperatorCallExpr(hasOverloadedOperatorName("="), hasArgument(0, Target),
                                        hasArgument(1, expr(NotYet).bind(ValueId)))))
      .bind(StatementId);
}

/// `torch::DeviceType device_type;` set by side-effect-free assignments that are statements of a block
/// (`device_type = torch::kCUDA;`) and read only by device declarations this pass replaces
/// (`torch::Device device(device_type);`): after the rewrite nothing reads it, so it goes with its
/// assignments.
AST_MATCHER(clang::VarDecl, onlyChoosesAReplacedDevice) {
  clang::ASTContext& Context = Finder->getASTContext();
  if (!Node.hasLocalStorage() || !Node.getType()->isEnumeralType() ||
      match(varDecl(hasType(isDeviceType())), Node, Context).empty() ||
      (Node.getInit() && Node.getInit()->HasSideEffects(Context)))
    return false;
  auto DeclarationOf = [&](const clang::VarDecl& Variable) -> const clang::DeclStmt* {
    for (const clang::DynTypedNode& Parent : Context.getParents(Variable))
      if (const auto* Statement = Parent.get<clang::DeclStmt>())
        return Statement;
    return nullptr;
  };
  const clang::DeclStmt* Declaration = DeclarationOf(Node);
  const clang::FunctionDecl* Function = Declaration ? enclosingFunction(*Declaration, Context) : nullptr;
  if (!Function || !Function->hasBody())
    return false;
  auto Replaced = declStmt(deviceDeclaration(), inScope());
  bool ReadByReplacedDeclaration = false;
  auto Use = declRefExpr(to(varDecl(equalsNode(&Node)))).bind("use");
  for (const BoundNodes& Found :
       match(traverse(clang::TK_AsIs, stmt(forEachDescendant(Use))), *Function->getBody(), Context)) {
    // Up from the use: the left side of a whole-statement assignment without side effects, or part of the
    // initializer of a variable (the expression's parent is the VarDecl) whose declaration this pass
    // replaces.
    const clang::Stmt* Current = Found.getNodeAs<clang::Stmt>("use");
    bool Allowed = false;
    for (int Depth = 0; Depth < 12 && Current; ++Depth) {
      clang::DynTypedNodeList Parents = Context.getParents(*Current);
      if (Parents.empty())
        break;
      if (const auto* Assignment = Parents[0].get<clang::BinaryOperator>()) {
        if (Depth == 0 && Assignment->isAssignmentOp() && Assignment->getLHS()->IgnoreParens() == Current &&
            !Assignment->getRHS()->HasSideEffects(Context)) {
          clang::DynTypedNodeList Holders = Context.getParents(*Assignment);
          Allowed = !Holders.empty() && Holders[0].get<clang::CompoundStmt>();
        }
        break;
      }
      if (const auto* Variable = Parents[0].get<clang::VarDecl>()) {
        const clang::DeclStmt* Statement = DeclarationOf(*Variable);
        Allowed = Statement && !match(Replaced, *Statement, Context).empty();
        ReadByReplacedDeclaration = ReadByReplacedDeclaration || Allowed;
        break;
      }
      Current = Parents[0].get<clang::Stmt>();
    }
    if (!Allowed)
      return false;
  }
  return ReadByReplacedDeclaration;
}

/// A condition that only asks about CUDA (`torch::cuda::is_available()`, `device_count()`,
/// `cudnn_is_available()`, with operators and constants around them): dropping it changes nothing else.
bool onlyAsksAboutCuda(const clang::Expr& Condition, clang::ASTContext& Context) {
  if (!Condition.HasSideEffects(Context))
    return true;
  auto Pure = functionDecl(hasAnyName("::torch::cuda::is_available", "::torch::cuda::device_count",
                                      "::torch::cuda::cudnn_is_available"));
  auto Effect =
      expr(anyOf(callExpr(unless(callee(Pure))), cxxConstructExpr(), binaryOperator(isAssignmentOperator()),
                 unaryOperator(hasAnyOperatorName("++", "--"))));
  return !containsMatch(Effect, Condition, Context);
}

/// Whether `Branch` (a then/else of an if) only assigns DeviceType variables that go with their assignments
/// (`onlyChoosesAReplacedDevice`), directly or in a nested if of the same kind; counts the assignments.
bool onlyAssignsRemovedDeviceTypes(const clang::Stmt& Branch, clang::ASTContext& Context, int& Assignments);

/// An if with a plain condition (no init statement, condition variable or consteval) whose branches only
/// assign such variables.
bool branchesOnlyAssignRemovedDeviceTypes(const clang::IfStmt& If, clang::ASTContext& Context,
                                          int& Assignments) {
  if (If.getInit() || If.getConditionVariable() || If.isConsteval() || !If.getCond() || !If.getThen())
    return false;
  return onlyAssignsRemovedDeviceTypes(*If.getThen(), Context, Assignments) &&
         (!If.getElse() || onlyAssignsRemovedDeviceTypes(*If.getElse(), Context, Assignments));
}

bool ifOnlyChoosesRemovedDeviceTypes(const clang::IfStmt& If, clang::ASTContext& Context, int& Assignments) {
  return If.getCond() && onlyAsksAboutCuda(*If.getCond(), Context) &&
         branchesOnlyAssignRemovedDeviceTypes(If, Context, Assignments);
}

bool onlyAssignsRemovedDeviceTypes(const clang::Stmt& Branch, clang::ASTContext& Context, int& Assignments) {
  if (const auto* Nested = llvm::dyn_cast<clang::IfStmt>(&Branch))
    return ifOnlyChoosesRemovedDeviceTypes(*Nested, Context, Assignments);
  const auto* Block = llvm::dyn_cast<clang::CompoundStmt>(&Branch);
  if (!Block)
    return false; // `if (c) x = y;`: the assignment rule leaves such a variable alone anyway
  auto Removed =
      binaryOperator(isAssignmentOperator(),
                     hasLHS(ignoringParenImpCasts(declRefExpr(to(varDecl(onlyChoosesAReplacedDevice()))))));
  for (const clang::Stmt* Child : Block->body()) {
    if (llvm::isa<clang::NullStmt>(Child))
      continue;
    if (const auto* Nested = llvm::dyn_cast<clang::IfStmt>(Child)) {
      if (!ifOnlyChoosesRemovedDeviceTypes(*Nested, Context, Assignments))
        return false;
      continue;
    }
    if (match(traverse(clang::TK_IgnoreUnlessSpelledInSource, Removed), *Child, Context).empty())
      return false;
    ++Assignments;
  }
  return true;
}

/// `if (torch::cuda::is_available()) { device_type = torch::kCUDA; } else { device_type = torch::kCPU; }`
/// where the variable goes (`onlyChoosesAReplacedDevice`): without its assignments the if does nothing, so
/// it goes as a whole instead of staying behind as `if (...) {} else {}`.
AST_MATCHER(clang::IfStmt, onlyChoosesRemovedDeviceTypes) {
  int Assignments = 0;
  return ifOnlyChoosesRemovedDeviceTypes(Node, Finder->getASTContext(), Assignments) && Assignments > 0;
}

/// `if (pick_gpu()) { device_type = torch::kCUDA; }`: the same, but the condition is one call that may do
/// more than ask about CUDA. Without the assignments only the call is left to keep, as a statement of its
/// own. (Not for a `[[nodiscard]]` function, nor for a condition with more in it: those keep their emptied
/// if.)
AST_MATCHER(clang::IfStmt, onlyCallsAndChoosesRemovedDeviceTypes) {
  auto& Context = Finder->getASTContext();
  const auto* Call =
      Node.getCond() ? llvm::dyn_cast<clang::CallExpr>(Node.getCond()->IgnoreParenImpCasts()) : nullptr;
  // A call a template leaves dependent has no result type to ask about (clang asserts on it).
  if (!Call || Call->isTypeDependent() || Call->isValueDependent() || !Call->getCalleeDecl() ||
      onlyAsksAboutCuda(*Call, Context) || Call->hasUnusedResultAttr(Context))
    return false;
  int Assignments = 0;
  return branchesOnlyAssignRemovedDeviceTypes(Node, Context, Assignments) && Assignments > 0;
}

/// Such an if that goes, whole or for its call: not the `else if` of another if (whose `else` would be left
/// without a statement).
StatementMatcher removedDeviceChoice() {
  return ifStmt(anyOf(onlyChoosesRemovedDeviceTypes(), onlyCallsAndChoosesRemovedDeviceTypes()),
                unless(hasParent(ifStmt())));
}

/// The declaration with the accelerator's device: `torch::Device device = accelerator.device();`, keeping
/// the declared type unless it was a DeviceType, which cannot hold a device index.
Stencil deviceDeclarationText() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Variable = Result.Nodes.getNodeAs<clang::VarDecl>(VariableId);
    std::string Type = "torch::Device";
    clang::QualType Declared = Variable->getType();
    bool IsEnum = Declared->isEnumeralType();
    if (!IsEnum || Declared->getContainedAutoType())
      Type = clang::Lexer::getSourceText(clang::CharSourceRange::getTokenRange(
                                             Variable->getTypeSourceInfo()->getTypeLoc().getSourceRange()),
                                         *Result.SourceManager, Result.Context->getLangOpts())
                 .str();
    if (Declared.isConstQualified() && !llvm::StringRef(Type).starts_with("const"))
      Type = "const " + Type;
    return Type + " " + Variable->getNameAsString() + " = " + AcceleratorDevice + ";";
  });
}

AST_MATCHER(clang::Decl, isInTrainingFileDecl) {
  return mainFileTrains(Finder->getASTContext());
}

/// A device variable defined at namespace scope (`inline torch::Device device = torch::Device(torch::kCUDA,
/// 0);`) in the main file or a header the rewrite changes, in a file that trains, not explicitly the CPU.
DeclarationMatcher globalDevice() {
  return varDecl(hasGlobalStorage(), unless(isStaticLocal()), isDefinition(),
                 hasDeclContext(decl(anyOf(translationUnitDecl(), namespaceDecl()))), hasType(isDeviceType()),
                 isTrainingDevice(), isExpansionInRewrittenFile(), isInTrainingFileDecl())
      .bind(VariableId);
}

AST_MATCHER(clang::VarDecl, isConstDevice) {
  return Node.getType().isConstQualified() || Node.isConstexpr();
}

/// `name = accelerator.device();`, the variable named as from the global namespace.
Stencil globalDeviceAssignment() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Variable = Result.Nodes.getNodeAs<clang::VarDecl>(VariableId);
    return Variable->getQualifiedNameAsString() + " = " + AcceleratorDevice + ";";
  });
}

/// A CUDA constant passed for a device parameter of a function of the project:
/// `train(model, torch::Device(torch::kCUDA, 0))`.
StatementMatcher cudaConstantDeviceParameter() {
  return callExpr(callee(functionDecl(isExpansionInRewrittenFile())),
                  forEachArgumentWithParam(expr(isCudaConstant()).bind(ArgumentId),
                                           parmVarDecl(hasType(isDeviceType()))))
      .bind(CallId);
}

} // namespace

StatementMatcher deviceSiteUsingAccelerator() {
  auto KeptDeclaration =
      declStmt(deviceDeclaration(), unless(hasSingleDecl(varDecl(isOnlyUsedInRemovedMoves()))));
  return stmt(anyOf(KeptDeclaration, deviceAssignment(), cudaConstantArgument(),
                    cudaConstantDeviceParameter(),
                    cxxMemberCallExpr(tensorCuda(), unless(on(isFromPreparedBatch()))), unplacedBatchRead()),
              inScope());
}

PassRule devicePass() {
  // Nothing inside an if that goes (whole, or for its call) is edited on its own.
  auto Scoped = [](StatementMatcher Matcher) {
    return traverse(clang::TK_IgnoreUnlessSpelledInSource,
                    stmt(Matcher, inScope(), unless(hasAncestor(removedDeviceChoice()))));
  };
  auto Object = node(ObjectId);
  return applyFirst<std::string>({
      makeRule(Scoped(declStmt(deviceDeclaration(), hasSingleDecl(varDecl(isOnlyUsedInRemovedMoves())))),
               removeStatement(StatementId),
               cat("the accelerator picks each process's device, and the rewrite removes every use of '",
                   name(VariableId), "' (prepare places the models, prepared loaders the batches)")),
      makeRule(Scoped(declStmt(hasSingleDecl(varDecl(onlyChoosesAReplacedDevice()).bind(VariableId)))
                          .bind(StatementId)),
               removeStatement(StatementId),
               cat("'", name(VariableId),
                   "' only chose the device that the accelerator now picks: nothing reads it any more")),
      makeRule(Scoped(ifStmt(removedDeviceChoice(), onlyChoosesRemovedDeviceTypes()).bind(StatementId)),
               removeStatement(StatementId),
               cat("this if only chose a device type that the accelerator's device replaces: without those "
                   "assignments it does nothing")),
      makeRule(Scoped(ifStmt(removedDeviceChoice(), onlyCallsAndChoosesRemovedDeviceTypes(),
                             hasCondition(expr().bind(ConditionId)))
                          .bind(StatementId)),
               changeTo(node(StatementId), cat(node(ConditionId), ";")),
               cat("this if only chose a device type that the accelerator's device replaces: without those "
                   "assignments only its condition's call is left to run")),
      makeRule(Scoped(binaryOperator(isAssignmentOperator(),
                                     hasLHS(ignoringParenImpCasts(declRefExpr(
                                         to(varDecl(onlyChoosesAReplacedDevice()).bind(VariableId))))))
                          .bind(StatementId)),
               removeStatement(StatementId),
               cat("'", name(VariableId),
                   "' only chose the device that the accelerator now picks: nothing reads it any more")),
      makeRule(
          Scoped(deviceDeclaration()), changeTo(statementWithSemicolon(StatementId), deviceDeclarationText()),
          cat("the accelerator picks each process's device (cuda:<local rank> when CUDA is available, else "
              "the CPU); '",
              name(VariableId), "' is that device, for the code that still uses it")),
      makeRule(
          Scoped(deviceAssignment()), changeTo(node(ValueId), cat(AcceleratorDevice)),
          cat("the accelerator picks each process's device; this assignment would move training elsewhere")),
      makeRule(
          Scoped(trainedModelMove()), removeStatement(CallId),
          cat("accelerator.prepare() moves the model to accelerator.device() (the model is prepared where "
              "its optimizer is made)")),
      makeRule(Scoped(cxxMemberCallExpr(tensorMoveToDevice(), on(isFromPreparedBatch())).bind(CallId)),
               changeTo(node(CallId), ifBound(DtypeId, cat(Object, ".to(", node(DtypeId), ")"), cat(Object))),
               cat("a prepared loader's batches are already on accelerator.device()")),
      makeRule(Scoped(cxxMemberCallExpr(tensorCuda(), on(isFromPreparedBatch())).bind(CallId)),
               changeTo(node(CallId), cat(Object)),
               cat("a prepared loader's batches are already on accelerator.device()")),
      makeRule(Scoped(stmt(tensorCuda()).bind(CallId)),
               changeTo(node(CallId), cat(Object, ".to(", AcceleratorDevice, ")")),
               cat("each process has its own device (cuda:<local rank>, or the CPU without CUDA); .cuda() "
                   "would put "
                   "every process on GPU 0")),
      makeRule(
          Scoped(unplacedBatchRead()), insertAfter(node(ObjectId), cat(".to(", AcceleratorDevice, ")")),
          cat("the batches of a loader that is not prepared stay on the CPU, and the prepared model is on "
              "accelerator.device(): moved where the loop reads them (on the CPU, a move to the same "
              "device does nothing)")),
      makeRule(
          Scoped(cpuMoveIntoPreparedModel()), noopEdit(node(CallId)),
          cat("'", node(CallId),
              "' not rewritten: it moves a batch of a prepared loader to the CPU, and the prepared model it "
              "feeds is on accelerator.device(); on a GPU the forward pass fails with a device mismatch. "
              "Drop the move (prepared batches are already on the model's device), or move to "
              "accelerator.device()")),
      makeRule(
          traverse(clang::TK_IgnoreUnlessSpelledInSource,
                   varDecl(globalDevice(), unless(isConstDevice()), isInFileWithMain())),
          insertAtStartOfMain(globalDeviceAssignment()),
          cat("the accelerator picks each process's device (cuda:<local rank> when CUDA is available, else "
              "the CPU); the global '",
              name(VariableId),
              "' is set to it at the start of main, so every tensor placed on it goes to this process's "
              "device rather than the one written here")),
      // One in a header, seen from a file without main, is set by the file with main.
      makeRule(
          traverse(clang::TK_IgnoreUnlessSpelledInSource,
                   varDecl(globalDevice(), anyOf(isConstDevice(), isExpansionInMainFile()))),
          noopEdit(name(VariableId)),
          cat("global device '", name(VariableId),
              "' not rewritten: every process would place its tensors on the device written here, while "
              "its model is on its own device (cuda:<local rank>); it is const, or this file has no main "
              "to set it in. Make it a non-const global of the file with main, or use "
              "accelerator.device() where tensors are placed")),
      makeRule(
          Scoped(cudaConstantDeviceParameter()), changeTo(node(ArgumentId), cat(AcceleratorDevice)),
          cat("each process has its own device (cuda:<local rank>, or the CPU without CUDA); this constant "
              "would put every process's tensors on one GPU")),
      makeRule(
          Scoped(cudaConstantArgument()), changeTo(node(ArgumentId), cat(AcceleratorDevice)),
          cat("each process has its own device (cuda:<local rank>, or the CPU without CUDA); a constant CUDA "
              "device would put every process on GPU 0")),
  });
}

/// The pass's row of the table (passes/Passes.def lists it; scripts/passes_table.py reads its texts).
PassInfo devicePassInfo() {
  return {"device",
          devicePass,
          "device declarations become `accelerator.device()`; manual moves of prepared models and batches go",
          /*OnByDefault=*/true,
          /*WhenNothingFound=*/{},
          /*LeavesAlone=*/"CPU moves, dtype conversions, models only evaluated",
          /*TurnedOnBy=*/{},
          /*UsesAccelerator=*/deviceSiteUsingAccelerator};
}

} // namespace accelerate::passes
