#!/usr/bin/env python3
"""PyTorch eager reference for `device` cells: Hugging Face GPT2LMHeadModel or LlamaForCausalLM
with sweetspot's built-in shapes, random weights, eval mode, timed with CUDA events after warm-up
(median). LLaMA runs with use_cache=False: a cell's forward keeps no KV cache either.

Prints one line per configuration:
  model dtype batch seq attn median_ms p10_ms p90_ms
Usage: pytorch_eager.py [--models gpt2_1.5b,gpt3_6.7b] [--iters 10]
       pytorch_eager.py --models llama_1b,llama2_7b --configs bf16:1:2048,bf16:4:1024 --attn sdpa
"""
import argparse
import inspect
import statistics

import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

SHAPES = {  # name: (layers, hidden, heads, positions), vocab 50257 as in sweetspot
    "gpt2_small": (12, 768, 12, 1024),
    "gpt2_1.5b": (48, 1600, 25, 1024),
    "gpt3_6.7b": (32, 4096, 32, 2048),
    "gpt3_13b": (40, 5120, 40, 2048),
}
# name: (layers, hidden, heads, kv heads, FFN, vocab, positions, rope theta, Llama 3 scaling factor
# or None), as sweetspot's built-in LLaMA models.
LLAMA_SHAPES = {
    "llama_1b": (16, 2048, 32, 8, 8192, 128256, 131072, 500000.0, 32.0),
    "llama2_7b": (32, 4096, 32, 32, 11008, 32000, 4096, 10000.0, None),
    "llama3_8b": (32, 4096, 32, 8, 14336, 128256, 131072, 500000.0, 8.0),
    "llama2_13b": (40, 5120, 40, 40, 13824, 32000, 4096, 10000.0, None),
}
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def time_forward(model, tokens, warmups, iters):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    with torch.inference_mode():
        for i in range(warmups + iters):
            start.record()
            model(tokens)
            end.record()
            end.synchronize()
            if i >= warmups:
                samples.append(start.elapsed_time(end))
    samples.sort()
    q = statistics.quantiles(samples, n=10)
    return statistics.median(samples), q[0], q[-1]


def model_maker(name, attn):
    """(a function making the named model with attention implementation `attn`, its vocabulary)"""
    if name in SHAPES:
        layers, hidden, heads, positions = SHAPES[name]
        cfg = GPT2Config(n_layer=layers, n_embd=hidden, n_head=heads, n_positions=positions, vocab_size=50257,
                         attn_implementation=attn)
        return (lambda: GPT2LMHeadModel(cfg)), 50257
    layers, hidden, heads, kv, ffn, vocab, positions, theta, factor = LLAMA_SHAPES[name]
    rope = {"rope_type": "default"}
    if factor:
        rope = {"rope_type": "llama3", "factor": factor, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}
    # transformers 5 takes theta and scaling as one rope_parameters; earlier versions as two keys.
    if "rope_parameters" in inspect.signature(LlamaConfig.__init__).parameters:
        rope_args = {"rope_parameters": dict(rope, rope_theta=theta)}
    else:
        rope_args = {"rope_theta": theta, "rope_scaling": rope if factor else None}
    cfg = LlamaConfig(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                      num_key_value_heads=kv, intermediate_size=ffn, vocab_size=vocab,
                      max_position_embeddings=positions, tie_word_embeddings=False, use_cache=False, **rope_args)
    cfg._attn_implementation = attn
    return (lambda: LlamaForCausalLM(cfg)), vocab


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="gpt2_1.5b,gpt3_6.7b")
    p.add_argument("--configs", default="fp32:1:1024,fp16:1:512", help="dtype:batch:seq,...")
    p.add_argument("--attn", default="eager,sdpa")
    p.add_argument("--warmups", type=int, default=3)
    p.add_argument("--iters", type=int, default=10)
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False  # true fp32, as sweetspot's default
    torch.backends.cudnn.allow_tf32 = False
    print("model dtype batch seq attn median_ms p10_ms p90_ms", flush=True)
    for name in a.models.split(","):
        for attn in a.attn.split(","):
            make, vocab = model_maker(name, attn)
            for spec in a.configs.split(","):
                dtype, batch, seq = spec.split(":")
                torch.manual_seed(0)
                with torch.device("cuda"):
                    model = make().to(DTYPES[dtype]).eval()
                tokens = torch.randint(0, vocab, (int(batch), int(seq)), device="cuda")
                med, p10, p90 = time_forward(model, tokens, a.warmups, a.iters)
                print(f"{name} {dtype} {batch} {seq} {attn} {med:.3f} {p10:.3f} {p90:.3f}", flush=True)
                del model
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
