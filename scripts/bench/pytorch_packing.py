#!/usr/bin/env python3
"""PyTorch's padded and packed forwards of sweetspot's models on ragged batches, beside sweetspot's
packing cells.

Hugging Face LlamaForCausalLM or GPT2LMHeadModel (pytorch_eager.py's shapes), random weights, eval,
SDPA, one batch of sequences of the given lengths at a time, three ways:
  padded    right-padded to the longest, attention_mask marking the real tokens (what a padded
            framework computes: every row of the rectangle);
  packed    all sequences in one row, position ids restarting per sequence and a block-diagonal
            causal mask as a 4-D boolean attention mask, so no sequence attends to another;
  position  the same row with position ids alone: transformers 5 reads restarting positions as
            sequence boundaries; earlier versions let the sequences attend across each other (how
            packing went wrong in the issue's anchor), which the logits check shows.
Each is timed with CUDA events (median of --iters after --warmups) with its peak memory
(torch.cuda.max_memory_allocated over a forward, weights included), and its logits on the real
tokens are compared with each of the first --check sequences run alone: max |Δ| / max |alone|.

The lengths, one of:
  --lengths-from DB [--cell ID]  exactly the batches sweetspot's cells ran: each distinct (model, dtype,
                                 drawn lengths) of the database's ok ragged cells (cells.drawn_lengths;
                                 a padded and a packed cell of one draw share it), on that model and
                                 dtype; or the one cell ID's
  --lengths 12,300,77,...        the lengths as a list
  --lengths-file F               the lengths in F, one a line, '#' comments: the format of a matrix's
                                 lengths = "file:F", but the batch is F's lengths in order (a
                                 "file:" cell draws its batch from them; --lengths-from has its draw)
  --lognormal 330,0.85 --batch 32 --seed 1 --clip 16,2048   drawn with torch's generator
The last three run on --models in --dtype.

Prints a table, one line per batch and way:
  model dtype mode tokens rows median_ms p10_ms p90_ms peak_gib check_rel_err cells
where cells names the sweetspot cells (cell_id) whose batch it is ('-' for lengths given here), each
batch after a '#' line that describes it. packing_table.py --pytorch reads it.

Needs torch and transformers (and a CUDA GPU) to run a forward; --help and reading the lengths do not.
Exit codes: 0 done, 2 bad input (an option, a lengths file, the database, a cell).
"""
import argparse
import math
import os
import pathlib
import statistics
import sys

sys.dont_write_bytecode = True  # keep the source tree free of __pycache__
HERE = pathlib.Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1] / "analysis")]  # pytorch_eager.py; read_only.py
from read_only import BadInput, connect  # noqa: E402

EXIT_BAD_INPUT = 2
HEADER = "model dtype mode tokens rows median_ms p10_ms p90_ms peak_gib check_rel_err cells"
# The database's ragged cells that measured their batch: their lengths as they drew them.
RAGGED_CELLS = """SELECT cell_id, model, dtype, packing, status, drawn_lengths FROM cells
WHERE drawn_lengths IS NOT NULL{where} ORDER BY cell_id"""


class Batch:
    """One batch to run: its model and dtype, its sequences' lengths, and the sweetspot cells that
    ran it (their cell_ids and packings; none for lengths given on the command line)."""

    def __init__(self, model, dtype, lengths, cells=()):
        self.model = model
        self.dtype = dtype
        self.lengths = lengths
        self.cells = list(cells)

    def cells_text(self):
        """"12,13" (the cell_ids), or "-"."""
        return ",".join(str(cell_id) for cell_id, _ in self.cells) or "-"

    def description(self):
        """The '#' line before the batch's rows."""
        real, longest = sum(self.lengths), max(self.lengths)
        cells = ", ".join(f"{cell_id} ({packing})" for cell_id, packing in self.cells)
        return (f"# {self.model} {self.dtype}: {len(self.lengths)} sequences, {real} real tokens, longest {longest}, "
                f"padding {1 - real / (len(self.lengths) * longest):.1%}"
                + (f"; sweetspot cells {cells}" if cells else ""))


def parse_lengths(text, where):
    """The positive integer lengths of `text` (one a line, '#' starts a comment, blank lines skipped), as
    a "file:" lengths axis reads them; BadInput naming `where` and the line otherwise."""
    lengths = []
    for number, line in enumerate(text.splitlines(), 1):
        value = line.split("#", 1)[0].strip()
        if not value:
            continue
        try:
            length = float(value)
        except ValueError:
            length = 0.0
        if not length.is_integer() or not 1 <= length <= 1e9:
            raise BadInput(f"{where}:{number}: expected a positive integer length, got '{value}'")
        lengths.append(int(length))
    if not lengths:
        raise BadInput(f"{where} holds no length")
    return lengths


