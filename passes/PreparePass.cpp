// passes/PreparePass.cpp: the rule that prepares optimizers, schedulers and the models an optimizer trains.
#include "passes/Pass.h"

#include "passes/Insertion.h"
#include "passes/Macros.h"
#include "passes/Templates.h"
#include "passes/TrainingCode.h"

#include "clang/AST/ASTContext.h"
#include "clang/AST/ExprCXX.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "clang/Lex/Lexer.h"
#include "clang/Tooling/Transformer/RangeSelector.h"
#include "clang/Tooling/Transformer/Stencil.h"

#include "clang/ASTMatchers/ASTMatchers.h"
#include <algorithm>
#include <array>
#include <map>

namespace accelerate::passes {

// ---- The pass ------------------------------------------------------------------------------------------

/// Rewrites the declaration of each local optimizer and learning-rate scheduler into a prepared one, and
/// prepares (in place) the models whose `parameters()` the optimizer takes, right before it:
///
///   torch::optim::SGD optimizer(model->parameters(), 0.1);
///     →  accelerator.prepare(model);
///        auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));
///   auto optimizer = std::make_shared<torch::optim::Adam>(net->parameters());
///     →  accelerator.prepare(net);
///        auto optimizer = accelerator.prepare(torch::optim::Adam(net->parameters()));
///   torch::optim::StepLR scheduler(optimizer, 10, 0.5);
///     →  auto scheduler = accelerator.prepare(torch::optim::StepLR(optimizer, 10, 0.5));
///
/// The prepared optimizer keeps `step()`, `zero_grad()`, `->` and converts to `torch::optim::Optimizer&`, so
/// the call sites stay as written. A model that two optimizers train is prepared once, before the first. A
/// global optimizer stays libtorch's; its global models are prepared at the start of `main`. An optimizer
/// over tensors that come from no model's `parameters()` is reported and left alone.
///
/// An optimizer held by a member of a class (by value, raw pointer, `std::unique_ptr`, `std::shared_ptr`)
/// whose build sites are in the file and whose uses a prepared optimizer supports (step, zero_grad,
/// param_groups,
/// `*member` as a torch::optim::Optimizer&, `delete`) becomes a prepared one where it is built:
///
///   torch::optim::SGD* opt = new torch::optim::SGD(net->parameters(), 0.1);
///     →  accelerate::Optimizer opt = accelerate::Accelerator::current().prepare(
///            torch::optim::SGD(accelerate::Accelerator::current().prepare(net)->parameters(), 0.1));
///   optimizer_ = std::make_unique<torch::optim::Adam>(model_->parameters());   (member of type
///   std::unique_ptr<torch::optim::Adam>, which becomes std::optional<accelerate::Optimizer>)
///     →  accelerator.prepare(model_);
///        optimizer_ = accelerator.prepare(torch::optim::Adam(model_->parameters()));
///
/// Any other member optimizer is reported, naming the member and why.
PassRule preparePass();

/// Matches the declarations preparePass() rewrites (they use `accelerator`).
clang::ast_matchers::StatementMatcher preparedDeclaration();

/// Matches `optimizer = std::make_unique<Opt>(model->parameters(), ...);`, before which preparePass()
/// prepares the models (the optimizer, held as a pointer to torch::optim::Optimizer, stays libtorch's).
clang::ast_matchers::StatementMatcher preparedAssignment();

/// Matches `member = new Opt(...);`, `member = std::make_unique<Opt>(...);` and `member.reset(new Opt(...));`
/// in a function body, for an optimizer member that preparePass() makes a prepared optimizer: it prepares the
/// models before the statement and the optimizer in it (with `accelerator`).
clang::ast_matchers::StatementMatcher preparedMemberBuild();

/// Matches a global optimizer whose (global) models preparePass() prepares at the start of `main`.
clang::ast_matchers::DeclarationMatcher preparedGlobalOptimizer();

/// Matches every statement preparePass() makes use `accelerator` (preparedDeclaration(),
/// preparedAssignment(), preparedMemberBuild()): its registry row's PassInfo::UsesAccelerator.
clang::ast_matchers::StatementMatcher prepareUsesAccelerator();

namespace {

using namespace clang::ast_matchers;
using namespace clang::transformer;

constexpr const char* StatementId = OptimizerStatementId;
constexpr const char* VariableId = OptimizerVariableId;
constexpr const char* ConstructId = OptimizerConstructId;
constexpr const char* FactoryId = OptimizerFactoryId;
constexpr const char* SavedId = PreparedOptimizerSavedId;
constexpr char MetricId[] = "metric";

std::string sourceText(clang::CharSourceRange Range, const MatchFinder::MatchResult& Result) {
  return clang::Lexer::getSourceText(Range, *Result.SourceManager, Result.Context->getLangOpts()).str();
}
std::string sourceText(clang::SourceRange Range, const MatchFinder::MatchResult& Result) {
  return sourceText(clang::CharSourceRange::getTokenRange(Range), Result);
}

/// `accelerator.prepare(model);` for a model as written there; a raw pointer to a module is prepared as
/// `*model` (prepare takes the module itself).
std::string modelPreparation(const clang::Expr& Model, const MatchFinder::MatchResult& Result) {
  std::string Name = sourceText(Model.getSourceRange(), Result);
  if (Model.getType()->isPointerType())
    Name = "*" + Name;
  return "accelerator.prepare(" + Name + ");";
}

/// The arguments between a construction's parentheses or braces, as written (empty when it has none).
clang::SourceRange argumentsInside(clang::SourceRange ParensOrBraces, const clang::SourceManager& SM,
                                   const clang::LangOptions& Options) {
  if (ParensOrBraces.isInvalid())
    return {};
  clang::SourceLocation Begin = clang::Lexer::getLocForEndOfToken(ParensOrBraces.getBegin(), 0, SM, Options);
  return {Begin, ParensOrBraces.getEnd()};
}

/// The object being made, as an expression: `T(args)` for `T name(args)` and for `make_shared<T>(args)`,
/// the initializer itself when it already is `T(args)`.
Stencil madeObject() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Variable = Result.Nodes.getNodeAs<clang::VarDecl>(VariableId);
    if (const auto* Factory = Result.Nodes.getNodeAs<clang::CallExpr>(FactoryId)) {
      const auto* Callee =
          llvm::dyn_cast<clang::DeclRefExpr>(Factory->getCallee()->IgnoreUnlessSpelledInSource());
      if (!Callee || Callee->getNumTemplateArgs() != 1)
        return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                       "expected std::make_shared<T>(...) with one template argument");
      std::string Type = sourceText(Callee->getTemplateArgs()[0].getSourceRange(), Result);
      auto Arguments = callArgs(FactoryId)(Result);
      if (!Arguments)
        return Arguments.takeError();
      return Type + "(" + sourceText(*Arguments, Result) + ")";
    }
    // `T name = T(args)` or `auto name = T(args)`: the initializer is already the object.
    if (Variable->getInitStyle() == clang::VarDecl::CInit)
      return sourceText(Variable->getInit()->IgnoreUnlessSpelledInSource()->getSourceRange(), Result);
    std::string Type =
        sourceText(Variable->getTypeSourceInfo()->getTypeLoc().getUnqualifiedLoc().getSourceRange(), Result);
    clang::SourceRange Parens;
    if (const auto* Construct = Result.Nodes.getNodeAs<clang::CXXConstructExpr>(ConstructId))
      Parens = Construct->getParenOrBraceRange();
    else if (const auto* List = Result.Nodes.getNodeAs<clang::ParenListExpr>(ConstructId))
      Parens = clang::SourceRange(List->getLParenLoc(), List->getRParenLoc());
    if (Parens.isInvalid()) // `T name;`: default-constructed.
      return Type + "()";
    return Type + sourceText(Parens, Result);
  });
}

