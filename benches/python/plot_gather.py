"""Plots the gather rows of bench_vs_reference.py's --json output: one bar
pair (loaderx 1.7.2, ours) per row, plus the decode ceiling of the same
frames for compressed rows, the ratio ours / ref printed beside it (and ours
/ ceiling where there is one).

    target/bench-venv/bin/python benches/python/plot_gather.py rows.json docs/python-gather.png

Needs matplotlib (a bench-only tool: install it into a bench venv, never into
the package's dependencies).
"""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src, dst):
    with open(src) as f:
        rows = [r for r in json.load(f) if "gather" in r["row"]]
    dense = [r for r in rows if r["unit"] == "MiB/s"]
    ragged = [r for r in rows if r["unit"] != "MiB/s"]
    fig, axes = plt.subplots(2, 1, figsize=(9, 7.5),
                             gridspec_kw={"height_ratios": [len(dense), max(1, len(ragged))]})
    for ax, part, unit in ((axes[0], dense, "MiB/s"), (axes[1], ragged, "k records/s")):
        labels = [r["row"].replace("dense gather ", "").replace("ragged gather ", "ragged ")
                  for r in part]
        y = range(len(part))
        ax.barh([k + 0.27 for k in y], [r["ref"] for r in part], 0.27,
                label="loaderx 1.7.2", color="#999999")
        ax.barh([k for k in y], [r["ours"] for r in part], 0.27,
                label="ours", color="#1f77b4")
        ax.barh([k - 0.27 for k in y], [r.get("ceiling", 0) for r in part], 0.27,
                label="decode ceiling (same frames, every core)", color="#ff7f0e")
        for k, r in zip(y, part):
            note = f"{r['ratio']:.2f}x"
            if "ours_vs_ceiling" in r:
                note += f" (ceiling x{r['ours_vs_ceiling']:.2f})"
            top = max(r["ours"], r["ref"], r.get("ceiling", 0))
            ax.text(top * 1.01, k, note, va="center")
        ax.set_yticks(list(y), labels)
        ax.invert_yaxis()
        ax.set_xlabel(unit)
        ax.set_xlim(0, max(max(r["ours"], r["ref"], r.get("ceiling", 0)) for r in part) * 1.35)
    axes[0].set_title("Python gather, 256 records per batch: ours vs loaderx 1.7.2\n(interleaved rounds, medians)")
    axes[0].legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    main(*sys.argv[1:3])
