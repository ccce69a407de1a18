"""Model building from presets: shapes, shared trunk, initialisers, errors."""
import numpy as np
import pytest
import yaml
from importlib import resources

from rlexp.errors import UserError
from rlexp.models.networks import build_model


def preset(name):
    return yaml.safe_load(resources.files("rlexp.conf").joinpath("model", f"{name}.yaml").read_text())


def test_mlp_builds_separate_towers_per_head():
    model = build_model(preset("mlp"), (4,), {"policy": 2, "value": 1})
    out = model(np.zeros((3, 4), np.float32))
    assert [tuple(o.shape) for o in out] == [(3, 2), (3, 1)]
    dense = [l for l in model.layers if l.__class__.__name__ == "Dense"]
    assert len(dense) == 6  # 2 hidden layers per head + 2 heads


def test_cnn_shares_the_trunk_and_scales_uint8():
    model = build_model(preset("nature_cnn"), (4, 84, 84), {"policy": 6, "value": 1}, input_dtype=np.uint8,
                        channels_first=True)
    out = model(np.zeros((2, 4, 84, 84), np.uint8))
    assert [tuple(o.shape) for o in out] == [(2, 6), (2, 1)]
    assert sum(l.__class__.__name__ == "Conv2D" for l in model.layers) == 3
    assert sum(l.__class__.__name__ == "Dense" for l in model.layers) == 3  # shared 512 + 2 heads
    assert model.count_params() == 1_687_719  # Nature CNN with 6 + 1 outputs


def test_orthogonal_gain_and_head_override():
    model = build_model(preset("mlp"), (64,), {"policy": 64, "value": 1})
    hidden = model.layers[1].kernel.numpy()  # first hidden layer: 64x64 orthogonal, gain sqrt(2)
    np.testing.assert_allclose(hidden.T @ hidden, 2.0 * np.eye(64), atol=1e-4)
    policy = model.get_layer("policy").kernel.numpy()
    np.testing.assert_allclose(policy.T @ policy, 1e-4 * np.eye(64), atol=1e-6)  # gain 0.01


def test_glorot_uniform_bounds():
    model = build_model(preset("mlp_large"), (8,), {"q": 2})
    kernel = model.layers[1].kernel.numpy()
    limit = np.sqrt(6 / (8 + 256))
    assert np.abs(kernel).max() <= limit and np.abs(kernel).max() > 0.8 * limit


def test_cnn_on_vector_observations_is_a_user_error():
    with pytest.raises(UserError, match="model=mlp"):
        build_model(preset("nature_cnn"), (4,), {"q": 2})


def test_torch_initializer_draws_as_pytorch_defaults():
    """PyTorch's nn.Linear: weights and biases U(-1/sqrt(fan_in), 1/sqrt(fan_in)); nn.LSTM: every weight
    U(-1/sqrt(hidden), 1/sqrt(hidden)) and two such biases, summed in Keras' single bias (no forget offset)."""
    import keras

    keras.backend.clear_session()  # layer names without the numbers earlier models left
    spec = {"name": "t", "initializer": "torch", "layers": [{"type": "lstm", "units": 64, "common": True},
                                                            {"type": "dense", "units": 32, "activation": "relu"},
                                                            {"type": "dense", "output": True}]}
    model = build_model(spec, (5,), {"policy": 3})
    weights = {w.path.split("/", 1)[-1] if "lstm" in w.path else w.path: w.numpy() for w in model.weights}
    bound = {"lstm_cell/kernel": 1 / 8, "lstm_cell/recurrent_kernel": 1 / 8, "dense/kernel": 1 / 8,
             "dense/bias": 1 / 8, "policy/kernel": 1 / np.sqrt(32), "policy/bias": 1 / np.sqrt(32)}
    for name, limit in bound.items():
        w = next(v for k, v in weights.items() if k.endswith(name))
        assert np.abs(w).max() <= limit, name
        if w.size >= 64:  # a uniform's extremes and standard deviation (limit / sqrt(3))
            assert np.abs(w).max() > 0.9 * limit, name
            assert abs(w.std() - limit / np.sqrt(3)) < 0.2 * limit / np.sqrt(3), name
    # each tensor its own draw (as PyTorch's): no bias repeats its kernel's first row, no recurrent kernel the
    # input kernel's first values (one seeded Keras initializer called twice repeats its draws)
    first = lambda name: next(v for k, v in weights.items() if k.endswith(name)).ravel()  # noqa: E731
    for a, b in (("dense/bias", "dense/kernel"), ("policy/bias", "policy/kernel"),
                 ("lstm_cell/recurrent_kernel", "lstm_cell/kernel")):
        n = min(first(a).size, first(b).size)
        assert not np.isclose(first(a)[:n], first(b)[:n]).any(), (a, b)
    bias = next(v for k, v in weights.items() if k.endswith("lstm_cell/bias"))
    assert bias.shape == (256,) and np.abs(bias).max() <= 2 / 8 and np.abs(bias).max() > 1 / 8  # a sum of two
    assert abs(bias.std() - np.sqrt(2) * (1 / 8) / np.sqrt(3)) < 0.2 * np.sqrt(2) * (1 / 8) / np.sqrt(3)
    assert abs(bias[64:128].mean()) < 0.05  # the forget gate's quarter: no +1 offset
    # nn.Conv2d: weights U(-1/sqrt(fan_in)) with fan_in = kernel area x input channels = 8 * 8 * 4 = 256
    conv = build_model({"name": "c", "initializer": "torch", "layers": [
        {"type": "conv", "filters": 64, "kernel": 8, "stride": 4, "common": True}, {"type": "flatten", "common": True},
        {"type": "dense", "output": True}]}, (84, 84, 4), {"policy": 2})
    kernel = next(w.numpy() for w in conv.weights if w.path.endswith("kernel") and len(w.shape) == 4)
    assert kernel.shape == (8, 8, 4, 64) and np.abs(kernel).max() <= 1 / 16 and np.abs(kernel).max() > 0.99 / 16
    assert abs(kernel.std() - (1 / 16) / np.sqrt(3)) < 0.02 * (1 / 16) / np.sqrt(3)