def lengths_file(path):
    try:
        with open(path, encoding="utf-8") as f:
            return parse_lengths(f.read(), path)
    except OSError as e:
        raise BadInput(f"lengths file {path} cannot be read ({e.strerror})") from e


def lengths_list(text):
    return parse_lengths(text.replace(",", "\n"), "--lengths")


def database_batches(path, cell=None):
    """The batches of the database's ok ragged cells, one per distinct (model, dtype, drawn lengths), in
    the order of their first cell; or the one batch of `cell` (a cell_id), whatever its status."""
    if not os.path.isfile(path):
        raise BadInput(f"no such database: {path}")
    con, tables = connect(path)
    try:
        if "cells" not in tables:
            raise BadInput(f"{path} is not a sweetspot results database (it has no cells table)")
        if "drawn_lengths" not in {row[1] for row in con.execute("PRAGMA table_info(cells)")}:
            raise BadInput(f"{path} stores no drawn lengths (schema 26 or older): `sweetspot merge -o NEW.db {path}` "
                           "writes a copy at the current schema, which draws each ragged cell's lengths again")
        if cell is None:
            rows = con.execute(RAGGED_CELLS.format(where=" AND status = 'ok'")).fetchall()
        else:
            rows = con.execute(RAGGED_CELLS.format(where=" AND cell_id = ?"), (cell,)).fetchall()
            if not rows:
                found = con.execute("SELECT lengths, status FROM cells WHERE cell_id = ?", (cell,)).fetchone()
                if found is None:
                    raise BadInput(f"{path} has no cell {cell}")
                raise BadInput(f"cell {cell} stored no drawn lengths: its lengths are '{found[0]}' (a rectangular "
                               f"batch when 'fixed') and its status {found[1]} (a cell that measured nothing stores "
                               "none)")
    finally:
        con.close()
    batches = {}
    for cell_id, model, dtype, packing, _, drawn in rows:
        key = (model, dtype, drawn)
        if key not in batches:
            batches[key] = Batch(model, dtype, [int(n) for n in drawn.split(",")])
        batches[key].cells.append((cell_id, packing))
    return list(batches.values())


def lognormal_lengths(spec, batch, seed, clip):
    import torch

    median, sigma = (float(v) for v in spec.split(","))
    low, high = (int(v) for v in clip.split(","))
    gen = torch.Generator().manual_seed(seed)
    z = torch.randn(batch, generator=gen, dtype=torch.float64)
    return [min(max(round(median * math.exp(sigma * float(v))), low), high) for v in z]


def batches_from(a):
    """The batches the options ask for (BadInput for input that cannot be read)."""
    if a.lengths_from:
        return database_batches(a.lengths_from, a.cell)
    if a.lengths:
        lengths = lengths_list(a.lengths)
    elif a.lengths_file:
        lengths = lengths_file(a.lengths_file)
    else:
        lengths = lognormal_lengths(a.lognormal, a.batch, a.seed, a.clip)
    return [Batch(model, a.dtype, lengths) for model in a.models.split(",")]


def padded_inputs(tokens, lengths):
    import torch

    longest = max(lengths)
    ids = torch.zeros(len(lengths), longest, dtype=torch.long, device="cuda")
    mask = torch.zeros(len(lengths), longest, dtype=torch.long, device="cuda")
    for i, (t, n) in enumerate(zip(tokens, lengths)):
        ids[i, :n] = t
        mask[i, :n] = 1
    return {"input_ids": ids, "attention_mask": mask}


def packed_inputs(tokens, lengths, with_mask):
    import torch

    ids = torch.cat(tokens).unsqueeze(0)
    positions = torch.cat([torch.arange(n, device="cuda") for n in lengths]).unsqueeze(0)
    inputs = {"input_ids": ids, "position_ids": positions}
    if with_mask:
        seq_of = torch.cat([torch.full((n,), i, device="cuda") for i, n in enumerate(lengths)])
        same = seq_of[:, None] == seq_of[None, :]
        causal = torch.ones(len(seq_of), len(seq_of), dtype=torch.bool, device="cuda").tril()
        inputs["attention_mask"] = (same & causal)[None, None]
    return inputs


def real_logits(model, inputs, lengths, mode):
    """The logits of each sequence's real tokens, [n, vocab] per sequence."""
    logits = model(**inputs).logits
    if mode == "padded":
        return [logits[i, :n] for i, n in enumerate(lengths)]
    starts = [sum(lengths[:i]) for i in range(len(lengths))]
    return [logits[0, s:s + n] for s, n in zip(starts, lengths)]


def time_ms(model, inputs, warmups, iters):
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for i in range(warmups + iters):
        start.record()
        model(**inputs)
        end.record()
        end.synchronize()
        if i >= warmups:
            samples.append(start.elapsed_time(end))
    q = statistics.quantiles(samples, n=10)
    return statistics.median(samples), q[0], q[-1]


