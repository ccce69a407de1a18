"""Prioritized replay's update phase for the off-policy family (DQN, DQfD): each batch drawn, and weighted, with the
priorities the previous update's TD errors left (Schaul et al. 2016, Algorithm 1), inside one graph call."""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from rlexp.agents.distributions import no_autograph


class PrioritizedUpdates:
    """`run_prioritized_updates` for `OffPolicyAgent` (its buffer, `normalize_batch`, `update_batch`, `metric_names`)."""

    def prioritized_batch(self, beta: float) -> dict[str, np.ndarray]:
        """One batch from the prioritized buffer (normalised), with its `indices` and importance `weights`."""
        return self.normalize_batch(self.buffer.sample(1, beta=beta))

    def run_prioritized_updates(self, n_batches: int) -> dict[str, float]:
        """`n_batches` updates in one graph call, as Schaul et al. (2016, Algorithm 1) do them: each on a batch
        drawn, and weighted, with the priorities as the previous update's TD errors left them, beta annealed
        over the run; the mean metrics."""
        beta = self.buffer.beta_at(self.steps, self.max_steps)
        first = self.prioritized_batch(beta)
        columns_by_dtype: dict[np.dtype, list[tuple[str, tuple[int, ...]]]] = {}
        for key in sorted(first):  # the order the traced graph unpacks, whatever the buffer's order
            columns_by_dtype.setdefault(first[key].dtype, []).append((key, first[key].shape[1:]))
        self._layout = list(columns_by_dtype.items())
        self._no_batch = [np.zeros_like(block) for block in self._pack(first)]  # the last update's successor
        if not hasattr(self, "_prioritized_fn"):
            self._prioritized_fn = tf.function(self._prioritized_steps, autograph=False)
        metrics = self._prioritized_fn(first, tf.constant(n_batches), tf.constant(beta, tf.float64))
        return {k: float(v) for k, v in metrics.items()}

    def _pack(self, batch: dict[str, np.ndarray]) -> list[np.ndarray]:
        """A batch's columns as one 2-D block per dtype of `_layout` (rows by the columns' widths, in its
        order): each numpy_function output costs ~4 µs, more than splitting a block in the graph."""
        return [np.concatenate([batch[key].reshape(len(batch[key]), -1).astype(dtype, copy=False)
                                for key, _ in columns], axis=1) for dtype, columns in self._layout]

    def _reprioritize_and_sample(self, indices: np.ndarray, td_errors: np.ndarray, beta: np.ndarray,
                                 more: np.ndarray) -> list[np.ndarray]:
        """Set the priorities of the batch just used from its TD errors; then the next batch, drawn with them
        (if `more`), packed (`_pack`)."""
        self.buffer.update_priorities(indices, td_errors)
        return self._pack(self.prioritized_batch(float(beta))) if more else self._no_batch

    @no_autograph
    def _prioritized_steps(self, batch: dict[str, tf.Tensor], steps: tf.Tensor,
                           beta: tf.Tensor) -> dict[str, tf.Tensor]:
        """`steps` updates, the first on `batch`; after each, a NumPy call sets the priorities of its batch
        from its |TD errors| and draws the next one. A `tf.while_loop`, as `_gradient_steps`."""
        rows, layout = batch["indices"].shape[0], self._layout

        def unpack(blocks: list[tf.Tensor]) -> dict[str, tf.Tensor]:
            columns = {}
            for block, (_, keys_shapes) in zip(blocks, layout):
                widths = [int(np.prod(shape)) for _, shape in keys_shapes]
                block.set_shape((rows, sum(widths)))
                for part, (key, shape) in zip(tf.split(block, widths, axis=1), keys_shapes):
                    columns[key] = tf.reshape(part, (rows, *shape))
            return columns

        def gradient_step(g, totals, batch):
            metrics = self.update_batch({k: v for k, v in batch.items() if k != "indices"})
            errors = tf.cast(tf.abs(metrics["td_errors"]), tf.float32)
            inputs = [batch["indices"], errors, beta, g + 1 < steps]
            blocks = tf.numpy_function(self._reprioritize_and_sample, inputs, [tf.as_dtype(d) for d, _ in layout],
                                       stateful=True)
            following = unpack(blocks)
            return g + 1, {k: totals[k] + metrics[k] for k in totals}, {k: following[k] for k in batch}

        totals = {k: tf.constant(0.0) for k in self.metric_names}
        _, totals, _ = tf.while_loop(lambda g, *_: g < steps, gradient_step, (tf.constant(0), totals, batch))
        return {k: v / tf.cast(tf.maximum(steps, 1), tf.float32) for k, v in totals.items()}
