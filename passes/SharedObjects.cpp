// passes/SharedObjects.cpp: the code that shares objects with a function or a class (see SharedObjects.h).
#include "passes/SharedObjects.h"

#include "passes/TrainingCode.h"

#include "clang/AST/ASTContext.h"
#include "clang/AST/DeclCXX.h"
#include "clang/AST/DeclTemplate.h"
#include "clang/AST/ExprCXX.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "clang/Basic/SourceManager.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <cstdint>
#include <deque>
#include <optional>

namespace accelerate::passes {
namespace {

using namespace clang::ast_matchers;

/// A node of the flow: a function whole, a class whole, a statement at the top of a function body, a
/// variable, a function's returned object. Statements and variables are keyed by where they are written, so
/// that a template's instantiations and its pattern are the same nodes.
enum class Kind : uint64_t { Function, Class, Statement, Variable, Returned };
/// The kind in the low 3 bits, a declaration's address (8-aligned) or a location above them.
using Key = uint64_t;
Key key(Kind K, const void* Declaration) {
  return reinterpret_cast<uintptr_t>(Declaration) | uint64_t(K);
}
Key key(Kind K, clang::SourceLocation Loc) {
  return (uint64_t(Loc.getRawEncoding()) + 1) << 3 | uint64_t(K);
}

const clang::FunctionDecl& patternOf(const clang::FunctionDecl& Function) {
  const clang::FunctionDecl* Pattern = Function.getTemplateInstantiationPattern();
  return *(Pattern ? Pattern : &Function)->getCanonicalDecl();
}

const clang::CXXRecordDecl& patternOf(const clang::CXXRecordDecl& Class) {
  const clang::CXXRecordDecl* Pattern = Class.getTemplateInstantiationPattern();
  return *(Pattern ? Pattern : &Class)->getCanonicalDecl();
}

Key functionKey(const clang::FunctionDecl& Function) {
  return key(Kind::Function, &patternOf(Function));
}
Key returnedKey(const clang::FunctionDecl& Function) {
  return key(Kind::Returned, &patternOf(Function));
}
Key classKey(const clang::CXXRecordDecl& Class) {
  return key(Kind::Class, &patternOf(Class));
}
Key variableKey(const clang::VarDecl& Variable) {
  if (Variable.hasGlobalStorage() && !Variable.isStaticLocal())
    return key(Kind::Variable, Variable.getCanonicalDecl());
  return key(Kind::Variable, Variable.getLocation());
}
Key statementKey(const clang::Stmt& S) {
  return key(Kind::Statement, S.getBeginLoc());
}

/// A value of this type can hand over an object: anything but a number, an enumeration, a character pointer
/// or array, a string, a device and tensor options (places, not objects: the device pass rewrites them
/// across the file).
bool holdsObjects(clang::QualType Type) {
  if (Type.isNull())
    return true;
  Type = Type.getNonReferenceType().getCanonicalType();
  if (Type->isArithmeticType() || Type->isEnumeralType() || Type->isNullPtrType())
    return false;
  if ((Type->isPointerType() || Type->isArrayType()) &&
      Type->getPointeeOrArrayElementType()->isAnyCharacterType())
    return false;
  if (const clang::CXXRecordDecl* Record = Type->getAsCXXRecordDecl()) {
    const std::string Name = Record->getQualifiedNameAsString();
    if (Name == "c10::Device" || Name == "c10::TensorOptions")
      return false;
    if (Record->isInStdNamespace() && Record->getDeclName().isIdentifier() &&
        (Record->getName() == "basic_string" || Record->getName() == "basic_string_view"))
      return false;
  }
  return true;
}

class Flow {
public:
  explicit Flow(clang::ASTContext& Context) : Context(Context), SM(Context.getSourceManager()) {}

  bool written(const clang::Decl& D) const { return isInRewrittenFile(SM, D.getLocation()); }

  void link(Key A, Key B) {
    if (A == B)
      return;
    Edges[A].push_back(B);
    Edges[B].push_back(A);
  }
  void implies(Key Whole, Key Part) { Edges[Whole].push_back(Part); }

