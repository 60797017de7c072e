// The rope rows of DeepSeek (MLA) checkpoints (internal; docs/models.md, "DeepSeek").
//
// Hugging Face DeepseekV2/V3 checkpoints store the rope part of the query (each head's last
// qk_rope_head_dim rows of q_proj / q_b_proj) and of kv_a_proj_with_mqa (its last
// qk_rope_head_dim rows) in interleaved pair order: the modeling code de-interleaves q_pe and
// k_pe (`view(d/2, 2).transpose`) before its rotate-half RoPE. The engine applies rotate-half
// RoPE to rows in the de-interleaved order, so the loader permutes those rows once — row j of
// the rotate-half order is stored row 2j, row d/2 + j is row 2j + 1 — and the writer permutes
// them back. The permuted matrices are copies owned by the ModelWeights; everything else stays
// a view of the file.
//
// Called by: model_loader (after binding a Hugging Face MLA checkpoint), checkpoint_writer.
// Thread-safety: mutates only `w`.
#pragma once

#include "engine/weights.h"

namespace kvferry::engine {

// `to_interleaved` false: checkpoint order -> the engine's; true: back. No-op unless is_mla().
void PermuteMlaRopeRows(ModelWeights* w, bool to_interleaved);

}  // namespace kvferry::engine
