#include "jinja/evaluator.h"

#include <algorithm>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "jinja/budget.h"
#include "jinja/filters.h"
#include "jinja/globals.h"
#include "jinja/operators.h"
#include "jinja/py_format.h"
#include "jinja/tests.h"

namespace kvferry::jinja {
namespace {

using namespace ast;  // NOLINT: the evaluator handles every node kind

// A scope: its variables and the scope names fall back to.
struct Frame {
  std::unordered_map<std::string, Value> vars;
  const Frame* parent = nullptr;
  std::shared_ptr<Frame> closure;  // a macro call's defining scope, kept alive for the call

  const Value* Find(const std::string& name) const {
    for (const Frame* f = this; f != nullptr; f = f->parent) {
      auto it = f->vars.find(name);
      if (it != f->vars.end()) return &it->second;
    }
    return nullptr;
  }
};
using FramePtr = std::shared_ptr<Frame>;

FramePtr ChildOf(const Frame* parent) {
  auto f = std::make_shared<Frame>();
  f->parent = parent;
  return f;
}

// A new scope under `parent`, with the names the scope analysis found local to it from the
// start defined as Undefined (they hide outer values until set).
FramePtr NewScope(const Frame* parent, const StartUndefined& start_undefined) {
  FramePtr f = ChildOf(parent);
  for (const std::string& name : start_undefined) {
    f->vars[name] = Value::Undefined("'" + name + "' is undefined");
  }
  return f;
}

enum class Jump { kNone, kBreak, kContinue };

class Evaluator {
 public:
  Evaluator(const SourceMap& map, const RenderOptions& options)
      : map_(map), options_(options), budget_(options.max_steps, options.max_output_bytes) {}

  ~Evaluator() {
    // Macros keep their defining scope alive and namespaces may hold themselves: clearing what
    // they hold breaks the reference cycles.
    for (auto& f : closure_frames_) f->vars.clear();
    for (auto& ns : namespaces_) ns->attrs.clear();
  }

  StatusOr<std::string> Run(const Body& body, const StartUndefined& root_undefined,
                            const Dict& context) {
    auto globals = std::make_shared<Frame>();
    InstallGlobals(globals.get());
    auto ctx = ChildOf(globals.get());
    for (const auto& [k, v] : context.entries()) ctx->vars[k] = v;
    auto root = NewScope(ctx.get(), root_undefined);
    closure_frames_.push_back(root);
    std::string out;
    out_ = &out;
    KVF_RETURN_IF_ERROR(ExecBody(body, root));
    return out;
  }

 private:
  // RAII nesting counter for the recursion.
  class Nest {
   public:
    explicit Nest(Evaluator* e) : e_(e) { ++e_->depth_; }
    ~Nest() { --e_->depth_; }
    Status Check(uint32_t offset) const {
      if (e_->depth_ <= e_->options_.max_depth) return Status::Ok();
      return e_->Locate(OutOfRangeError("template render nests deeper than " +
                                        std::to_string(e_->options_.max_depth) +
                                        " levels (runaway macro recursion?)"),
                        offset);
    }

   private:
    Evaluator* e_;
  };

  // Prefixes the location of the innermost failing node, once; raise_exception's message and
  // already located errors pass through.
  Status Locate(Status s, uint32_t offset) {
    if (s.ok() || raised_ || located_) return s;
    located_ = true;
    return Status(s.code(), map_.Location(offset) + ": " + std::string(s.message()));
  }
  template <typename T>
  StatusOr<T> Locate(StatusOr<T> s, uint32_t offset) {
    if (s.ok()) return s;
    return Locate(s.status(), offset);
  }

  Status Emit(std::string_view text) {
    out_->append(text);
    if (out_->size() > options_.max_output_bytes) {
      return OutOfRangeError("template output exceeds " +
                             std::to_string(options_.max_output_bytes) + " bytes");
    }
    return Status::Ok();
  }

  // ---- globals ----

  void InstallGlobals(Frame* g) {
    GlobalHooks hooks;
    hooks.budget = &budget_;
    hooks.now = options_.now;
    hooks.on_raise = [this] { raised_ = true; };
    hooks.on_namespace = [this](std::shared_ptr<Namespace> ns) {
      namespaces_.push_back(std::move(ns));
    };
    for (auto& [name, value] : MakeGlobals(hooks)) g->vars[name] = std::move(value);
  }

  // ---- statements ----

