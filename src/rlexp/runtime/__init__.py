"""The process rlexp runs in: TensorFlow imported without its noise, XLA's compile cache between runs, and
sweep trials forked from a preloaded forkserver."""
