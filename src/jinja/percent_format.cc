#include "jinja/percent_format.h"

#include <cmath>
#include <cstdio>
#include <vector>

#include "jinja/py_format.h"
#include "jinja/str_ops.h"
#include "jinja/utf8.h"

namespace kvferry::jinja {
namespace {

struct Spec {
  std::string flags;
  int64_t width = -1;
  int64_t precision = -1;
  char type = 0;
};

class Formatter {
 public:
  Formatter(const Value& args, bool escape, Budget& budget) : budget_(budget), escape_(escape) {
    if (args.is_list() && args.seq_kind() == SeqKind::kTuple) {
      args_ = args.items();
    } else {
      args_.push_back(args);
      // Python takes an object with __getitem__ (a list, a dict, Jinja2's Undefined) for a
      // mapping: a format that uses no argument then leaves it unconverted without complaint.
      mapping_ = (args.is_list() && args.seq_kind() == SeqKind::kList) || args.is_dict() ||
                 args.is_undefined();
    }
  }

  StatusOr<std::string> Run(const std::string& fmt) {
    std::string out;
    for (size_t i = 0; i < fmt.size(); ++i) {
      if (fmt[i] != '%') {
        out.push_back(fmt[i]);
        continue;
      }
      Spec spec;
      KVF_RETURN_IF_ERROR(ParseSpec(fmt, &i, &spec));
      if (spec.type == '%') {
        out.push_back('%');
        continue;
      }
      KVF_ASSIGN_OR_RETURN(Value arg, NextArg());
      KVF_ASSIGN_OR_RETURN(std::string piece, Convert(spec, arg));
      out += piece;
      KVF_RETURN_IF_ERROR(budget_.CheckSize(out.size()));
    }
    if (next_ < args_.size() && !(mapping_ && next_ == 0)) {
      return InvalidArgumentError("not all arguments converted during string formatting");
    }
    return out;
  }

 private:
  StatusOr<Value> NextArg() {
    if (next_ >= args_.size())
      return InvalidArgumentError("not enough arguments for format string");
    return args_[next_++];
  }

  StatusOr<int64_t> StarOrNumber(const std::string& fmt, size_t* i) {
    if (fmt[*i] == '*') {
      ++*i;
      KVF_ASSIGN_OR_RETURN(Value v, NextArg());
      if (!v.is_int() && !v.is_bool()) return InvalidArgumentError("* wants int");
      return v.as_integer();
    }
    int64_t n = 0;
    while (*i < fmt.size() && fmt[*i] >= '0' && fmt[*i] <= '9') {
      n = n * 10 + (fmt[(*i)++] - '0');
      if (n > static_cast<int64_t>(budget_.max_bytes())) return budget_.CheckSize(n);
    }
    return n;
  }

  // Parses the spec after the '%' at *i; leaves *i on the conversion character.
  Status ParseSpec(const std::string& fmt, size_t* i, Spec* spec) {
    ++*i;
    if (*i < fmt.size() && fmt[*i] == '(') {
      return UnimplementedError("%(name) mapping keys are not supported");
    }
    while (*i < fmt.size() && std::string_view("#0- +").find(fmt[*i]) != std::string_view::npos) {
      spec->flags.push_back(fmt[(*i)++]);
    }
    if (*i < fmt.size() && (fmt[*i] == '*' || (fmt[*i] >= '0' && fmt[*i] <= '9'))) {
      KVF_ASSIGN_OR_RETURN(spec->width, StarOrNumber(fmt, i));
    }
    if (*i < fmt.size() && fmt[*i] == '.') {
      ++*i;
      spec->precision = 0;
      if (*i < fmt.size()) {
        KVF_ASSIGN_OR_RETURN(spec->precision, StarOrNumber(fmt, i));
      }
    }
    while (*i < fmt.size() && (fmt[*i] == 'h' || fmt[*i] == 'l' || fmt[*i] == 'L')) ++*i;
    if (*i >= fmt.size()) return InvalidArgumentError("incomplete format");
    spec->type = fmt[*i];
    if (std::string_view("diouxXeEfFgGcrsa%").find(spec->type) == std::string_view::npos) {
      return InvalidArgumentError(std::string("unsupported format character '") + spec->type + "'");
    }
    return Status::Ok();
  }

