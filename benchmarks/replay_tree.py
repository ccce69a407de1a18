"""Where prioritized replay's per-minibatch work can run: the cost of one minibatch's priority work (set the 64
priorities its update left, then draw the next 64 leaves among 100k with their weights) inside a graph update
loop, done (a) by rlexp's way, one numpy_function call into the Numba sum-tree (rlexp.buffers.sumtree), (b) with
TensorFlow ops on a sum-tree held in variables (the same walk: 17 levels of gathers and scatters), (c) in an
XLA-compiled loop that carries the tree as tensors. Beside them, (d) the gradient step the work sits next to:
DQN's CartPole network (256, 256), a batch of 64, Adam, in a plain graph loop. Cases alternate, medians of
`--repeats` rounds of `--batches` minibatches. Writes benchmarks/results/replay_tree.md.

Usage: python benchmarks/replay_tree.py [--repeats 5] [--batches 256]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from current import write_table  # noqa: E402

LEAVES, BATCH = 100_000, 64


def tree_ops(tf, depth: int, first: int):
    """find(sums, masses) and update(sums, mins, leaves, values) on sum and min trees as tensors."""

    def find(sums, masses):
        node = tf.ones_like(masses, tf.int32)
        for _ in range(depth):
            left_sum = tf.gather(sums, 2 * node)
            right = masses >= left_sum
            masses = tf.where(right, masses - left_sum, masses)
            node = 2 * node + tf.cast(right, tf.int32)
        return node - first

    def update(sums, mins, leaves, values):
        node = first + leaves
        sums = tf.tensor_scatter_nd_update(sums, node[:, None], values)
        mins = tf.tensor_scatter_nd_update(mins, node[:, None], values)
        for _ in range(depth):
            node //= 2
            children = tf.stack([2 * node, 2 * node + 1], axis=1)
            sums = tf.tensor_scatter_nd_update(sums, node[:, None], tf.reduce_sum(tf.gather(sums, children), 1))
            mins = tf.tensor_scatter_nd_update(mins, node[:, None], tf.reduce_min(tf.gather(mins, children), 1))
        return sums, mins

    def update_variables(sums, mins, leaves, values):  # in place: a scatter into each variable per level
        node = first + leaves
        sums.scatter_nd_update(node[:, None], values)
        mins.scatter_nd_update(node[:, None], values)
        for _ in range(depth):
            node //= 2
            children = tf.stack([2 * node, 2 * node + 1], axis=1)
            sums.scatter_nd_update(node[:, None], tf.reduce_sum(tf.gather(sums, children), 1))
            mins.scatter_nd_update(node[:, None], tf.reduce_min(tf.gather(mins, children), 1))

    return find, update, update_variables


def cases(tf):
    """{name: (loop function of the number of minibatches, its arguments)}."""
    from rlexp.buffers.sumtree import SumTree

    numpy_tree = SumTree(LEAVES)
    numpy_tree.update(np.arange(LEAVES), np.random.default_rng(0).random(LEAVES) + 0.1)
    rng, rows = np.random.default_rng(1), np.random.default_rng(2).random((LEAVES, 11)).astype(np.float32)
    find, update, update_variables = tree_ops(tf, numpy_tree.depth, numpy_tree.first_leaf)
    sums, mins = tf.constant(numpy_tree.sums), tf.constant(numpy_tree.mins)
    sums_var, mins_var = tf.Variable(sums), tf.Variable(mins)

    def numpy_step(leaves, errors):  # rlexp's per-minibatch call: set priorities, draw the next batch and its rows
        numpy_tree.update(leaves, np.abs(errors) + 1e-6)
        masses = (np.arange(BATCH) + rng.random(BATCH)) * (numpy_tree.total / BATCH)
        drawn = np.minimum(numpy_tree.find(masses), LEAVES - 1)
        weights = (numpy_tree.min / numpy_tree.leaves(drawn)) ** 0.5
        return drawn, np.concatenate([rows.take(drawn, axis=0), weights[:, None].astype(np.float32)], axis=1)

    def loop(body, state):
        def run(n):
            return tf.while_loop(lambda g, *_: g < n, lambda g, *s: (g + 1, *body(g, *s)), (tf.constant(0), *state))
        return run

    def crossing(g, leaves, total):
        errors = tf.random.uniform([BATCH], dtype=tf.float64)
        drawn, block = tf.numpy_function(numpy_step, [leaves, errors], [tf.int64, tf.float32], stateful=True)
        drawn.set_shape([BATCH])
        return drawn, total + tf.reduce_sum(block)

    def variables(g, leaves, total):
        errors = tf.random.uniform([BATCH], dtype=tf.float64)
        update_variables(sums_var, mins_var, leaves, errors)  # ordered before the reads below (automatic
        masses = (tf.range(BATCH, dtype=tf.float64) + tf.random.uniform([BATCH], dtype=tf.float64)) * (
            sums_var[1] / BATCH)                               # control dependencies on the variables)
        drawn = find(sums_var, masses)
        weights = (mins_var[1] / tf.gather(sums_var, numpy_tree.first_leaf + drawn)) ** 0.5
        return drawn, total + tf.reduce_sum(tf.gather(rows, drawn)) + tf.cast(tf.reduce_sum(weights), tf.float32)

    def carried(g, leaves, total, tree_sums, tree_mins):
        errors = tf.random.uniform([BATCH], dtype=tf.float64)
        tree_sums, tree_mins = update(tree_sums, tree_mins, leaves, errors)
        masses = (tf.range(BATCH, dtype=tf.float64) + tf.random.uniform([BATCH], dtype=tf.float64)) * (
            tree_sums[1] / BATCH)
        drawn = find(tree_sums, masses)
        weights = (tree_mins[1] / tf.gather(tree_sums, numpy_tree.first_leaf + drawn)) ** 0.5
        total += tf.reduce_sum(tf.gather(rows, drawn)) + tf.cast(tf.reduce_sum(weights), tf.float32)
        return drawn, total, tree_sums, tree_mins

    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(256, activation="relu"),
                                 tf.keras.layers.Dense(256, activation="relu"), tf.keras.layers.Dense(2)])
    optimizer = tf.keras.optimizers.Adam(1e-3)
    optimizer.build(model.trainable_variables)
    observations = tf.constant(rows[:, :4])

    def gradient_step(g, leaves, total):
        batch = tf.gather(observations, tf.random.uniform([BATCH], 0, LEAVES, tf.int32))
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.reduce_sum(model(batch), 1) - 1.0))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return leaves, total + loss

    start = (tf.zeros([BATCH], tf.int64), tf.constant(0.0))
    start32 = (tf.zeros([BATCH], tf.int32), tf.constant(0.0))
    return {
        "(a) numpy_function + Numba tree (rlexp)": tf.function(loop(crossing, start), autograph=False),
        "(b) TF ops, tree in variables (scatter in place)": tf.function(loop(variables, start32), autograph=False),
        "(c) XLA loop, tree carried as tensors": tf.function(loop(carried, (*start32, sums, mins)), autograph=False,
                                                             jit_compile=True),
        "(d) the gradient step (DQN CartPole network)": tf.function(loop(gradient_step, start32), autograph=False),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batches", type=int, default=256)
    opts = parser.parse_args()
    import tensorflow as tf

    loops, micros, first = cases(tf), {}, {}
    for name, run in loops.items():
        start = time.perf_counter()
        run(tf.constant(2))
        first[name] = time.perf_counter() - start
    for _ in range(opts.repeats):
        for name, run in loops.items():
            start = time.perf_counter()
            run(tf.constant(opts.batches))
            micros.setdefault(name, []).append((time.perf_counter() - start) / opts.batches * 1e6)
    step = statistics.median(micros["(d) the gradient step (DQN CartPole network)"])
    lines = ["| per minibatch | µs (each round) | median µs | / gradient step | first call s |",
             "|---|---|---:|---:|---:|"]
    for name, values in micros.items():
        lines.append(f"| {name} | {' / '.join(f'{v:,.0f}' for v in values)} | {statistics.median(values):,.0f} | "
                     f"{statistics.median(values) / step:.2f} | {first[name]:.2f} |")
    body = (f"One minibatch's priority work ({BATCH} priorities set, {BATCH} leaves of {LEAVES:,} drawn with their "
            f"weights and rows) in a graph loop of {opts.batches}, {opts.repeats} rounds, cases alternating; (d) is "
            "the gradient step it sits next to in DQN's update loop.\n\n" + "\n".join(lines))
    print(body)
    print(write_table("replay_tree", "Prioritized replay: where the per-minibatch priority work can run", body))


if __name__ == "__main__":
    main()
