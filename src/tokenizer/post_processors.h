// Post-processors: the stage after the model, adding the special tokens around an encoded
// sequence when Encode is asked to (add_special_tokens), as the "post_processor" section of a
// tokenizer.json describes. Supported types: TemplateProcessing (the "single" template),
// ByteLevel (offsets only, so nothing to do on ids), Sequence; any other type is a
// kUnimplemented error naming it.
//
// Internal to src/tokenizer. Thread-safety: immutable after construction.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kvferry/common/status.h"
#include "tokenizer/json_section.h"

namespace kvferry::tokenizer {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Adds the special tokens to the ids of one sequence if add_special_tokens.
  virtual void Process(std::vector<int32_t>* ids, bool add_special_tokens) const = 0;
};

// From a non-null "post_processor" section; the ids it names must be below `id_limit`.
StatusOr<std::unique_ptr<PostProcessor>> PostProcessorFromJson(const JsonSection& section,
                                                               int32_t id_limit);

// A template "prefix $A suffix" (for pipelines built in code).
std::unique_ptr<PostProcessor> MakeTemplateProcessor(std::vector<int32_t> prefix,
                                                     std::vector<int32_t> suffix);

}  // namespace kvferry::tokenizer
