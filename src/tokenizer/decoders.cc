#include "tokenizer/decoders.h"

#include <fmt/format.h>

#include "kvferry/common/utf8.h"
#include "tokenizer/byte_level.h"

namespace kvferry::tokenizer {
namespace {

// Joins the bytes every token stands for; a token with a character outside the byte map (an
// added token such as "<|im_start|>" written in plain text) contributes its own bytes.
class ByteLevel : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens, bool) const override {
    std::string out;
    for (const std::string& t : *tokens) {
      std::optional<std::string> bytes = ByteLevelToBytes(t);
      out.append(bytes ? *bytes : t);
    }
    *tokens = {std::move(out)};
  }
};

void ReplaceAll(std::string* s, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  std::string out;
  size_t prev = 0, at;
  while ((at = s->find(from, prev)) != std::string::npos) {
    out.append(*s, prev, at - prev);
    out.append(to);
    prev = at + from.size();
  }
  out.append(*s, prev);
  *s = std::move(out);
}

class Replace : public Decoder {
 public:
  Replace(std::string from, std::string to) : from_(std::move(from)), to_(std::move(to)) {}
  void DecodeChain(std::vector<std::string>* tokens, bool) const override {
    for (std::string& t : *tokens) ReplaceAll(&t, from_, to_);
  }

 private:
  std::string from_, to_;
};

// Every "▁" becomes a space, except in a text's first token, where it is dropped (unless the
// prepend scheme is "never": then no "▁" was added).
class Metaspace : public Decoder {
 public:
  Metaspace(std::string replacement, bool drop_first)
      : replacement_(std::move(replacement)), drop_first_(drop_first) {}
  void DecodeChain(std::vector<std::string>* tokens, bool at_start) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      ReplaceAll(&(*tokens)[i], replacement_, i == 0 && at_start && drop_first_ ? "" : " ");
    }
  }

 private:
  std::string replacement_;
  bool drop_first_;
};

std::optional<uint8_t> ByteToken(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return std::nullopt;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<uint8_t>(hi * 16 + lo);
}

// Runs of <0xNN> tokens become one token of those bytes.
class ByteFallback : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens, bool) const override {
    std::vector<std::string> out;
    std::string run;
    bool in_run = false;
    for (std::string& t : *tokens) {
      if (std::optional<uint8_t> b = ByteToken(t)) {
        run.push_back(static_cast<char>(*b));
        in_run = true;
        continue;
      }
      if (in_run) out.push_back(std::exchange(run, std::string()));
      in_run = false;
      out.push_back(std::move(t));
    }
    if (in_run) out.push_back(std::move(run));
    *tokens = std::move(out);
  }
};

class Fuse : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens, bool) const override {
    std::string out;
    for (const std::string& t : *tokens) out.append(t);
    *tokens = {std::move(out)};
  }
};

