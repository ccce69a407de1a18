"""NumPy mirrors of small Keras models, for acting one env step at a time.

A TensorFlow call costs ~250 µs here whatever the model size, so an MLP policy acting on 8 CartPoles
spends 10x longer in TF's dispatch than in the maths. `NumpyModel` evaluates the same functional graph
(Dense, Flatten, Rescaling layers; a population's StackedDense) with NumPy from weight arrays passed in, in ~25 µs. Models with other
layers (convolutions) have no mirror: TensorFlow is the faster choice for them anyway.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "linear": lambda x: x,
    "tanh": np.tanh,
    "relu": lambda x: np.maximum(x, 0.0),
    "sigmoid": lambda x: 0.5 * (np.tanh(0.5 * x) + 1.0),
    "elu": lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0.0))),
    "softplus": lambda x: np.logaddexp(0.0, x),
}


class NumpyModel:
    """Evaluates a Keras functional model made of Dense/Flatten/Rescaling layers with NumPy.

    Call it with the model's weights (arrays, in `model.weights` order) and a batch of inputs; it returns
    the list of outputs. `NumpyModel.mirror(model)` returns None for a model it can't evaluate, or can't
    evaluate in the precision it computes in (layers of a mixed-precision policy compute in 16 bits).
    """

    def __init__(self, steps: list[tuple[Any, ...]], input_id: int, output_ids: list[int]) -> None:
        self.steps, self.input_id, self.output_ids = steps, input_id, output_ids

    @classmethod
    def mirror(cls, model: Any) -> NumpyModel | None:
        if len(model.inputs) != 1:
            return None
        weight_index = {id(w): i for i, w in enumerate(model.weights)}
        steps = []
        for op in model.operations:
            kind = type(op).__name__
            if kind == "InputLayer":
                continue
            if getattr(op, "compute_dtype", "float32") != "float32":  # 16-bit compute: NumPy would act in float32
                return None
            node = op._inbound_nodes[0]
            if len(node.input_tensors) != 1 or len(node.output_tensors) != 1:
                return None
            src, dst = id(node.input_tensors[0]), id(node.output_tensors[0])
            if kind in ("Dense", "StackedDense"):  # StackedDense: a population's members' layers (models.stacked)
                activation = getattr(op.activation, "__name__", None)
                if activation not in ACTIVATIONS or op.bias is None:
                    return None
                steps.append(("dense" if kind == "Dense" else "stacked", src, dst, weight_index[id(op.kernel)],
                              weight_index[id(op.bias)], ACTIVATIONS[activation]))
            elif kind == "Flatten":
                steps.append(("flatten", src, dst))
            elif kind == "Rescaling" and not np.ndim(op.offset) and not np.ndim(op.scale):
                steps.append(("rescale", src, dst, float(op.scale), float(op.offset)))
            else:
                return None
        return cls(steps, id(model.inputs[0]), [id(t) for t in model.outputs])

    def __call__(self, weights: Sequence[np.ndarray], x: np.ndarray) -> list[np.ndarray]:
        values = {self.input_id: x}
        for step in self.steps:
            kind, src, dst = step[:3]
            h = values[src]
            if kind == "dense":
                h = step[5](h @ weights[step[3]] + weights[step[4]])
            elif kind == "stacked":  # member n's block of rows by its own kernel: [N, B, in] @ [N, in, out]
                kernel, bias = weights[step[3]], weights[step[4]]
                rows = h.reshape(len(kernel), -1, h.shape[-1])
                h = step[5]((rows @ kernel + bias[:, None, :]).reshape(-1, kernel.shape[-1]))
            elif kind == "flatten":
                h = h.reshape(len(h), -1)
            else:
                h = h.astype(np.float32) * step[3] + step[4]
            values[dst] = h
        return [values[i] for i in self.output_ids]