  Status ExecBody(const Body& body, const FramePtr& frame) {
    for (const auto& stmt : body) {
      KVF_RETURN_IF_ERROR(Exec(*stmt, frame));
      if (jump_ != Jump::kNone) return Status::Ok();
    }
    return Status::Ok();
  }

  Status Exec(const Stmt& s, const FramePtr& frame) {
    Nest nest(this);
    KVF_RETURN_IF_ERROR(nest.Check(s.offset));
    switch (s.kind) {
      case StmtKind::kData:
        return Emit(static_cast<const Data&>(s).text);
      case StmtKind::kOutput: {
        KVF_ASSIGN_OR_RETURN(Value v, Eval(*static_cast<const Output&>(s).expr, *frame));
        return Locate(Emit(ToPyStr(v)), s.offset);
      }
      case StmtKind::kIf:
        return ExecIf(static_cast<const If&>(s), frame);
      case StmtKind::kFor:
        return ExecFor(static_cast<const For&>(s), frame);
      case StmtKind::kSet:
        return ExecSet(static_cast<const Set&>(s), frame);
      case StmtKind::kSetBlock:
        return ExecSetBlock(static_cast<const SetBlock&>(s), frame);
      case StmtKind::kMacro:
        return ExecMacro(static_cast<const Macro&>(s), frame);
      case StmtKind::kCallBlock:
        return ExecCallBlock(static_cast<const CallBlock&>(s), frame);
      case StmtKind::kFilterBlock:
        return ExecFilterBlock(static_cast<const FilterBlock&>(s), frame);
      case StmtKind::kBreak:
        jump_ = Jump::kBreak;
        return Status::Ok();
      case StmtKind::kContinue:
        jump_ = Jump::kContinue;
        return Status::Ok();
      case StmtKind::kScope: {
        const auto& scope = static_cast<const Scope&>(s);
        return ExecBody(scope.body,
                        scope.new_scope ? NewScope(frame.get(), scope.body_undefined) : frame);
      }
    }
    return InternalError("unknown statement kind");
  }

  Status ExecIf(const If& s, const FramePtr& frame) {
    for (const auto& [cond, body] : s.branches) {
      KVF_ASSIGN_OR_RETURN(Value c, Eval(*cond, *frame));
      if (c.Truthy()) return ExecBody(body, frame);
    }
    return ExecBody(s.otherwise, frame);
  }

  // Binds loop or set targets: one name takes the value, several unpack it.
  Status Bind(const std::vector<std::string>& targets, const Value& value, Frame* frame,
              uint32_t offset) {
    if (targets.size() == 1) {
      frame->vars[targets[0]] = value;
      return Status::Ok();
    }
    auto items = Iterate(value, budget_);
    if (!items.ok()) {
      return Locate(
          InvalidArgumentError("cannot unpack non-iterable " + value.TypeName() + " object"),
          offset);
    }
    const size_t want = targets.size(), got = items->size();
    if (got != want) {
      const std::string msg =
          got > want ? "too many values to unpack (expected " + std::to_string(want) + ")"
                     : "not enough values to unpack (expected " + std::to_string(want) + ", got " +
                           std::to_string(got) + ")";
      return Locate(InvalidArgumentError(msg), offset);
    }
    for (size_t i = 0; i < want; ++i) frame->vars[targets[i]] = (*items)[i];
    return Status::Ok();
  }

  // The items a loop runs over, after its `if` filter.
  StatusOr<std::vector<Value>> LoopItems(const For& s, const FramePtr& frame) {
    KVF_ASSIGN_OR_RETURN(Value seq, Eval(*s.iter, *frame));
    KVF_ASSIGN_OR_RETURN(auto items, Locate(Iterate(seq, budget_), s.iter->offset));
    if (s.filter == nullptr) return items;
    std::vector<Value> kept;
    for (const Value& item : items) {
      auto scope = ChildOf(frame.get());
      KVF_RETURN_IF_ERROR(Bind(s.targets, item, scope.get(), s.offset));
      KVF_ASSIGN_OR_RETURN(Value keep, Eval(*s.filter, *scope));
      if (keep.Truthy()) kept.push_back(item);
    }
    return kept;
  }