  /// The classes of the rewritten files a type names: itself, what it points to, its template arguments
  /// (`std::shared_ptr<Net>`, `std::vector<Trainer>`) and its bases' (a `TORCH_MODULE` holder).
  void classesIn(clang::QualType Type, llvm::SmallPtrSetImpl<const clang::CXXRecordDecl*>& Out,
                 int Depth = 0) const {
    if (Type.isNull() || Depth > 4)
      return;
    Type = Type.getNonReferenceType().getCanonicalType();
    while (Type->isPointerType() || Type->isArrayType())
      Type = Type->getPointeeOrArrayElementType()->getCanonicalTypeInternal();
    const clang::CXXRecordDecl* Record = Type->getAsCXXRecordDecl();
    if (!Record)
      return;
    if (written(*Record) && !Record->isLambda())
      Out.insert(Record);
    if (const auto* Specialization = llvm::dyn_cast<clang::ClassTemplateSpecializationDecl>(Record))
      for (const clang::TemplateArgument& Argument : Specialization->getTemplateArgs().asArray())
        if (Argument.getKind() == clang::TemplateArgument::Type)
          classesIn(Argument.getAsType(), Out, Depth + 1);
    if (Record->hasDefinition())
      for (const clang::CXXBaseSpecifier& Base : Record->getDefinition()->bases())
        classesIn(Base.getType(), Out, Depth + 1);
  }

  void linkClassesIn(Key Piece, clang::QualType Type) {
    llvm::SmallPtrSet<const clang::CXXRecordDecl*, 4> Classes;
    classesIn(Type, Classes);
    for (const clang::CXXRecordDecl* Class : Classes)
      link(Piece, addClass(*Class));
  }

  Key addClass(const clang::CXXRecordDecl& Class) {
    Key K = classKey(Class);
    if (const clang::CXXRecordDecl* Definition = patternOf(Class).getDefinition())
      Pieces.try_emplace(K,
                         SharingPiece{Definition->getSourceRange(),
                                      "class '" + Definition->getNameAsString() + "'", clang::SourceRange()});
    return K;
  }

  void addFunction(const clang::FunctionDecl& Function) {
    const clang::FunctionDecl& Pattern = patternOf(Function);
    const clang::FunctionDecl* Definition = nullptr;
    if (!Pattern.hasBody(Definition))
      Definition = &Function;
    const std::string Name = "function '" + Definition->getQualifiedNameAsString() + "'";
    const Key Whole = functionKey(Function);
    Pieces.try_emplace(Whole, SharingPiece{Definition->getSourceRange(), Name, clang::SourceRange()});
    std::optional<Key> Class;
    if (const auto* Method = llvm::dyn_cast<clang::CXXMethodDecl>(&Function)) {
      Class = addClass(*Method->getParent());
      link(Whole, *Class);
    }
    for (const clang::ParmVarDecl* Parameter : Function.parameters()) {
      const Key Variable = variableKey(*Parameter);
      Pieces.try_emplace(Variable, SharingPiece{Parameter->getSourceRange(), Name, clang::SourceRange()});
      implies(Whole, Variable);
      linkClassesIn(Variable, Parameter->getType());
    }
    auto AddPiece = [&](const clang::Stmt& S) {
      const Key Piece = statementKey(S);
      Pieces.try_emplace(Piece, SharingPiece{S.getSourceRange(), Name, Definition->getSourceRange()});
      implies(Whole, Piece);
      if (Class)
        link(Piece, *Class); // A method's statements share its class's members.
      flowIn(Piece, S, Function);
    };
    if (const auto* Constructor = llvm::dyn_cast<clang::CXXConstructorDecl>(&Function)) {
      const Key Inits = key(Kind::Statement, Constructor->getLocation());
      Pieces.try_emplace(Inits, SharingPiece{Constructor->getSourceRange(), Name, clang::SourceRange()});
      implies(Whole, Inits);
      if (Class)
        link(Inits, *Class);
      for (const clang::CXXCtorInitializer* Initializer : Constructor->inits())
        if (Initializer->getInit() && Initializer->isWritten())
          flowIn(Inits, *Initializer->getInit(), Function);
    }
    const clang::Stmt* Body = Function.getBody();
    if (const auto* Block = llvm::dyn_cast_or_null<clang::CompoundStmt>(Body)) {
      for (const clang::Stmt* S : Block->body())
        AddPiece(*S);
    } else if (Body) {
      AddPiece(*Body);
    }
  }

