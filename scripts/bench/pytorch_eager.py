#!/usr/bin/env python3
"""PyTorch eager reference for `device` cells: Hugging Face GPT2LMHeadModel or LlamaForCausalLM
with sweetspot's built-in shapes and an untied lm_head (sweetspot's layout), random weights, eval
mode, timed with CUDA events after warm-up (median). LLaMA has no biases, RMSNorm eps 1e-5 and
sweetspot's rotary theta and scaling, and runs with use_cache=False: a cell's forward keeps no KV
cache either. pytorch_train.py and pytorch_packing.py build their models here too.

Prints one line per configuration:
  model dtype batch seq attn median_ms p10_ms p90_ms
Usage: pytorch_eager.py [--models gpt2_1.5b,gpt3_6.7b] [--iters 10]
       pytorch_eager.py --models llama_1b,llama2_7b --configs bf16:1:2048,bf16:4:1024 --attn sdpa
"""
import argparse
import inspect
import statistics
from typing import NamedTuple

import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

class Shape(NamedTuple):
    """One of sweetspot's built-in models (kernels/model/model_config.cpp). GPT-2's block has as many
    kv heads as heads, an MLP 4 × hidden wide and learned positions, so the fields after positions
    are LLaMA's alone; rope_factor is Llama 3's frequency scaling, None for none."""
    family: str
    layers: int
    hidden: int
    heads: int
    vocab: int
    positions: int
    kv_heads: int = 0
    ffn: int = 0
    rope_theta: float = 0.0
    rope_factor: float | None = None


SHAPES = {
    "gpt2_small": Shape("gpt2", 12, 768, 12, 50257, 1024),
    "gpt2_1.5b": Shape("gpt2", 48, 1600, 25, 50257, 1024),
    "gpt3_6.7b": Shape("gpt2", 32, 4096, 32, 50257, 2048),
    "gpt3_13b": Shape("gpt2", 40, 5120, 40, 50257, 2048),
    "llama_1b": Shape("llama", 16, 2048, 32, 128256, 131072, 8, 8192, 500000.0, 32.0),
    "llama2_7b": Shape("llama", 32, 4096, 32, 32000, 4096, 32, 11008, 10000.0),
    "llama3_8b": Shape("llama", 32, 4096, 32, 128256, 8192, 8, 14336, 500000.0),
    "llama2_13b": Shape("llama", 40, 5120, 40, 32000, 4096, 40, 13824, 10000.0),
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
    shape = SHAPES[name]
    if shape.family == "gpt2":
        cfg = GPT2Config(n_layer=shape.layers, n_embd=shape.hidden, n_head=shape.heads, n_positions=shape.positions,
                         vocab_size=shape.vocab, tie_word_embeddings=False, attn_implementation=attn)
        return (lambda: GPT2LMHeadModel(cfg)), shape.vocab
    rope = {"rope_type": "default"}
    if shape.rope_factor:
        rope = {"rope_type": "llama3", "factor": shape.rope_factor, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}
    # transformers 5 takes theta and scaling as one rope_parameters; earlier versions as two keys.
    if "rope_parameters" in inspect.signature(LlamaConfig.__init__).parameters:
        rope_args = {"rope_parameters": dict(rope, rope_theta=shape.rope_theta)}
    else:
        rope_args = {"rope_theta": shape.rope_theta, "rope_scaling": rope if shape.rope_factor else None}
    # LlamaConfig's own default eps is 1e-6; sweetspot's LLaMA models have 1e-5.
    cfg = LlamaConfig(num_hidden_layers=shape.layers, hidden_size=shape.hidden, num_attention_heads=shape.heads,
                      num_key_value_heads=shape.kv_heads, intermediate_size=shape.ffn, vocab_size=shape.vocab,
                      max_position_embeddings=shape.positions, rms_norm_eps=1e-5, attention_bias=False,
                      mlp_bias=False, tie_word_embeddings=False, use_cache=False, **rope_args)
    cfg._attn_implementation = attn
    return (lambda: LlamaForCausalLM(cfg)), shape.vocab


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