Stencil preparedDeclarationText() {
  return cat("auto ", name(VariableId), " = accelerator.prepare(", madeObject(), ");");
}

/// The models the optimizer trains that no earlier optimizer in the same function trains: each is prepared
/// right before this optimizer, once.
/// The models that the optimizers this pass prepares before `S` in its function train: each is prepared there
/// already (a model is prepared once).
std::vector<const clang::ValueDecl*> modelsPreparedBefore(const clang::Stmt& S, clang::ASTContext& Context) {
  const clang::SourceManager& SM = Context.getSourceManager();
  const clang::FunctionDecl* Function = enclosingFunction(S, Context);
  std::vector<const clang::ValueDecl*> Prepared;
  if (!Function)
    return Prepared;
  for (const clang::Expr* Construction : optimizerConstructions(Context))
    if (enclosingFunction(*Construction, Context) == Function &&
        SM.isBeforeInTranslationUnit(Construction->getBeginLoc(), S.getBeginLoc()) &&
        isPreparedConstruction(*Construction, Context))
      for (const clang::Expr* Model : modelsTrainedBy(*Construction, Context))
        if (!llvm::is_contained(Prepared, namedDeclaration(Model)))
          Prepared.push_back(namedDeclaration(Model));
  return Prepared;
}

std::vector<const clang::Expr*> modelsToPrepare(const MatchFinder::MatchResult& Result) {
  const auto* Statement = Result.Nodes.getNodeAs<clang::Stmt>(StatementId);
  const auto* Variable = Result.Nodes.getNodeAs<clang::VarDecl>(VariableId);
  clang::ASTContext& Context = *Result.Context;
  std::vector<const clang::ValueDecl*> Earlier = modelsPreparedBefore(*Statement, Context);
  std::vector<const clang::Expr*> Models;
  for (const clang::Expr* Model : modelsTrainedBy(*Variable->getInit(), Context))
    if (!llvm::is_contained(Earlier, namedDeclaration(Model)))
      Models.push_back(Model);
  return Models;
}

/// Why an optimizer built in a template is not prepared: an instantiation trains a non-module.
Stencil nonModuleInstanceWarning() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Variable = Result.Nodes.getNodeAs<clang::VarDecl>(VariableId);
    std::optional<NonModuleInstance> Found = nonModuleInstance(*Variable, *Result.Context);
    const clang::SourceManager& SM = *Result.SourceManager;
    std::string Model =
        clang::Lexer::getSourceText(clang::CharSourceRange::getTokenRange(Found->Model->getSourceRange()), SM,
                                    Result.Context->getLangOpts())
            .str();
    std::string Instance;
    llvm::raw_string_ostream Out(Instance);
    Found->Instance->getNameForDiagnostic(Out, Result.Context->getPrintingPolicy(), /*Qualified=*/false);
    std::string Type = Found->Type.getNonReferenceType().getUnqualifiedType().getAsString(
        Result.Context->getPrintingPolicy());
    unsigned Line = SM.getExpansionLineNumber(Found->Instance->getPointOfInstantiation());
    return std::string(RefusalMarker) + "optimizer '" + Variable->getNameAsString() +
           "' not prepared: the instantiation " + Instance +
           (Line ? " (made at line " + std::to_string(Line) + ")" : std::string()) + " trains '" + Model +
           "' of type '" + Type +
           "', which is not a torch::nn::Module: its tensors are loose, so no module is known whose "
           "gradients to synchronise, and the template is rewritten for every instantiation or none; make '" +
           Type +
           "' a torch::nn::Module (its tensors registered with register_parameter), or prepare its "
           "training by hand";
  });
}

Stencil modelPreparations() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    std::string Text;
    for (const clang::Expr* Model : modelsToPrepare(Result)) {
      Text += (Text.empty() ? "" : "\n") + modelPreparation(*Model, Result);
    }
    return Text;
  });
}

/// Inserts the models' preparations before the statement when there are any.
EditGenerator prepareModels() {
  return [](const MatchFinder::MatchResult& Result) -> llvm::Expected<llvm::SmallVector<Edit, 1>> {
    if (modelsToPrepare(Result).empty())
      return llvm::SmallVector<Edit, 1>();
    return editList({insertBeforeStatement(StatementId, modelPreparations())})(Result);
  };
}

AST_MATCHER(clang::DeclStmt, isSplitPreparedDeclarationMatcher) {
  return isSplitPreparedDeclaration(Node, Finder->getASTContext());
}

