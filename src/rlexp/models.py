"""Keras models from YAML presets (conf/model/): shared trunk, per-head towers and output heads."""
from __future__ import annotations

import math
from typing import Any, Mapping

import keras
import numpy as np

from rlexp.errors import UserError

LAYER_TYPES = ("dense", "conv", "flatten")
INITIALIZERS = ("orthogonal", "glorot_uniform")


def initializer(name: str, gain: float) -> keras.initializers.Initializer:
    """Orthogonal or Glorot-uniform initializer scaled by `gain`."""
    if name == "orthogonal":
        return keras.initializers.Orthogonal(gain=gain)
    if name == "glorot_uniform":  # Glorot uniform is VarianceScaling(1, fan_avg, uniform); gain scales the std
        return keras.initializers.VarianceScaling(scale=gain**2, mode="fan_avg", distribution="uniform")
    raise UserError(f"model initializer {name!r} is unknown; use one of {', '.join(INITIALIZERS)}")


def _make_layer(spec: Mapping[str, Any], defaults: Mapping[str, Any], units: int | None = None,
                name: str | None = None) -> keras.layers.Layer:
    kind = spec.get("type", "dense")
    init = initializer(spec.get("initializer", defaults["initializer"]), float(spec.get("gain", defaults["gain"])))
    if kind == "dense":
        return keras.layers.Dense(units or int(spec["units"]), activation=spec.get("activation"),
                                  kernel_initializer=init, name=name)
    if kind == "conv":
        return keras.layers.Conv2D(int(spec["filters"]), int(spec["kernel"]), strides=int(spec.get("stride", 1)),
                                   padding=spec.get("padding", "valid"), activation=spec.get("activation"),
                                   kernel_initializer=init, name=name)
    if kind == "flatten":
        return keras.layers.Flatten(name=name)
    raise UserError(f"model layer type {kind!r} is unknown; use one of {', '.join(LAYER_TYPES)}")


def build_model(preset: Mapping[str, Any], input_shape: tuple[int, ...], heads: Mapping[str, int],
                input_dtype: Any = np.float32, channels_first: bool = False, name: str = "model",
                latent_of: str | None = None) -> keras.Model:
    """Build a functional Keras model from a preset.

    preset: `layers` (dicts with type, units/filters, activation, `common`, `output`), `initializer`, `gain`,
        `heads` (per-head overrides of the output layer, e.g. a small policy gain).
    input_shape: observation shape; uint8 inputs are scaled to [0, 1].
    heads: output name -> units, in the order of the model's outputs (e.g. {"policy": 2, "value": 1}).
    channels_first: observations are stacked frames (N, H, W); they are moved to channels-last for Conv2D.
    latent_of: also output the features that feed this head's output layer (last, e.g. for gSDE).
    """
    layers = list(preset.get("layers") or [])
    defaults = {"initializer": preset.get("initializer", "orthogonal"), "gain": preset.get("gain", 1.0)}
    outputs = [spec for spec in layers if spec.get("output")]
    if len(outputs) != 1 or not layers[-1].get("output"):
        raise UserError(f"model preset {preset.get('name')!r} needs exactly one `output: true` layer, the last one")
    has_conv = any(spec.get("type") == "conv" for spec in layers)
    if has_conv and len(input_shape) < 2:
        raise UserError(f"model={preset.get('name')} has conv layers but the observations are vectors of shape "
                        f"{tuple(input_shape)}; use model=mlp (or model=auto)")
    inputs = keras.Input(shape=tuple(input_shape), dtype="uint8" if input_dtype == np.uint8 else "float32")
    x = inputs
    if input_dtype == np.uint8:
        x = keras.layers.Rescaling(1.0 / 255.0)(x)
    if has_conv:
        if channels_first:
            x = keras.layers.Permute((2, 3, 1))(x)
        elif len(input_shape) == 2:
            x = keras.layers.Reshape((*input_shape, 1))(x)
    elif len(input_shape) > 1:
        x = keras.layers.Flatten()(x)
    hidden = layers[:-1]
    started_towers = False
    for spec in hidden:
        if spec.get("common"):
            if started_towers:
                raise UserError("model preset: `common: true` layers must come before the per-head layers")
            x = _make_layer(spec, defaults)(x)
        else:
            started_towers = True
    tower = [spec for spec in hidden if not spec.get("common")]
    head_overrides = preset.get("heads") or {}
    results, latent = [], None
    for head, units in heads.items():
        h = x
        for spec in tower:
            h = _make_layer(spec, defaults)(h)
        spec = {**layers[-1], **dict(head_overrides.get(head) or {})}
        results.append(_make_layer(spec, defaults, units=int(units), name=head)(h))
        latent = h if head == latent_of else latent
    if latent_of is not None:
        results.append(latent)
    return keras.Model(inputs, results, name=name)


def param_count(model: keras.Model) -> int:
    return int(sum(math.prod(w.shape) for w in model.weights))
