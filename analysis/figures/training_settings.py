"""What the training sweet-spot figures compare: a workload (what is trained) and its settings (how
it is trained), told apart by the roles the database's axes declare (analysis/axes.py), so that an
axis added later falls on its side by its role alone. A workload is every workload parameter but
the batch and the variant; a setting is every placement parameter, and the variant; the batch is
what each setting sweeps. Protocol parameters (repeats, iterations, seeds) measure the same thing
again, so the figures pool them."""
from figures.common import value_text

SWEPT = "batch"
# Workload parameters that choose how the same step is computed rather than what: every variant's
# gradients are the baseline's within the dtype's tolerance, so a variant is one more way to train
# the workload, to set beside the others.
SAME_RESULT = ("variant",)
# Settings whose values name themselves in a label ("device, tempo"); the others are named with
# their parameter ("budget 50%").
SELF_NAMED = ("backend", "variant")
# What a workload's label names first, then any other workload parameter that differs.
WORKLOAD_NAMED = ("model", "dtype", "seq")


def workload_axes(axes, cells):
    """The parameters (in the axes' order) whose values make a workload."""
    return [p for p in axes.parameters if p in axes.workload and p not in (SWEPT, *SAME_RESULT) and p in cells]


def setting_axes(axes, cells):
    """The parameters whose values make a setting of a workload: those that name themselves first,
    then the others in the axes' order."""
    found = [p for p in axes.parameters if p in cells and p != SWEPT
             and (p in SAME_RESULT or (p in axes.identity and p not in axes.workload))]
    return [p for p in SELF_NAMED if p in found] + [p for p in found if p not in SELF_NAMED]


def differs(values):
    return values.astype(str).nunique() > 1


def named_settings(cells, axes):
    """The setting parameters a label names: the backend and the variant, and every other one that
    takes more than one value among `cells` (so a setting's label is the same in every panel)."""
    return [p for p in setting_axes(axes, cells) if p in SELF_NAMED or differs(cells[p])]


def setting_label(cell, names):
    """"device, tempo, budget 50%": the cell's values of the setting parameters `names`."""
    return ", ".join(value_text(cell[n]) if n in SELF_NAMED else f"{n} {value_text(cell[n])}" for n in names)


def workload_label(cell, cells, axes):
    """"gpt2_1.5b bf16, seq 1024, dropout 0.1": the cell's model, dtype and sequence length, and its
    value of each other workload parameter that differs among `cells`."""
    others = [p for p in workload_axes(axes, cells) if p not in WORKLOAD_NAMED and differs(cells[p])]
    return (f"{cell['model']} {cell['dtype']}, seq {value_text(cell['seq'])}"
            + "".join(f", {p} {value_text(cell[p])}" for p in others))


def by_workload(cells, axes):
    """[(label, the workload's cells)] for each workload among `cells`, in order."""
    key = workload_axes(axes, cells)
    return [(workload_label(group.iloc[0], cells, axes), group)
            for _, group in cells.groupby(key, dropna=False, sort=True)]


def by_setting(cells, axes, names):
    """[(label, the setting's cells)] for each setting among `cells` (one workload's), in order; the
    label names the parameters `names` (named_settings of every cell the figure draws)."""
    key = setting_axes(axes, cells)
    return [(setting_label(group.iloc[0], names), group) for _, group in cells.groupby(key, dropna=False, sort=True)]
