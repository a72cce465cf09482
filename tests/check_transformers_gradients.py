#!/usr/bin/env python3
"""Checks sweetspot's float64 reference of a training step (the loss and every parameter's
gradient, `sweetspot gradients`) against PyTorch autograd through Hugging Face transformers'
GPT2LMHeadModel, in float64 on the CPU.

Builds a randomly initialised GPT2LMHeadModel of a small config with an untied lm_head (every
parameter then perturbed, so that biases and LayerNorms are not their trivial initial values),
saves it with save_pretrained in float32, runs `sweetspot gradients` on it, and computes the same
loss (the mean cross-entropy of the targets) and its gradients with autograd on the same float32
values held in float64. Prints, per tensor, max |ours - theirs| / max |theirs| (our [out, in]
layout against transformers' Conv1D [in, out], transposed), and exits 1 if the loss or any tensor
is further apart than 1e-9: both sides compute in float64 and differ only in the order of sums.

  tests/check_transformers_gradients.py --sweetspot build/sweetspot

Needs torch, transformers and numpy (the GPU machine has them; Debian 12 has no torch package).
"""
import argparse
import os
import subprocess
import sys
import tempfile

TOLERANCE = 1e-9
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# transformers' Conv1D weights are [in, out]; ours, as nn.Linear, [out, in].
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def build_checkpoint(folder, seed):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=101, n_positions=32, n_embd=48, n_layer=2, n_head=4, tie_word_embeddings=False,
                        bos_token_id=0, eos_token_id=0,
                        attn_implementation="eager")
    model = GPT2LMHeadModel(config)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    model.save_pretrained(folder, safe_serialization=True)
    return model


def autograd_step(model, tokens, targets):
    import torch

    model = model.double().eval()
    logits = model(torch.tensor(tokens)).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), torch.tensor(targets).reshape(-1))
    loss.backward()
    grads = {}
    for name, p in model.named_parameters():
        ours = name.removeprefix("transformer.")
        g = p.grad.detach().numpy()
        grads[ours] = g.T if ours.endswith(CONV1D) else g
    return loss.item(), grads


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sweetspot", default=os.environ.get("SWEETSPOT_BINARY", os.path.join(REPO, "build", "sweetspot")))
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args()
    import numpy as np

    rng = np.random.default_rng(args.seed)
    tokens = rng.integers(0, 101, size=(2, 17)).tolist()
    targets = rng.integers(0, 101, size=(2, 17)).tolist()
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = os.path.join(tmp, "gpt2")
        model = build_checkpoint(checkpoint, args.seed)
        out = os.path.join(tmp, "grads")
        command = [args.sweetspot, "gradients", "--weights", checkpoint, "-o", out]
        for seq, tgt in zip(tokens, targets):
            command += ["--tokens", ",".join(map(str, seq)), "--targets", ",".join(map(str, tgt))]
        run = subprocess.run(command, capture_output=True, text=True)
        if run.returncode != 0:
            print(run.stdout + run.stderr)
            return 1
        their_loss, theirs = autograd_step(model, tokens, targets)
        our_loss = float(np.load(os.path.join(out, "loss.npy"))[0])
        worst = abs(our_loss - their_loss) / abs(their_loss)
        print(f"loss: ours {our_loss:.15f}, transformers {their_loss:.15f}, relative difference {worst:.2e}")
        failed = worst > TOLERANCE
        for name, grad in sorted(theirs.items()):
            ours = np.load(os.path.join(out, name + ".npy"))
            if ours.shape != grad.shape:
                print(f"{name}: our shape {ours.shape}, theirs {grad.shape}")
                failed = True
                continue
            error = float(np.max(np.abs(ours - grad)) / np.max(np.abs(grad)))
            failed |= error > TOLERANCE
            print(f"{name:28s} {error:.2e}{'  FAILED' if error > TOLERANCE else ''}")
        print(f"{len(theirs)} tensors; tolerance {TOLERANCE:g}: {'FAILED' if failed else 'ok'}")
        return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
