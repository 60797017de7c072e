#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <fmt/format.h>
#include <pcre2.h>

#include "kvferry/common/unique_handle.h"
#include "kvferry/common/utf8.h"

namespace kvferry::tokenizer {
namespace {

// One match attempt may take this much backtracking work / heap (KiB) before it is abandoned.
// Patterns of real tokenizers use a tiny fraction of it even on 100 KB inputs.
constexpr uint32_t kMatchLimit = 10'000'000;
constexpr uint32_t kHeapLimitKib = 64 * 1024;
constexpr size_t kJitStackMax = 1 << 20;

std::string ErrorText(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof(buf)) < 0) return fmt::format("error {}", code);
  return std::string(reinterpret_cast<const char*>(buf));
}

// Per-thread matching state: a match context carrying the limits and this thread's JIT stack,
// and match data for the whole-match offsets only.
struct Scratch {
  UniqueHandle<pcre2_match_context, pcre2_match_context_free> context;
  UniqueHandle<pcre2_jit_stack, pcre2_jit_stack_free> jit_stack;
  UniqueHandle<pcre2_match_data, pcre2_match_data_free> match_data;

  Scratch()
      : context(pcre2_match_context_create(nullptr)),
        jit_stack(pcre2_jit_stack_create(32 * 1024, kJitStackMax, nullptr)),
        match_data(pcre2_match_data_create(1, nullptr)) {
    pcre2_set_match_limit(context.get(), kMatchLimit);
    pcre2_set_heap_limit(context.get(), kHeapLimitKib);
    if (jit_stack) pcre2_jit_stack_assign(context.get(), nullptr, jit_stack.get());
  }
};

Scratch& ThreadScratch() {
  thread_local Scratch scratch;
  return scratch;
}

StatusOr<std::shared_ptr<pcre2_code>> CompileCode(std::string_view pattern, uint32_t options) {
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   options, &error, &error_offset, nullptr);
  if (code == nullptr) {
    return InvalidArgumentError(
        fmt::format("bad regex \"{}\" at offset {}: {}", pattern, error_offset, ErrorText(error)));
  }
  // JIT is an optimization: where it is unavailable pcre2_match interprets the pattern.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return std::shared_ptr<pcre2_code>(code, pcre2_code_free);
}

}  // namespace

StatusOr<Regex> Regex::Compile(std::string_view pattern) {
  KVF_ASSIGN_OR_RETURN(auto code, CompileCode(pattern, PCRE2_UTF | PCRE2_UCP));
  return Regex(std::move(code), std::string(pattern));
}

StatusOr<Regex> Regex::Literal(std::string_view text) {
  if (text.empty()) return Regex(nullptr, std::string());
  if (!IsValidUtf8(text)) return InvalidArgumentError("literal pattern is not valid UTF-8");
  // PCRE2_UCP is not allowed with PCRE2_LITERAL, and a literal needs no character classes.
  KVF_ASSIGN_OR_RETURN(auto code, CompileCode(text, PCRE2_UTF | PCRE2_LITERAL));
  return Regex(std::move(code), std::string(text));
}

Status Regex::ForEachMatch(std::string_view text,
                           const std::function<void(size_t, size_t)>& on_match) const {
  if (!code_) return Status::Ok();
  Scratch& s = ThreadScratch();
  if (!s.context || !s.match_data) return ResourceExhaustedError("regex: out of memory");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos <= text.size()) {
    // The text was validated once by the caller; re-checking it on every call would make
    // matching quadratic.
    const int rc = pcre2_match(code_.get(), subject, text.size(), pos, PCRE2_NO_UTF_CHECK,
                               s.match_data.get(), s.context.get());
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      const std::string what = fmt::format("regex \"{}\": {}", pattern_, ErrorText(rc));
      return rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_HEAPLIMIT ||
                     rc == PCRE2_ERROR_DEPTHLIMIT || rc == PCRE2_ERROR_JIT_STACKLIMIT ||
                     rc == PCRE2_ERROR_NOMEMORY
                 ? ResourceExhaustedError(what)
                 : InternalError(what);
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.match_data.get());
    const size_t begin = ov[0], end = ov[1];
    // \K inside a lookaround can report a match that ends before it starts or before `pos`.
    if (end < begin || begin < pos) return InvalidArgumentError("regex: \\K is not supported");
    on_match(begin, end);
    if (end > begin) {
      pos = end;
    } else if (end < text.size()) {
      pos = end + SequenceLength(static_cast<unsigned char>(text[end]));
    } else {
      break;
    }
  }
  return Status::Ok();
}

}  // namespace kvferry::tokenizer
