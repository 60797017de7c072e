#include "jinja/scopes.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace kvferry::jinja {
namespace {

using namespace ast;  // NOLINT: the analysis visits every node kind

// How a scope's variable gets its first value (jinja2/idtracking.py's VAR_LOAD_*).
enum class Origin { kParameter, kResolve, kAlias, kUndefined };

// One scope's symbols.
class Symbols {
 public:
  explicit Symbols(const Symbols* parent) : parent_(parent) {}

  bool Known(const std::string& name) const {
    for (const Symbols* s = this; s != nullptr; s = s->parent_) {
      if (s->refs_.count(name) != 0) return true;
    }
    return false;
  }

  void Load(const std::string& name) {
    if (!Known(name)) refs_[name] = Origin::kResolve;
  }

  void Store(const std::string& name) {
    stores_.insert(name);
    if (refs_.count(name) != 0) return;
    refs_[name] =
        (parent_ != nullptr && parent_->Known(name)) ? Origin::kAlias : Origin::kUndefined;
  }

  void Parameter(const std::string& name) {
    stores_.insert(name);
    refs_[name] = Origin::kParameter;
  }

  // After an if: what its three branches (if, elifs, else) did. A name set in some but not all
  // of them keeps the value from outside.
  void MergeBranches(const std::vector<Symbols>& branches) {
    std::map<std::string, size_t> set_in;
    for (const Symbols& b : branches) {
      for (const std::string& name : b.stores_) {
        if (stores_.count(name) == 0) ++set_in[name];
      }
    }
    for (const Symbols& b : branches) {
      for (const auto& [name, origin] : b.refs_) refs_[name] = origin;
      stores_.insert(b.stores_.begin(), b.stores_.end());
    }
    for (const auto& [name, count] : set_in) {
      if (count == branches.size()) continue;
      refs_[name] =
          (parent_ != nullptr && parent_->Known(name)) ? Origin::kAlias : Origin::kResolve;
    }
  }

  StartUndefined Undefined() const {
    StartUndefined names;
    for (const auto& [name, origin] : refs_) {
      if (origin == Origin::kUndefined) names.push_back(name);
    }
    return names;
  }

 private:
  const Symbols* parent_;
  std::map<std::string, Origin> refs_;
  std::set<std::string> stores_;
};

void Loads(const Expr* e, Symbols* s);

// Every name a call's or filter's arguments read.
void LoadsArgs(const Args& args, Symbols* s) {
  for (const auto& a : args.positional) Loads(a.get(), s);
  for (const auto& [k, a] : args.keyword) Loads(a.get(), s);
}

// Every name an operator (unary, binary, comparison, conditional expression) reads.
void LoadsOperator(const Expr* e, Symbols* s) {
  switch (e->kind) {
    case ExprKind::kUnary:
      Loads(static_cast<const Unary*>(e)->operand.get(), s);
      return;
    case ExprKind::kBinary: {
      const auto* b = static_cast<const Binary*>(e);
      Loads(b->lhs.get(), s);
      Loads(b->rhs.get(), s);
      return;
    }
    case ExprKind::kCompare: {
      const auto* c = static_cast<const Compare*>(e);
      Loads(c->operand.get(), s);
      for (const auto& [op, x] : c->ops) Loads(x.get(), s);
      return;
    }
    case ExprKind::kCondition: {
      const auto* c = static_cast<const Condition*>(e);
      Loads(c->cond.get(), s);
      Loads(c->then.get(), s);
      Loads(c->otherwise.get(), s);
      return;
    }
    default:
      return;
  }
}

// Every name an expression reads.
void Loads(const Expr* e, Symbols* s) {
  if (e == nullptr) return;
  switch (e->kind) {
    case ExprKind::kLiteral:
      return;
    case ExprKind::kName:
      s->Load(static_cast<const Name*>(e)->name);
      return;
    case ExprKind::kList:
    case ExprKind::kTuple:
      for (const auto& i : static_cast<const Sequence*>(e)->items) Loads(i.get(), s);
      return;
    case ExprKind::kDict:
      for (const auto& [k, v] : static_cast<const DictLit*>(e)->pairs) {
        Loads(k.get(), s);
        Loads(v.get(), s);
      }
      return;
    case ExprKind::kGetAttr:
      Loads(static_cast<const GetAttr*>(e)->operand.get(), s);
      return;
    case ExprKind::kGetItem: {
      const auto* g = static_cast<const GetItem*>(e);
      Loads(g->operand.get(), s);
      Loads(g->index.get(), s);
      return;
    }
    case ExprKind::kSlice: {
      const auto* x = static_cast<const Slice*>(e);
      for (const Expr* part : {x->operand.get(), x->start.get(), x->stop.get(), x->step.get()}) {
        Loads(part, s);
      }
      return;
    }
    case ExprKind::kCall: {
      const auto* c = static_cast<const Call*>(e);
      Loads(c->callee.get(), s);
      LoadsArgs(c->args, s);
      return;
    }
    case ExprKind::kFilter:
    case ExprKind::kTest: {
      const auto* a = static_cast<const Apply*>(e);
      Loads(a->operand.get(), s);
      LoadsArgs(a->args, s);
      return;
    }
    case ExprKind::kUnary:
    case ExprKind::kBinary:
    case ExprKind::kCompare:
    case ExprKind::kCondition:
      LoadsOperator(e, s);
      return;
  }
}

// Analyzes one scope: its own statements first, then (with the scope complete, as Jinja2's
// compiler has it by then) the scopes nested in it.
class ScopeAnalysis {
 public:
  explicit ScopeAnalysis(const Symbols* parent) : symbols_(parent) {}