// Removes up to `start` leading and `stop` trailing copies of a character from every token.
class Strip : public Decoder {
 public:
  Strip(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void DecodeChain(std::vector<std::string>* tokens, bool at_start) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      std::string& t = (*tokens)[i];
      size_t begin = 0, end = t.size();
      const size_t start = i == 0 && !at_start ? 0 : start_;
      for (size_t k = 0; k < start && t.compare(begin, content_.size(), content_) == 0; ++k) {
        begin += content_.size();
      }
      for (size_t k = 0; k < stop_ && end >= begin + content_.size() &&
                         t.compare(end - content_.size(), content_.size(), content_) == 0;
           ++k) {
        end -= content_.size();
      }
      t = t.substr(begin, end - begin);
    }
  }

 private:
  std::string content_;
  size_t start_, stop_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps)
      : steps_(std::move(steps)) {}
  void DecodeChain(std::vector<std::string>* tokens, bool at_start) const override {
    for (const auto& step : steps_) step->DecodeChain(tokens, at_start);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

StatusOr<std::string> OneChar(const JsonSection& section, const char* key) {
  KVF_ASSIGN_OR_RETURN(std::string c, section.String(key));
  if (c.empty() || WellFormedLength(c, 0) != c.size()) {
    return section.Invalid(fmt::format("\"{}\" must be one character", key));
  }
  return c;
}

StatusOr<std::unique_ptr<Decoder>> MetaspaceDecoderFromJson(const JsonSection& section) {
  KVF_ASSIGN_OR_RETURN(std::string replacement, OneChar(section, "replacement"));
  KVF_ASSIGN_OR_RETURN(std::string scheme, section.StringOr("prepend_scheme", ""));
  KVF_ASSIGN_OR_RETURN(bool add_prefix_space, section.BoolOr("add_prefix_space", true));
  if (!scheme.empty() && scheme != "always" && scheme != "first" && scheme != "never") {
    return section.Invalid(fmt::format("unknown prepend_scheme \"{}\"", scheme));
  }
  const bool drop_first = scheme.empty() ? add_prefix_space : scheme != "never";
  return std::unique_ptr<Decoder>(new Metaspace(std::move(replacement), drop_first));
}

StatusOr<std::unique_ptr<Decoder>> ReplaceFromJson(const JsonSection& section) {
  const JsonSection pattern = section.Member("pattern");
  if (!pattern.Member("Regex").IsNull()) {
    return pattern.Unsupported("a Regex pattern in a Replace decoder is not supported");
  }
  KVF_ASSIGN_OR_RETURN(std::string from, pattern.String("String"));
  KVF_ASSIGN_OR_RETURN(std::string to, section.String("content"));
  return MakeReplaceDecoder(std::move(from), std::move(to));
}

StatusOr<std::unique_ptr<Decoder>> StripFromJson(const JsonSection& section) {
  KVF_ASSIGN_OR_RETURN(std::string content, OneChar(section, "content"));
  KVF_ASSIGN_OR_RETURN(int64_t start, section.IntOr("start", 0, 0, 1 << 20));
  KVF_ASSIGN_OR_RETURN(int64_t stop, section.IntOr("stop", 0, 0, 1 << 20));
  return MakeStripDecoder(std::move(content), static_cast<size_t>(start),
                          static_cast<size_t>(stop));
}

}  // namespace

StatusOr<std::unique_ptr<Decoder>> DecoderFromJson(const JsonSection& section) {
  KVF_ASSIGN_OR_RETURN(std::string type, section.Type());
  if (type == "ByteLevel") return MakeByteLevelDecoder();
  if (type == "Metaspace") return MetaspaceDecoderFromJson(section);
  if (type == "Replace") return ReplaceFromJson(section);
  if (type == "ByteFallback") return MakeByteFallbackDecoder();
  if (type == "Fuse") return MakeFuseDecoder();
  if (type == "Strip") return StripFromJson(section);
  if (type == "Sequence") {
    KVF_ASSIGN_OR_RETURN(JsonSection list, section.Array("decoders"));
    std::vector<std::unique_ptr<Decoder>> steps;
    for (size_t i = 0; i < list.json().size(); ++i) {
      KVF_ASSIGN_OR_RETURN(auto step, DecoderFromJson(list.Element(i)));
      steps.push_back(std::move(step));
    }
    return MakeSequenceDecoder(std::move(steps));
  }
  return section.Unsupported(fmt::format("unsupported decoder type \"{}\"", type));
}

std::unique_ptr<Decoder> MakeByteLevelDecoder() { return std::make_unique<ByteLevel>(); }
std::unique_ptr<Decoder> MakeReplaceDecoder(std::string from, std::string to) {
  return std::make_unique<Replace>(std::move(from), std::move(to));
}
std::unique_ptr<Decoder> MakeByteFallbackDecoder() { return std::make_unique<ByteFallback>(); }
std::unique_ptr<Decoder> MakeFuseDecoder() { return std::make_unique<Fuse>(); }
std::unique_ptr<Decoder> MakeStripDecoder(std::string content, size_t start, size_t stop) {
  return std::make_unique<Strip>(std::move(content), start, stop);
}
std::unique_ptr<Decoder> MakeSequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps) {
  return std::make_unique<SequenceDecoder>(std::move(steps));
}

}  // namespace kvferry::tokenizer
