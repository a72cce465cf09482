#!/usr/bin/env python3
"""Checks sweetspot's forward against Hugging Face transformers on a saved checkpoint.

Builds a randomly initialised GPT2LMHeadModel, or with --family llama a LlamaForCausalLM (grouped
kv heads, its own MLP width, rope theta and optionally Llama 3's frequency scaling), of a small
config (every parameter then perturbed, so that biases and norms are not their trivial initial
values and a mix-up of any two of them shows), saves it with save_pretrained, runs the same token ids through transformers (fp32 on the
CPU, TF32 off) and through `sweetspot logits` on the host backend and, where a GPU is visible, on
every GPU backend. Prints the max relative error, max |ours - theirs| / max |theirs|, per backend
and exits 1 if any is above 1e-4 (or a run failed).

  tests/check_transformers.py --sweetspot build/sweetspot       # both steps, in a temporary folder
  tests/check_transformers.py --family llama --hidden 192 --heads 4 --kv-heads 1 --seq 777 --positions 1024
  tests/check_transformers.py --save-only DIR                   # needs torch and transformers only
  tests/check_transformers.py --compare DIR --sweetspot PATH    # needs no torch (nor numpy)

DIR then holds config.json and model.safetensors, or with --max-shard-size its shards and
model.safetensors.index.json (as save_pretrained wrote them), tokens.json,
reference.npy (transformers' logits, float32 [batch, seq, vocab]) and, after --compare,
logits-BACKEND.npy for each backend. The sweetspot binary is --sweetspot, else $SWEETSPOT_BINARY,
else build/sweetspot.
"""
import argparse
import array
import ast
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

TOLERANCE = 1e-4
GPU_BACKENDS = ["device", "explicit-copy", "uvm", "uvm-prefetch"]
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write_npy(path, values, shape):
    """float32 C-order .npy (format 1.0) from a flat list of floats."""
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }" % (
        ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else ""))
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    data = array.array("f", values)
    if sys.byteorder != "little":
        data.byteswap()
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1"))
        f.write(data.tobytes())


def read_npy(path):
    """(flat list of floats, shape) of a float32 C-order .npy file."""
    with open(path, "rb") as f:
        blob = f.read()
    if blob[:6] != b"\x93NUMPY":
        raise ValueError(f"{path}: not a .npy file")
    major = blob[6]
    if major == 1:
        (length,), start = struct.unpack("<H", blob[8:10]), 10
    else:
        (length,), start = struct.unpack("<I", blob[8:12]), 12
    header = ast.literal_eval(blob[start:start + length].decode("latin1"))
    if header["descr"] != "<f4" or header["fortran_order"]:
        raise ValueError(f"{path}: expected little-endian float32 in C order, got {header}")
    data = array.array("f")
    data.frombytes(blob[start + length:])
    if sys.byteorder != "little":
        data.byteswap()
    shape = tuple(header["shape"])
    expected = 1
    for d in shape:
        expected *= d
    if len(data) != expected:
        raise ValueError(f"{path}: {len(data)} values for shape {shape}")
    return data, shape