/// Several optimizers or schedulers declared in one statement, outside macros, in training code.
StatementMatcher severalDeclarations() {
  return declStmt(unless(hasSingleDecl(anything())),
                  has(varDecl(hasType(qualType(anyOf(isOptimizerType(), isSchedulerType()))))),
                  unless(isInMacroExpansion()), isInTrainingFile(), unless(isInDistributedFunction()))
      .bind(StatementId);
}

/// The split of severalDeclarations(): for each declarator in order, the models it trains that nothing
/// before it in the function trains are prepared, then `auto name = accelerator.prepare(T(args));`, each on
/// a line of its own indented like the statement.
Stencil splitPreparedDeclarations() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Statement = Result.Nodes.getNodeAs<clang::DeclStmt>(StatementId);
    clang::ASTContext& Context = *Result.Context;
    const clang::SourceManager& SM = *Result.SourceManager;
    std::vector<const clang::ValueDecl*> Prepared = modelsPreparedBefore(*Statement, Context);
    // The statement's indentation, when nothing precedes it on its line.
    std::string Separator = " ";
    {
      clang::SourceLocation Begin = SM.getExpansionLoc(Statement->getBeginLoc());
      llvm::StringRef Buffer = SM.getBufferData(SM.getFileID(Begin));
      unsigned Offset = SM.getFileOffset(Begin);
      size_t LineStart = Buffer.rfind('\n', Offset);
      LineStart = LineStart == llvm::StringRef::npos ? 0 : LineStart + 1;
      llvm::StringRef Prefix = Buffer.slice(LineStart, Offset);
      if (Prefix.trim().empty())
        Separator = "\n" + Prefix.str();
    }
    const auto* First = llvm::cast<clang::VarDecl>(*Statement->decl_begin());
    std::string Type =
        sourceText(First->getTypeSourceInfo()->getTypeLoc().getUnqualifiedLoc().getSourceRange(), Result);
    std::vector<std::string> Lines;
    for (const clang::Decl* Declaration : Statement->decls()) {
      const auto* Variable = llvm::cast<clang::VarDecl>(Declaration);
      const auto* Construct = llvm::cast<clang::CXXConstructExpr>(Variable->getInit()->IgnoreImplicit());
      for (const clang::Expr* Model : modelsTrainedBy(*Construct, Context)) {
        if (llvm::is_contained(Prepared, namedDeclaration(Model)))
          continue;
        Prepared.push_back(namedDeclaration(Model));
        Lines.push_back(modelPreparation(*Model, Result));
      }
      std::string Arguments = sourceText(clang::CharSourceRange::getCharRange(argumentsInside(
                                             Construct->getParenOrBraceRange(), SM, Context.getLangOpts())),
                                         Result);
      Lines.push_back("auto " + Variable->getNameAsString() + " = accelerator.prepare(" + Type + "(" +
                      Arguments + "));");
    }
    return llvm::join(Lines, Separator);
  });
}

/// Why a declaration of several optimizers cannot be split.
Stencil severalDeclarationsWarning() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Statement = Result.Nodes.getNodeAs<clang::DeclStmt>(StatementId);
    std::string Why;
    isSplitPreparedDeclaration(*Statement, *Result.Context, &Why);
    std::vector<std::string> Names;
    for (const clang::Decl* Declaration : Statement->decls())
      Names.push_back("'" + llvm::cast<clang::NamedDecl>(Declaration)->getNameAsString() + "'");
    return std::string(RefusalMarker) + "optimizers " + llvm::join(Names, ", ") +
           " not prepared: they are declared in one statement, which the rewrite splits only when each one "
           "can be prepared, and " +
           (Why.empty() ? std::string("one cannot") : Why) +
           "; declare each on its own line and prepare its model and it with accelerator.prepare(...) by "
           "hand";
  });
}

AST_MATCHER(clang::Decl, isInTrainingFileDecl) {
  return mainFileTrains(Finder->getASTContext());
}

/// `accelerator.prepare(model);` for each global model a global optimizer trains.
Stencil globalModelPreparations() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Variable = Result.Nodes.getNodeAs<clang::VarDecl>(VariableId);
    std::string Text;
    for (const clang::Expr* Model : modelsTrainedBy(*Variable->getInit(), *Result.Context))
      Text += (Text.empty() ? "" : "\n") + modelPreparation(*Model, Result);
    return Text;
  });
}

/// A namespace-scope optimizer (declared in the main file) that trains global models.
DeclarationMatcher globalOptimizer() {
  return varDecl(hasGlobalStorage(), unless(isStaticLocal()),
                 hasDeclContext(decl(anyOf(translationUnitDecl(), namespaceDecl()))),
                 hasType(isOptimizerType()), hasInitializer(expr()), trainsSomeModel(),
                 isExpansionInRewrittenFile(), isInTrainingFileDecl())
      .bind(VariableId);
}

/// `torch::save(optimizer, ...)` / `torch::load(optimizer, ...)` of a prepared optimizer held by value.
StatementMatcher serializedPreparedOptimizer() {
  return callExpr(
      callee(functionDecl(hasAnyName("::torch::save", "::torch::load"))),
      hasArgument(0, ignoringImplicit(declRefExpr(to(varDecl(isPreparedOptimizerObject()))).bind(SavedId))),
      unless(isInMacroExpansion()), isInTrainingFile(), unless(isInDistributedFunction()));
}

/// `optimizer = std::make_unique<torch::optim::Adam>(model->parameters(), ...)`: a smart pointer assigned in
/// a statement of its own (one per branch of an if/else, say).
AST_MATCHER(clang::Expr, isAssignedOptimizer) {
  return optimizerAssignment(Node, Finder->getASTContext()) != nullptr &&
         !preparedMemberBuiltBy(Node, Finder->getASTContext()) &&
         !preparedContainerFilledBy(Node, Finder->getASTContext());
}

