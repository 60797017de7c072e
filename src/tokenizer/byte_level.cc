#include "tokenizer/byte_level.h"

#include <array>

#include "kvferry/common/utf8.h"

namespace kvferry::tokenizer {
namespace {

struct Tables {
  std::array<char32_t, 256> to_char{};
  std::array<std::string, 256> to_utf8;
  std::array<int16_t, 512> to_byte{};  // all 256 characters are below U+0200; -1: none

  Tables() {
    to_byte.fill(-1);
    auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      to_char[b] = static_cast<char32_t>(printable(b) ? b : next++);
      to_byte[to_char[b]] = static_cast<int16_t>(b);
      AppendUtf8(to_char[b], &to_utf8[b]);
    }
  }
};

const Tables& T() {
  static const Tables tables;
  return tables;
}

}  // namespace

char32_t ByteToChar(uint8_t b) { return T().to_char[b]; }

std::optional<uint8_t> CharToByte(char32_t cp) {
  if (cp >= 512 || T().to_byte[cp] < 0) return std::nullopt;
  return static_cast<uint8_t>(T().to_byte[cp]);
}

void AppendByteLevel(std::string_view bytes, std::string* out) {
  const Tables& t = T();
  for (char c : bytes) out->append(t.to_utf8[static_cast<uint8_t>(c)]);
}

std::optional<std::string> ByteLevelToBytes(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  size_t i = 0;
  while (i < token.size()) {
    if (WellFormedLength(token, i) == 0) return std::nullopt;
    const std::optional<uint8_t> b = CharToByte(NextCodePoint(token, &i));
    if (!b) return std::nullopt;
    out.push_back(static_cast<char>(*b));
  }
  return out;
}

}  // namespace kvferry::tokenizer