def build_model(args):
    """A randomly initialised model of the family and shape the arguments name, fp32, eval mode."""
    special = {"bos_token_id": args.vocab - 1, "eos_token_id": args.vocab - 1}
    if args.family == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel
        config = GPT2Config(n_layer=args.layers, n_embd=args.hidden, n_head=args.heads, vocab_size=args.vocab,
                            n_positions=args.positions, layer_norm_epsilon=1e-5,
                            tie_word_embeddings=not args.untied, **special)
        return GPT2LMHeadModel(config).eval()
    import inspect
    from transformers import LlamaConfig, LlamaForCausalLM
    rope = {"rope_type": "default"}
    if args.rope_scaling:
        factor, low, high, original = args.rope_scaling.split(",")
        rope = {"rope_type": "llama3", "factor": float(factor), "low_freq_factor": float(low),
                "high_freq_factor": float(high), "original_max_position_embeddings": int(original)}
    # transformers 5 takes theta and scaling as one rope_parameters; earlier versions as two keys.
    if "rope_parameters" in inspect.signature(LlamaConfig.__init__).parameters:
        rope_args = {"rope_parameters": dict(rope, rope_theta=args.rope_theta)}
    else:
        rope_args = {"rope_theta": args.rope_theta, "rope_scaling": rope if args.rope_scaling else None}
    config = LlamaConfig(num_hidden_layers=args.layers, hidden_size=args.hidden, num_attention_heads=args.heads,
                         num_key_value_heads=args.kv_heads or args.heads, intermediate_size=args.ffn or 4 * args.hidden,
                         vocab_size=args.vocab, max_position_embeddings=args.positions, rms_norm_eps=args.rms_eps,
                         tie_word_embeddings=not args.untied, attention_bias=False, mlp_bias=False, **rope_args,
                         **special)
    # Eager attention: the plain softmax(QKᵀ)V in fp32, not a fused kernel's own rounding.
    config._attn_implementation = "eager"
    return LlamaForCausalLM(config).eval()


