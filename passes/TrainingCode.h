// passes/TrainingCode.h: what the passes agree is training code: the libtorch types they recognise, the
// models an optimizer trains, the loaders a training loop reads, and the code they leave alone.
#ifndef ACCELERATE_PASSES_TRAININGCODE_H
#define ACCELERATE_PASSES_TRAININGCODE_H

#include "clang/ASTMatchers/ASTMatchers.h"
#include "clang/Basic/FileEntry.h"
#include "llvm/ADT/StringSet.h"

#include <initializer_list>
#include <optional>

#include <string>
#include <utility>
#include <vector>

namespace clang {
class ASTContext;
class SourceLocation;
class SourceManager;
class CallExpr;
class CXXDeleteExpr;
class Expr;
class FieldDecl;
class FunctionDecl;
class ParmVarDecl;
class Stmt;
class ValueDecl;
class VarDecl;
} // namespace clang

namespace accelerate::passes {

/// Forgets what was learnt about the last parse (the facts are kept per parse, for speed): the front ends
/// call it before running the passes on a new AST, since a new AST may reuse the old one's addresses.
void forgetTrainingCodeFacts();

// ---- Types (through references, pointers, `std::shared_ptr` and `std::unique_ptr`)
// -------------------------

/// A `torch::nn::Module` subclass, a module holder (`torch::nn::Linear`, a `TORCH_MODULE`), or a smart
/// pointer to a module.
clang::ast_matchers::internal::Matcher<clang::QualType> isModuleType();
/// A class derived from `torch::nn::Module`, not Module itself (a module class: the user's, or libtorch's).
clang::ast_matchers::internal::Matcher<clang::Decl> isModuleClass();
/// A class derived from `torch::optim::Optimizer`.
clang::ast_matchers::internal::Matcher<clang::QualType> isOptimizerType();
/// A class derived from `torch::optim::LRScheduler`.
clang::ast_matchers::internal::Matcher<clang::QualType> isSchedulerType();
/// `c10::Device` or `c10::DeviceType` (`torch::Device`, `torch::DeviceType`, `torch::kCUDA`'s type).
clang::ast_matchers::internal::Matcher<clang::QualType> isDeviceType();

// ---- Where code is --------------------------------------------------------------------------------------

/// True when `Loc` (where it expands) is in code the rewrite changes: the main file, or a header of the
/// project that PassSettings::Headers names (never a system header).
bool isInRewrittenFile(const clang::SourceManager& SM, clang::SourceLocation Loc);
/// The file's real path (absolute, links resolved) as the file manager found it; its name when it has none.
std::string realPathOf(clang::FileEntryRef File);
/// `Path` relative to the directory `Directory` (both absolute), or nothing when it is not below it.
std::optional<llvm::StringRef> pathBelow(llvm::StringRef Path, llvm::StringRef Directory);
/// Matches a declaration written (where it expands) in a file the rewrite changes (isInRewrittenFile).
clang::ast_matchers::internal::Matcher<clang::Decl> isExpansionInRewrittenFile();

// ---- Numbers computed on this process's share of the data ------------------------------------------------

/// How a local number of training code was computed from this process's share of a prepared loader's data:
/// from means (`loss.item<double>()`, summed over steps), from sums and counts (`.sum().item()`,
/// `batch.data.size(0)`), or from something else (a ratio of such numbers, a max); None when it is not.
enum class Share { None, Mean, Sum, Unknown };
/// A number read from this process's tensors: `item()`, and the sizes `size(...)`, `numel()` (of a tensor, or
/// in a template of a value of dependent type).
clang::ast_matchers::StatementMatcher perProcessRead();
/// True when `E` makes a perProcessRead() of a value of this process's share: one that derives, through the
/// locals of `Function` (their initialisers, assignments and in-place fills), from a prepared loader's
/// batches, or from a tensor the pass cannot follow (a parameter, member or global that is not a model or an
/// optimizer). Values every process has alike (parameters, constants, an unprepared loader's batches) are
/// not.
bool readsProcessShare(const clang::Expr& E, const clang::FunctionDecl& Function, clang::ASTContext& Context);
/// How the local arithmetic `Variable` of `Function` was computed from this process's share (Share::None for
/// parameters, constants and numbers that do not come from it).
Share shareOf(const clang::VarDecl& Variable, const clang::FunctionDecl& Function, clang::ASTContext& Context,
              int Depth = 0);
/// True when `Function` reads a prepared loader: each process sees only its share of the data.
bool readsShardedData(const clang::FunctionDecl& Function, clang::ASTContext& Context);
/// The uses in `E` (itself included) of locals of `Function` computed from this process's share, with their
/// kind (shareOf).
std::vector<std::pair<const clang::DeclRefExpr*, Share>>
shareReads(const clang::Expr& E, const clang::FunctionDecl& Function, clang::ASTContext& Context);

// ---- Output statements (passes/PrintedOutput.cpp) --------------------------------------------------------

/// `a << b << c`: the stream (`a`) and what is written to it (`b`, `c`), for resolved and dependent code.
struct StreamChain {
  const clang::Expr* Stream = nullptr;
  std::vector<const clang::Expr*> Operands;
};
/// The chain `E` writes, when it is a `<<` chain on a stream; none otherwise.
std::optional<StreamChain> streamChain(const clang::Expr* E);
/// What kind of stream a chain writes to.
enum class OutputStream { Cout, OtherStandard, File, None };
OutputStream streamKind(const clang::Expr* E);
/// The name an operand spells when it is a function (`std::endl`, `std::flush`), resolved or not.
std::string manipulatorName(const clang::Expr* E);
/// `std::endl`, `std::flush` or `std::ends` (function templates of the stream's type).
bool isTemplateManipulator(const clang::Expr* E);
/// The tensors `Function` runs backward on, written as variables: its losses; also a loss a training step
/// it calls returns (`auto loss = train_step(...)`).
std::vector<const clang::ValueDecl*> lossesOf(const clang::FunctionDecl& Function,
                                              clang::ASTContext& Context);
/// The loss objects in `loss.item<T>()` calls within `Operand`, for the losses in `Losses`.
std::vector<const clang::Expr*> lossReads(const clang::Expr& Operand,
                                          const std::vector<const clang::ValueDecl*>& Losses,
                                          clang::ASTContext& Context);
/// The first call or update in `S` (in evaluation order for output) that may change what the program
/// computes next, or null. Lambda bodies are not looked into.
const clang::Expr* firstSideEffect(const clang::Stmt& S);
/// `printf`, `puts` or `fprintf`, resolved or in a template.
clang::ast_matchers::StatementMatcher printfCall();

/// A number an output statement prints that the training computes, as mainProcessPass() classifies it: an
/// operand that reads a loss the function runs backward on (`loss.item<T>()`), or a local computed from the
/// batches (shareOf: a sum or count, a mean of losses, or another number made of them, such as `total / n`,
/// `correct / seen`).
struct PrintedValue {
  const clang::Expr* Operand = nullptr; ///< The operand printed: of the `<<` chain, or a printf argument.
  /// In a `<<` chain, the text of the string literal printed right before it (stream manipulators such as
  /// `std::setprecision(8)` in between skipped), its escapes resolved; "" when what comes before is not a
  /// string literal. None in a `printf`, whose format holds the label.
  std::optional<std::string> PrintedBefore;
  /// The loss objects of its `loss.item<T>()` reads, in source order.
  std::vector<const clang::Expr*> LossReads;
  /// Its uses of locals computed from the batches, with their kind (shareOf).
  std::vector<std::pair<const clang::DeclRefExpr*, Share>> Numbers;
  /// True when the function reads a prepared loader: the Numbers are this process's share, which
  /// mainProcessPass() reduces where they are printed (sums and counts with SUM, means with MEAN), and leaves
  /// the line per process when one is Share::Unknown.
  bool PerProcess = false;
  /// The first call or update in it not known to be pure (see mainProcessPass()), or null.
  const clang::Expr* SideEffect = nullptr;
};

/// The training numbers that `Statement`, a `<<` chain on std::cout, std::cerr or std::clog, or a
/// `printf`/`fprintf` call, prints, in the order printed. Files a program writes are not printing.
std::vector<PrintedValue> printedValues(const clang::Expr& Statement, clang::ASTContext& Context);

/// `Value`'s operand as written, its losses and this process's shares made global as mainProcessPass() makes
/// them where the line prints: `accelerator.reduce(total, accelerate::ReduceOp::MEAN) / n`; a bare
/// `loss.item<T>()` as the 0-d tensor `accelerator.reduce(loss.detach(), accelerate::ReduceOp::MEAN)`. None
/// when a number cannot be made global (Share::Unknown of this process's share) or the operand's text is not
/// all in the file (a macro).
std::optional<std::string> globalValueText(const PrintedValue& Value, clang::ASTContext& Context);

// ---- Calls ----------------------------------------------------------------------------------------------

/// The index of the call's first argument that stands for a parameter of its callee: 1 for a member
/// operator called as an operator (a lambda's `step(optimizer)`, `a + b` with a member `operator+`), whose
/// argument 0 is the object; 0 otherwise.
unsigned firstParameterArgument(const clang::CallExpr& Call);
/// A reference a template leaves unresolved (`run_epoch(net, ...)` with a dependent argument,
/// `this->run_epoch()`), bound to "dependent".
clang::ast_matchers::internal::Matcher<clang::Stmt> dependentReference();
/// The name such a reference spells.
std::string spelledName(const clang::Expr& Unresolved);
/// True when `Function` is named `Name` (an identifier).
bool isNamed(const clang::FunctionDecl& Function, llvm::StringRef Name);
/// True when `S` calls one of `Targets` (or an instantiation of one), directly or through functions of the
/// rewritten files (isInRewrittenFile), `Depth` calls deep at most. In a template, a call still dependent
/// (dependentReference) counts when it names a target.
bool callsAnyOf(const clang::Stmt& S, llvm::ArrayRef<const clang::FunctionDecl*> Targets,
                clang::ASTContext& Context, int Depth = 2);

/// `main`, when the main file defines it: its first declaration written there (where it expands) whose
/// function has a body. Null when the main file defines no `main` (a training function another file calls).
const clang::FunctionDecl* mainFunctionOfMainFile(clang::ASTContext& Context);
/// Matches any declaration when the main file defines `main` (mainFunctionOfMainFile()).
clang::ast_matchers::internal::Matcher<clang::Decl> isInFileWithMain();

/// The function a statement is in, lambdas excluded (a lambda's statements belong to the function that
/// defines it), following the parent map up. Null at namespace scope.
const clang::FunctionDecl* enclosingFunction(const clang::Stmt& S, clang::ASTContext& Context);

/// True when the main file trains something: it declares, takes or steps a `torch::optim` optimizer. Files
/// that only use autograd (a `backward()` in a demo or a test) are not training code and are left alone.
bool mainFileTrains(clang::ASTContext& Context);
/// Matches any node when mainFileTrains().
clang::ast_matchers::internal::Matcher<clang::Stmt> isInTrainingFile();

/// Matches a statement in a function that already distributes its work: it calls an `accelerate::Accelerator`
/// member or a c10d collective. The passes leave such functions alone (the `distributed` pass says so once).
/// This is also what makes a second run of accel-rewrite change nothing.
clang::ast_matchers::internal::Matcher<clang::Stmt> isInDistributedFunction();
/// True when `Function`'s body calls an `accelerate::Accelerator` member or a c10d collective.
bool isDistributedFunction(const clang::FunctionDecl& Function, clang::ASTContext& Context);

// ---- Models, optimizers, loaders --------------------------------------------------------------------------

/// The variable or member an expression names, looking through `*`, `.get()`, parentheses and implicit
/// conversions: `model`, `*model`, `this->model`, `model.get()`. Null for anything else.
const clang::ValueDecl* namedDeclaration(const clang::Expr* E);

/// The models whose `parameters()` an optimizer's constructor arguments take (`model->parameters()`,
/// `model.parameters()`, `(*model).parameters()`), in source order, each model once: the expression naming
/// the model as written there (`model`, `*model`, `this->net`).
std::vector<const clang::Expr*> modelsTrainedBy(const clang::Expr& OptimizerArguments,
                                                clang::ASTContext& Context);

/// Every expression in the main file that constructs an optimizer: `SGD optimizer(...)`, `SGD(...)`,
/// `std::make_shared<SGD>(...)`, in source order.
std::vector<const clang::Expr*> optimizerConstructions(clang::ASTContext& Context);

/// The statement `optimizer = std::make_unique<Adam>(...)` (a smart pointer assigned in a statement of its
/// own in a block) when `Construction` is its right-hand side; null otherwise.
const clang::Stmt* optimizerAssignment(const clang::Expr& Construction, clang::ASTContext& Context);

/// One place an optimizer member is built: `new T(args)`, `std::make_unique<T>(args)` (or make_shared), or
/// `T(args)` for a member held by value, in the member's default initialiser, in a constructor's member
/// initialiser list, or assigned in a function body (`member = new T(args);`, `member.reset(new T(args));`).
struct MemberOptimizerBuild {
  /// The optimizer's construction, one of optimizerConstructions().
  const clang::Expr* Construction = nullptr;
  /// What the prepared optimizer replaces: the new-expression, the make_shared/make_unique call, or (held by
  /// value) the construction.
  const clang::Expr* Made = nullptr;
  /// The assignment or `reset` call, a statement of its own in a block; null for an initialiser.
  const clang::Expr* Statement = nullptr;
};

/// An optimizer held by a member of a class of the main file (by value, raw pointer, `std::unique_ptr` or
/// `std::shared_ptr`), with where it is built and whether the prepare pass can make it a prepared one.
struct MemberOptimizer {
  const clang::FieldDecl* Field = nullptr;
  std::vector<MemberOptimizerBuild> Builds;
  /// `delete member;` statements (a raw pointer's), which go when the member holds a prepared optimizer.
  std::vector<const clang::CXXDeleteExpr*> Deletes;
  /// Initialisers that make a pointer member null (`opt{}`, `opt = nullptr`, `opt_(nullptr)` in a
  /// constructor): the optimizer is built later, and each becomes the empty optional. Each is the range of
  /// source text to replace with its text (`{}`, `std::nullopt`, `(std::nullopt)`).
  std::vector<std::pair<clang::SourceRange, std::string>> NullInitialisers;
  /// True when the member is built after the object is (assigned in a function body, or not initialised in
  /// every constructor): it becomes a `std::optional<accelerate::Optimizer>`, else an accelerate::Optimizer.
  bool Optional = false;
  /// Why the member cannot hold a prepared optimizer (it is used in a way accelerate::Optimizer does not
  /// support, built where the tool cannot see it, ...); empty when it can.
  std::string Problem;
};

/// The facts about `Field`, an optimizer-typed member declared in the main file.
const MemberOptimizer& memberOptimizer(const clang::FieldDecl& Field, clang::ASTContext& Context);

/// The optimizer members of the main file's classes whose build sites are known and whose uses a prepared
/// optimizer supports: the prepare pass makes each an accelerate::Optimizer.
std::vector<const MemberOptimizer*> preparedMemberOptimizers(clang::ASTContext& Context);

/// The member that `Construction` (one of optimizerConstructions()) builds, when it is a build site of a
/// member that preparedMemberOptimizers() lists; null otherwise.
const MemberOptimizer* preparedMemberBuiltBy(const clang::Expr& Construction, clang::ASTContext& Context);

/// A local container of optimizers (`std::vector<std::unique_ptr<torch::optim::Optimizer>>`, std::deque,
/// std::list, or a std::map / std::unordered_map of them, holding optimizers by value, raw pointer,
/// std::unique_ptr or std::shared_ptr), filled in its function by `push_back(X)` / `emplace_back(X)` (or, for
/// a map, `C[key] = X`, `C.emplace(key, X)`), X one of `new T(args)`, `std::make_unique<T>(args)`,
/// `std::make_shared<T>(args)` or, by value, `T(args)`. The prepare pass makes its element type
/// accelerate::Optimizer and each X `accelerator.prepare(T(args))`, the models each trains prepared before
/// it.
struct OptimizerContainer {
  const clang::VarDecl* Variable = nullptr;
  /// The element's type as written (the template argument that becomes accelerate::Optimizer, or for a map
  /// `std::optional<accelerate::Optimizer>`: `map[key]` needs a value it can make before the assignment).
  clang::SourceRange ElementType;
  bool Map = false;
  /// Each fill: the construction, what it replaces (the new-expression, make_unique/make_shared call or
  /// T(args)), and the statement that adds it (insertions of model preparations go before it).
  std::vector<MemberOptimizerBuild> Fills;
  /// Why its optimizers cannot be prepared (used in a way accelerate::Optimizer does not support, filled with
  /// something else, declared with `auto`, ...); empty when they can.
  std::string Problem;
};

/// The containers of optimizers of the main file's functions, with their facts (OptimizerContainer).
std::vector<const OptimizerContainer*> optimizerContainers(clang::ASTContext& Context);

/// The container `Construction` (one of optimizerConstructions()) fills, when its Problem is empty.
const OptimizerContainer* preparedContainerFilledBy(const clang::Expr& Construction,
                                                    clang::ASTContext& Context);

/// True when `Model` (a module variable or member) is trained and prepared: an optimizer constructed in the
/// main file takes its `parameters()`, where the prepare pass prepares its models (a local or, with main,
/// global declaration, or an assignment statement). Models that are only evaluated (an EMA copy, a frozen
/// feature extractor) are not.
bool isTrainedModel(const clang::ValueDecl& Model, clang::ASTContext& Context);

/// A declaration of several optimizers or schedulers in one statement (`torch::optim::Adam
/// og(g->parameters()), od(d->parameters());`) that the prepare pass splits into one prepared declaration
/// each: every declarator is a local object (no pointer, reference or static) constructed with arguments,
/// each optimizer takes some model's `parameters()`. `Why` (when given) receives, for one that is not, the
/// reason naming the declarator.
bool isSplitPreparedDeclaration(const clang::DeclStmt& Statement, clang::ASTContext& Context,
                                std::string* Why = nullptr);

/// True when the prepare pass prepares the models an optimizer construction (one of optimizerConstructions())
/// trains: it initialises a local or, in a file that defines `main`, a global declaration; it is assigned to
/// a smart pointer in a statement of its own (optimizerAssignment()); or it builds a member that
/// preparedMemberOptimizers() lists.
bool isPreparedConstruction(const clang::Expr& Construction, clang::ASTContext& Context);

// ---- Optimizers the prepare pass prepares (passes/PreparedOptimizers.cpp) ------------------------------

/// The names declarationOf() binds (the prepare pass's rules read them), and the name of the optimizer
/// libtorchOnlyMemberOfPreparedOptimizer() binds.
inline constexpr char OptimizerStatementId[] = "statement";
inline constexpr char OptimizerVariableId[] = "variable";
inline constexpr char OptimizerConstructId[] = "construct";
inline constexpr char OptimizerFactoryId[] = "factory";
inline constexpr char PreparedOptimizerSavedId[] = "saved";

/// A variable that holds the object itself (not a pointer, a reference or a smart pointer).
clang::ast_matchers::internal::Matcher<clang::VarDecl> holdsObject();
/// `T name(args)`, `T name{args}`, `T name = T(args)`, `auto name = T(args)`, and
/// `auto name = std::make_shared<T>(args)` (or make_unique) for a type `Type` matches, declared alone in a
/// function; binds OptimizerStatementId, OptimizerVariableId, and OptimizerConstructId or OptimizerFactoryId.
clang::ast_matchers::StatementMatcher
declarationOf(clang::ast_matchers::internal::Matcher<clang::QualType> Type);
/// A model of a template (`net` in `template <class T> void train(T& net)`) that one of its instantiations
/// makes something other than a module: its tensors are loose.
struct NonModuleInstance {
  const clang::Expr* Model = nullptr;
  const clang::FunctionDecl* Instance = nullptr;
  clang::QualType Type;
};
/// The first model the optimizer `Variable` trains that an instantiation of its template makes a non-module.
std::optional<NonModuleInstance> nonModuleInstance(const clang::VarDecl& Variable,
                                                   clang::ASTContext& Context);
/// An optimizer one of whose template's instantiations trains a non-module (nonModuleInstance).
clang::ast_matchers::internal::Matcher<clang::VarDecl> trainsANonModuleInSomeInstantiation();
/// An optimizer over the parameters of models (modules in every instantiation of its template).
clang::ast_matchers::internal::Matcher<clang::VarDecl> trainsSomeModel();
/// A by-value optimizer whose declaration the prepare pass rewrites: its name then holds an
/// accelerate::Optimizer.
clang::ast_matchers::internal::Matcher<clang::VarDecl> isPreparedOptimizerObject();
/// A reference parameter of an optimizer type that every call in the main file passes a prepared optimizer
/// for (directly, through the parameters of up to two calls out, or next to a function handed on as a
/// callback).
clang::ast_matchers::internal::Matcher<clang::ParmVarDecl> onlyReceivesPreparedOptimizers();
/// `optimizer.defaults()`: a member of libtorch's optimizer that accelerate::Optimizer does not have, called
/// on a name that holds a prepared optimizer, resolved or in a template; the name is bound to
/// PreparedOptimizerSavedId.
clang::ast_matchers::StatementMatcher libtorchOnlyMemberOfPreparedOptimizer();

// ---- The training step -----------------------------------------------------------------------------------

/// `X.backward(...)` or `p->backward(...)` where backward is a member of at::Tensor (or of a class derived
/// from it), outside system headers.
clang::ast_matchers::StatementMatcher tensorBackwardCall();
/// `X.backward(...)` spelled with a dependent X (not an implicit `this`), in a template, outside system
/// headers.
clang::ast_matchers::StatementMatcher dependentBackwardCall();
/// Matches a call written in a template as `X.backward(...)` with a dependent X that every instantiation of
/// the template makes a tensor backward call: rewriting the template as written is then right for all of
/// them.
clang::ast_matchers::internal::Matcher<clang::CallExpr> isTensorBackwardInEveryInstantiation();
/// Matches a call of `torch::autograd::backward(tensors, ...)` outside system headers.
clang::ast_matchers::StatementMatcher autogradBackwardCall();
/// The tensors of `torch::autograd::backward({a, b, ...})`, a braced list, when no other argument is given:
/// the original then needs each to hold one element (libtorch makes their gradients implicitly), so
/// `accelerator.backward(a + b + ...)` computes the same gradients. Empty otherwise.
std::vector<const clang::Expr*> autogradBackwardLosses(const clang::CallExpr& Call,
                                                       clang::ASTContext& Context);
/// Matches the training step's backward calls, the ones the backward pass rewrites: a tensorBackwardCall(),
/// a dependentBackwardCall() that isTensorBackwardInEveryInstantiation(), or an autogradBackwardCall() (the
/// pass rewrites it or says why not), outside macro expansions, in a
/// training file, outside functions that already distribute their work. The other passes find the training
/// step by them.
clang::ast_matchers::StatementMatcher trainingBackwardCall();

/// True when the loop's body runs a training step: a tensor `backward()` call, resolved or (in a template)
/// spelled with a dependent type, in the loop or in a function of the main file it calls (two calls deep).
bool loopTrains(const clang::Stmt& Loop, clang::ASTContext& Context);

/// The data loader variable a range-for loop iterates, when its range is `*loader` or `loader` for a variable
/// declared with `torch::data::make_data_loader(...)`; through function parameters (up to three calls up),
/// when every call of the function in the main file passes such a loader for it. Null otherwise.
const clang::VarDecl* iteratedLoader(const clang::Stmt& RangeFor, clang::ASTContext& Context);

/// The names the loader matchers below bind (the data-loader pass's rules read them).
inline constexpr char LoaderStatementId[] = "statement";
inline constexpr char LoaderVariableId[] = "loader";
inline constexpr char LoaderCallId[] = "call";
inline constexpr char LoaderOptionsId[] = "options";

/// How a `make_data_loader` call orders its samples, from its sampler template argument.
enum class SamplerOrder { Shuffled, Sequential, Other };
SamplerOrder samplerOrder(const clang::CallExpr& Call);
/// The batch type a `make_data_loader(dataset, ...)` call's dataset makes (its `BatchType`), when it can be
/// told; null otherwise.
clang::QualType batchTypeOf(const clang::CallExpr& Call, clang::ASTContext& Context);
/// True when the runtime's `accelerate::ToDevice` moves `Type` (see <accelerate/data.h>): tensors,
/// `torch::data::Example`, standard containers of such values, numbers, strings. Otherwise `Unsupported` is
/// the first type in it that no rule moves.
bool movableBatch(clang::QualType Type, const clang::ASTContext& Context, std::string& Unsupported);
/// `Type` as a user writes it: without `class`, or an anonymous namespace.
std::string spelledType(clang::QualType Type, const clang::ASTContext& Context);
/// A `make_data_loader` call whose batches are of a type the runtime cannot move to a device.
clang::ast_matchers::internal::Matcher<clang::CallExpr> hasUnmovableBatch();
/// A variable a training loop reads as its loader (isTrainingLoader).
clang::ast_matchers::internal::Matcher<clang::VarDecl> isTrainingLoaderVariable();
/// A variable declared `auto`.
clang::ast_matchers::internal::Matcher<clang::VarDecl> isDeclaredAuto();
/// `auto loader = torch::data::make_data_loader...(...)`, alone in its declaration, read by a training loop,
/// whose call `Call` matches; binds LoaderStatementId, LoaderVariableId, LoaderCallId and, when written,
/// LoaderOptionsId.
clang::ast_matchers::StatementMatcher
trainingLoaderDeclaration(clang::ast_matchers::internal::Matcher<clang::CallExpr> Call);
/// The declarations the data-loader pass rewrites into `accelerator.prepare_data_loader(...)`: the
/// two-argument form (dataset, options) with the default or a standard sampler, over a dataset that is not
/// stateful (they use `accelerator`).
clang::ast_matchers::StatementMatcher preparedLoaderDeclaration();
/// True when the data-loader pass runs and rewrites the declaration of `Loader`: its batches then arrive on
/// the device.
bool isPreparedLoader(const clang::VarDecl& Loader, clang::ASTContext& Context);

/// True when a range-for loop of the main file iterates `Loader` (see iteratedLoader).
bool isReadByLoop(const clang::VarDecl& Loader, clang::ASTContext& Context);

/// True when a loop that runs a training step iterates `Loader` (see iteratedLoader).
bool isTrainingLoader(const clang::VarDecl& Loader, clang::ASTContext& Context);

/// The data loader a training loop iterates (iteratedLoader, loopTrains) when it is a variable of static
/// storage other than a static local (namespace scope, a static member): it is made before `main` constructs
/// the Accelerator, so it cannot be prepared where it is declared. The data-loader pass refuses such a loop.
/// Null otherwise.
const clang::VarDecl* staticTrainingLoader(const clang::Stmt& Loop, clang::ASTContext& Context);

/// The first training loop of the main file that iterates `Loader`, a loader of static storage
/// (staticTrainingLoader). Null when there is none.
const clang::Stmt* loopTrainingOnStaticLoader(const clang::VarDecl& Loader, clang::ASTContext& Context);

/// True when `Function` is training or evaluation code: `main` of a training file, or a function that runs a
/// backward pass, makes or steps an optimizer, iterates a data loader or holds a `torch::NoGradGuard`. Its
/// output and its files are the main process's.
bool isTrainingOrEvaluationFunction(const clang::FunctionDecl& Function, clang::ASTContext& Context);
/// Matches a statement in such a function, in a training file.
clang::ast_matchers::internal::Matcher<clang::Stmt> isInTrainingOrEvaluationCode();
/// True when `Function`, of a rewritten file and not training or evaluation code itself, is called from such
/// code (of a training file), directly or through one more function of the rewritten files (two calls deep,
/// as loopTrains follows them): a helper such as `export_weights(model, path)`. The files it writes are
/// written by every process, as the training code's are.
bool isTrainingHelper(const clang::FunctionDecl& Function, clang::ASTContext& Context);
/// Matches a statement in such a helper.
clang::ast_matchers::internal::Matcher<clang::Stmt> isInTrainingHelper();

/// True when a condition above `S` in its function (an `if`, `while` or `for` condition) depends on a
/// tensor's value or on a dependent type: processes could disagree on it, so `S` must take no collective.
bool isUnderTensorCondition(const clang::Stmt& S, clang::ASTContext& Context);

/// True when `Matcher` matches `S` or a node inside it.
bool containsMatch(const clang::ast_matchers::StatementMatcher& Matcher, const clang::Stmt& S,
                   clang::ASTContext& Context);

/// Every value `Function` writes to a variable: (variable, initializer) for each initialised declaration, and
/// (variable, right side) for each assignment (`=`, `+=`, ...) to a variable, in its body.
std::vector<std::pair<const clang::VarDecl*, const clang::Expr*>>
variableWrites(const clang::FunctionDecl& Function, clang::ASTContext& Context);

/// True when `S` is inside a loop (of its function) that runs a training step (see loopTrains).
bool isInTrainingLoop(const clang::Stmt& S, clang::ASTContext& Context);

/// Matches `X.step()` on a `torch::optim` optimizer (through `->` too).
clang::ast_matchers::StatementMatcher optimizerStep();

// ---- Training runs (the tracking and progress-bar passes) ----------------------------------------------

/// True for a for, range-for, while or do loop.
bool isLoop(const clang::Stmt& S);
/// The loops around `S` in its function, innermost first; a lambda's body ends the search (its loops run when
/// it is called, not where it is written).
std::vector<const clang::Stmt*> enclosingLoops(const clang::Stmt& S, clang::ASTContext& Context);
/// Every loop written in the main file, in source order.
std::vector<const clang::Stmt*> mainFileLoops(clang::ASTContext& Context);

/// A training run, the outermost training loop: a loop that runs a training step (see loopTrains), in no loop
/// of its function that does too, outside lambdas, in a function that no training loop elsewhere in the file
/// calls (a `train_epoch` called once per epoch belongs to its caller's run).
bool isTrainingRun(const clang::Stmt& Loop, clang::ASTContext& Context);
/// The training loops of a run, outermost first: the run, then the first loop in it that trains, and so on
/// down (`while (step < steps)`, then `for (auto& batch : *loader)`).
std::vector<const clang::Stmt*> trainingLoopsOf(const clang::Stmt& Run, clang::ASTContext& Context);
/// The last of trainingLoopsOf(): the loop whose body is one training step.
const clang::Stmt& innermostTrainingLoop(const clang::Stmt& Run, clang::ASTContext& Context);
/// The body of a for, range-for, while or do loop; null for another statement.
const clang::Stmt* loopBody(const clang::Stmt& Loop);
/// How many times `S` writes `Variable` (assignments, increments, decrements).
unsigned writesIn(const clang::Stmt& S, const clang::VarDecl& Variable, clang::ASTContext& Context);

/// A step counter a training run already keeps, and where it counts.
struct StepCounterFact {
  const clang::VarDecl* Variable = nullptr;
  /// The statement of the innermost training loop's body that increments it (`++step;`, or the
  /// `if (++step % 10 == 0) ...` whose condition does); null when the run's `for` header does.
  const clang::Stmt* Increment = nullptr;
};
/// A `for` loop's own counter: the one variable its header declares and increments (`for (int epoch = 0;
/// epoch < epochs; ++epoch)`); null for another loop.
const clang::VarDecl* forLoopCounter(const clang::Stmt& Loop);
/// The counter a run already keeps: the run's own `for` variable when the run is the innermost training loop
/// (`for (int step = 0; ...; ++step)`), else a variable declared before the run and incremented (`++n`,
/// `n++`, `n += 1`) as a statement of the innermost training loop's body (or in the condition of an `if`
/// there: `if (++step % 10 == 0)`), and written nowhere else in the run.
std::optional<StepCounterFact> existingStepCounter(const clang::Stmt& Run, clang::ASTContext& Context);

/// The names a new local of `Function` must not take: its variables and parameters, and the main file's
/// top-level names.
llvm::StringSet<> takenNames(const clang::FunctionDecl& Function, clang::ASTContext& Context);

/// A name for a new local: the first of `Preferred` not in `Taken`, else `<Stem>_2`, `<Stem>_3`, ...
std::string freeName(const llvm::StringSet<>& Taken, std::initializer_list<const char*> Preferred,
                     llvm::StringRef Stem);

} // namespace accelerate::passes

#endif // ACCELERATE_PASSES_TRAININGCODE_H
