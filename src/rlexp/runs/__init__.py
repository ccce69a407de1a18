"""Run dirs and what a run writes into them: the run dir and its lock, checkpoints, crash-safe files, the
training history, evaluations, TensorBoard/W&B tracking, the progress display and the run's logs."""