  Value LoopObject(const std::vector<Value>& items, size_t i) {
    const int64_t n = static_cast<int64_t>(items.size());
    const int64_t i0 = static_cast<int64_t>(i);
    Dict loop;
    loop.Set("index0", Value::Int(i0));
    loop.Set("index", Value::Int(i0 + 1));
    loop.Set("revindex0", Value::Int(n - i0 - 1));
    loop.Set("revindex", Value::Int(n - i0));
    loop.Set("first", Value::Bool(i == 0));
    loop.Set("last", Value::Bool(i0 == n - 1));
    loop.Set("length", Value::Int(n));
    loop.Set("depth", Value::Int(1));
    loop.Set("depth0", Value::Int(0));
    loop.Set("previtem", i > 0 ? items[i - 1] : Value::Undefined("there is no previous item"));
    loop.Set("nextitem", i0 + 1 < n ? items[i + 1] : Value::Undefined("there is no next item"));
    loop.Set("cycle", Value::MakeCallable("loop.cycle", [i0](CallArgs args) -> StatusOr<Value> {
               if (args.args.empty()) return InvalidArgumentError("no items for cycling given");
               return args.args[i0 % static_cast<int64_t>(args.args.size())];
             }));
    return Value::MakeDict(std::move(loop));
  }

  Status ExecFor(const For& s, const FramePtr& frame) {
    KVF_ASSIGN_OR_RETURN(auto items, LoopItems(s, frame));
    if (items.empty()) return ExecBody(s.otherwise, NewScope(frame.get(), s.otherwise_undefined));
    for (size_t i = 0; i < items.size(); ++i) {
      KVF_RETURN_IF_ERROR(Locate(budget_.Charge(1), s.offset));
      auto scope = NewScope(frame.get(), s.body_undefined);
      KVF_RETURN_IF_ERROR(Bind(s.targets, items[i], scope.get(), s.offset));
      scope->vars["loop"] = LoopObject(items, i);
      KVF_RETURN_IF_ERROR(ExecBody(s.body, scope));
      const Jump jump = jump_;
      jump_ = Jump::kNone;
      if (jump == Jump::kBreak) break;
    }
    return Status::Ok();
  }

  Status AssignAttr(const std::string& name, const std::string& attr, Value value,
                    const Frame& frame, uint32_t offset) {
    const Value* ns = frame.Find(name);
    if (ns == nullptr || !ns->is_namespace()) {
      return Locate(InvalidArgumentError("cannot assign attribute on non-namespace object"),
                    offset);
    }
    ns->as_namespace().attrs.Set(attr, std::move(value));
    return Status::Ok();
  }

  Status ExecSet(const Set& s, const FramePtr& frame) {
    KVF_ASSIGN_OR_RETURN(Value v, Eval(*s.value, *frame));
    if (!s.attr.empty()) return AssignAttr(s.targets[0], s.attr, std::move(v), *frame, s.offset);
    return Bind(s.targets, v, frame.get(), s.offset);
  }

  // Renders `body` into a string of its own.
  StatusOr<std::string> Capture(const Body& body, const FramePtr& frame) {
    std::string buf;
    std::string* saved = out_;
    out_ = &buf;
    Status st = ExecBody(body, frame);
    out_ = saved;
    KVF_RETURN_IF_ERROR(st);
    return buf;
  }

  Status ExecSetBlock(const SetBlock& s, const FramePtr& frame) {
    KVF_ASSIGN_OR_RETURN(std::string text,
                         Capture(s.body, NewScope(frame.get(), s.body_undefined)));
    Value v = Value::Str(std::move(text));
    if (s.filter != nullptr) {
      KVF_ASSIGN_OR_RETURN(v, EvalFilter(*s.filter, &v, *frame));
    }
    if (!s.attr.empty()) return AssignAttr(s.target, s.attr, std::move(v), *frame, s.offset);
    frame->vars[s.target] = std::move(v);
    return Status::Ok();
  }

  Status ExecFilterBlock(const FilterBlock& s, const FramePtr& frame) {
    KVF_ASSIGN_OR_RETURN(std::string text,
                         Capture(s.body, NewScope(frame.get(), s.body_undefined)));
    Value v = Value::Str(std::move(text));
    KVF_ASSIGN_OR_RETURN(v, EvalFilter(*s.filter, &v, *frame));
    return Locate(Emit(ToPyStr(v)), s.offset);
  }

  // ---- macros ----