  StatusOr<std::string> Pad(const Spec& spec, std::string body) {
    const int64_t len = static_cast<int64_t>(utf8::Length(body));
    if (spec.width <= len) return body;
    KVF_RETURN_IF_ERROR(budget_.Build(body.size() + (spec.width - len)));
    const std::string fill(spec.width - len, ' ');
    return spec.flags.find('-') != std::string::npos ? body + fill : fill + body;
  }

  StatusOr<std::string> Printf(const Spec& spec, char type, const char* length, auto value) {
    if (spec.width > 4096 || spec.precision > 4096) {
      return UnimplementedError("numeric width or precision above 4096");
    }
    std::string f = "%" + spec.flags;
    if (spec.width >= 0) f += std::to_string(spec.width);
    if (spec.precision >= 0) f += "." + std::to_string(spec.precision);
    f += length;
    f.push_back(type);
    char buf[8500];
    std::snprintf(buf, sizeof(buf), f.c_str(), value);
    return std::string(buf);
  }

  StatusOr<std::string> Convert(const Spec& spec, const Value& arg) {
    const char t = spec.type;
    if (t == 's' || t == 'r' || t == 'a') {
      std::string s = t == 's' ? ToPyStr(arg) : PyRepr(arg);
      if (escape_ && !(t == 's' && arg.is_markup())) s = HtmlEscape(s);
      if (spec.precision >= 0) {
        auto cps = utf8::Decode(s);
        if (static_cast<int64_t>(cps.size()) > spec.precision) cps.resize(spec.precision);
        s = utf8::Encode(cps);
      }
      return Pad(spec, std::move(s));
    }
    if (t == 'c') {
      if (arg.is_string() && utf8::Length(arg.as_string()) == 1) return Pad(spec, arg.as_string());
      if (!arg.is_int() || arg.as_int() < 0 || arg.as_int() > 0x10FFFF) {
        return InvalidArgumentError("%c requires int or char");
      }
      std::string c;
      utf8::Append(static_cast<char32_t>(arg.as_int()), &c);
      return Pad(spec, std::move(c));
    }
    if (!arg.is_number()) {
      return InvalidArgumentError(std::string("%") + t +
                                  " format: a real number is required, not " + arg.TypeName());
    }
    if (t == 'e' || t == 'E' || t == 'f' || t == 'F' || t == 'g' || t == 'G') {
      return Printf(spec, t, "", arg.as_double());
    }
    if ((t == 'o' || t == 'x' || t == 'X') && arg.is_float()) {
      return InvalidArgumentError(std::string("%") + t +
                                  " format: an integer is required, not float");
    }
    if (arg.is_float() && !std::isfinite(arg.as_float())) {
      return InvalidArgumentError("cannot convert float infinity or NaN to integer");
    }
    const double d = arg.is_float() ? std::trunc(arg.as_float()) : 0;
    if (arg.is_float() && std::fabs(d) >= 9.2e18) return OutOfRangeError("integer overflow");
    const long long v = arg.is_float() ? static_cast<long long>(d) : arg.as_integer();
    const char ct = (t == 'i' || t == 'u') ? 'd' : t;
    if (ct == 'o' && spec.flags.find('#') != std::string::npos) {  // Python writes 0o17
      Spec plain = spec;
      plain.flags.erase(plain.flags.find('#'), 1);
      KVF_ASSIGN_OR_RETURN(std::string digits, Printf(plain, 'o', "ll", v < 0 ? -v : v));
      return std::string(v < 0 ? "-0o" : "0o") + digits;
    }
    if (ct != 'd' && v < 0) {  // Python prints -0xff, C would print the two's complement
      KVF_ASSIGN_OR_RETURN(std::string digits, Printf(spec, ct, "ll", -v));
      return "-" + digits;
    }
    return Printf(spec, ct, "ll", v);
  }

  Budget& budget_;
  const bool escape_;
  std::vector<Value> args_;
  bool mapping_ = false;
  size_t next_ = 0;
};

}  // namespace

StatusOr<std::string> PercentFormat(const std::string& fmt, const Value& args, bool escape,
                                    Budget& budget) {
  KVF_RETURN_IF_ERROR(budget.ChargeBytes(fmt.size()));
  return Formatter(args, escape, budget).Run(fmt);
}

}  // namespace kvferry::jinja