  /// What a statement at the top of `Function`'s body shares: the variables it names, the callees it hands
  /// objects to, the classes whose objects it makes or declares.
  void flowIn(Key Piece, const clang::Stmt& S, const clang::FunctionDecl& Function) {
    auto Call = callExpr(callee(functionDecl().bind("callee"))).bind("call");
    auto Construct = cxxConstructExpr().bind("construct");
    auto NamedFunction = declRefExpr(to(functionDecl().bind("named"))).bind("reference");
    auto Variable = declRefExpr(to(varDecl().bind("variable")));
    auto Typed = expr(anyOf(cxxNewExpr(), callExpr())).bind("typed");
    auto Declared = varDecl().bind("declared");
    auto Return = returnStmt().bind("return");
    llvm::SmallPtrSet<const clang::Expr*, 16> Callees;
    std::vector<std::pair<const clang::DeclRefExpr*, const clang::FunctionDecl*>> Named;
    auto Anywhere = [](auto Matcher) { return stmt(eachOf(Matcher, forEachDescendant(Matcher))); };
    for (const BoundNodes& Found :
         match(traverse(clang::TK_AsIs,
                        stmt(eachOf(Anywhere(Call), Anywhere(Construct), Anywhere(NamedFunction),
                                    Anywhere(Variable), Anywhere(Typed), forEachDescendant(Declared),
                                    Anywhere(Return)))),
               S, Context)) {
      if (const auto* TheCall = Found.getNodeAs<clang::CallExpr>("call")) {
        const auto* Callee = Found.getNodeAs<clang::FunctionDecl>("callee");
        Callees.insert(TheCall->getCallee()->IgnoreParenImpCasts());
        const clang::FunctionDecl* Definition = nullptr;
        if (!patternOf(*Callee).hasBody(Definition) || !written(*Definition))
          continue;
        const auto* Method = llvm::dyn_cast<clang::CXXMethodDecl>(Callee);
        if (Method && !Method->isStatic() && !Method->getParent()->isLambda())
          link(Piece, addClass(*Method->getParent()));
        // The arguments flow into the parameters (an operator method's first argument is its object).
        const unsigned Shift = firstParameterArgument(*TheCall);
        for (unsigned I = Shift; I < TheCall->getNumArgs(); ++I) {
          const clang::Expr* Argument = TheCall->getArg(I);
          if (llvm::isa<clang::CXXDefaultArgExpr>(Argument) || !holdsObjects(Argument->getType()))
            continue;
          if (I - Shift < Callee->getNumParams())
            link(Piece, variableKey(*Callee->getParamDecl(I - Shift)));
          else
            link(Piece, functionKey(*Callee)); // Into a variadic tail: the callee whole.
        }
        if (holdsObjects(TheCall->getType()) && !TheCall->getType()->isVoidType())
          link(Piece, returnedKey(*Callee));
      } else if (const auto* Construction = Found.getNodeAs<clang::CXXConstructExpr>("construct")) {
        linkClassesIn(Piece, Construction->getType());
        if (const clang::CXXConstructorDecl* Constructor = Construction->getConstructor();
            Constructor && written(*Constructor))
          for (unsigned I = 0; I < Construction->getNumArgs() && I < Constructor->getNumParams(); ++I)
            if (!llvm::isa<clang::CXXDefaultArgExpr>(Construction->getArg(I)) &&
                holdsObjects(Construction->getArg(I)->getType()))
              link(Piece, variableKey(*Constructor->getParamDecl(I)));
      } else if (const auto* Reference = Found.getNodeAs<clang::DeclRefExpr>("reference")) {
        Named.push_back({Reference, Found.getNodeAs<clang::FunctionDecl>("named")});
      } else if (const auto* Read = Found.getNodeAs<clang::VarDecl>("variable")) {
        if (!holdsObjects(Read->getType()))
          continue;
        const bool Global = Read->hasGlobalStorage() && !Read->isStaticLocal();
        if (Global && !written(*Read))
          continue;
        const Key K = variableKey(*Read);
        Pieces.try_emplace(
            K, SharingPiece{Read->getSourceRange(),
                            Global ? "variable '" + Read->getNameAsString() + "'"
                                   : "function '" + patternOf(Function).getQualifiedNameAsString() + "'",
                            clang::SourceRange()});
        link(Piece, K);
      } else if (const auto* E = Found.getNodeAs<clang::Expr>("typed")) {
        linkClassesIn(Piece, E->getType());
        if (const auto* New = llvm::dyn_cast<clang::CXXNewExpr>(E))
          linkClassesIn(Piece, New->getAllocatedType());
      } else if (const auto* Local = Found.getNodeAs<clang::VarDecl>("declared")) {
        linkClassesIn(Piece, Local->getType());
        if (holdsObjects(Local->getType()))
          link(Piece, variableKey(*Local));
      } else if (const auto* Returned = Found.getNodeAs<clang::ReturnStmt>("return")) {
        if (Returned->getRetValue() && holdsObjects(Returned->getRetValue()->getType()))
          link(Piece, returnedKey(Function));
      }
    }
    // A function named but not called here (a callback handed on) shares whatever it is later given.
    for (const auto& [Reference, Callback] : Named) {
      const clang::FunctionDecl* Definition = nullptr;
      if (!Callees.contains(Reference) && patternOf(*Callback).hasBody(Definition) && written(*Definition))
        link(Piece, functionKey(*Callback));
    }
  }

