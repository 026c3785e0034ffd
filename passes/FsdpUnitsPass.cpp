// passes/FsdpUnitsPass.cpp: the rule that runs each project module's forward through accelerate::fsdp::unit.
#include "passes/Pass.h"

#include "passes/Macros.h"
#include "passes/TrainingCode.h"

#include "clang/AST/ASTContext.h"
#include "clang/AST/DeclCXX.h"
#include "clang/AST/DeclTemplate.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "clang/Basic/SourceManager.h"
#include "clang/Lex/Lexer.h"
#include "clang/Tooling/Transformer/RangeSelector.h"
#include "clang/Tooling/Transformer/Stencil.h"

namespace accelerate::passes {

// ---- The pass ------------------------------------------------------------------------------------------

/// In every class of the project derived from `torch::nn::Module` (the main file and the headers the rewrite
/// may change), the body of each `forward` runs inside `accelerate::fsdp::unit`, the runtime's unit call:
///
///   torch::Tensor forward(torch::Tensor x) {     torch::Tensor forward(torch::Tensor x) {
///     x = fc1(x);                            →     return accelerate::fsdp::unit(*this, [&]() ->
///     torch::Tensor { return fc2(torch::relu(x));                    x = fc1(x);
///   }                                                return fc2(torch::relu(x));
///                                                  });
///                                                }
///
/// Under the fsdp strategy the wrap policy (fsdp_auto_wrap_policy) decides at prepare which instances are
/// units; for every other instance, and under any other strategy, the call is a plain call of the body. Left
/// alone, with a warning: a forward whose result a unit cannot hook (not a Tensor, a vector of them, or a
/// tuple or pair of those), one whose return type depends on a template parameter, one written by a macro.
/// Noted: a member of a project module that is one of libtorch's composite modules (its forward cannot be
/// edited; the runtime makes the enclosing project module the unit when the policy names it). Off unless
/// named in `--passes=` (`accelerate_target(... FSDP)` names it).
PassRule fsdpUnitsPass();

namespace {

using namespace clang::ast_matchers;
using namespace clang::transformer;

constexpr char ForwardId[] = "forward";
constexpr char BodyId[] = "body";
constexpr char FieldId[] = "field";
constexpr char LayerId[] = "layer";

bool isTensor(clang::QualType Type) {
  const auto* Record = Type.getCanonicalType()->getAsCXXRecordDecl();
  return Record && Record->getQualifiedNameAsString() == "at::Tensor";
}

/// Whether a unit can hook a result of this type: what accelerate::fsdp::detail::collect takes (a Tensor, a
/// std::vector of them, a std::tuple or std::pair of those), by value or by reference.
bool isUnitResult(clang::QualType Type) {
  Type = Type.getNonReferenceType().getCanonicalType().getUnqualifiedType();
  if (isTensor(Type))
    return true;
  const auto* Specialization =
      llvm::dyn_cast_or_null<clang::ClassTemplateSpecializationDecl>(Type->getAsCXXRecordDecl());
  if (!Specialization || !Specialization->isInStdNamespace())
    return false;
  llvm::StringRef Name = Specialization->getName();
  const clang::TemplateArgumentList& Arguments = Specialization->getTemplateArgs();
  auto IsUnitResult = [](const clang::TemplateArgument& Argument) {
    return Argument.getKind() == clang::TemplateArgument::Type && isUnitResult(Argument.getAsType());
  };
  if (Name == "vector")
    return Arguments.size() >= 1 && Arguments[0].getKind() == clang::TemplateArgument::Type &&
           isTensor(Arguments[0].getAsType());
  if (Name == "pair")
    return Arguments.size() == 2 && IsUnitResult(Arguments[0]) && IsUnitResult(Arguments[1]);
  if (Name == "tuple")
    return Arguments.size() == 1 && Arguments[0].getKind() == clang::TemplateArgument::Pack &&
           Arguments[0].pack_size() > 0 && llvm::all_of(Arguments[0].pack_elements(), IsUnitResult);
  return false;
}

AST_MATCHER(clang::FunctionDecl, returnsUnitResult) {
  return !Node.getReturnType()->isDependentType() && isUnitResult(Node.getReturnType());
}

AST_MATCHER(clang::FunctionDecl, hasDependentReturnType) {
  return Node.getReturnType()->isDependentType();
}

/// A call of accelerate::fsdp::unit, resolved or not (in a template).
StatementMatcher unitCall() {
  auto Unit = functionDecl(hasName("::accelerate::fsdp::unit"));
  return expr(anyOf(callExpr(callee(Unit)),
                    unresolvedLookupExpr(hasAnyDeclaration(namedDecl(hasName("::accelerate::fsdp::unit"))))));
}

/// The `forward` definitions of module classes, written in a file the rewrite changes.
DeclarationMatcher moduleForward() {
  return cxxMethodDecl(hasName("forward"), isDefinition(), unless(isStaticStorageClass()),
                       ofClass(cxxRecordDecl(isModuleClass())), isExpansionInRewrittenFile(),
                       hasBody(compoundStmt().bind(BodyId)))
      .bind(ForwardId);
}

/// What follows `[&]()` in the unit's lambda: the forward's return type as written, so that every return
/// statement of the body (`return {a, b};` for a tuple) means what it meant.
std::string lambdaReturnType(const clang::FunctionDecl& Forward, const clang::SourceManager& SM,
                             const clang::LangOptions& LangOpts) {
  clang::QualType Declared = Forward.getDeclaredReturnType();
  if (const clang::AutoType* Auto = Declared->getContainedAutoType())
    return Auto->isDecltypeAuto() ? " -> decltype(auto)" : ""; // `auto` deduces the same way in a lambda
  clang::SourceRange Range = Forward.getReturnTypeSourceRange();
  if (Range.isValid() && !Range.getBegin().isMacroID() && !Range.getEnd().isMacroID()) {
    llvm::StringRef Text =
        clang::Lexer::getSourceText(clang::CharSourceRange::getTokenRange(Range), SM, LangOpts);
    if (!Text.empty())
      return " -> " + Text.str();
  }
  clang::PrintingPolicy Policy(LangOpts);
  Policy.FullyQualifiedName = true;
  return " -> " + Declared.getAsString(Policy);
}

/// The forward's inputs as the unit call passes them (`, x, mask`) and as its lambda takes them
/// (`torch::Tensor x, const torch::Tensor& mask`), so that the body reads its own copies and the runtime can
/// run it again in backward (activation checkpointing) after the forward has returned. An unnamed parameter
/// is left out (the body cannot read it). A parameter pack, an rvalue reference or a declarator the lexer
/// cannot take apart leaves both empty: the lambda then captures the parameters (`[&]()`), and the unit is
/// never recomputed.
struct UnitInputs {
  std::string Arguments;
  std::string Parameters;
};
UnitInputs unitInputs(const clang::FunctionDecl& Forward, const clang::SourceManager& SM,
                      const clang::LangOptions& LangOpts) {
  UnitInputs Inputs;
  for (const clang::ParmVarDecl* Parameter : Forward.parameters()) {
    if (Parameter->getName().empty())
      continue;
    clang::SourceLocation Begin = Parameter->getBeginLoc(), Name = Parameter->getLocation();
    clang::TypeLoc Type =
        Parameter->getTypeSourceInfo() ? Parameter->getTypeSourceInfo()->getTypeLoc() : clang::TypeLoc();
    bool Plain = !Parameter->isParameterPack() && !Parameter->getType()->isRValueReferenceType() &&
                 Begin.isFileID() && Name.isFileID() && !Type.isNull() &&
                 SM.isBeforeInTranslationUnit(Type.getEndLoc(), Name);
    llvm::StringRef Text =
        Plain ? clang::Lexer::getSourceText(clang::CharSourceRange::getTokenRange(Begin, Name), SM, LangOpts)
              : llvm::StringRef();
    if (Text.empty() || Text.contains('\n') || Text.contains("//") || Text.contains("/*"))
      return {};
    Inputs.Arguments += ", " + Parameter->getName().str();
    Inputs.Parameters += (Inputs.Parameters.empty() ? "" : ", ") + Text.str();
  }
  return Inputs;
}

/// The edits that put the body of the bound forward inside the unit call: an opening line after its brace,
/// each line of the body indented one step more (the step the body already uses), and the call's end before
/// the closing brace. A body on one line stays on one line. Insertions only, so edits other passes make in
/// the body still apply.
EditGenerator wrapInUnit() {
  return [](const MatchFinder::MatchResult& Result) -> llvm::Expected<llvm::SmallVector<Edit, 1>> {
    const auto* Forward = Result.Nodes.getNodeAs<clang::FunctionDecl>(ForwardId);
    const auto* Body = Result.Nodes.getNodeAs<clang::CompoundStmt>(BodyId);
    const clang::SourceManager& SM = *Result.SourceManager;
    auto [File, Open] = SM.getDecomposedLoc(SM.getFileLoc(Body->getLBracLoc()));
    unsigned Close = SM.getDecomposedLoc(SM.getFileLoc(Body->getRBracLoc())).second;
    llvm::StringRef Buffer = SM.getBufferData(File);
    const UnitInputs Inputs = unitInputs(*Forward, SM, Result.Context->getLangOpts());
    const std::string Call = "return accelerate::fsdp::unit(*this" + Inputs.Arguments + ", [&](" +
                             Inputs.Parameters + ")" +
                             lambdaReturnType(*Forward, SM, Result.Context->getLangOpts()) + " {";
    llvm::SmallVector<Edit, 1> Edits;
    auto InsertAt = [&](unsigned Offset, std::string Text) {
      Edit Inserted;
      clang::SourceLocation Where = SM.getComposedLoc(File, Offset);
      Inserted.Range = clang::CharSourceRange::getCharRange(Where, Where);
      Inserted.Replacement = std::move(Text);
      Edits.push_back(std::move(Inserted));
    };
    llvm::StringRef Inner = Buffer.slice(Open + 1, Close);
    if (!Inner.contains('\n')) {
      InsertAt(Open + 1, " " + Call);
      InsertAt(Close, "}); ");
      return Edits;
    }
    auto IndentOf = [&](size_t LineStart) {
      return Buffer.substr(LineStart).take_while([](char C) { return C == ' ' || C == '\t'; });
    };
    const size_t CloseLine = Buffer.rfind('\n', Close) + 1;
    const llvm::StringRef CloseIndent = IndentOf(CloseLine);
    const bool CloseAlone = Buffer.slice(CloseLine, Close).trim().empty();
    // The line starts of the body, after the opening brace's line, before the closing brace's line (or up to
    // it, when code precedes the brace there).
    std::vector<size_t> Lines;
    for (size_t Line = Buffer.find('\n', Open) + 1; Line < Close; Line = Buffer.find('\n', Line) + 1) {
      if (Line == CloseLine && CloseAlone)
        break;
      Lines.push_back(Line);
    }
    auto IsBlank = [&](size_t Line) {
      return Buffer.substr(Line).take_until([](char C) { return C == '\n'; }).trim().empty();
    };
    std::string StatementIndent = CloseIndent.str() + "  ";
    for (size_t Line : Lines)
      if (!IsBlank(Line)) {
        StatementIndent = IndentOf(Line).str();
        break;
      }
    llvm::StringRef Step = "  ";
    if (llvm::StringRef(StatementIndent).starts_with(CloseIndent) &&
        StatementIndent.size() > CloseIndent.size())
      Step = llvm::StringRef(StatementIndent).drop_front(CloseIndent.size());
    // Indenting a line inside a raw string literal or after a line continuation would change the program.
    const bool Reindent = !Inner.contains("R\"") && !Inner.contains("\\\n") && !Inner.contains("\\\r\n");
    InsertAt(Open + 1, "\n" + StatementIndent + Call);
    if (Reindent)
      for (size_t Line : Lines)
        if (!IsBlank(Line))
          InsertAt(Line, Step.str());
    if (CloseAlone)
      InsertAt(CloseLine, StatementIndent + "});\n");
    else
      InsertAt(Close, "}); ");
    return Edits;
  };
}

/// Names `Forward` for messages: 'BlockImpl::forward'.
std::string nameOf(const clang::FunctionDecl& Forward) {
  return Forward.getQualifiedNameAsString();
}

} // namespace

PassRule fsdpUnitsPass() {
  auto Forward = moduleForward();
  auto Bound = [](auto Matcher) { return traverse(clang::TK_IgnoreUnlessSpelledInSource, Matcher); };

  auto Named = run([](const MatchFinder::MatchResult& Result) {
    return nameOf(*Result.Nodes.getNodeAs<clang::FunctionDecl>(ForwardId));
  });

  // Already a unit (written by hand, or an earlier rewrite): left as it is.
  auto AlreadyUnit =
      makeRule(Bound(cxxMethodDecl(Forward, hasBody(hasDescendant(unitCall())))), noopEdit(node(ForwardId)),
               cat(std::string(NoteMarker), "'", Named,
                   "' left alone: its forward already calls accelerate::fsdp::unit"));
  auto ReturnType = run([](const MatchFinder::MatchResult& Result) {
    const auto* Found = Result.Nodes.getNodeAs<clang::FunctionDecl>(ForwardId);
    return Found->getDeclaredReturnType().getAsString(clang::PrintingPolicy(Result.Context->getLangOpts()));
  });
  const std::string Stays = "; it stays a plain forward, and its parameters train in the unit of the module "
                            "that holds it. ";

  auto InMacro = makeRule(
      Bound(cxxMethodDecl(Forward, hasBody(compoundStmt(isInMacroExpansion())))), noopEdit(node(ForwardId)),
      cat("'", Named,
          "' not made an FSDP unit: its body comes from a macro, and the edit would have to change "
          "the macro",
          Stays,
          "Fix: write the forward without the macro, or call accelerate::fsdp::unit(*this, [&] { ... }) "
          "in the macro by hand"));

  auto ConstForward =
      makeRule(Bound(cxxMethodDecl(Forward, isConst())), noopEdit(node(ForwardId)),
               cat("'", Named,
                   "' not made an FSDP unit: it is a const member function, and a unit gathers and frees "
                   "its module's parameters",
                   Stays, "Fix: drop the const (libtorch's own modules' forward is not const)"));

  auto Dependent = makeRule(
      Bound(cxxMethodDecl(Forward, hasDependentReturnType())), noopEdit(node(ForwardId)),
      cat("'", Named, "' not made an FSDP unit: its return type '", ReturnType,
          "' depends on a template parameter, so whether a unit can hook it differs between instantiations",
          Stays,
          "Fix: return torch::Tensor (or a std::vector, std::tuple or std::pair of them), or call "
          "accelerate::fsdp::unit(*this, x, [&](torch::Tensor x) { ... }) by hand where every instantiation "
          "returns one"));

  auto NotHookable = makeRule(
      Bound(cxxMethodDecl(Forward, unless(returnsUnitResult()))), noopEdit(node(ForwardId)),
      cat("'", Named, "' not made an FSDP unit: it returns '", ReturnType,
          "', and a unit's backward is attached to the tensors its forward returns", Stays,
          "Fix: return torch::Tensor, std::vector<torch::Tensor>, or a std::tuple or std::pair of them"));

  auto Wrap = makeRule(
      Bound(Forward),
      flattenVector({wrapInUnit(), edit(addInclude("accelerate/accelerate.h", IncludeFormat::Angled))}),
      cat("'", Named,
          "' runs inside accelerate::fsdp::unit: under parallel_strategy 'fsdp' an instance the "
          "wrap policy (fsdp_auto_wrap_policy) makes a unit has its parameters gathered for its "
          "forward and its backward and sharded otherwise; any other call is a plain call"));

  // A composite module of libtorch's own (TransformerEncoderLayer, MultiheadAttention, ...) held by a module
  // of the project: nobody can put the unit call in its forward.
  auto Libtorch = cxxRecordDecl(isModuleClass(), unless(isExpansionInRewrittenFile()),
                                has(fieldDecl(hasType(isModuleType()))))
                      .bind(LayerId);
  auto HoldsLibtorch = hasUnqualifiedDesugaredType(recordType(hasDeclaration(cxxRecordDecl(anyOf(
      Libtorch,
      isDerivedFrom(
          classTemplateSpecializationDecl(hasName("::torch::nn::ModuleHolder"),
                                          hasTemplateArgument(0, refersToType(hasDeclaration(Libtorch))))),
      classTemplateSpecializationDecl(hasName("::std::shared_ptr"),
                                      hasTemplateArgument(0, refersToType(hasDeclaration(Libtorch)))))))));
  auto LayerField = fieldDecl(hasParent(cxxRecordDecl(isModuleClass(), isExpansionInRewrittenFile())),
                              isExpansionInRewrittenFile(), hasType(qualType(HoldsLibtorch)))
                        .bind(FieldId);
  auto LibtorchLayer = makeRule(
      Bound(LayerField), noopEdit(node(FieldId)),
      cat(std::string(NoteMarker), "'", run([](const MatchFinder::MatchResult& Result) {
            return Result.Nodes.getNodeAs<clang::FieldDecl>(FieldId)->getQualifiedNameAsString();
          }),
          "' is libtorch's ", run([](const MatchFinder::MatchResult& Result) {
            return Result.Nodes.getNodeAs<clang::CXXRecordDecl>(LayerId)->getNameAsString();
          }),
          ", whose forward cannot call accelerate::fsdp::unit: it trains in the unit of the module that "
          "holds "
          "it, and when fsdp_transformer_layer_cls_to_wrap names its class the runtime makes the nearest "
          "enclosing module whose forward calls the unit the unit instead"));

  return applyFirst({AlreadyUnit, InMacro, ConstForward, Dependent, NotHookable, Wrap, LibtorchLayer});
}

/// The pass's row of the table (passes/Passes.def lists it; scripts/passes_table.py reads its texts).
PassInfo fsdpUnitsPassInfo() {
  return {
      "fsdp-units", fsdpUnitsPass,
      "the forward of every module class of the project runs inside `accelerate::fsdp::unit`, so that under "
      "the fsdp strategy the wrap policy can make its instances units (`accelerate_target(... FSDP)` "
      "turns it on)",
      /*OnByDefault=*/false,
      /*WhenNothingFound=*/
      "no class derived from torch::nn::Module with a forward is defined in the files "
      "rewritten (the inputs, and the headers --headers names), so no module can "
      "become an FSDP unit; rewrite the file that defines the model's classes, or name "
      "its header with --headers",
      /*LeavesAlone=*/
      "forwards that return no tensors, `const` forwards, forwards written by a macro "
      "(warnings); forwards that already call `accelerate::fsdp::unit`, libtorch's "
      "composite modules (notes)",
      /*TurnedOnBy=*/"`--enable=fsdp-units`, `accelerate_target(... FSDP)`"};
}

} // namespace accelerate::passes