  // Calls a macro or a caller: binds arguments in a scope under `closure`, renders `body`.
  StatusOr<Value> Invoke(const std::string& name, const std::vector<Param>& params,
                         const Body& body, const StartUndefined& start_undefined,
                         const FramePtr& closure, CallArgs args, uint32_t offset) {
    Nest nest(this);
    KVF_RETURN_IF_ERROR(nest.Check(offset));
    KVF_RETURN_IF_ERROR(Locate(budget_.Charge(1), offset));
    auto scope = NewScope(closure.get(), start_undefined);
    scope->closure = closure;
    std::vector<Value> varargs;
    for (size_t i = 0; i < args.args.size(); ++i) {
      if (i < params.size()) {
        scope->vars[params[i].name] = std::move(args.args[i]);
      } else {
        varargs.push_back(std::move(args.args[i]));
      }
    }
    Dict kwargs;
    for (auto& kv : args.kwargs) {
      const std::string& k = kv.first;
      Value& v = kv.second;
      const bool is_param =
          std::any_of(params.begin(), params.end(), [&](const Param& p) { return p.name == k; });
      if (k == "caller") {
        scope->vars["caller"] = std::move(v);
      } else if (is_param) {
        if (scope->vars.count(k) != 0) {
          return Locate(InvalidArgumentError("macro '" + name +
                                             "' got multiple values for argument '" + k + "'"),
                        offset);
        }
        scope->vars[k] = std::move(v);
      } else {
        kwargs.Set(k, std::move(v));
      }
    }
    for (const Param& p : params) {  // defaults see the arguments before them
      if (scope->vars.count(p.name) != 0) continue;
      if (p.default_value == nullptr) {
        scope->vars[p.name] = Value::Undefined("parameter '" + p.name + "' was not provided");
        continue;
      }
      KVF_ASSIGN_OR_RETURN(Value d, Eval(*p.default_value, *scope));
      scope->vars[p.name] = std::move(d);
    }
    scope->vars["varargs"] = Value::MakeList(std::move(varargs), SeqKind::kTuple);
    scope->vars["kwargs"] = Value::MakeDict(std::move(kwargs));
    KVF_ASSIGN_OR_RETURN(std::string text, Capture(body, scope));
    jump_ = Jump::kNone;
    return Value::Str(std::move(text));
  }

  // What a macro or a call block's caller runs; points into the tree.
  struct MacroDef {
    std::string name;
    const std::vector<Param>* params;
    const Body* body;
    const StartUndefined* start_undefined;
    uint32_t offset;
  };

  // The macro as a callable. It sees `frame`, which closure_frames_ keeps alive for the whole
  // render; it holds it weakly, since the frame holds the macro.
  Value MakeMacro(MacroDef def, const FramePtr& frame) {
    closure_frames_.push_back(frame);
    std::weak_ptr<Frame> weak = frame;
    const std::string label = "macro '" + def.name + "'";
    return Value::MakeCallable(label, [this, def, weak](CallArgs args) -> StatusOr<Value> {
      FramePtr closure = weak.lock();
      if (closure == nullptr) return InternalError("macro '" + def.name + "' lost its scope");
      return Invoke(def.name, *def.params, *def.body, *def.start_undefined, closure,
                    std::move(args), def.offset);
    });
  }

  Status ExecMacro(const Macro& s, const FramePtr& frame) {
    frame->vars[s.name] =
        MakeMacro({s.name, &s.params, &s.body, &s.body_undefined, s.offset}, frame);
    return Status::Ok();
  }

  Status ExecCallBlock(const CallBlock& s, const FramePtr& frame) {
    const Value caller =
        MakeMacro({"caller", &s.caller_params, &s.body, &s.body_undefined, s.offset}, frame);
    KVF_ASSIGN_OR_RETURN(Value callee, Eval(*s.call->callee, *frame));
    KVF_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(s.call->args, *frame));
    args.kwargs.emplace_back("caller", caller);
    KVF_ASSIGN_OR_RETURN(Value result, CallValue(callee, std::move(args), s.call->offset));
    return Locate(Emit(ToPyStr(result)), s.offset);
  }

  // ---- expressions ----

  StatusOr<Value> Eval(const Expr& e, const Frame& frame) {
    Nest nest(this);
    KVF_RETURN_IF_ERROR(nest.Check(e.offset));
    return Locate(EvalNode(e, frame), e.offset);
  }

