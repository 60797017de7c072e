// Tokenizer::BuiltinByteLevel: kvferry's built-in vocabulary (one id per byte, four specials)
// expressed as a byte-level BPE pipeline without merges, so that it runs the same code as the
// vocabularies loaded from files.
#include "kvferry/tokenizer/tokenizer.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pipeline.h"

namespace kvferry::tokenizer {

Tokenizer Tokenizer::BuiltinByteLevel() {
  auto p = std::make_unique<Pipeline>();
  Vocab vocab;
  for (int b = 0; b < 256; ++b) {
    std::string token;
    AppendByteLevel(std::string(1, static_cast<char>(b)), &token);
    vocab.emplace(std::move(token), b);
  }
  // A fixed, valid vocabulary: neither step can fail.
  p->model = std::move(BpeModel::Create(std::move(vocab), {}, BpeOptions{}, "built-in")).value();
  std::vector<AddedToken> specials;
  for (const auto& [name, id] :
       {std::pair{"<bos>", kBuiltinBos}, std::pair{"<eos>", kBuiltinEos},
        std::pair{"<pad>", kBuiltinPad}, std::pair{"<unk>", kBuiltinUnk}}) {
    specials.push_back(AddedToken{name, id, false, false, false, false, true});
  }
  // encode_special_tokens: "<bos>" in a prompt stays five bytes, as it always was.
  p->added = std::move(AddedVocabulary::Create(std::move(specials), nullptr,
                                               /*encode_special_tokens=*/true))
                 .value();
  p->pre_tokenizer = MakeByteLevelPreTokenizer(/*add_prefix_space=*/false, /*use_regex=*/false);
  p->post_processor = MakeTemplateProcessor({kBuiltinBos}, {});
  p->decoder = MakeByteLevelDecoder();
  p->any_bytes = true;
  p->special_strings = SpecialTokens{"<bos>", "<eos>", "<unk>", "<pad>", {}};
  p->bos_id = kBuiltinBos;
  p->eos_ids = {kBuiltinEos};
  p->pad_id = kBuiltinPad;
  p->unk_id = kBuiltinUnk;
  return std::move(Assemble(std::move(p))).value();
}

}  // namespace kvferry::tokenizer
