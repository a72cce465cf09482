"""Predicted against measured peak device memory per cell (the memory estimator's error)."""
import matplotlib.pyplot as plt
import pandas as pd

from bound import UVM_BACKENDS
from figures.common import Drawn, Skip, backend_color, backends_in, title_figure, workload_title

NAME = "peak_memory"
TITLE = "Predicted vs measured peak memory"

# The measured side: NVML's peak (the device's used memory gained from before the cell's CUDA
# context to its peak, schema 6 on) where the cell has one, else the device memory in use after
# the first iteration (CUDA context included).
NVML_PEAK = "gpu_peak_bytes"
USED_AFTER_FIRST = "device_used_bytes"
MEASURED = "measured_peak"
# The estimator's prediction of what the cell allocates, stored before it ran.
PREDICTED = "predicted_alloc_bytes"
# The estimator's predicted peak, stored before the cell ran (schema 6 on, once the database held a
# cell to calibrate it): the allocations plus what the cells before it measured beyond theirs.
STORED_PEAK = "predicted_peak_bytes"
# What a cell allocated, as it measured it: the used memory beyond them is the CUDA context and
# the libraries', fixed per GPU and driver.
ALLOCATED = ("device_weight_bytes", "activation_bytes")
TRAINING_STATE = "training_state_bytes"


def with_measured(ok):
    """The cells with MEASURED: NVML's peak where there is one, else the used memory."""
    if USED_AFTER_FIRST not in ok:
        return ok.assign(**{MEASURED: float("nan")})
    measured = ok[USED_AFTER_FIRST]
    if NVML_PEAK in ok:
        measured = ok[NVML_PEAK].where(ok[NVML_PEAK].notna(), measured)
    return ok.assign(**{MEASURED: measured})


def fixed_costs(ok):
    """Per cell with a measured fixed cost: device memory in use beyond its own allocations, for the
    GPU cells whose weights are not managed memory (a UVM cell's managed pages come and go)."""
    own = ok[~ok["backend"].isin(UVM_BACKENDS + ("host",))].dropna(subset=[MEASURED, *ALLOCATED])
    # A training cell's backend also held its gradients and optimizer state.
    state = own[TRAINING_STATE].fillna(0) if TRAINING_STATE in own else 0
    return own.assign(fixed=own[MEASURED] - own[ALLOCATED[0]] - own[ALLOCATED[1]] - state)


def predicted_peaks(ok):
    """The cells with both sides, with predicted_peak: the estimator's stored peak where the cell has one;
    else, for cells whose weights are not managed memory, the predicted allocations plus the largest
    fixed cost measured on the other cells of the same GPU and driver (its device cells where there
    are any; the cell's own measurement is left out of its prediction). A UVM cell's peak also holds the managed pages the driver keeps,
    which only the estimator's stored peak predicts, so UVM cells without one are left out, as are
    cells with no other cell to measure the fixed cost on. Apart from drawing, so tests can check
    them."""
    if PREDICTED not in ok or USED_AFTER_FIRST not in ok or any(c not in ok for c in ALLOCATED):
        return ok.iloc[0:0].assign(predicted_peak=pd.Series(dtype=float))
    ok = with_measured(ok)
    costs = fixed_costs(ok)
    cells = ok.dropna(subset=[PREDICTED, MEASURED])
    cells = cells[cells[MEASURED] > 0].copy()

    def fixed_for(cell):
        others = costs[(costs["gpu_name"] == cell["gpu_name"]) & (costs["gpu_driver"] == cell["gpu_driver"])
                       & (costs["cell_id"] != cell["cell_id"])]
        # An explicit-copy cell's memory beyond its allocations also holds the GPU's page tables for
        # its pinned weights (up to 0.17 GiB for GPT-3 13B), so device cells measure the fixed cost
        # where there are any, as the estimator's calibration does.
        device = others[others["backend"] == "device"]
        if len(device):
            others = device
        return others["fixed"].max() if len(others) else float("nan")

    cells["predicted_peak"] = [float("nan") if cell["backend"] in UVM_BACKENDS else cell[PREDICTED] + fixed_for(cell)
                               for _, cell in cells.iterrows()]
    if STORED_PEAK in cells:
        cells["predicted_peak"] = cells[STORED_PEAK].where(cells[STORED_PEAK].notna(), cells["predicted_peak"])
    return cells.dropna(subset=["predicted_peak"])


def compared(ok):
    """The cells with a predicted peak, and the relative error (predicted − measured) ÷ measured of each."""
    cells = predicted_peaks(ok)
    return cells, (cells["predicted_peak"] - cells[MEASURED]) / cells[MEASURED]


def render(data):
    if PREDICTED not in data.cells:
        raise Skip(f"this database has no {PREDICTED} column: it was written before sweetspot stored the "
                   "estimator's predictions (schema version 5).")
    cells, error = compared(data.ok)
    if cells.empty:
        raise Skip(f"no measured GPU cell has both {PREDICTED} and a measured peak together with another cell of its "
                   "GPU and driver to measure the CUDA context and libraries' memory on (a device or explicit-copy "
                   "cell that recorded its allocations).")
    fig, (ax, err_ax) = plt.subplots(1, 2, figsize=(10.0, 4.2))
    for backend in backends_in(cells):
        mine = cells["backend"] == backend
        ax.scatter(cells.loc[mine, MEASURED] / 2**30, cells.loc[mine, "predicted_peak"] / 2**30, label=backend,
                   color=backend_color(backend), edgecolor="black", linewidth=0.4)
        err_ax.scatter(cells.loc[mine, MEASURED] / 2**30, 100 * error[mine], color=backend_color(backend),
                       edgecolor="black", linewidth=0.4)
    top = max(cells[MEASURED].max(), cells["predicted_peak"].max()) / 2**30 * 1.05
    ax.plot([0, top], [0, top], color="black", linewidth=0.8, label="prediction = measurement")
    ax.set_xlabel("measured peak device memory (GiB)")
    ax.set_ylabel("predicted peak device memory (GiB)")
    ax.legend(loc="upper left", framealpha=0.85)
    for limit in (1, -1):
        err_ax.axhline(limit, color="black", linestyle="--", linewidth=0.8, label="±1 % target" if limit > 0 else None)
    err_ax.axhline(0, color="black", linewidth=0.6, label="no error")
    err_ax.legend(loc="best", framealpha=0.85)
    err_ax.set_xlabel("measured peak device memory (GiB)")
    err_ax.set_ylabel("prediction error (%)")
    title_figure(fig, workload_title(cells, data.ok, data.db.axes), "one point per cell, coloured by backend")
    fig.tight_layout()
    nvml = int(cells[NVML_PEAK].notna().sum()) if NVML_PEAK in cells else 0
    stored = int(cells[STORED_PEAK].notna().sum()) if STORED_PEAK in cells else 0
    return Drawn(fig, "The estimator's predicted peak device memory against the measured peak, and the relative error; "
                      f"dashed lines: the ±1 % target. Measured: NVML's peak less the memory in use before the cell "
                      f"({NVML_PEAK}, {nvml} cells), else the device memory in use after the first iteration "
                      f"({USED_AFTER_FIRST}, CUDA context included). "
                      f"The prediction is the peak the estimator stored before the cell ran ({STORED_PEAK}, "
                      f"{stored} cells), else what it said the cell would allocate ({PREDICTED}: weights, activations, "
                      "scores, GEMM workspace) plus the CUDA context and libraries' memory measured on the other cells "
                      "of the same GPU and driver (the largest of their used memory beyond their own allocations). "
                      f"{len(cells)} cells, worst error {100 * error.abs().max():.2f} %.")