StatementMatcher assignedOptimizer() {
  auto Made = callExpr(callee(functionDecl(hasAnyName("::std::make_shared", "::std::make_unique"))),
                       hasType(isOptimizerType()), isAssignedOptimizer())
                  .bind(FactoryId);
  return cxxOperatorCallExpr(hasOverloadedOperatorName("="), hasArgument(1, hasDescendant(Made)),
                             unless(isInMacroExpansion()), isInTrainingFile(),
                             unless(isInDistributedFunction()))
      .bind(StatementId);
}

Stencil assignedModelPreparations() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Made = Result.Nodes.getNodeAs<clang::Expr>(FactoryId);
    std::string Text;
    for (const clang::Expr* Model : modelsTrainedBy(*Made, *Result.Context)) {
      Text += (Text.empty() ? "" : "\n") + modelPreparation(*Model, Result);
    }
    return Text;
  });
}

AST_MATCHER(clang::Expr, madeWithModel) {
  return !modelsTrainedBy(Node, Finder->getASTContext()).empty();
}

constexpr char FieldId[] = "field";

AST_MATCHER(clang::FieldDecl, isPreparedMemberOptimizer) {
  return memberOptimizer(Node, Finder->getASTContext()).Problem.empty();
}

/// An optimizer member of a class of the main file, in a file that trains.
DeclarationMatcher optimizerMember() {
  return fieldDecl(hasType(isOptimizerType()), isExpansionInRewrittenFile(), isInTrainingFileDecl())
      .bind(FieldId);
}

/// The first use, in source order, of the optimizer member a member expression names when the member is
/// declared in a file the rewrite may not change (a header outside --headers), outside system headers: one
/// warning per member, where the rewritten code first uses it.
AST_MATCHER(clang::MemberExpr, isFirstUseOfUnrewrittenOptimizerMember) {
  const auto* Field = llvm::dyn_cast<clang::FieldDecl>(Node.getMemberDecl());
  clang::ASTContext& Context = Finder->getASTContext();
  const clang::SourceManager& SM = Context.getSourceManager();
  if (!Field || isInRewrittenFile(SM, Field->getLocation()) ||
      SM.isInSystemHeader(SM.getExpansionLoc(Field->getLocation())))
    return false;
  const clang::MemberExpr* First = nullptr;
  for (const clang::Decl* TopLevel : Context.getTranslationUnitDecl()->decls()) {
    if (!isInRewrittenFile(SM, TopLevel->getLocation()))
      continue;
    auto Use = memberExpr(member(equalsNode(Field))).bind("use");
    for (const BoundNodes& Found :
         match(traverse(clang::TK_AsIs, decl(forEachDescendant(Use))), *TopLevel, Context)) {
      const auto* Candidate = Found.getNodeAs<clang::MemberExpr>("use");
      if (!First || SM.isBeforeInTranslationUnit(SM.getExpansionLoc(Candidate->getBeginLoc()),
                                                 SM.getExpansionLoc(First->getBeginLoc())))
        First = Candidate;
    }
  }
  return First == &Node;
}

Stencil unrewrittenMemberWarning() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Use = Result.Nodes.getNodeAs<clang::MemberExpr>("use");
    const auto* Field = llvm::cast<clang::FieldDecl>(Use->getMemberDecl());
    const clang::SourceManager& SM = *Result.SourceManager;
    clang::PresumedLoc Declared = SM.getPresumedLoc(SM.getExpansionLoc(Field->getLocation()));
    return std::string(RefusalMarker) + "optimizer member '" + Field->getParent()->getNameAsString() +
           "::" + Field->getNameAsString() + "' not prepared: it is declared in " +
           std::string(Declared.getFilename()) + ":" + std::to_string(Declared.getLine()) +
           ", a header the rewrite may not change, so it cannot become a prepared optimizer; rewrite the "
           "project's headers too (accel-rewrite --headers=DIR; accelerate_target() rewrites the headers "
           "under "
           "the target's source directory), or prepare it by hand: hold an accelerate::Optimizer made with "
           "accelerator.prepare(<optimizer>), its models prepared first";
  });
}

clang::CharSourceRange tokenRange(clang::SourceRange Range) {
  return clang::CharSourceRange::getTokenRange(Range);
}

/// `T(args)` for the optimizer a member's build site makes, with each model in `Inline` written as its
/// preparation (`accelerate::Accelerator::current().prepare(model)`), for an initialiser, where no statement
/// can go before the optimizer is made.
llvm::Expected<std::string> preparedOptimizerText(const MemberOptimizerBuild& Build,
                                                  const clang::FieldDecl* Field,
                                                  llvm::ArrayRef<const clang::Expr*> Inline,
                                                  llvm::StringRef Accelerator,
                                                  const MatchFinder::MatchResult& Result) {
  const clang::SourceManager& SM = *Result.SourceManager;
  const clang::LangOptions& Options = Result.Context->getLangOpts();
  clang::SourceRange TypeRange, Arguments;
  if (const auto* New = llvm::dyn_cast<clang::CXXNewExpr>(Build.Made)) {
    TypeRange = New->getAllocatedTypeSourceInfo()->getTypeLoc().getSourceRange();
    Arguments = argumentsInside(New->getConstructExpr()->getParenOrBraceRange(), SM, Options);
  } else if (const auto* Call = llvm::dyn_cast<clang::CallExpr>(Build.Made)) {
    const auto* Callee = llvm::dyn_cast<clang::DeclRefExpr>(Call->getCallee()->IgnoreUnlessSpelledInSource());
    if (!Callee || Callee->getNumTemplateArgs() != 1)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "expected std::make_shared<T>(...) with one template argument");
    TypeRange = Callee->getTemplateArgs()[0].getSourceRange();
    if (Call->getNumArgs() > 0)
      Arguments = {Call->getArg(0)->getBeginLoc(), Call->getRParenLoc()};
  } else if (!Field) {
    // `T(args)` written out (an element added to a container): it is the object already.
    return Accelerator.str() + ".prepare(" + sourceText(Build.Made->getSourceRange(), Result) + ")";
  } else {
    const auto* Construct = llvm::cast<clang::CXXConstructExpr>(Build.Made);
    TypeRange = Field->getTypeSourceInfo()->getTypeLoc().getUnqualifiedLoc().getSourceRange();
    Arguments = argumentsInside(Construct->getParenOrBraceRange(), SM, Options);
  }
  std::string Type = sourceText(TypeRange, Result);
  std::string Text;
  if (Arguments.isValid()) {
    // The arguments' text, with each model to prepare inline replaced by its preparation.
    clang::CharSourceRange Range = clang::CharSourceRange::getCharRange(Arguments);
    std::vector<const clang::Expr*> Models(Inline.begin(), Inline.end());
    llvm::sort(Models, [&](const clang::Expr* A, const clang::Expr* B) {
      return SM.isBeforeInTranslationUnit(A->getBeginLoc(), B->getBeginLoc());
    });
    clang::SourceLocation At = Range.getBegin();
    for (const clang::Expr* Model : Models) {
      Text += sourceText(clang::CharSourceRange::getCharRange(At, Model->getBeginLoc()), Result);
      std::string Name = sourceText(Model->getSourceRange(), Result);
      Text += Model->getType()->isPointerType() ? "(&" + Accelerator.str() + ".prepare(*" + Name + "))"
                                                : Accelerator.str() + ".prepare(" + Name + ")";
      At = clang::Lexer::getLocForEndOfToken(Model->getEndLoc(), 0, SM, Options);
    }
    Text += sourceText(clang::CharSourceRange::getCharRange(At, Range.getEnd()), Result);
  }
  return Accelerator.str() + ".prepare(" + Type + "(" + Text + "))";
}