  StatusOr<Value> EvalNode(const Expr& e, const Frame& frame) {
    switch (e.kind) {
      case ExprKind::kLiteral:
        return static_cast<const Literal&>(e).value;
      case ExprKind::kName: {
        const std::string& name = static_cast<const Name&>(e).name;
        if (const Value* v = frame.Find(name)) return *v;
        return Value::Undefined("'" + name + "' is undefined");
      }
      case ExprKind::kList:
      case ExprKind::kTuple:
        return EvalSequence(static_cast<const Sequence&>(e), frame);
      case ExprKind::kDict:
        return EvalDict(static_cast<const DictLit&>(e), frame);
      case ExprKind::kGetAttr: {
        const auto& g = static_cast<const ast::GetAttr&>(e);
        KVF_ASSIGN_OR_RETURN(Value obj, Eval(*g.operand, frame));
        return jinja::GetAttr(obj, g.name, budget_);
      }
      case ExprKind::kGetItem: {
        const auto& g = static_cast<const ast::GetItem&>(e);
        KVF_ASSIGN_OR_RETURN(Value obj, Eval(*g.operand, frame));
        KVF_ASSIGN_OR_RETURN(Value key, Eval(*g.index, frame));
        return jinja::GetItem(obj, key, budget_);
      }
      case ExprKind::kSlice:
        return EvalSlice(static_cast<const Slice&>(e), frame);
      case ExprKind::kCall:
        return EvalCall(static_cast<const Call&>(e), frame);
      case ExprKind::kFilter:
        return EvalFilter(e, nullptr, frame);
      case ExprKind::kTest:
        return EvalTest(static_cast<const Apply&>(e), frame);
      case ExprKind::kUnary:
        return EvalUnary(static_cast<const Unary&>(e), frame);
      case ExprKind::kBinary:
        return EvalBinary(static_cast<const Binary&>(e), frame);
      case ExprKind::kCompare:
        return EvalCompare(static_cast<const Compare&>(e), frame);
      case ExprKind::kCondition:
        return EvalCondition(static_cast<const Condition&>(e), frame);
    }
    return InternalError("unknown expression kind");
  }

  StatusOr<Value> EvalSequence(const Sequence& e, const Frame& frame) {
    std::vector<Value> items;
    items.reserve(e.items.size());
    for (const auto& item : e.items) {
      KVF_ASSIGN_OR_RETURN(Value v, Eval(*item, frame));
      items.push_back(std::move(v));
    }
    return Value::MakeList(std::move(items),
                           e.kind == ExprKind::kTuple ? SeqKind::kTuple : SeqKind::kList);
  }

  StatusOr<Value> EvalDict(const DictLit& e, const Frame& frame) {
    Dict d;
    for (const auto& [key_expr, value_expr] : e.pairs) {
      KVF_ASSIGN_OR_RETURN(Value key, Eval(*key_expr, frame));
      if (!key.is_string()) {
        return Locate(UnimplementedError("dict keys other than strings are not supported"),
                      key_expr->offset);
      }
      KVF_ASSIGN_OR_RETURN(Value value, Eval(*value_expr, frame));
      d.Set(key.as_string(), std::move(value));
    }
    return Value::MakeDict(std::move(d));
  }

  StatusOr<Value> EvalSlice(const Slice& e, const Frame& frame) {
    KVF_ASSIGN_OR_RETURN(Value obj, Eval(*e.operand, frame));
    Value bounds[3] = {Value::None(), Value::None(), Value::None()};
    const Expr* exprs[3] = {e.start.get(), e.stop.get(), e.step.get()};
    for (int i = 0; i < 3; ++i) {
      if (exprs[i] == nullptr) continue;
      KVF_ASSIGN_OR_RETURN(bounds[i], Eval(*exprs[i], frame));
    }
    return GetSlice(obj, bounds[0], bounds[1], bounds[2], budget_);
  }

  StatusOr<CallArgs> EvalArgs(const Args& a, const Frame& frame) {
    CallArgs args;
    for (const auto& p : a.positional) {
      KVF_ASSIGN_OR_RETURN(Value v, Eval(*p, frame));
      args.args.push_back(std::move(v));
    }
    for (const auto& [k, p] : a.keyword) {
      KVF_ASSIGN_OR_RETURN(Value v, Eval(*p, frame));
      args.kwargs.emplace_back(k, std::move(v));
    }
    return args;
  }

  StatusOr<Value> CallValue(const Value& callee, CallArgs args, uint32_t offset) {
    if (callee.is_undefined()) return Locate(UndefinedError(callee), offset);
    if (!callee.is_callable()) {
      return Locate(InvalidArgumentError("'" + callee.TypeName() + "' object is not callable"),
                    offset);
    }
    return Locate(callee.as_callable().fn(std::move(args)), offset);
  }