def measure(model, tokens, lengths, mode, alone, a):
    """One way's (rows, logits check, peak GiB, (median, p10, p90) ms) on one batch."""
    import torch

    inputs = padded_inputs(tokens, lengths) if mode == "padded" else \
        packed_inputs(tokens, lengths, with_mask=mode == "packed")
    got = real_logits(model, inputs, lengths, mode)[:a.check]
    err = max(float((g.float() - w).abs().max() / w.abs().max()) for g, w in zip(got, alone))
    del got
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    model(**inputs)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() / 2**30
    return inputs["input_ids"].numel(), err, peak, time_ms(model, inputs, a.warmups, a.iters)


def run_batch(model, vocab, batch, a):
    """Times each of --modes on one batch, printing a line each."""
    import torch

    lengths = batch.lengths
    gen = torch.Generator(device="cuda").manual_seed(a.seed)
    tokens = [torch.randint(0, vocab, (n,), device="cuda", generator=gen) for n in lengths]
    with torch.inference_mode():
        alone = [model(input_ids=t[None]).logits[0].float() for t in tokens[:a.check]]
        for mode in a.modes.split(","):
            try:
                rows, err, peak, (med, p10, p90) = measure(model, tokens, lengths, mode, alone, a)
                line = (f"{batch.model} {batch.dtype} {mode} {sum(lengths)} {rows} {med:.3f} {p10:.3f} {p90:.3f} "
                        f"{peak:.3f} {err:.3e} {batch.cells_text()}")
            except torch.cuda.OutOfMemoryError:
                # A '#' line, which readers of the table skip: the other ways and batches still run.
                line = f"# {batch.model} {batch.dtype} {mode}: out of GPU memory"
            print(line, flush=True)
            torch.cuda.empty_cache()


def run(batches, a):
    """Every batch, each model made once, on the GPU."""
    import torch
    from pytorch_eager import DTYPES, model_maker

    print(HEADER, flush=True)
    made = None
    for batch in sorted(batches, key=lambda b: (b.model, b.dtype)):
        print(batch.description(), flush=True)
        if made is None or made[0] != (batch.model, batch.dtype):
            made = None
            torch.cuda.empty_cache()
            try:
                make, vocab = model_maker(batch.model, "sdpa")
            except KeyError:
                print(f"# left out: pytorch_eager.py has no shape for model {batch.model}", flush=True)
                continue
            torch.manual_seed(0)
            with torch.device("cuda"):
                made = ((batch.model, batch.dtype), make().to(DTYPES[batch.dtype]).eval(), vocab)
        run_batch(made[1], made[2], batch, a)


def arguments(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    given = p.add_mutually_exclusive_group(required=True)
    given.add_argument("--lengths-from", metavar="DB",
                       help="a sweetspot results database: the batches of its ok ragged cells, on their model and "
                            "dtype")
    given.add_argument("--lengths", help="comma-separated lengths")
    given.add_argument("--lengths-file", metavar="FILE", help="one length per line ('#' comments)")
    given.add_argument("--lognormal", metavar="MEDIAN,SIGMA", help="draw --batch lengths (torch's generator, --seed)")
    p.add_argument("--cell", type=int, metavar="ID", help="with --lengths-from: only this cell's batch")
    p.add_argument("--models", help="models to run given lengths on (default llama_1b); not with --lengths-from")
    p.add_argument("--dtype", choices=["fp32", "fp16", "bf16"],
                   help="their dtype (default bf16); not with --lengths-from")
    p.add_argument("--batch", type=int, default=32, help="sequences --lognormal draws")
    p.add_argument("--seed", type=int, default=1, help="seed of --lognormal's draw and of the token ids")
    p.add_argument("--clip", default="16,2048", help="LOW,HIGH for --lognormal")
    p.add_argument("--modes", default="padded,packed,position")
    p.add_argument("--check", type=int, default=4, help="sequences run alone for the logits check")
    p.add_argument("--warmups", type=int, default=3)
    p.add_argument("--iters", type=int, default=10)
    a = p.parse_args(argv)
    if a.cell is not None and not a.lengths_from:
        p.error("--cell names a cell of --lengths-from DB")
    if a.lengths_from and (a.models or a.dtype):
        p.error("--models and --dtype are for lengths given here: with --lengths-from each batch runs on its cells' "
                "model and dtype (--cell ID picks one)")
    a.models = a.models or "llama_1b"
    a.dtype = a.dtype or "bf16"
    return a


def main(argv):
    a = arguments(argv)
    try:
        batches = batches_from(a)
    except BadInput as e:
        print(f"pytorch_packing.py: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not batches:
        print(f"pytorch_packing.py: {a.lengths_from} has no ok cell with drawn lengths (lengths other than 'fixed')",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    run(batches, a)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