/// The edits that make an optimizer member a prepared one: its type becomes accelerate::Optimizer (a
/// std::optional of one when it is built after the object), each build site prepares the models the
/// optimizer trains and then the optimizer, and `delete member;` goes.
EditGenerator prepareMember() {
  return [](const MatchFinder::MatchResult& Result) -> llvm::Expected<llvm::SmallVector<Edit, 1>> {
    const auto* Field = Result.Nodes.getNodeAs<clang::FieldDecl>(FieldId);
    clang::ASTContext& Context = *Result.Context;
    const clang::SourceManager& SM = *Result.SourceManager;
    const MemberOptimizer& Member = memberOptimizer(*Field, Context);
    llvm::SmallVector<Edit, 1> Edits;
    auto Change = [&](clang::CharSourceRange Range, std::string Text) {
      Edit E;
      E.Range = Range;
      E.Replacement = std::move(Text);
      Edits.push_back(std::move(E));
    };
    // The type; `torch::optim::Adam *opt` keeps a space before the name.
    clang::SourceRange TypeRange = Field->getTypeSourceInfo()->getTypeLoc().getSourceRange();
    std::string Type = Member.Optional ? "std::optional<accelerate::Optimizer>" : "accelerate::Optimizer";
    clang::SourceLocation AfterType =
        clang::Lexer::getLocForEndOfToken(TypeRange.getEnd(), 0, SM, Context.getLangOpts());
    const char* Next = SM.getCharacterData(AfterType);
    if (Next && *Next != ' ' && *Next != '\t')
      Type += " ";
    Change(tokenRange(TypeRange), Type);
    // The file that declares the member (a header, when the rewrite may change it) needs the runtime's types.
    Edit Include;
    Include.Kind = EditKind::AddInclude;
    Include.Range = tokenRange(Field->getSourceRange());
    Include.Replacement = "<accelerate/accelerate.h>";
    Edits.push_back(std::move(Include));
    // Each build site, models first; a model is prepared once per function (or initialiser list).
    std::map<const void*, std::vector<const clang::ValueDecl*>> PreparedIn;
    for (const MemberOptimizerBuild& Build : Member.Builds) {
      // The function (a constructor, for its initialiser list), or the class for a default initialiser.
      const void* Owner = enclosingFunction(Build.Statement ? *Build.Statement : *Build.Made, Context);
      if (!Owner)
        Owner = Field->getParent();
      std::vector<const clang::ValueDecl*>& Prepared = PreparedIn[Owner];
      // In a function body, the models of optimizers made before it there (another member's, a local's).
      if (Build.Statement)
        for (const clang::ValueDecl* Earlier : modelsPreparedBefore(*Build.Statement, Context))
          if (!llvm::is_contained(Prepared, Earlier))
            Prepared.push_back(Earlier);
      std::vector<const clang::Expr*> Models;
      for (const clang::Expr* Model : modelsTrainedBy(*Build.Construction, Context))
        if (!llvm::is_contained(Prepared, namedDeclaration(Model))) {
          Prepared.push_back(namedDeclaration(Model));
          Models.push_back(Model);
        }
      if (!Build.Statement) {
        auto Text = preparedOptimizerText(Build, Field, Models, "accelerate::Accelerator::current()", Result);
        if (!Text)
          return Text.takeError();
        // `T opt(args)` / `opt(args)` in an initialiser list: the parentheses' content; otherwise the
        // expression that makes it.
        const auto* Construct = llvm::dyn_cast<clang::CXXConstructExpr>(Build.Made);
        if (Construct && !llvm::isa<clang::CXXTemporaryObjectExpr>(Construct) &&
            Construct->getParenOrBraceRange().isValid()) {
          clang::SourceRange Inside =
              argumentsInside(Construct->getParenOrBraceRange(), SM, Context.getLangOpts());
          Change(clang::CharSourceRange::getCharRange(Inside), *Text);
        } else {
          Change(tokenRange(Build.Made->getSourceRange()), *Text);
        }
        continue;
      }
      std::string Preparations;
      for (const clang::Expr* Model : Models) {
        Preparations += (Preparations.empty() ? "" : "\n") + modelPreparation(*Model, Result);
      }
      if (!Preparations.empty())
        Edits.push_back(editInsertingBefore(*Build.Statement, Preparations, SM));
      auto Text = preparedOptimizerText(Build, Field, {}, "accelerator", Result);
      if (!Text)
        return Text.takeError();
      // `member = new T(args)` / `member.reset(new T(args))` → `member = accelerator.prepare(T(args))`.
      const clang::Expr* Target = nullptr;
      if (const auto* Assign = llvm::dyn_cast<clang::BinaryOperator>(Build.Statement))
        Target = Assign->getLHS();
      else if (const auto* Operator = llvm::dyn_cast<clang::CXXOperatorCallExpr>(Build.Statement))
        Target = Operator->getArg(0);
      else if (const auto* Reset = llvm::dyn_cast<clang::CXXMemberCallExpr>(Build.Statement))
        Target = Reset->getImplicitObjectArgument();
      if (!Target)
        return llvm::createStringError(llvm::inconvertibleErrorCode(), "unexpected optimizer member build");
      Change(tokenRange(Build.Statement->getSourceRange()),
             sourceText(Target->getSourceRange(), Result) + " = " + *Text);
    }
    for (const clang::CXXDeleteExpr* Delete : Member.Deletes)
      Change(rangeRemovingStatement(*Delete, Context), "");
    // A null pointer becomes the empty optional: `opt{}` stays, `opt = nullptr` / `opt_(nullptr)` say so.
    for (const auto& [Range, Text] : Member.NullInitialisers)
      if (sourceText(tokenRange(Range), Result) != Text)
        Change(tokenRange(Range), Text);
    return Edits;
  };
}

