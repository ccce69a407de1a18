"""The commands `mode=` dispatches to: train, play/eval, plot, init."""
