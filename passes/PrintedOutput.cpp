// passes/PrintedOutput.cpp: the facts module's output statements (TrainingCode.h): stream chains and printf
// calls, the losses a function runs backward on and reads, side effects in what is printed, and the
// training numbers a statement prints.
#include "passes/TrainingCode.h"

#include "clang/AST/ASTContext.h"
#include "clang/AST/ExprCXX.h"
#include "clang/AST/StmtCXX.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "clang/Lex/Lexer.h"
#include "llvm/ADT/STLExtras.h"

#include <optional>

namespace accelerate::passes {

using namespace clang::ast_matchers;

std::optional<StreamChain> streamChain(const clang::Expr* E) {
  StreamChain Chain;
  E = E->IgnoreUnlessSpelledInSource();
  while (true) {
    E = E->IgnoreParens();
    if (const auto* Operator = llvm::dyn_cast<clang::CXXOperatorCallExpr>(E);
        Operator && Operator->getOperator() == clang::OO_LessLess && Operator->getNumArgs() == 2) {
      Chain.Operands.insert(Chain.Operands.begin(), Operator->getArg(1));
      E = Operator->getArg(0)->IgnoreUnlessSpelledInSource();
      continue;
    }
    if (const auto* Binary = llvm::dyn_cast<clang::BinaryOperator>(E);
        Binary && Binary->getOpcode() == clang::BO_Shl) {
      Chain.Operands.insert(Chain.Operands.begin(), Binary->getRHS());
      E = Binary->getLHS()->IgnoreUnlessSpelledInSource();
      continue;
    }
    break;
  }
  if (Chain.Operands.empty())
    return std::nullopt;
  Chain.Stream = E;
  return Chain;
}

OutputStream streamKind(const clang::Expr* E) {
  const auto* Reference = llvm::dyn_cast<clang::DeclRefExpr>(E->IgnoreParenImpCasts());
  const auto* Variable = Reference ? llvm::dyn_cast<clang::VarDecl>(Reference->getDecl()) : nullptr;
  if (!Variable)
    return OutputStream::None;
  std::string Name = Variable->getQualifiedNameAsString();
  if (Name == "std::cout")
    return OutputStream::Cout;
  if (Name == "std::cerr" || Name == "std::clog")
    return OutputStream::OtherStandard;
  const auto* Record = Variable->getType().getNonReferenceType()->getAsCXXRecordDecl();
  if (Record && (Record->getQualifiedNameAsString() == "std::basic_ofstream" ||
                 Record->getQualifiedNameAsString() == "std::basic_fstream"))
    return OutputStream::File;
  return OutputStream::None;
}

/// The name an operand spells when it is a function (`std::endl`, `std::flush`), resolved or not.
std::string manipulatorName(const clang::Expr* E) {
  E = E->IgnoreUnlessSpelledInSource()->IgnoreParenImpCasts();
  if (const auto* Reference = llvm::dyn_cast<clang::DeclRefExpr>(E))
    if (llvm::isa<clang::FunctionDecl>(Reference->getDecl()))
      return Reference->getDecl()->getNameAsString();
  if (const auto* Unresolved = llvm::dyn_cast<clang::UnresolvedLookupExpr>(E))
    return Unresolved->getName().getAsString();
  return "";
}

bool isTemplateManipulator(const clang::Expr* E) {
  std::string Name = manipulatorName(E);
  return Name == "endl" || Name == "flush" || Name == "ends";
}

namespace {

/// The variables `Body` runs backward on (`loss.backward()`, also in a template; each of
/// `torch::autograd::backward({a, b})`).
std::vector<const clang::ValueDecl*> backwardVariables(const clang::Stmt& Body, clang::ASTContext& Context) {
  auto Loss = declRefExpr(to(varDecl().bind("loss")));
  auto Resolved = cxxMemberCallExpr(
      callee(cxxMethodDecl(hasName("backward"),
                           ofClass(cxxRecordDecl(isSameOrDerivedFrom("::at::TensorBase"))))),
      on(ignoringParenImpCasts(Loss)));
  auto Dependent = cxxDependentScopeMemberExpr(hasMemberName("backward"),
                                               hasObjectExpression(ignoringParenImpCasts(Loss)));
  std::vector<const clang::ValueDecl*> Losses;
  for (const BoundNodes& Found :
       match(traverse(clang::TK_AsIs, stmt(forEachDescendant(expr(anyOf(Resolved, Dependent))))), Body,
             Context))
    Losses.push_back(Found.getNodeAs<clang::ValueDecl>("loss"));
  // `torch::autograd::backward({main_loss, aux_loss})`: each variable of the list.
  for (const BoundNodes& Found :
       match(traverse(clang::TK_AsIs, stmt(forEachDescendant(callExpr(autogradBackwardCall()).bind("call")))),
             Body, Context))
    for (const clang::Expr* Tensor :
         autogradBackwardLosses(*Found.getNodeAs<clang::CallExpr>("call"), Context))
      if (const auto* Read = llvm::dyn_cast<clang::DeclRefExpr>(Tensor->IgnoreParenImpCasts()))
        if (llvm::isa<clang::VarDecl>(Read->getDecl()))
          Losses.push_back(Read->getDecl());
  return Losses;
}

} // namespace

/// The tensors the function runs backward on, written as variables: its losses. Also a loss a training step
/// returns: `auto loss = train_step(...)`, where the function or lambda called runs backward on the variable
/// it returns.
std::vector<const clang::ValueDecl*> lossesOf(const clang::FunctionDecl& Function,
                                              clang::ASTContext& Context) {
  std::vector<const clang::ValueDecl*> Losses = backwardVariables(*Function.getBody(), Context);
  auto Returned = declRefExpr(to(varDecl().bind("returned")));
  auto ReturnsVariable = returnStmt(hasReturnValue(
      ignoringImplicit(anyOf(Returned, cxxConstructExpr(hasArgument(0, ignoringImplicit(Returned)))))));
  for (const BoundNodes& Found : match(
           traverse(clang::TK_AsIs,
                    stmt(forEachDescendant(
                        varDecl(hasInitializer(ignoringImplicit(callExpr().bind("step")))).bind("result")))),
           *Function.getBody(), Context)) {
    const clang::FunctionDecl* Step = Found.getNodeAs<clang::CallExpr>("step")->getDirectCallee();
    if (!Step || !Step->hasBody() || Step == &Function)
      continue;
    std::vector<const clang::ValueDecl*> StepLosses = backwardVariables(*Step->getBody(), Context);
    for (const BoundNodes& Return :
         match(traverse(clang::TK_AsIs, stmt(forEachDescendant(ReturnsVariable))), *Step->getBody(), Context))
      if (llvm::is_contained(StepLosses, Return.getNodeAs<clang::ValueDecl>("returned"))) {
        Losses.push_back(Found.getNodeAs<clang::ValueDecl>("result"));
        break;
      }
  }
  return Losses;
}

/// The loss objects in `loss.item<T>()` calls within `Operand`, for the losses in `Losses`.
std::vector<const clang::Expr*> lossReads(const clang::Expr& Operand,
                                          const std::vector<const clang::ValueDecl*>& Losses,
                                          clang::ASTContext& Context) {
  std::vector<const clang::Expr*> Objects;
  if (Losses.empty())
    return Objects;
  auto Object = expr(ignoringParenImpCasts(declRefExpr(to(varDecl().bind("loss"))))).bind("object");
  auto Item = expr(anyOf(
      cxxMemberCallExpr(callee(cxxMethodDecl(hasName("item"))), on(Object)),
      callExpr(callee(cxxDependentScopeMemberExpr(hasMemberName("item"), hasObjectExpression(Object))))));
  for (const BoundNodes& Found :
       match(traverse(clang::TK_AsIs, expr(anyOf(Item, forEachDescendant(Item)))), Operand, Context))
    if (llvm::is_contained(Losses, Found.getNodeAs<clang::ValueDecl>("loss")))
      Objects.push_back(Found.getNodeAs<clang::Expr>("object"));
  return Objects;
}

namespace {

/// True when `Method` has a const overload with the same parameters: `param_groups()`, `options()` called on
/// a non-const object are accessors.
bool hasConstTwin(const clang::CXXMethodDecl& Method) {
  for (const clang::NamedDecl* Found : Method.getParent()->lookup(Method.getDeclName())) {
    const auto* Twin = llvm::dyn_cast<clang::CXXMethodDecl>(Found->getUnderlyingDecl());
    if (Twin && Twin != &Method && Twin->isConst() && Twin->getNumParams() == Method.getNumParams())
      return true;
  }
  return false;
}

/// A call on the short list of calls known to change nothing: stream inserters, `item()`, const member
/// functions other than in-place tensor operations (`add_`) and `backward`, accessors with a const twin, and
/// functions of namespace std but the random ones.
bool isKnownPureCall(const clang::Expr& Call) {
  if (const auto* Operator = llvm::dyn_cast<clang::CXXOperatorCallExpr>(&Call)) {
    switch (Operator->getOperator()) {
    case clang::OO_Equal:
    case clang::OO_PlusEqual:
    case clang::OO_MinusEqual:
    case clang::OO_StarEqual:
    case clang::OO_SlashEqual:
    case clang::OO_PercentEqual:
    case clang::OO_CaretEqual:
    case clang::OO_AmpEqual:
    case clang::OO_PipeEqual:
    case clang::OO_LessLessEqual:
    case clang::OO_GreaterGreaterEqual:
    case clang::OO_PlusPlus:
    case clang::OO_MinusMinus:
    case clang::OO_Call:
      return false;
    default:
      return true; // `<<`, arithmetic, comparisons, `[]`, `->`, `*`
    }
  }
  if (const auto* Member = llvm::dyn_cast<clang::CXXMemberCallExpr>(&Call)) {
    const clang::CXXMethodDecl* Method = Member->getMethodDecl();
    if (!Method || !Method->getDeclName().isIdentifier())
      return false;
    llvm::StringRef Name = Method->getName();
    if (Name == "item")
      return true;
    if (Name.ends_with("_") || Name == "backward" || Name == "step" || Name == "zero_grad")
      return false;
    return Method->isConst() || hasConstTwin(*Method);
  }
  if (const auto* Plain = llvm::dyn_cast<clang::CallExpr>(&Call)) {
    const clang::Expr* Callee = Plain->getCallee()->IgnoreParenImpCasts();
    if (const auto* Dependent = llvm::dyn_cast<clang::CXXDependentScopeMemberExpr>(Callee)) {
      // In a template, tensor reads by name: `loss.template item<float>()`, `batch.data.size(0)`.
      std::string Name = Dependent->getMember().getAsString();
      return llvm::is_contained(llvm::ArrayRef<llvm::StringRef>{"item", "size", "sizes", "numel", "dim",
                                                                "sum", "mean", "max", "min", "norm", "argmax",
                                                                "eq"},
                                Name);
    }
    auto IsPureFunction = [](const clang::NamedDecl* Declaration) {
      const auto* Function = llvm::dyn_cast_or_null<clang::FunctionDecl>(Declaration->getUnderlyingDecl());
      if (const auto* Template =
              llvm::dyn_cast_or_null<clang::FunctionTemplateDecl>(Declaration->getUnderlyingDecl()))
        Function = Template->getTemplatedDecl();
      if (!Function || !Function->getDeclName().isIdentifier())
        return false;
      llvm::StringRef Name = Function->getName();
      return Function->isInStdNamespace() && !Name.contains("rand") && Name != "exchange" && Name != "swap" &&
             Name != "getline";
    };
    if (const auto* Unresolved = llvm::dyn_cast<clang::UnresolvedLookupExpr>(Callee))
      return !Unresolved->decls().empty() && llvm::all_of(Unresolved->decls(), IsPureFunction);
    return Plain->getDirectCallee() && IsPureFunction(Plain->getDirectCallee());
  }
  return false;
}

} // namespace

/// The first call or update in `S` (in evaluation order for output, which C++17 sequences left to right)
/// that may change what the program computes next: running it on the main process only would make the
/// processes' states differ. Lambda bodies are not looked into (creating a lambda runs nothing).
const clang::Expr* firstSideEffect(const clang::Stmt& S) {
  if (llvm::isa<clang::LambdaExpr>(&S))
    return nullptr;
  for (const clang::Stmt* Child : S.children())
    if (Child)
      if (const clang::Expr* Found = firstSideEffect(*Child))
        return Found;
  if (const auto* Binary = llvm::dyn_cast<clang::BinaryOperator>(&S); Binary && Binary->isAssignmentOp())
    return Binary;
  if (const auto* Unary = llvm::dyn_cast<clang::UnaryOperator>(&S); Unary && Unary->isIncrementDecrementOp())
    return Unary;
  if (const auto* Call = llvm::dyn_cast<clang::CallExpr>(&S); Call && !isKnownPureCall(*Call))
    return Call;
  return nullptr;
}

StatementMatcher printfCall() {
  auto Names =
      hasAnyName("::printf", "::std::printf", "::puts", "::std::puts", "::fprintf", "::std::fprintf");
  return callExpr(callee(expr(ignoringImplicit(anyOf(
      declRefExpr(to(functionDecl(Names))), unresolvedLookupExpr(hasAnyDeclaration(functionDecl(Names))))))));
}

namespace {

/// A stream manipulator: a function named as an operand (`std::fixed`, `std::endl`) or a call of one of
/// std's `set...` manipulators (`std::setprecision(8)`, `std::setw(6)`).
bool isManipulator(const clang::Expr* E) {
  if (!manipulatorName(E).empty())
    return true;
  const auto* Call = llvm::dyn_cast<clang::CallExpr>(E->IgnoreUnlessSpelledInSource()->IgnoreParenImpCasts());
  const clang::FunctionDecl* Callee = Call ? Call->getDirectCallee() : nullptr;
  return Callee && Callee->isInStdNamespace() && Callee->getDeclName().isIdentifier() &&
         Callee->getName().starts_with("set");
}

/// The value of the string literal `E` is, resolved escapes included; "" for anything else.
std::string literalText(const clang::Expr* E) {
  const auto* Literal =
      llvm::dyn_cast<clang::StringLiteral>(E->IgnoreUnlessSpelledInSource()->IgnoreParenImpCasts());
  return Literal && Literal->isOrdinary() ? Literal->getString().str() : "";
}

} // namespace

std::vector<PrintedValue> printedValues(const clang::Expr& Statement, clang::ASTContext& Context) {
  std::vector<PrintedValue> Printed;
  std::vector<const clang::Expr*> Operands;
  std::optional<StreamChain> Chain = streamChain(&Statement);
  if (Chain) {
    OutputStream Kind = streamKind(Chain->Stream);
    if (Kind != OutputStream::Cout && Kind != OutputStream::OtherStandard)
      return Printed;
    Operands = Chain->Operands;
  } else if (const auto* Call = llvm::dyn_cast<clang::CallExpr>(Statement.IgnoreUnlessSpelledInSource());
             Call && !match(traverse(clang::TK_AsIs, printfCall()), *Call, Context).empty()) {
    Operands.assign(Call->arg_begin(), Call->arg_end());
  } else {
    return Printed;
  }
  const clang::FunctionDecl* Function = enclosingFunction(Statement, Context);
  if (!Function || !Function->hasBody())
    return Printed;
  std::vector<const clang::ValueDecl*> Losses = lossesOf(*Function, Context);
  bool PerProcess = readsShardedData(*Function, Context);
  for (size_t I = 0; I < Operands.size(); ++I) {
    PrintedValue Value;
    Value.Operand = Operands[I];
    Value.LossReads = lossReads(*Operands[I], Losses, Context);
    Value.Numbers = shareReads(*Operands[I], *Function, Context);
    if (Value.LossReads.empty() && Value.Numbers.empty())
      continue;
    Value.PerProcess = PerProcess;
    Value.SideEffect = firstSideEffect(*Operands[I]);
    if (Chain) {
      size_t Before = I;
      while (Before > 0 && isManipulator(Operands[Before - 1]))
        --Before;
      Value.PrintedBefore = Before > 0 ? literalText(Operands[Before - 1]) : "";
    }
    Printed.push_back(std::move(Value));
  }
  return Printed;
}

std::optional<std::string> globalValueText(const PrintedValue& Value, clang::ASTContext& Context) {
  if (Value.PerProcess &&
      llvm::any_of(Value.Numbers, [](const auto& Use) { return Use.second == Share::Unknown; }))
    return std::nullopt;
  const clang::SourceManager& SM = Context.getSourceManager();
  auto Range = [&](const clang::Expr* E) {
    return clang::Lexer::makeFileCharRange(clang::CharSourceRange::getTokenRange(E->getSourceRange()), SM,
                                           Context.getLangOpts());
  };
  // A bare `loss.item<T>()` is logged as the tensor: `accelerator.reduce(loss.detach(), ...)`.
  const clang::Expr* Bare = Value.Operand->IgnoreUnlessSpelledInSource()->IgnoreParenImpCasts();
  const clang::Expr* Object = nullptr;
  if (const auto* Member = llvm::dyn_cast<clang::CXXMemberCallExpr>(Bare))
    Object = Member->getImplicitObjectArgument();
  else if (const auto* Call = llvm::dyn_cast<clang::CallExpr>(Bare))
    if (const auto* Dependent =
            llvm::dyn_cast<clang::CXXDependentScopeMemberExpr>(Call->getCallee()->IgnoreParenImpCasts()))
      Object = Dependent->getBase();
  if (Object && Value.LossReads.size() == 1 && Value.Numbers.empty() &&
      Object->IgnoreParenImpCasts() == Value.LossReads.front()->IgnoreParenImpCasts()) {
    clang::CharSourceRange Loss = Range(Value.LossReads.front());
    if (Loss.isInvalid())
      return std::nullopt;
    return "accelerator.reduce(" + clang::Lexer::getSourceText(Loss, SM, Context.getLangOpts()).str() +
           ".detach(), accelerate::ReduceOp::MEAN)";
  }
  clang::CharSourceRange Whole = Range(Value.Operand);
  if (Whole.isInvalid())
    return std::nullopt;
  unsigned Begin = SM.getFileOffset(Whole.getBegin()), End = SM.getFileOffset(Whole.getEnd());
  std::vector<std::pair<unsigned, std::string>> Insertions; // at offsets in the operand's text
  auto Wrap = [&](const clang::Expr* E, llvm::StringRef Op) {
    clang::CharSourceRange Part = Range(E);
    if (Part.isInvalid() || SM.getFileID(Part.getBegin()) != SM.getFileID(Whole.getBegin()))
      return false;
    unsigned From = SM.getFileOffset(Part.getBegin()), To = SM.getFileOffset(Part.getEnd());
    if (From < Begin || To > End)
      return false;
    Insertions.emplace_back(To - Begin, (", accelerate::ReduceOp::" + Op + ")").str());
    Insertions.emplace_back(From - Begin, "accelerator.reduce(");
    return true;
  };
  for (const clang::Expr* Loss : Value.LossReads)
    if (!Wrap(Loss, "MEAN"))
      return std::nullopt;
  if (Value.PerProcess)
    for (const auto& [Use, Kind] : Value.Numbers)
      if (!Wrap(Use, Kind == Share::Sum ? "SUM" : "MEAN"))
        return std::nullopt;
  std::string Text = clang::Lexer::getSourceText(Whole, SM, Context.getLangOpts()).str();
  // From the end, so that earlier offsets stay valid; at one offset the opening first, so that a closing
  // inserted there after it comes before it.
  llvm::stable_sort(Insertions, [](const auto& A, const auto& B) {
    bool OpensA = llvm::StringRef(A.second).starts_with("accelerator."),
         OpensB = llvm::StringRef(B.second).starts_with("accelerator.");
    return A.first != B.first ? A.first > B.first : OpensA && !OpensB;
  });
  for (const auto& [Offset, Inserted] : Insertions)
    Text.insert(Offset, Inserted);
  return Text;
}

} // namespace accelerate::passes
