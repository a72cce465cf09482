"""Predicted against measured peak device memory per cell (the memory estimator's error)."""
import matplotlib.pyplot as plt

from figures.common import Drawn, Skip, backend_color, backends_in

NAME = "peak_memory"
TITLE = "Predicted vs measured peak memory"

# The measured side: device memory in use after the first iteration, CUDA context included.
MEASURED = "device_used_bytes"


def predicted_column(columns):
    """The estimator's peak-device-memory prediction, whatever its final name: predicted_*device* bytes."""
    return next((c for c in columns if c.startswith("predicted") and "device" in c and c.endswith("bytes")), None)


def compared(ok, predicted):
    """The cells with both sides, and the relative error (predicted − measured) ÷ measured of each.
    Apart from drawing, so tests can check them."""
    cells = ok.dropna(subset=[predicted, MEASURED])
    cells = cells[cells[MEASURED] > 0]
    return cells, (cells[predicted] - cells[MEASURED]) / cells[MEASURED]


def render(data):
    predicted = predicted_column(data.cells.columns)
    if predicted is None:
        raise Skip("this database has no predicted peak memory column (predicted_…device…_bytes in cells): the "
                   "memory estimator does not store its predictions yet.")
    cells, error = compared(data.ok, predicted)
    if cells.empty:
        raise Skip(f"no measured cell has both {predicted} and {MEASURED} (GPU cells record the measured side).")
    fig, (ax, err_ax) = plt.subplots(1, 2, figsize=(10.0, 4.2))
    for backend in backends_in(cells):
        mine = cells["backend"] == backend
        ax.scatter(cells.loc[mine, MEASURED] / 2**30, cells.loc[mine, predicted] / 2**30, label=backend,
                   color=backend_color(backend), edgecolor="black", linewidth=0.4)
        err_ax.scatter(cells.loc[mine, MEASURED] / 2**30, 100 * error[mine], color=backend_color(backend),
                       edgecolor="black", linewidth=0.4)
    top = max(cells[MEASURED].max(), cells[predicted].max()) / 2**30 * 1.05
    ax.plot([0, top], [0, top], color="black", linewidth=0.8, label="prediction = measurement")
    ax.set_xlabel("measured peak device memory (GiB)")
    ax.set_ylabel("predicted peak device memory (GiB)")
    ax.legend(loc="upper left", framealpha=0.85)
    for limit in (1, -1):
        err_ax.axhline(limit, color="black", linestyle="--", linewidth=0.8)
    err_ax.set_xlabel("measured peak device memory (GiB)")
    err_ax.set_ylabel("prediction error (%)")
    fig.tight_layout()
    return Drawn(fig, f"The estimator's predicted peak device memory ({predicted}) against the device memory in use "
                      f"after the first iteration ({MEASURED}, CUDA context included), and the relative error; dashed "
                      f"lines: the ±1 % target. {len(cells)} cells, worst error {100 * error.abs().max():.2f} %.")