  std::vector<SharingPiece> reachedFrom(Key Start) {
    std::vector<SharingPiece> Out;
    llvm::DenseSet<Key> Seen{Start};
    std::deque<Key> Next{Start};
    while (!Next.empty()) {
      Key K = Next.front();
      Next.pop_front();
      if (auto Piece = Pieces.find(K); Piece != Pieces.end())
        Out.push_back(Piece->second);
      for (Key Other : Edges.lookup(K))
        if (Seen.insert(Other).second)
          Next.push_back(Other);
    }
    return Out;
  }

private:
  clang::ASTContext& Context;
  const clang::SourceManager& SM;
  llvm::DenseMap<Key, llvm::SmallVector<Key, 4>> Edges;
  llvm::DenseMap<Key, SharingPiece> Pieces;
};

} // namespace

std::vector<SharingPiece> codeSharingObjectsWith(const clang::Decl& Start, clang::ASTContext& Context) {
  Flow Code(Context);
  auto Defined = functionDecl(isDefinition()).bind("function");
  for (clang::Decl* TopLevel : Context.getTranslationUnitDecl()->decls()) {
    if (!Code.written(*TopLevel))
      continue;
    for (const BoundNodes& Found :
         match(traverse(clang::TK_AsIs, decl(eachOf(Defined, forEachDescendant(Defined)))), *TopLevel,
               Context)) {
      const auto* Function = Found.getNodeAs<clang::FunctionDecl>("function");
      const auto* Method = llvm::dyn_cast<clang::CXXMethodDecl>(Function);
      if (Method && Method->getParent()->isLambda())
        continue; // Its body is part of the statement it is written in.
      Code.addFunction(*Function);
    }
  }
  if (const auto* Class = llvm::dyn_cast<clang::CXXRecordDecl>(&Start)) {
    const Key Whole = Code.addClass(*Class);
    // A class whole: its methods whole, those defined outside it included.
    for (const clang::CXXMethodDecl* Method :
         patternOf(*Class).getDefinition() ? patternOf(*Class).getDefinition()->methods() : Class->methods())
      Code.implies(Whole, functionKey(*Method));
    return Code.reachedFrom(Whole);
  }
  if (const auto* Function = llvm::dyn_cast<clang::FunctionDecl>(&Start))
    return Code.reachedFrom(functionKey(*Function));
  return {};
}

} // namespace accelerate::passes