  Symbols& symbols() { return symbols_; }

  void Statements(Body& body) { Statements(body, &symbols_); }

  // Runs the nested scopes' analyses; returns this scope's undefined-at-start names.
  StartUndefined Finish() {
    for (auto& nested : nested_) nested(&symbols_);
    return symbols_.Undefined();
  }

 private:
  using Nested = std::function<void(const Symbols* parent)>;

  // A nested scope: `setup` declares its parameters and reads, `body` its statements.
  void Nest(std::function<void(Symbols*)> setup, Body* body, StartUndefined* out) {
    nested_.push_back([setup, body, out](const Symbols* parent) {
      ScopeAnalysis inner(parent);
      if (setup) setup(&inner.symbols());
      if (body != nullptr) inner.Statements(*body);
      *out = inner.Finish();
    });
  }

  static void Params(const std::vector<Param>& params, Symbols* s) {
    for (const Param& p : params) s->Parameter(p.name);
    for (const Param& p : params) Loads(p.default_value.get(), s);
  }

  void Statements(Body& body, Symbols* s) {
    for (auto& stmt : body) Statement(*stmt, s);
  }

  // One test and its body as Jinja2 sees an if: three branches (body, elifs, else), of which
  // an elif or an if without else leaves two empty.
  void Branch(std::pair<ExprPtr, Body>& branch, Symbols* s) {
    Loads(branch.first.get(), s);
    std::vector<Symbols> branches(3, *s);
    Statements(branch.second, &branches[0]);
    s->MergeBranches(branches);
  }

  // if/elif.../else: Jinja2 keeps each elif as an if of its own inside the elif branch, and
  // the else as the first if's third branch.
  void IfStatement(If& node, Symbols* s) {
    auto& [test, body] = node.branches[0];
    Loads(test.get(), s);
    std::vector<Symbols> branches(3, *s);
    Statements(body, &branches[0]);
    for (size_t i = 1; i < node.branches.size(); ++i) Branch(node.branches[i], &branches[1]);
    Statements(node.otherwise, &branches[2]);
    s->MergeBranches(branches);
  }

  // The loop's targets and `loop` are the body's parameters; the else branch is a scope of its
  // own.
  void ForStatement(For& f, Symbols* s) {
    Loads(f.iter.get(), s);
    const std::vector<std::string> targets = f.targets;
    Nest(
        [targets](Symbols* inner) {
          for (const auto& t : targets) inner->Parameter(t);
          inner->Parameter("loop");
        },
        &f.body, &f.body_undefined);
    Nest(nullptr, &f.otherwise, &f.otherwise_undefined);
  }

  // `set ns.attr = ...` reads `ns`; `set a, b = ...` stores its targets.
  void SetStatement(Set& set, Symbols* s) {
    Loads(set.value.get(), s);
    if (!set.attr.empty()) {
      s->Load(set.targets[0]);
    } else {
      for (const auto& t : set.targets) s->Store(t);
    }
  }

  void SetBlockStatement(SetBlock& set, Symbols* s) {
    if (!set.attr.empty()) {
      s->Load(set.target);
    } else {
      s->Store(set.target);
    }
    Nest(nullptr, &set.body, &set.body_undefined);
  }

  void Statement(Stmt& stmt, Symbols* s) {
    switch (stmt.kind) {
      case StmtKind::kData:
      case StmtKind::kBreak:
      case StmtKind::kContinue:
        return;
      case StmtKind::kOutput:
        Loads(static_cast<Output&>(stmt).expr.get(), s);
        return;
      case StmtKind::kIf:
        IfStatement(static_cast<If&>(stmt), s);
        return;
      case StmtKind::kFor:
        ForStatement(static_cast<For&>(stmt), s);
        return;
      case StmtKind::kSet:
        SetStatement(static_cast<Set&>(stmt), s);
        return;
      case StmtKind::kSetBlock:
        SetBlockStatement(static_cast<SetBlock&>(stmt), s);
        return;
      case StmtKind::kMacro: {
        auto& m = static_cast<Macro&>(stmt);
        s->Store(m.name);
        const auto* params = &m.params;
        Nest([params](Symbols* inner) { Params(*params, inner); }, &m.body, &m.body_undefined);
        return;
      }
      case StmtKind::kCallBlock: {
        auto& c = static_cast<CallBlock&>(stmt);
        Loads(c.call.get(), s);
        const auto* params = &c.caller_params;
        Nest([params](Symbols* inner) { Params(*params, inner); }, &c.body, &c.body_undefined);
        return;
      }
      case StmtKind::kFilterBlock: {
        auto& f = static_cast<FilterBlock&>(stmt);
        Loads(f.filter.get(), s);
        const Expr* filter = f.filter.get();
        Nest([filter](Symbols* inner) { Loads(filter, inner); }, &f.body, &f.body_undefined);
        return;
      }
      case StmtKind::kScope: {
        auto& sc = static_cast<ast::Scope&>(stmt);
        if (sc.new_scope) {
          Nest(nullptr, &sc.body, &sc.body_undefined);
        } else {
          Statements(sc.body, s);
        }
        return;
      }
    }
  }

  Symbols symbols_;
  std::vector<Nested> nested_;
};

}  // namespace

StartUndefined AnalyzeScopes(Body& body) {
  ScopeAnalysis root(nullptr);
  root.Statements(body);
  return root.Finish();
}

}  // namespace kvferry::jinja
