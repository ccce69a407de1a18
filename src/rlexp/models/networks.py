"""Keras models from YAML presets (conf/model/): shared trunk, per-head towers and output heads.

A preset may list recurrent layers (`lstm`, `gru`); the model then takes sequences (see `build_model`).
Dict/Tuple observations arrive flattened; the model splits them again and sends each part through its own
encoder (`encoders`: CNN layers for images, dense layers for vectors) before the preset's layers.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import gymnasium as gym
import keras
import numpy as np

from rlexp.errors import UserError
from rlexp.models.batch_renorm import BatchRenorm

LAYER_TYPES = ("dense", "conv", "flatten", "batch_renorm", "lstm", "gru")
RECURRENT_TYPES = ("lstm", "gru")
INITIALIZERS = ("orthogonal", "glorot_uniform", "torch")
# Per-part encoders of Dict/Tuple observations when the preset names none (`encoders: {image:, vector:, <key>:}`).
DEFAULT_ENCODERS = {
    "image": [{"type": "conv", "filters": 32, "kernel": 8, "stride": 4, "activation": "relu"},
              {"type": "conv", "filters": 64, "kernel": 4, "stride": 2, "activation": "relu"},
              {"type": "conv", "filters": 64, "kernel": 3, "stride": 1, "activation": "relu"},
              {"type": "flatten"}],
    "vector": [{"type": "dense", "units": 64, "activation": "tanh"}],
}


def initializer(name: str, gain: float, fan_in: int | None = None) -> keras.initializers.Initializer:
    """Orthogonal or Glorot-uniform initializer scaled by `gain`; `torch`: PyTorch's default for nn.Linear and
    nn.Conv2d, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (what SB3's off-policy networks and policies with
    ortho_init=False start from); a conv layer's fan-in (kernel area x input channels) is Keras' own."""
    if name == "orthogonal":
        return keras.initializers.Orthogonal(gain=gain)
    if name == "glorot_uniform":  # Glorot uniform is VarianceScaling(1, fan_avg, uniform); gain scales the std
        return keras.initializers.VarianceScaling(scale=gain**2, mode="fan_avg", distribution="uniform")
    if name == "torch":
        if fan_in is None:  # U(+-sqrt(3 scale / fan_in)) = U(+-gain / sqrt(fan_in))
            return keras.initializers.VarianceScaling(scale=gain**2 / 3, mode="fan_in", distribution="uniform")
        return keras.initializers.RandomUniform(-gain / np.sqrt(fan_in), gain / np.sqrt(fan_in))
    raise UserError(f"model initializer {name!r} is unknown; use one of {', '.join(INITIALIZERS)}")


class SumOfUniforms(keras.initializers.Initializer):
    """The sum of two U(-limit, limit) draws: PyTorch's LSTM bias, b_ih + b_hh, as Keras' single bias."""

    def __init__(self, limit: float) -> None:
        self.limit = float(limit)  # two initializers: one called twice repeats its draws
        self.first, self.second = (keras.initializers.RandomUniform(-self.limit, self.limit) for _ in range(2))

    def __call__(self, shape, dtype=None):
        return self.first(shape, dtype) + self.second(shape, dtype)

    def get_config(self) -> dict[str, Any]:
        return {"limit": self.limit}


def is_recurrent(preset: Mapping[str, Any]) -> bool:
    """Whether a model preset has LSTM or GRU layers."""
    return any(spec.get("type") in RECURRENT_TYPES for spec in preset.get("layers") or [])


def has_batch_renorm(preset: Mapping[str, Any]) -> bool:
    """Whether a model preset has batch_renorm layers (CrossQ's)."""
    return any(spec.get("type") == "batch_renorm" for spec in preset.get("layers") or [])


def mixed_precision() -> bool:
    return keras.mixed_precision.dtype_policy().name.startswith("mixed")


class EpisodeResetCell(keras.layers.Layer):
    """An LSTM or GRU cell whose state restarts from zeros where an episode starts: its input is a step's
    features with the episode-start flag (0/1) appended as the last entry."""

    def __init__(self, cell: keras.layers.Layer, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cell = cell
        self.state_size, self.output_size = cell.state_size, cell.output_size

    def build(self, input_shape: tuple[int | None, ...]) -> None:
        self.cell.build((input_shape[0], input_shape[-1] - 1))

    def call(self, inputs, states, training: bool = False):
        keep = 1.0 - inputs[:, -1:]
        states = [s * keras.ops.cast(keep, s.dtype) for s in states]
        return self.cell(inputs[:, :-1], states, training=training)


class Builder:
    """Applies layer specs to tensors; in `sequence` mode tensors are [batch, time, ...] (non-dense layers run
    per step) and recurrent layers read the episode-start flags and collect their state inputs/outputs."""

    def __init__(self, defaults: Mapping[str, Any], sequence: bool, starts: Any = None) -> None:
        self.defaults, self.sequence, self.starts = defaults, sequence, starts
        self.state_inputs: list[Any] = []
        self.state_outputs: list[Any] = []

    def per_step(self, layer: keras.layers.Layer) -> keras.layers.Layer:
        return keras.layers.TimeDistributed(layer) if self.sequence else layer

    def make(self, spec: Mapping[str, Any], units: int | None = None, name: str | None = None,
             dtype: str | None = None, fan_in: int | None = None) -> keras.layers.Layer:
        kind = spec.get("type", "dense")
        if kind == "flatten":
            return self.per_step(keras.layers.Flatten(name=name))
        if kind == "batch_renorm":  # (CrossQ's; the agent says when it trains: model(x, training=True))
            return self.per_step(BatchRenorm(momentum=float(spec.get("momentum", 0.01)),
                                             epsilon=float(spec.get("epsilon", 1e-3)),
                                             warmup_steps=int(spec.get("warmup_steps", 100_000)), name=name))
        name_of_init = spec.get("initializer", self.defaults["initializer"])
        gain = float(spec.get("gain", self.defaults["gain"]))
        init = initializer(name_of_init, gain, fan_in)
        if kind == "dense":  # PyTorch draws biases as the weights, apart (one initializer twice repeats its draws)
            bias = initializer(name_of_init, gain, fan_in) if name_of_init == "torch" else "zeros"
            return keras.layers.Dense(units or int(spec["units"]), activation=spec.get("activation"),
                                      kernel_initializer=init, bias_initializer=bias, name=name, dtype=dtype)
        if kind == "conv":
            return self.per_step(keras.layers.Conv2D(
                int(spec["filters"]), int(spec["kernel"]), strides=int(spec.get("stride", 1)),
                padding=spec.get("padding", "valid"), activation=spec.get("activation"), kernel_initializer=init,
                name=name))  # (zero biases: PyTorch draws a conv's as its weights, a small difference at the start)
        raise UserError(f"model layer type {kind!r} is unknown; use one of {', '.join(LAYER_TYPES)}")

    def apply(self, spec: Mapping[str, Any], x: Any) -> Any:
        if spec.get("type") not in RECURRENT_TYPES:
            return self.make(spec, fan_in=x.shape[-1] if spec.get("type", "dense") == "dense" else None)(x)
        units = int(spec["units"])
        name_of_init = spec.get("initializer", self.defaults["initializer"])
        gain = float(spec.get("gain", self.defaults["gain"]))
        init = initializer(name_of_init, gain, units)
        cell_type = keras.layers.LSTMCell if spec["type"] == "lstm" else keras.layers.GRUCell
        if name_of_init == "torch":  # every weight U(+-1/sqrt(units)); the LSTM's single bias two such draws
            # (PyTorch's b_ih + b_hh) and no forget-gate offset (Keras' unit_forget_bias); the GRU keeps two biases
            lstm = spec["type"] == "lstm"
            options = dict(recurrent_initializer=initializer(name_of_init, gain, units),  # each its own draws
                           bias_initializer=SumOfUniforms(1 / np.sqrt(units)) if lstm
                           else initializer(name_of_init, gain, units))
            if lstm:
                options["unit_forget_bias"] = False
        else:
            options = {}
        cell = cell_type(units, kernel_initializer=init, **options)
        states = [keras.Input((units,), name=f"state_{len(self.state_inputs) + i}")
                  for i in range(2 if spec["type"] == "lstm" else 1)]
        self.state_inputs += states
        flags = keras.layers.Reshape((-1, 1))(self.starts)
        x = keras.layers.Concatenate()([x, flags])
        x, *new_states = keras.layers.RNN(EpisodeResetCell(cell), return_sequences=True, return_state=True)(
            x, initial_state=states)
        self.state_outputs += [keras.layers.Activation("linear", dtype="float32")(s) for s in new_states]
        return x

    def reshape(self, x: Any, shape: tuple[int, ...]) -> Any:
        return self.per_step(keras.layers.Reshape(shape))(x)


def _image_input(builder: Builder, x: Any, shape: tuple[int, ...], channels_first: bool) -> Any:
    """Stacked frames (N, H, W) to channels-last, a single-channel (H, W) frame to (H, W, 1)."""
    if channels_first:
        return builder.per_step(keras.layers.Permute((2, 3, 1)))(x)
    if len(shape) == 2:
        return builder.reshape(x, (*shape, 1))
    return x


def _encode_parts(builder: Builder, x: Any, parts: Sequence[tuple[str, gym.Space]],
                  encoders: Mapping[str, Any]) -> Any:
    """Split flattened Dict/Tuple observations into their parts, encode each, concatenate the features."""
    features, start = [], 0
    for key, space in parts:
        size = int(gym.spaces.flatdim(space))
        part = keras.layers.Lambda(lambda t, a=start, b=start + size: t[..., a:b])(x)
        start += size
        image = isinstance(space, gym.spaces.Box) and len(space.shape) >= 2
        layers = encoders.get(key, encoders.get("image" if image else "vector"))
        if image:
            if space.dtype == np.uint8:
                part = keras.layers.Rescaling(1.0 / 255.0)(part)
            part = _image_input(builder, builder.reshape(part, tuple(space.shape)), tuple(space.shape), False)
        for spec in layers or []:
            part = builder.apply(spec, part)
        features.append(part)
    return keras.layers.Concatenate()(features) if len(features) > 1 else features[0]


def build_model(preset: Mapping[str, Any], input_shape: tuple[int, ...], heads: Mapping[str, int],
                input_dtype: Any = np.float32, channels_first: bool = False, name: str = "model",
                latent_of: str | None = None, parts: Sequence[tuple[str, gym.Space]] | None = None) -> keras.Model:
    """Build a functional Keras model from a preset.

    preset: `layers` (dicts with type, units/filters, activation, `common`, `output`), `initializer`, `gain`,
        `heads` (per-head overrides of the output layer, e.g. a small policy gain), `encoders` (Dict/Tuple
        observations: layer lists per observation key, or for all `image` / `vector` parts).
    input_shape: observation shape; uint8 inputs are scaled to [0, 1].
    heads: output name -> units, in the order of the model's outputs (e.g. {"policy": 2, "value": 1}).
    channels_first: observations are stacked frames (N, H, W); they are moved to channels-last for Conv2D.
    latent_of: also output the features that feed this head's output layer (after the heads, e.g. for gSDE).
    parts: the (key, space) leaves of Dict/Tuple observations, which arrive flattened (`observation_parts`).

    With `lstm`/`gru` layers (`units`; `common: true` for one shared by all heads, else one per head) the
    model is recurrent: inputs [obs [batch, time, ...], episode starts [batch, time], *initial states], outputs
    [*heads over time, (latent), *final states]; a state is zeroed at the steps flagged as episode starts.
    Head outputs (and states) are float32 under a mixed-precision policy.
    """
    layers = list(preset.get("layers") or [])
    defaults = {"initializer": preset.get("initializer", "orthogonal"), "gain": preset.get("gain", 1.0)}
    outputs = [spec for spec in layers if spec.get("output")]
    if len(outputs) != 1 or not layers[-1].get("output"):
        raise UserError(f"model preset {preset.get('name')!r} needs exactly one `output: true` layer, the last one")
    for spec in layers:
        if spec.get("type", "dense") not in LAYER_TYPES:
            raise UserError(f"model layer type {spec.get('type')!r} is unknown; use one of {', '.join(LAYER_TYPES)}")
    has_conv = any(spec.get("type") == "conv" for spec in layers)
    if has_conv and (len(input_shape) < 2 or parts):
        raise UserError(f"model={preset.get('name')} has conv layers but the observations are vectors of shape "
                        f"{tuple(input_shape)}; use model=mlp (or model=auto; Dict/Tuple images go through "
                        "`encoders`)")
    sequence = is_recurrent(preset)
    dtype = "uint8" if input_dtype == np.uint8 else "float32"
    inputs = keras.Input(shape=((None,) if sequence else ()) + tuple(input_shape), dtype=dtype, name="obs")
    starts = keras.Input(shape=(None,), name="episode_starts") if sequence else None
    builder = Builder(defaults, sequence, starts)
    x = inputs
    if parts:
        encoders = {**DEFAULT_ENCODERS, **dict(preset.get("encoders") or {})}
        x = _encode_parts(builder, x, parts, encoders)
    else:
        if input_dtype == np.uint8:
            x = keras.layers.Rescaling(1.0 / 255.0)(x)
        if has_conv:
            x = _image_input(builder, x, tuple(input_shape), channels_first)
        elif len(input_shape) > 1:
            x = builder.per_step(keras.layers.Flatten())(x)
    hidden = layers[:-1]
    started_towers = False
    for spec in hidden:
        if spec.get("common"):
            if started_towers:
                raise UserError("model preset: `common: true` layers must come before the per-head layers")
            x = builder.apply(spec, x)
        else:
            started_towers = True
    tower = [spec for spec in hidden if not spec.get("common")]
    head_overrides = preset.get("heads") or {}
    out_dtype = "float32" if mixed_precision() else None
    results, latent = [], None
    for head, units in heads.items():
        h = x
        for spec in tower:
            h = builder.apply(spec, h)
        spec = {**layers[-1], **dict(head_overrides.get(head) or {})}
        results.append(builder.make(spec, units=int(units), name=head, dtype=out_dtype, fan_in=h.shape[-1])(h))
        latent = h if head == latent_of else latent
    if latent_of is not None:
        results.append(keras.layers.Activation("linear", dtype="float32")(latent) if out_dtype else latent)
    if sequence:
        return keras.Model([inputs, starts, *builder.state_inputs], results + builder.state_outputs, name=name)
    return keras.Model(inputs, results, name=name)


def recurrent_state_sizes(model: keras.Model) -> list[int]:
    """Units of each recurrent state input of a model from `build_model` (empty for feed-forward models)."""
    return [int(t.shape[-1]) for t in model.inputs[2:]] if len(model.inputs) > 2 else []


def param_count(model: keras.Model) -> int:
    return int(sum(math.prod(w.shape) for w in model.weights))