def save(directory, args):
    """The checkpoint, the token ids and transformers' logits for them, into `directory`."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(args.seed)
    model = build_model(args)
    generator = torch.Generator().manual_seed(args.seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.02 * torch.randn(p.shape, generator=generator))
    # Stored in half precision, the reference is the forward on exactly the stored values in fp32,
    # which is what sweetspot's fp32 cells compute with.
    # Buffers are no parameters and no checkpoint stores them (LLaMA's rotary inv_freq): the
    # reference keeps them in fp32, as sweetspot computes them, rather than rounded by the cast.
    buffers = {name: b.clone() for name, b in model.named_buffers()}
    model = model.to(getattr(torch, args.store_dtype))
    shards = {"max_shard_size": args.max_shard_size} if args.max_shard_size else {}
    try:
        model.save_pretrained(directory, safe_serialization=True, **shards)
    except TypeError:  # versions that always write safetensors may no longer take the argument
        model.save_pretrained(directory, **shards)
    written = "model.safetensors.index.json" if args.max_shard_size else "model.safetensors"
    if not os.path.exists(os.path.join(directory, written)):
        raise SystemExit(f"save_pretrained wrote no {written} into {directory}: {sorted(os.listdir(directory))}")

    tokens = torch.randint(0, args.vocab, (args.batch, args.seq), generator=generator)
    with torch.no_grad():
        model = model.float()
        for name, b in model.named_buffers():
            b.copy_(buffers[name])
        logits = model(tokens).logits
    with open(os.path.join(directory, "tokens.json"), "w") as f:
        json.dump(tokens.tolist(), f)
    write_npy(os.path.join(directory, "reference.npy"), logits.flatten().tolist(), list(logits.shape))
    print(f"saved to {directory}: {args.store_dtype} weights, transformers {__import__('transformers').__version__}, "
          f"torch {torch.__version__}, logits {list(logits.shape)}")


def gpu_visible():
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return any(line.startswith("GPU") for line in out.splitlines())


def compare(directory, args):
    """Runs sweetspot on every backend; returns True when all agree with transformers."""
    sweetspot = args.sweetspot or os.environ.get("SWEETSPOT_BINARY") or os.path.join(REPO, "build", "sweetspot")
    with open(os.path.join(directory, "tokens.json")) as f:
        tokens = json.load(f)
    reference, ref_shape = read_npy(os.path.join(directory, "reference.npy"))
    max_ref = max(abs(v) for v in reference)
    backends = args.backends.split(",") if args.backends else ["host"] + (GPU_BACKENDS if gpu_visible() else [])

    all_ok = True
    print(f"relative error = max |ours - transformers| / max |transformers| (= {max_ref:.4g}), tolerance {TOLERANCE}")
    print(f"{'backend':<14} {'rel err':>12}")
    for backend in backends:
        out = os.path.join(directory, f"logits-{backend}.npy")
        cmd = [sweetspot, "logits", "--weights", directory, "--backend", backend, "--dtype", "fp32", "-o", out]
        if args.variant and backend != "host":
            cmd += ["--variant", args.variant]
        for sequence in tokens:
            cmd += ["--tokens", ",".join(str(t) for t in sequence)]
        run = subprocess.run(cmd, capture_output=True, text=True)
        # Exit code 1: sweetspot's own check failed, but the logits were written; compare them anyway.
        if run.returncode not in (0, 1) or not os.path.exists(out):
            print(f"{backend:<14} {'FAILED':>12}  sweetspot exited with {run.returncode}: {(run.stdout + run.stderr).strip()}")
            all_ok = False
            continue
        ours, shape = read_npy(out)
        if shape != ref_shape:
            print(f"{backend:<14} {'FAILED':>12}  shape {shape}, transformers gave {ref_shape}")
            all_ok = False
            continue
        rel = max(abs(a - b) for a, b in zip(ours, reference)) / max_ref
        ok = rel <= TOLERANCE and run.returncode == 0
        all_ok &= ok
        note = "" if run.returncode == 0 else "  (sweetspot's own check failed: " + run.stdout.strip().splitlines()[-1] + ")"
        print(f"{backend:<14} {rel:12.3e}  {'ok' if ok else 'ABOVE ' + str(TOLERANCE)}{note}")
    return all_ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    steps = parser.add_mutually_exclusive_group()
    steps.add_argument("--save-only", metavar="DIR", help="only build and save the model, tokens and reference logits")
    steps.add_argument("--compare", metavar="DIR", help="only run sweetspot on a folder --save-only wrote, and compare")
    parser.add_argument("--sweetspot", help="the sweetspot binary (default: $SWEETSPOT_BINARY, else build/sweetspot)")
    parser.add_argument("--backends", help="comma-separated (default: host, and every GPU backend when a GPU is visible)")
    parser.add_argument("--family", choices=["gpt2", "llama"], default="gpt2",
                        help="GPT2LMHeadModel or LlamaForCausalLM (default gpt2)")
    parser.add_argument("--untied", action="store_true",
                        help="save lm_head.weight of its own instead of tying it to the token embedding")
    parser.add_argument("--kv-heads", type=int, default=0, help="llama: key and value heads (default: --heads)")
    parser.add_argument("--ffn", type=int, default=0, help="llama: the MLP's intermediate_size (default 4 × --hidden)")
    parser.add_argument("--rope-theta", type=float, default=10000.0, help="llama: rotary base (default 10000)")
    parser.add_argument("--rope-scaling", metavar="F,LOW,HIGH,ORIG",
                        help="llama: Llama 3's frequency scaling: factor, low and high frequency factors, original positions")
    parser.add_argument("--rms-eps", type=float, default=1e-5, help="llama: RMSNorm epsilon (default 1e-5)")
    parser.add_argument("--variant", help="sweetspot's variant for the GPU backends (default: its own default)")
    parser.add_argument("--store-dtype", choices=["float32", "float16", "bfloat16"], default="float32",
                        help="dtype the checkpoint is saved in (the reference computes in fp32 on the stored values)")
    parser.add_argument("--max-shard-size", help="save_pretrained's max_shard_size (e.g. 24KB), to write a sharded checkpoint")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--positions", type=int, default=64)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    if args.save_only:
        os.makedirs(args.save_only, exist_ok=True)
        save(args.save_only, args)
        return 0
    if args.compare:
        return 0 if compare(args.compare, args) else 1
    directory = tempfile.mkdtemp(prefix="sweetspot-transformers-")
    try:
        save(directory, args)
        return 0 if compare(directory, args) else 1
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
