"""Hyperparameter sweeps: rlexp's Optuna sweeper (`--multirun`) and the trial side of pruning.

The sweeper (selected by default in conf/config.yaml; the Hydra plugin in hydra_plugins/rlexp_sweeper
registers it) runs on Optuna directly. Its parts:
- `space`: Hydra's sweep grammar as Optuna distributions; comma lists alone are a grid, each point run once;
- `settings`: hydra.sweeper.* checked before anything is written (a wrong one is one line) and the sampler;
- `storage`: SQLite in the sweep dir by default, a journal file or PostgreSQL for many workers; the claim lock
  under which workers take trials; heartbeats that tell a killed sweep's trials;
- `scheduler`: job slots that free the moment a job ends (each trial's seeds are jobs like any other);
- `pruning`: the pruners and the reporter inside each trial's process (only unfinished trials are pruned);
- `study`: the loop (ask a trial under the lock, run its seeds, tell the study as its last seed ends), the
  step budget, the confirmation round;
- `report`: optimization_results.yaml, trials.csv, tuned/best.yaml, plots and the command that trains the best.
"""
import warnings

import optuna

optuna.logging.set_verbosity(optuna.logging.WARNING)  # our own one line per trial instead
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)  # enqueue_trial, plots, heartbeat
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed")  # our own heartbeat thread sends them

from rlexp.sweep.pruning import (PruningReporter, curve_objectives, halving_rungs,  # noqa: E402
                                 make_pruner, trial_metrics, trial_reporter, trial_spec)
from rlexp.sweep.report import params_of
from rlexp.sweep.settings import check_settings, make_sampler
from rlexp.sweep.space import baseline_params, describe, grid_points, search_space, sweep_hash
from rlexp.sweep.storage import make_storage, storage_url
from rlexp.sweep.study import OptunaSweep

__all__ = ["OptunaSweep", "PruningReporter", "baseline_params", "check_settings", "curve_objectives", "describe",
           "grid_points", "halving_rungs", "make_pruner", "make_sampler", "make_storage", "params_of", "search_space",
           "storage_url", "sweep_hash", "trial_metrics", "trial_reporter", "trial_spec"]