constexpr char ContainerId[] = "container";

const OptimizerContainer* containerOf(const clang::VarDecl& Variable, clang::ASTContext& Context) {
  for (const OptimizerContainer* Container : optimizerContainers(Context))
    if (Container->Variable == &Variable)
      return Container;
  return nullptr;
}

AST_MATCHER(clang::VarDecl, isPreparedOptimizerContainer) {
  const OptimizerContainer* Container = containerOf(Node, Finder->getASTContext());
  return Container && Container->Problem.empty();
}

AST_MATCHER(clang::VarDecl, isRefusedOptimizerContainer) {
  const OptimizerContainer* Container = containerOf(Node, Finder->getASTContext());
  return Container && !Container->Problem.empty();
}

/// A statement that adds an optimizer to a container the prepare pass prepares.
AST_MATCHER(clang::Expr, isPreparedContainerFill) {
  for (const OptimizerContainer* Container : optimizerContainers(Finder->getASTContext()))
    if (Container->Problem.empty())
      for (const MemberOptimizerBuild& Fill : Container->Fills)
        if (Fill.Statement == &Node)
          return true;
  return false;
}

/// A container of optimizers in training code.
DeclarationMatcher optimizerContainer() {
  return varDecl(hasLocalStorage(), unless(parmVarDecl()), isExpansionInRewrittenFile(),
                 isInTrainingFileDecl(), anyOf(isPreparedOptimizerContainer(), isRefusedOptimizerContainer()))
      .bind(ContainerId);
}

/// The edits that make a container of optimizers hold prepared ones: its element type becomes
/// accelerate::Optimizer, and each optimizer added to it is made with accelerator.prepare(), the models it
/// trains prepared before the statement that adds it (once per function).
EditGenerator prepareContainer() {
  return [](const MatchFinder::MatchResult& Result) -> llvm::Expected<llvm::SmallVector<Edit, 1>> {
    const auto* Variable = Result.Nodes.getNodeAs<clang::VarDecl>(ContainerId);
    clang::ASTContext& Context = *Result.Context;
    const clang::SourceManager& SM = *Result.SourceManager;
    const OptimizerContainer& Container = *containerOf(*Variable, Context);
    llvm::SmallVector<Edit, 1> Edits;
    auto Change = [&](clang::CharSourceRange Range, std::string Text) {
      Edit E;
      E.Range = Range;
      E.Replacement = std::move(Text);
      Edits.push_back(std::move(E));
    };
    Change(tokenRange(Container.ElementType),
           Container.Map ? "std::optional<accelerate::Optimizer>" : "accelerate::Optimizer");
    for (const MemberOptimizerBuild& Fill : Container.Fills) {
      // Models an optimizer made earlier in the function trains are prepared already.
      std::vector<const clang::ValueDecl*> Prepared = modelsPreparedBefore(*Fill.Statement, Context);
      std::string Preparations;
      for (const clang::Expr* Model : modelsTrainedBy(*Fill.Construction, Context)) {
        if (llvm::is_contained(Prepared, namedDeclaration(Model)))
          continue;
        Prepared.push_back(namedDeclaration(Model));
        Preparations += (Preparations.empty() ? "" : "\n") + modelPreparation(*Model, Result);
      }
      if (!Preparations.empty())
        Edits.push_back(editInsertingBefore(*Fill.Statement, Preparations, SM));
      auto Text = preparedOptimizerText(Fill, nullptr, {}, "accelerator", Result);
      if (!Text)
        return Text.takeError();
      Change(tokenRange(Fill.Made->getSourceRange()), *Text);
    }
    return Edits;
  };
}

Stencil containerWarning() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Variable = Result.Nodes.getNodeAs<clang::VarDecl>(ContainerId);
    return std::string(RefusalMarker) + "optimizers in '" + Variable->getNameAsString() +
           "' not prepared: " + containerOf(*Variable, *Result.Context)->Problem;
  });
}

Stencil memberExplanation() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Field = Result.Nodes.getNodeAs<clang::FieldDecl>(FieldId);
    const MemberOptimizer& Member = memberOptimizer(*Field, *Result.Context);
    std::string Text = "optimizer member '" + Field->getNameAsString() + "' holds the prepared optimizer, " +
                       (Member.Optional ? "a std::optional<accelerate::Optimizer> (it is built after the "
                                          "object is)"
                                        : "an accelerate::Optimizer") +
                       ", which keeps step(), zero_grad(), param_groups() and `->` and converts to "
                       "torch::optim::Optimizer&: it steps with fused kernels, only at the end of an "
                       "accumulation window, and only on synchronised gradients; the models it trains are "
                       "prepared where it is built, before it";
    if (!Member.Deletes.empty())
      Text += "; `delete` goes, the prepared optimizer owns the optimizer";
    return Text;
  });
}

Stencil memberWarning() {
  return run([](const MatchFinder::MatchResult& Result) -> llvm::Expected<std::string> {
    const auto* Field = Result.Nodes.getNodeAs<clang::FieldDecl>(FieldId);
    const MemberOptimizer& Member = memberOptimizer(*Field, *Result.Context);
    return std::string(RefusalMarker) + "optimizer member '" + Field->getParent()->getNameAsString() +
           "::" + Field->getNameAsString() + "' not prepared: " + Member.Problem;
  });
}

} // namespace

