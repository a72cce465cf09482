#!/usr/bin/env python3
"""Checks sweetspot's float64 reference of a training step (the loss, every parameter's
gradient and the weights after the step's clipping and AdamW, `sweetspot gradients`) against
PyTorch autograd, torch.nn.utils.clip_grad_norm_ and torch.optim.AdamW through Hugging Face
transformers' GPT2LMHeadModel, in float64 on the CPU.

Builds a randomly initialised GPT2LMHeadModel of a small config with an untied lm_head (every
parameter then perturbed, so that biases and LayerNorms are not their trivial initial values),
saves it with save_pretrained in float32, runs `sweetspot gradients` on it, and computes the same
loss (the mean cross-entropy of the targets) and its gradients with autograd on the same float32
values held in float64, then one step from sweetspot's gradients (so that only the step's own
arithmetic is compared: AdamW's first step divides a gradient by its own size plus eps, which
magnifies the two sides' last-bit differences near zero by lr / eps): the gradients clipped to a
global norm of 1.0 and AdamW with a training cell's settings (lr 3e-4, betas 0.9 and 0.95, eps
1e-8, each the float32 value sweetspot holds) and weight decay 0.1 on the matrices only. Prints, per tensor, max |ours - theirs|
/ max |theirs| of the gradient and of the update (weights after less before: what the step
changed, not hidden under the weights' size) (our [out, in] layout against transformers' Conv1D
[in, out], transposed), and exits 1 if the loss or any tensor is further apart than 1e-9: both
sides compute in float64 and differ only in the order of sums.

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
WEIGHT_DECAY = 0.1


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


def our_name(name):
    return name.removeprefix("transformer.")


def ours_layout(name, array):
    """A transformers parameter's name and values as sweetspot names and lays them out (and back:
    the transposition is its own inverse)."""
    ours = our_name(name)
    return ours, array.T if ours.endswith(CONV1D) else array


def autograd_step(model, tokens, targets, our_grads):
    """The loss and every gradient by autograd, and every update of one clipped AdamW step from
    `our_grads` (sweetspot's, by name in our layout), by name."""
    import numpy as np
    import torch

    model = model.double().eval()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    logits = model(torch.tensor(tokens)).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), torch.tensor(targets).reshape(-1))
    loss.backward()
    grads = dict(ours_layout(name, p.grad.detach().numpy().copy()) for name, p in model.named_parameters())
    for name, p in model.named_parameters():
        p.grad = torch.from_numpy(ours_layout(name, our_grads[our_name(name)])[1].copy())

    # sweetspot holds the settings as float32: these are its values exactly.
    f32 = lambda x: float(np.float32(x))
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": f32(WEIGHT_DECAY)},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=f32(3e-4), betas=(f32(0.9), f32(0.95)), eps=f32(1e-8), foreach=False)
    optimizer.step()
    updates = dict(ours_layout(name, (p.detach() - before[name]).numpy()) for name, p in model.named_parameters())
    return loss.item(), grads, updates


def relative_error(ours, theirs):
    import numpy as np

    return float(np.max(np.abs(ours - theirs)) / np.max(np.abs(theirs)))


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
        command = [args.sweetspot, "gradients", "--weights", checkpoint, "--weight-decay", str(WEIGHT_DECAY), "-o", out]
        for seq, tgt in zip(tokens, targets):
            command += ["--tokens", ",".join(map(str, seq)), "--targets", ",".join(map(str, tgt))]
        run = subprocess.run(command, capture_output=True, text=True)
        if run.returncode != 0:
            print(run.stdout + run.stderr)
            return 1
        initial = dict(ours_layout(name, p.detach().double().numpy().copy()) for name, p in model.named_parameters())
        our_grads = {our_name(name): np.load(os.path.join(out, our_name(name) + ".npy"))
                     for name, _ in model.named_parameters()}
        their_loss, theirs, their_updates = autograd_step(model, tokens, targets, our_grads)
        our_loss = float(np.load(os.path.join(out, "loss.npy"))[0])
        worst = abs(our_loss - their_loss) / abs(their_loss)
        print(f"loss: ours {our_loss:.15f}, transformers {their_loss:.15f}, relative difference {worst:.2e}")
        failed = worst > TOLERANCE
        print(f"{'tensor':28s} gradient  update")
        for name, grad in sorted(theirs.items()):
            ours = our_grads[name]
            if ours.shape != grad.shape:
                print(f"{name}: our shape {ours.shape}, theirs {grad.shape}")
                failed = True
                continue
            our_update = np.load(os.path.join(out, "updated", name + ".npy")) - initial[name]
            errors = (relative_error(ours, grad), relative_error(our_update, their_updates[name]))
            bad = max(errors) > TOLERANCE
            failed |= bad
            print(f"{name:28s} {errors[0]:.2e}  {errors[1]:.2e}{'  FAILED' if bad else ''}")
        print(f"{len(theirs)} tensors; tolerance {TOLERANCE:g}: {'FAILED' if failed else 'ok'}")
        return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
