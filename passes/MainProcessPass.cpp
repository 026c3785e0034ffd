// passes/MainProcessPass.cpp: the rule that keeps training output to the main process.
#include "passes/MainProcessPass.h"

#include "passes/Insertion.h"
#include "passes/Macros.h"
#include "passes/TrainingCode.h"

#include "clang/AST/ASTContext.h"
#include "clang/AST/ExprCXX.h"
#include "clang/AST/StmtCXX.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "clang/Lex/Lexer.h"
#include "clang/Tooling/Transformer/Stencil.h"
#include "llvm/ADT/STLExtras.h"

#include <optional>

namespace accelerate::passes {
namespace {

using namespace clang::ast_matchers;
using namespace clang::transformer;

constexpr char StatementId[] = "statement";

/// `a << b << c`: the stream (`a`) and what is written to it (`b`, `c`), for resolved and dependent code.
struct StreamChain {
  const clang::Expr* Stream = nullptr;
  std::vector<const clang::Expr*> Operands;
};

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

/// What kind of stream a chain writes to.
enum class Stream { Cout, OtherStandard, File, None };

Stream streamKind(const clang::Expr* E) {
  const auto* Reference = llvm::dyn_cast<clang::DeclRefExpr>(E->IgnoreParenImpCasts());
  const auto* Variable = Reference ? llvm::dyn_cast<clang::VarDecl>(Reference->getDecl()) : nullptr;
  if (!Variable)
    return Stream::None;
  std::string Name = Variable->getQualifiedNameAsString();
  if (Name == "std::cout")
    return Stream::Cout;
  if (Name == "std::cerr" || Name == "std::clog")
    return Stream::OtherStandard;
  const auto* Record = Variable->getType().getNonReferenceType()->getAsCXXRecordDecl();
  if (Record && (Record->getQualifiedNameAsString() == "std::basic_ofstream" ||
                 Record->getQualifiedNameAsString() == "std::basic_fstream"))
    return Stream::File;
  return Stream::None;
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

std::string sourceText(clang::SourceRange Range, const clang::ASTContext& Context) {
  return clang::Lexer::getSourceText(clang::CharSourceRange::getTokenRange(Range), Context.getSourceManager(),
                                     Context.getLangOpts())
      .str();
}

/// A `\n`-terminated string literal written as one token: its spelling without the `\n`.
std::optional<std::string> withoutFinalNewline(const clang::Expr* E, const clang::ASTContext& Context) {
  E = E->IgnoreUnlessSpelledInSource()->IgnoreParenImpCasts();
  std::string Text = sourceText(E->getSourceRange(), Context);
  if (llvm::isa<clang::CharacterLiteral>(E) && Text == "'\\n'")
    return std::string();
  if (!llvm::isa<clang::StringLiteral>(E) || !llvm::StringRef(Text).ends_with("\\n\"") ||
      llvm::StringRef(Text).count('"') != 2 || !llvm::StringRef(Text).starts_with("\""))
    return std::nullopt;
  Text = Text.substr(0, Text.size() - 3) + "\"";
  return Text == "\"\"" ? std::string() : Text;
}

/// `std::cout << ... << std::endl;` (or a final "...\n") with no other function manipulator: it fits
/// accelerator.print, which ends the line itself.
bool fitsPrint(const StreamChain& Chain, const clang::ASTContext& Context) {
  if (streamKind(Chain.Stream) != Stream::Cout)
    return false;
  const clang::Expr* Last = Chain.Operands.back();
  bool EndsLine = manipulatorName(Last) == "endl" || withoutFinalNewline(Last, Context).has_value();
  return EndsLine && llvm::none_of(llvm::ArrayRef(Chain.Operands).drop_back(), isTemplateManipulator);
}

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

/// The first operand of an output statement (a stream chain's operands, printf's arguments) with a side
/// effect, or null.
const clang::Expr* outputSideEffect(const clang::Expr& Statement) {
  if (std::optional<StreamChain> Chain = streamChain(&Statement)) {
    for (const clang::Expr* Operand : Chain->Operands)
      if (const clang::Expr* Found = firstSideEffect(*Operand))
        return Found;
    return nullptr;
  }
  if (const auto* Call = llvm::dyn_cast<clang::CallExpr>(Statement.IgnoreUnlessSpelledInSource()))
    for (const clang::Expr* Argument : Call->arguments())
      if (const clang::Expr* Found = firstSideEffect(*Argument))
        return Found;
  return nullptr;
}

AST_MATCHER(clang::Expr, hasSideEffectInOutput) {
  return outputSideEffect(Node) != nullptr;
}

// ---- Numbers computed on this process's share of the data ------------------------------------------------

/// The operands an output statement prints: a stream chain's, or printf's arguments.
std::vector<const clang::Expr*> printedOperands(const clang::Expr& Statement) {
  if (std::optional<StreamChain> Chain = streamChain(&Statement))
    return Chain->Operands;
  std::vector<const clang::Expr*> Operands;
  if (const auto* Call = llvm::dyn_cast<clang::CallExpr>(Statement.IgnoreUnlessSpelledInSource()))
    Operands.assign(Call->arg_begin(), Call->arg_end());
  return Operands;
}

/// The uses, in the printed operands, of numbers computed on this process's share, with their kind.
std::vector<std::pair<const clang::DeclRefExpr*, Share>> sharedNumbers(const clang::Expr& Statement,
                                                                       clang::ASTContext& Context) {
  std::vector<std::pair<const clang::DeclRefExpr*, Share>> Uses;
  const clang::FunctionDecl* Function = enclosingFunction(Statement, Context);
  if (!Function || !readsShardedData(*Function, Context))
    return Uses;
  for (const clang::Expr* Operand : printedOperands(Statement)) {
    auto Reads = shareReads(*Operand, *Function, Context);
    Uses.insert(Uses.end(), Reads.begin(), Reads.end());
  }
  return Uses;
}

AST_MATCHER(clang::Expr, printsSharedNumber) {
  return !sharedNumbers(Node, Finder->getASTContext()).empty();
}

/// Printed numbers that cannot be made global here: of unknown kind, or under a condition the processes could
/// disagree on (the reduction is collective).
AST_MATCHER(clang::Expr, printsUnreducibleNumber) {
  clang::ASTContext& Context = Finder->getASTContext();
  auto Uses = sharedNumbers(Node, Context);
  if (Uses.empty())
    return false;
  return isUnderTensorCondition(Node, Context) ||
         llvm::any_of(Uses, [](const auto& Use) { return Use.second == Share::Unknown; });
}

/// `accelerator.reduce(total, accelerate::ReduceOp::SUM)` around each use of a number computed on this
/// process's share: the printed value is the one the whole data gives.
void addShareReductions(const clang::Expr& Statement, clang::ASTContext& Context,
                        llvm::SmallVector<Edit, 1>& Edits) {
  const clang::SourceManager& SM = Context.getSourceManager();
  for (const auto& [Use, Kind] : sharedNumbers(Statement, Context)) {
    clang::CharSourceRange Range = clang::Lexer::makeFileCharRange(
        clang::CharSourceRange::getTokenRange(Use->getSourceRange()), SM, Context.getLangOpts());
    Edit Before, After;
    Before.Range = clang::CharSourceRange::getCharRange(Range.getBegin(), Range.getBegin());
    Before.Replacement = "accelerator.reduce(";
    After.Range = clang::CharSourceRange::getCharRange(Range.getEnd(), Range.getEnd());
    After.Replacement = Kind == Share::Sum ? ", accelerate::ReduceOp::SUM)" : ", accelerate::ReduceOp::MEAN)";
    Edits.push_back(Before);
    Edits.push_back(After);
  }
}

/// The first printed number that cannot be made global, as written.
std::string unreducibleText(const MatchFinder::MatchResult& Result) {
  const auto* Statement = Result.Nodes.getNodeAs<clang::Expr>("statement");
  for (const auto& [Use, Kind] : sharedNumbers(*Statement, *Result.Context))
    if (Kind == Share::Unknown || isUnderTensorCondition(*Statement, *Result.Context))
      return Use->getDecl()->getNameAsString();
  return "";
}

AST_MATCHER(clang::Expr, isStreamOutput) {
  std::optional<StreamChain> Chain = streamChain(&Node);
  return Chain && streamKind(Chain->Stream) != Stream::None;
}

AST_MATCHER(clang::Expr, fitsAcceleratorPrint) {
  std::optional<StreamChain> Chain = streamChain(&Node);
  return Chain && fitsPrint(*Chain, Finder->getASTContext());
}

StatementMatcher printfCall() {
  auto Names =
      hasAnyName("::printf", "::std::printf", "::puts", "::std::puts", "::fprintf", "::std::fprintf");
  return callExpr(callee(expr(ignoringImplicit(anyOf(
      declRefExpr(to(functionDecl(Names))), unresolvedLookupExpr(hasAnyDeclaration(functionDecl(Names))))))));
}

/// The edits that make a `std::cout << a << b << std::endl;` line `accelerator.print(a, b);`: the stream and
/// the
/// `<<` between operands change, the operands stay as written (other passes may edit inside them: a
/// `.cuda()`), and `loss.item<T>()` of a loss the function runs backward on reads the mean loss over the
/// processes.
EditGenerator printEdits() {
  return [](const MatchFinder::MatchResult& Result) -> llvm::Expected<llvm::SmallVector<Edit, 1>> {
    clang::ASTContext& Context = *Result.Context;
    const clang::SourceManager& SM = Context.getSourceManager();
    const auto* Statement = Result.Nodes.getNodeAs<clang::Expr>(StatementId);
    std::optional<StreamChain> Chain = streamChain(Statement);
    auto Range = [&](const clang::Expr* E) {
      return clang::Lexer::makeFileCharRange(clang::CharSourceRange::getTokenRange(E->getSourceRange()), SM,
                                             Context.getLangOpts());
    };
    auto Change = [](clang::SourceLocation Begin, clang::SourceLocation End, std::string Text) {
      Edit Result;
      Result.Range = clang::CharSourceRange::getCharRange(Begin, End);
      Result.Replacement = std::move(Text);
      return Result;
    };
    std::vector<const clang::ValueDecl*> Losses;
    const clang::FunctionDecl* Function = enclosingFunction(*Statement, Context);
    if (Function && !isUnderTensorCondition(*Statement, Context))
      Losses = lossesOf(*Function, Context);

    // The operands print keeps: all but a final std::endl, and a final "...\n" without its newline.
    std::vector<const clang::Expr*> Kept(Chain->Operands.begin(), Chain->Operands.end() - 1);
    const clang::Expr* Last = Chain->Operands.back();
    std::optional<std::string> LastText = withoutFinalNewline(Last, Context);
    llvm::SmallVector<Edit, 1> Edits;
    if (LastText && !LastText->empty()) {
      Kept.push_back(Last);
      Edits.push_back(Change(Range(Last).getBegin(), Range(Last).getEnd(), *LastText));
    }
    clang::CharSourceRange Whole = Range(Statement);
    if (Kept.empty()) {
      Edits.assign({Change(Whole.getBegin(), Whole.getEnd(), "accelerator.print()")});
      return Edits;
    }
    Edits.push_back(Change(Whole.getBegin(), Range(Kept.front()).getBegin(), "accelerator.print("));
    for (size_t I = 1; I < Kept.size(); ++I)
      Edits.push_back(Change(Range(Kept[I - 1]).getEnd(), Range(Kept[I]).getBegin(), ", "));
    Edits.push_back(Change(Range(Kept.back()).getEnd(), Whole.getEnd(), ")"));
    for (const clang::Expr* Operand : Kept)
      for (const clang::Expr* Loss : lossReads(*Operand, Losses, Context)) {
        clang::CharSourceRange Object = Range(Loss);
        Edits.push_back(Change(Object.getBegin(), Object.getBegin(), "accelerator.reduce("));
        Edits.push_back(Change(Object.getEnd(), Object.getEnd(), ", accelerate::ReduceOp::MEAN)"));
      }
    addShareReductions(*Statement, Context, Edits);
    return Edits;
  };
}

auto inScope() {
  return allOf(unless(isInMacroExpansion()), isInTrainingOrEvaluationCode(),
               unless(isInDistributedFunction()));
}

StatementMatcher printable() {
  return expr(isStreamOutput(), fitsAcceleratorPrint(), isWholeStatement(), inScope()).bind(StatementId);
}

/// Output to a file: a chain on a file stream, or `fprintf` to a `FILE*` other than stdout and stderr.
AST_MATCHER(clang::Expr, writesToAFile) {
  if (std::optional<StreamChain> Chain = streamChain(&Node))
    return streamKind(Chain->Stream) == Stream::File;
  const auto* Call = llvm::dyn_cast<clang::CallExpr>(Node.IgnoreUnlessSpelledInSource());
  const clang::FunctionDecl* Callee = Call ? Call->getDirectCallee() : nullptr;
  if (!Callee || !Callee->getDeclName().isIdentifier() || Callee->getName() != "fprintf" ||
      Call->getNumArgs() == 0)
    return false;
  const auto* File = llvm::dyn_cast<clang::DeclRefExpr>(Call->getArg(0)->IgnoreParenImpCasts());
  return !File || (File->getDecl()->getName() != "stdout" && File->getDecl()->getName() != "stderr");
}

StatementMatcher guardable() {
  // A helper that training code calls writes its files on every process too; its console output is left as
  // it is.
  auto HelperWrite = allOf(writesToAFile(), unless(isInMacroExpansion()), isInTrainingHelper(),
                           unless(isInDistributedFunction()));
  return expr(anyOf(expr(isStreamOutput()), printfCall()), isWholeStatement(), anyOf(inScope(), HelperWrite))
      .bind(StatementId);
}

/// The stream of the output statement bound to StatementId, written as
/// `accelerator.main_process_stream(...)`.
EditGenerator streamOnMainProcess() {
  return [](const MatchFinder::MatchResult& Result) -> llvm::Expected<llvm::SmallVector<Edit, 1>> {
    const auto* Statement = Result.Nodes.getNodeAs<clang::Expr>(StatementId);
    std::optional<StreamChain> Chain = streamChain(Statement);
    clang::CharSourceRange Stream = clang::Lexer::makeFileCharRange(
        clang::CharSourceRange::getTokenRange(Chain->Stream->getSourceRange()), *Result.SourceManager,
        Result.Context->getLangOpts());
    Edit Before, After;
    Before.Range = clang::CharSourceRange::getCharRange(Stream.getBegin(), Stream.getBegin());
    Before.Replacement = "accelerator.main_process_stream(";
    After.Range = clang::CharSourceRange::getCharRange(Stream.getEnd(), Stream.getEnd());
    After.Replacement = ")";
    llvm::SmallVector<Edit, 1> Edits{Before, After};
    addShareReductions(*Statement, *Result.Context, Edits);
    return Edits;
  };
}

/// The call or update an output statement must still run on every process, as written.
std::string sideEffectText(const MatchFinder::MatchResult& Result) {
  const clang::Expr* Effect = outputSideEffect(*Result.Nodes.getNodeAs<clang::Expr>(StatementId));
  return Effect ? sourceText(Effect->getSourceRange(), *Result.Context) : "";
}

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
    Stream Kind = streamKind(Chain->Stream);
    if (Kind != Stream::Cout && Kind != Stream::OtherStandard)
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

StatementMatcher mainProcessOutput() {
  return stmt(anyOf(printable(), guardable()));
}

PassRule mainProcessPass() {
  auto EffectText = run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    return sideEffectText(Result);
  });
  auto NumberText = run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    return unreducibleText(Result);
  });
  auto Unreducible = cat(
      "output not rewritten: '", NumberText,
      "' is computed from this process's share of the data (a prepared loader's batches), so each process "
      "has its own value, and the rewriter cannot tell how to combine it (not a sum or count, nor a mean "
      "of losses, or printed under a condition on a tensor, where a collective could wait forever); every "
      "process prints this line. Reduce its parts before computing it: accelerator.reduce(sum, "
      "accelerate::ReduceOp::SUM) for sums and counts, accelerate::ReduceOp::MEAN for means");
  return applyFirst<std::string>({
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource, expr(printable(), printsUnreducibleNumber())),
               noopEdit(node(StatementId)), Unreducible),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource, printable()), printEdits(),
               cat("accelerator.print() prints on the main process only, once per job instead of once per "
                   "process; a loss the function runs backward on is printed as its mean over the processes "
                   "(accelerator.reduce), the loss of the global batch, and sums, counts and means computed "
                   "from this process's share of the data as their sum or mean over the processes")),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource, expr(guardable(), printsUnreducibleNumber())),
               noopEdit(node(StatementId)), Unreducible),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource,
                        expr(guardable(), isStreamOutput(), hasSideEffectInOutput())),
               streamOnMainProcess(),
               cat("only the main process writes this output, but every process evaluates it: '", EffectText,
                   "' may change what the processes compute next (a call not known to be pure), so a "
                   "main-process guard around it would let them drift apart")),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource,
                        expr(guardable(), isStreamOutput(), printsSharedNumber())),
               streamOnMainProcess(),
               cat("only the main process writes this output, but every process evaluates it: the sums, "
                   "counts and means it prints are computed from each process's share of the data and "
                   "reduced over the processes (accelerator.reduce, a collective every process takes)")),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource, expr(guardable(), hasSideEffectInOutput())),
               noopEdit(node(StatementId)),
               cat("output not rewritten: '", EffectText,
                   "' may change what the processes compute next (a call not known to be pure), and a "
                   "main-process guard would run it on one process only; every process prints this line. "
                   "Evaluate it into a variable on the line before, and accel-rewrite guards the output")),
      makeRule(
          traverse(clang::TK_IgnoreUnlessSpelledInSource, expr(guardable(), printsSharedNumber())),
          noopEdit(node(StatementId)),
          cat("output not rewritten: it prints numbers computed from this process's share of the data, "
              "which must be reduced over the processes by every process (a collective), and a "
              "main-process guard would leave the others out; every process prints this line. Print with "
              "std::cout, or reduce the numbers into variables on the line before "
              "(accelerator.reduce(total, accelerate::ReduceOp::SUM))")),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource, guardable()),
               guardStatement(StatementId, "accelerator.is_main_process()"),
               cat("only the main process writes this output, once per job instead of once per process")),
  });
}

} // namespace accelerate::passes