namespace {

constexpr char ParameterId[] = "parameter";

/// The parameter's type as written: `torch::optim::Adam&`.
RangeSelector parameterType() {
  return [](const MatchFinder::MatchResult& Result) -> llvm::Expected<clang::CharSourceRange> {
    const auto* Parameter = Result.Nodes.getNodeAs<clang::ParmVarDecl>(ParameterId);
    return clang::CharSourceRange::getTokenRange(
        Parameter->getTypeSourceInfo()->getTypeLoc().getSourceRange());
  };
}

} // namespace

namespace {

AST_MATCHER(clang::Expr, buildsPreparedMember) {
  for (const MemberOptimizer* Member : preparedMemberOptimizers(Finder->getASTContext()))
    for (const MemberOptimizerBuild& Build : Member->Builds)
      if (Build.Statement == &Node)
        return true;
  return false;
}

/// A metric computed from this process's share of the data: it reads a tensor of this process (`item()`, a
/// size) or a local computed from the share (shareOf).
AST_MATCHER(clang::Expr, isComputedFromShare) {
  clang::ASTContext& Context = Finder->getASTContext();
  const clang::FunctionDecl* Function = enclosingFunction(Node, Context);
  if (!Function || !readsShardedData(*Function, Context))
    return false;
  return readsProcessShare(Node, *Function, Context) || !shareReads(Node, *Function, Context).empty();
}

} // namespace

StatementMatcher preparedMemberBuild() {
  auto Member = memberExpr(member(fieldDecl(hasType(isOptimizerType()))));
  return traverse(clang::TK_AsIs,
                  expr(anyOf(binaryOperator(isAssignmentOperator(), hasLHS(ignoringParenImpCasts(Member))),
                             cxxOperatorCallExpr(hasOverloadedOperatorName("="),
                                                 hasArgument(0, ignoringParenImpCasts(Member))),
                             cxxMemberCallExpr(callee(cxxMethodDecl(hasName("reset"))),
                                               on(ignoringParenImpCasts(Member)))),
                       buildsPreparedMember()));
}

StatementMatcher preparedAssignment() {
  return traverse(clang::TK_AsIs, stmt(assignedOptimizer(), hasDescendant(expr(madeWithModel()))));
}

DeclarationMatcher preparedGlobalOptimizer() {
  return decl(globalOptimizer(), isInFileWithMain());
}

StatementMatcher preparedDeclaration() {
  return declStmt(anyOf(declarationOf(isOptimizerType()), declarationOf(isSchedulerType())),
                  hasSingleDecl(varDecl(anyOf(hasType(isSchedulerType()), trainsSomeModel()))));
}

StatementMatcher prepareUsesAccelerator() {
  return stmt(anyOf(preparedDeclaration(), preparedAssignment(), preparedMemberBuild(),
                    traverse(clang::TK_AsIs, expr(isPreparedContainerFill())),
                    declStmt(severalDeclarations(), isSplitPreparedDeclarationMatcher())));
}

