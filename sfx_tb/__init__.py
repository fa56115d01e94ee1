"""sfx_tb: monitoring of sfx experiments without torch.

- ``python -m sfx.tb PATTERN...``: a real TensorBoard over the experiments matching wildcard patterns.
- ``python -m sfx.tb plot PATTERN...``: learning curves, mean and spread over seeds, to PNG/SVG/PDF.
- ``python -m sfx.tb table PATTERN...``: final results per group of seeds, Markdown or CSV; ``--aggregate`` /
  ``--eval``: IQM, mean, median, optimality gap per method over seeds and tasks and P(X > Y) between methods,
  with stratified bootstrap CIs (:mod:`sfx_tb.aggregate`, :mod:`sfx_tb.stats`); ``plot --profile``: performance
  profiles.
- ``python -m sfx.tb evaluate PATTERN...``: ``python -m sfx.enjoy`` on every experiment (its own process), then
  the aggregate table of the evaluation results files.
- In Python (notebooks)::

      from sfx_tb import load_scalars, plot_curves, summary_table
      df = load_scalars("quickstart", dir="train_dir", metrics=["reward", "fps"])
      summary_table(df, "reward")
      plot_curves(df, "reward", out="curves.png")

Nothing here imports torch or the trainer; pandas, matplotlib and tensorboard are imported only by
the functions that need them.
"""

from sfx_tb.curves import aggregate_curves, plot_curves
from sfx_tb.errors import TbError
from sfx_tb.experiments import ExperimentDir, find_experiments, group_by_seed, select_experiments
from sfx_tb.scalars import load_scalars, read_scalar_events
from sfx_tb.table import summary_table, to_markdown

__all__ = [
    "ExperimentDir", "TbError", "aggregate_curves", "find_experiments", "group_by_seed", "load_scalars",
    "plot_curves", "read_scalar_events", "select_experiments", "summary_table", "to_markdown",
]