  StatusOr<Value> EvalCall(const Call& e, const Frame& frame) {
    KVF_ASSIGN_OR_RETURN(Value callee, Eval(*e.callee, frame));
    KVF_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e.args, frame));
    return CallValue(callee, std::move(args), e.offset);
  }

  // A filter chain; `input` replaces the innermost missing operand (filter and set blocks).
  StatusOr<Value> EvalFilter(const Expr& e, const Value* input, const Frame& frame) {
    const auto& f = static_cast<const Apply&>(e);
    Value operand;
    if (f.operand == nullptr) {
      operand = *input;
    } else if (f.operand->kind == ExprKind::kFilter && input != nullptr) {
      KVF_ASSIGN_OR_RETURN(operand, EvalFilter(*f.operand, input, frame));
    } else {
      KVF_ASSIGN_OR_RETURN(operand, Eval(*f.operand, frame));
    }
    KVF_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(f.args, frame));
    return Locate(ApplyFilter(f.name, operand, args, budget_), f.offset);
  }

  StatusOr<Value> EvalTest(const Apply& t, const Frame& frame) {
    KVF_ASSIGN_OR_RETURN(Value operand, Eval(*t.operand, frame));
    KVF_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(t.args, frame));
    KVF_ASSIGN_OR_RETURN(bool pass, ApplyTest(t.name, operand, args, budget_));
    return Value::Bool(pass != t.negated);
  }

  StatusOr<Value> EvalUnary(const Unary& u, const Frame& frame) {
    KVF_ASSIGN_OR_RETURN(Value v, Eval(*u.operand, frame));
    if (u.op == "not") return Value::Bool(!v.Truthy());
    return UnaryArithmetic(u.op, v);
  }

  StatusOr<Value> EvalBinary(const Binary& b, const Frame& frame) {
    KVF_ASSIGN_OR_RETURN(Value lhs, Eval(*b.lhs, frame));
    if (b.op == "and" || b.op == "or") {  // Python returns the deciding operand
      if (lhs.Truthy() == (b.op == "or")) return lhs;
      return Eval(*b.rhs, frame);
    }
    KVF_ASSIGN_OR_RETURN(Value rhs, Eval(*b.rhs, frame));
    if (b.op == "~") {
      std::string s = ToPyStr(lhs);
      const std::string r = ToPyStr(rhs);
      KVF_RETURN_IF_ERROR(budget_.Build(s.size() + r.size()));
      return Value::Str(s + r);
    }
    return Arithmetic(b.op, lhs, rhs, budget_);
  }

  StatusOr<Value> EvalCompare(const Compare& c, const Frame& frame) {
    KVF_ASSIGN_OR_RETURN(Value lhs, Eval(*c.operand, frame));
    for (const auto& [op, expr] : c.ops) {
      KVF_ASSIGN_OR_RETURN(Value rhs, Eval(*expr, frame));
      KVF_ASSIGN_OR_RETURN(bool holds, Locate(CompareOp(op, lhs, rhs), expr->offset));
      if (!holds) return Value::Bool(false);
      lhs = std::move(rhs);
    }
    return Value::Bool(true);
  }

  StatusOr<Value> EvalCondition(const Condition& c, const Frame& frame) {
    KVF_ASSIGN_OR_RETURN(Value cond, Eval(*c.cond, frame));
    if (cond.Truthy()) return Eval(*c.then, frame);
    if (c.otherwise != nullptr) return Eval(*c.otherwise, frame);
    const std::string line = map_.Location(c.offset);
    return Value::Undefined("the inline if-expression on " + line.substr(0, line.find(',')) +
                            " evaluated to false and no else section was defined.");
  }

  const SourceMap& map_;
  const RenderOptions& options_;
  Budget budget_;
  std::string* out_ = nullptr;
  Jump jump_ = Jump::kNone;
  int depth_ = 0;
  bool raised_ = false;   // the error in flight came from raise_exception
  bool located_ = false;  // the error in flight already names its location
  std::vector<FramePtr> closure_frames_;
  std::vector<std::shared_ptr<Namespace>> namespaces_;
};

}  // namespace

StatusOr<std::string> Evaluate(const ast::Body& body, const ast::StartUndefined& root_undefined,
                               const SourceMap& map, const Dict& context,
                               const RenderOptions& options) {
  Evaluator evaluator(map, options);
  return evaluator.Run(body, root_undefined, context);
}

}  // namespace kvferry::jinja