PassRule preparePass() {
  const auto RetypedParameter = cat(
      "every call passes a prepared optimizer here, and a prepared optimizer is an accelerate::Optimizer: "
      "the parameter takes it, so the function steps it (fused, accumulation-aware) instead of the "
      "libtorch optimizer inside");
  auto OptimizerWithModel =
      declStmt(declarationOf(isOptimizerType()), hasSingleDecl(varDecl(trainsSomeModel())));
  return applyFirst<std::string>({
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource,
                        fieldDecl(optimizerMember(), isPreparedMemberOptimizer())),
               prepareMember(), memberExplanation()),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource,
                        fieldDecl(optimizerMember(), unless(isPreparedMemberOptimizer()))),
               noopEdit(name(FieldId)), memberWarning()),
      makeRule(
          traverse(clang::TK_AsIs, memberExpr(hasType(isOptimizerType()), unless(isInMacroExpansion()),
                                              hasAncestor(decl(isExpansionInRewrittenFile())),
                                              isInTrainingFile(), isFirstUseOfUnrewrittenOptimizerMember())
                                       .bind("use")),
          noopEdit(node("use")), unrewrittenMemberWarning()),
      makeRule(
          traverse(clang::TK_IgnoreUnlessSpelledInSource,
                   varDecl(optimizerContainer(), isPreparedOptimizerContainer())),
          prepareContainer(),
          cat("the container holds prepared optimizers (accelerate::Optimizer, which keeps step(), "
              "zero_grad(), param_groups() and `->`, and converts to torch::optim::Optimizer&): each one "
              "added to it is made with accelerator.prepare(), the models it trains prepared right before "
              "(moved to accelerator.device(), parameters broadcast, gradients synchronised)")),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource,
                        varDecl(optimizerContainer(), isRefusedOptimizerContainer())),
               noopEdit(name(ContainerId)), containerWarning()),
      makeRule(
          traverse(clang::TK_IgnoreUnlessSpelledInSource,
                   declStmt(severalDeclarations(), isSplitPreparedDeclarationMatcher())),
          changeTo(statementWithSemicolon(StatementId), splitPreparedDeclarations()),
          cat("the optimizers and schedulers declared together are declared one by one, each made with "
              "accelerator.prepare() (an accelerate::Optimizer or accelerate::Scheduler with the same "
              "step(), zero_grad() and `->`); the models each optimizer trains are prepared right before "
              "it, in place: moved to accelerator.device(), their parameters broadcast from the main "
              "process, their gradients synchronised across processes")),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource,
                        declStmt(severalDeclarations(), unless(isSplitPreparedDeclarationMatcher()))),
               noopEdit(node(StatementId)), severalDeclarationsWarning()),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource,
                        declStmt(declarationOf(isOptimizerType()),
                                 hasSingleDecl(varDecl(trainsANonModuleInSomeInstantiation())))),
               noopEdit(node(StatementId)), nonModuleInstanceWarning()),
      makeRule(
          traverse(clang::TK_IgnoreUnlessSpelledInSource, OptimizerWithModel),
          flatten(prepareModels(), changeTo(statementWithSemicolon(StatementId), preparedDeclarationText())),
          cat("accelerator.prepare() returns an accelerate::Optimizer with the same step(), zero_grad() and "
              "`->`, which converts to torch::optim::Optimizer& for schedulers and torch::save: it steps "
              "with "
              "fused kernels, only at the end of an accumulation window, and only on synchronised "
              "gradients; the models it trains are prepared first, in place: moved to "
              "accelerator.device(), their parameters broadcast from the main process, their gradients "
              "synchronised across processes")),
      makeRule(
          traverse(clang::TK_IgnoreUnlessSpelledInSource, declarationOf(isOptimizerType())),
          noopEdit(node(StatementId)),
          cat(std::string(RefusalMarker), "optimizer '", name(VariableId),
              "' not prepared: its constructor takes no model's parameters() (loose tensors, or a "
              "vector built elsewhere), so no model is known whose gradients to synchronise; prepare the "
              "model with accelerator.prepare(model) and the optimizer with "
              "accelerator.prepare(optimizer) by hand")),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource,
                        parmVarDecl(hasType(isOptimizerType()), isExpansionInRewrittenFile(),
                                    onlyReceivesPreparedOptimizers())
                            .bind(ParameterId)),
               changeTo(parameterType(), cat("accelerate::Optimizer&")), RetypedParameter),
      // A lambda's parameters are only visited as written with the AST as it is.
      makeRule(traverse(clang::TK_AsIs,
                        parmVarDecl(hasDeclContext(cxxMethodDecl(ofClass(cxxRecordDecl(isLambda())))),
                                    unless(hasAncestor(functionDecl(isTemplateInstantiation()))),
                                    hasType(isOptimizerType()), isExpansionInRewrittenFile(),
                                    onlyReceivesPreparedOptimizers())
                            .bind(ParameterId)),
               changeTo(parameterType(), cat("accelerate::Optimizer&")), RetypedParameter),
      makeRule(preparedAssignment(), insertBeforeStatement(StatementId, assignedModelPreparations()),
               cat("the models this optimizer trains are prepared before it is made (moved to "
                   "accelerator.device(), "
                   "parameters broadcast, gradients synchronised); the optimizer, assigned to a pointer to "
                   "torch::optim::Optimizer, stays libtorch's: it steps on the synchronised gradients, "
                   "without the "
                   "prepared optimizer's fused step and accumulation")),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource, serializedPreparedOptimizer()),
               insertAfter(node(SavedId), cat(".unwrap()")),
               cat("the prepared optimizer is an accelerate::Optimizer handle; torch::save and torch::load "
                   "take the "
                   "libtorch optimizer it holds, unwrap()")),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource, libtorchOnlyMemberOfPreparedOptimizer()),
               insertAfter(node(SavedId), cat(".unwrap()")),
               cat("'", node(SavedId),
                   "' holds a prepared optimizer (accelerate::Optimizer), which has step(), zero_grad() and "
                   "param_groups() of libtorch's interface; the rest (defaults(), state(), ...) is the "
                   "libtorch optimizer's it holds, unwrap()")),
      makeRule(traverse(clang::TK_IgnoreUnlessSpelledInSource, preparedGlobalOptimizer()),
               insertAtStartOfMain(globalModelPreparations()),
               cat("the models the global optimizer '", name(VariableId),
                   "' trains are prepared at the start of main (moved to accelerator.device(), parameters "
                   "broadcast, "
                   "gradients synchronised); the optimizer itself stays libtorch's, since a global cannot be "
                   "declared again: it steps on the synchronised gradients, without the prepared optimizer's "
                   "fused "
                   "step and accumulation; make it a local of main to get those")),
      makeRule(
          traverse(clang::TK_IgnoreUnlessSpelledInSource, globalOptimizer()), noopEdit(name(VariableId)),
          cat("global optimizer '", name(VariableId),
              "' not prepared: this file has no main to prepare its models in; prepare them where training "
              "starts")),
      makeRule(
          traverse(clang::TK_IgnoreUnlessSpelledInSource,
                   cxxMemberCallExpr(
                       callee(cxxMethodDecl(hasName("step"),
                                            ofClass(hasName("::torch::optim::ReduceLROnPlateauScheduler")))),
                       hasArgument(0, expr(isComputedFromShare()).bind(MetricId)),
                       unless(isInMacroExpansion()), isInTrainingFile(), unless(isInDistributedFunction()))
                       .bind(StatementId)),
          noopEdit(node(StatementId)),
          cat("plateau scheduler step not made safe: its metric '", node(MetricId),
              "' is computed from this process's share of the data, so each process would lower its learning "
              "rate at its own epoch and the processes' models would drift apart; step it with a value "
              "reduced over the processes, e.g. accelerator.reduce(metric, accelerate::ReduceOp::MEAN) for a "
              "mean")),
      makeRule(
          traverse(clang::TK_IgnoreUnlessSpelledInSource, declarationOf(isSchedulerType())),
          changeTo(statementWithSemicolon(StatementId), preparedDeclarationText()),
          cat("accelerator.prepare() returns an accelerate::Scheduler with the same step(): it steps once "
              "per real optimizer step, not on accumulation micro-steps")),
  });
}

/// The pass's row of the table (passes/Passes.def lists it; scripts/passes_table.py reads its texts).
PassInfo preparePassInfo() {
  return {"prepare", preparePass,
          "optimizers and schedulers become `accelerator.prepare(...)`; the models an optimizer trains are "
          "prepared "
          "before it",
          /*OnByDefault=*/true, /*WhenNothingFound=*/{},
          /*LeavesAlone=*/
          "optimizers over loose tensors; member optimizers used in ways a prepared one does not "
          "support; plateau schedulers stepped with a metric of this process's share (warnings)",
          /*TurnedOnBy=*/{}, /*UsesAccelerator=*/prepareUsesAccelerator,
          /*UsesAcceleratorInMain=*/preparedGlobalOptimizer};
}

} // namespace accelerate::passes
