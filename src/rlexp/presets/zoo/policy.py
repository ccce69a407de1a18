"""An RL Zoo row's policy (`policy`, `policy_kwargs`) as rlexp's model preset and agent options: every option of
SB3 2.9's policies (ActorCriticPolicy, the recurrent one of sb3-contrib, SAC's, TD3's, DQN's) is translated where
rlexp has it and refused, named, where it does not."""
from __future__ import annotations

import math
from typing import Any

from rlexp.presets.zoo.checks import Problems, as_number
from rlexp.presets.zoo.rows import ZooRow, literal_dict

ON_POLICY = ("a2c", "ppo", "ppo_lstm", "trpo")
SQRT2 = math.sqrt(2.0)
COMMON_OPTIONS = {"net_arch", "activation_fn", "features_extractor_class", "features_extractor_kwargs",
                  "normalize_images", "optimizer_class", "optimizer_kwargs"}
ACTOR_CRITIC_OPTIONS = COMMON_OPTIONS | {"ortho_init", "log_std_init", "full_std", "use_expln", "squash_output",
                                         "share_features_extractor"}
# each SB3 / sb3-contrib policy's keyword arguments (what a row's policy_kwargs may hold)
POLICY_OPTIONS = {
    "a2c": ACTOR_CRITIC_OPTIONS, "ppo": ACTOR_CRITIC_OPTIONS, "trpo": ACTOR_CRITIC_OPTIONS,
    "ppo_lstm": ACTOR_CRITIC_OPTIONS | {"lstm_hidden_size", "n_lstm_layers", "shared_lstm", "enable_critic_lstm",
                                        "lstm_kwargs"},
    "sac": COMMON_OPTIONS | {"log_std_init", "use_expln", "clip_mean", "n_critics", "share_features_extractor"},
    "td3": COMMON_OPTIONS | {"n_critics", "share_features_extractor"},
    "ddpg": COMMON_OPTIONS | {"n_critics", "share_features_extractor"},
    "dqn": COMMON_OPTIONS,
    "qrdqn": COMMON_OPTIONS | {"n_quantiles"},
    "crossq": COMMON_OPTIONS | {"log_std_init", "use_expln", "clip_mean", "n_critics", "share_features_extractor",
                                "batch_norm", "batch_norm_momentum", "batch_norm_eps", "renorm_warmup_steps"},
    "ars": {"net_arch", "activation_fn", "with_bias", "squash_output"},
    "tqc": COMMON_OPTIONS | {"log_std_init", "use_expln", "clip_mean", "n_critics", "n_quantiles",
                             "share_features_extractor"},
}
POLICIES = ("MlpPolicy", "CnnPolicy", "MultiInputPolicy", "MlpLstmPolicy", "CnnLstmPolicy", "LinearPolicy")
ACTIVATIONS = {"ReLU": "relu", "Tanh": "tanh", "GELU": "gelu", "ELU": "elu", "SiLU": "silu",
               "LeakyReLU": "leaky_relu", "Sigmoid": "sigmoid"}
NATURE_CNN = [{"type": "conv", "filters": 32, "kernel": 8, "stride": 4, "activation": "relu", "common": True},
              {"type": "conv", "filters": 64, "kernel": 4, "stride": 2, "activation": "relu", "common": True},
              {"type": "conv", "filters": 64, "kernel": 3, "stride": 1, "activation": "relu", "common": True},
              {"type": "flatten", "common": True},
              {"type": "dense", "units": 512, "activation": "relu", "common": True}]
NUMBER_OPTIONS = {"log_std_init", "clip_mean", "batch_norm_momentum", "batch_norm_eps"}
INTEGER_OPTIONS = {"lstm_hidden_size", "n_lstm_layers", "n_critics", "n_quantiles", "renorm_warmup_steps"}
BOOLEAN_OPTIONS = {"batch_norm", "ortho_init", "full_std", "use_expln", "squash_output", "with_bias", "share_features_extractor",
                   "normalize_images", "shared_lstm", "enable_critic_lstm"}
EXTRACTORS = {"MlpPolicy": "FlattenExtractor", "MlpLstmPolicy": "FlattenExtractor", "CnnPolicy": "NatureCNN",
              "CnnLstmPolicy": "NatureCNN", "MultiInputPolicy": "CombinedExtractor"}


def short(name: Any) -> str:
    """`nn.ReLU`, `th.nn.ReLU`, `torch.nn.ReLU` -> `ReLU`."""
    return str(name).rsplit(".", 1)[-1]


def model_section(row: ZooRow, values: dict[str, Any], image: bool, problems: Problems
                  ) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the model preset, the agent keys the policy sets: log_std_init, use_expln, clip_mean, the optimizer's)."""
    kwargs = problems.attempt(lambda: literal_dict(values.get("policy_kwargs", "dict()"), "policy_kwargs", row), {})
    kwargs = checked_options(kwargs if isinstance(kwargs, dict) else {}, problems)
    algo, on_policy = row.algo, row.algo in ON_POLICY
    policy = str(values.get("policy", "MlpPolicy"))
    if policy not in POLICIES:
        problems.add("policy", f"= {policy}: rlexp builds {', '.join(POLICIES[:3])} and the Lstm policies of "
                               "ppo_lstm.yml")
    for key in sorted(set(kwargs) - POLICY_OPTIONS[algo]):
        problems.add(f"policy_kwargs.{key}", f"is not an option of SB3's {algo.upper()} policy; remove it")
    activation = ACTIVATIONS.get(short(kwargs.get("activation_fn", "nn.Tanh" if on_policy else "nn.ReLU")))
    if activation is None:
        problems.add("policy_kwargs.activation_fn", f"= {kwargs['activation_fn']}: rlexp's layers take "
                                                    f"{', '.join('nn.' + name for name in ACTIVATIONS)}")
    not_built(kwargs, policy, image, on_policy, problems)
    default_critics = {"ddpg": 1}.get(algo, 2)
    if "n_critics" in kwargs and kwargs["n_critics"] != default_critics and algo != "tqc":
        problems.add("policy_kwargs.n_critics", f"= {kwargs['n_critics']}: rlexp's {algo.upper()} has "
                                                f"{default_critics}")
    if algo == "crossq":  # (sb3-contrib's CrossQ: pi and qf may differ; its default pi [256, 256], qf [1024, 1024])
        towers = problems.attempt(lambda: crossq_sizes(row, kwargs.get("net_arch")), ([256, 256], [1024, 1024]))
        sizes, critic_layers = towers
    else:
        sizes = problems.attempt(lambda: hidden_sizes(row, kwargs.get("net_arch"), image), [])
    layers: list[dict[str, Any]] = [dict(spec) for spec in NATURE_CNN] if image else []
    features = (kwargs.get("features_extractor_kwargs") or {}) if image else {}
    if isinstance(features, dict) and (as_number(features.get("features_dim")) or 0.5).is_integer():
        layers[-1]["units"] = int(features["features_dim"])
    if policy.endswith("LstmPolicy"):
        layers.append(problems.attempt(lambda: lstm_layer(row, kwargs), {"type": "lstm", "units": 256}))
    norm = batch_renorm(kwargs) if algo == "crossq" else None
    for units in sizes:
        layers += [norm] if norm else []
        layers.append({"type": "dense", "units": units, "activation": activation or "relu"})
    layers += ([norm] if norm else []) + [{"type": "dense", "output": True}]
    ortho = on_policy and bool(kwargs.get("ortho_init", True))
    model = {"name": f"zoo_{algo}", "initializer": "orthogonal" if ortho else "torch",
             "gain": SQRT2 if ortho else 1.0, "layers": layers,
             "heads": {"policy": {"gain": 0.01}, "value": {"gain": 1.0}, "q": {"gain": 1.0}} if ortho else {}}
    if policy == "MultiInputPolicy":  # SB3's CombinedExtractor: vector parts flattened and concatenated as they are
        model["encoders"] = {"vector": []}
    agent: dict[str, Any] = {"log_std_init": float(kwargs.get("log_std_init", -3.0 if algo in ("sac", "tqc", "crossq")
                                                              else 0.0))}
    if values.get("use_sde"):  # (SB3 reads use_expln only with gSDE)
        agent["use_expln"] = bool(kwargs.get("use_expln", False))
    if algo == "crossq":
        agent["critic_layers"] = critic_layers
    if algo in ("sac", "tqc", "crossq"):
        agent["clip_mean"] = float(kwargs.get("clip_mean", 2.0))
    if algo in ("qrdqn", "tqc"):  # sb3-contrib's defaults: 200 quantiles (QR-DQN), 25 per critic of 2 (TQC)
        agent["n_quantiles"] = int(kwargs.get("n_quantiles", 200 if algo == "qrdqn" else 25))
    if algo == "tqc":
        agent["n_critics"] = int(kwargs.get("n_critics", 2))
    if "optimizer_class" in kwargs or "optimizer_kwargs" in kwargs:
        options = None if kwargs.get("optimizer_kwargs") is None else problems.attempt(
            lambda: literal_dict(kwargs["optimizer_kwargs"], "policy_kwargs.optimizer_kwargs", row), {})
        agent["optimizer"] = (short(kwargs["optimizer_class"]) if "optimizer_class" in kwargs else None), options
    return model, agent


def checked_options(kwargs: dict[str, Any], problems: Problems) -> dict[str, Any]:
    """policy_kwargs with its numbers, whole numbers and booleans checked (a wrong one noted and left out)."""
    out = {}
    for key, value in kwargs.items():
        number = as_number(value)
        if key in NUMBER_OPTIONS | INTEGER_OPTIONS and (number is None or key in INTEGER_OPTIONS
                                                        and not number.is_integer()):
            problems.add(f"policy_kwargs.{key}", f"= {value!r} is not a {'whole ' * (key in INTEGER_OPTIONS)}number")
        elif key in BOOLEAN_OPTIONS and not isinstance(value, bool):
            problems.add(f"policy_kwargs.{key}", f"= {value!r} is not a boolean (True or False)")
        else:
            out[key] = int(number) if key in INTEGER_OPTIONS else number if key in NUMBER_OPTIONS else value
    return out


def not_built(kwargs: dict[str, Any], policy: str, image: bool, on_policy: bool, problems: Problems) -> None:
    """The options whose value rlexp does not build: noted, each with what rlexp builds."""
    for key, default, why in (("full_std", True, "rlexp's gSDE learns a std per feature and action"),
                              ("squash_output", False, "rlexp's on-policy gSDE does not squash actions with tanh"),
                              ("normalize_images", True, "rlexp scales images by 1/255, as SB3's default")):
        if key in kwargs and kwargs[key] != default:
            problems.add(f"policy_kwargs.{key}", f"= {kwargs[key]}: {why}")
    extractor = EXTRACTORS.get(policy, "FlattenExtractor")
    if "features_extractor_class" in kwargs and short(kwargs["features_extractor_class"]) != extractor:
        problems.add("policy_kwargs.features_extractor_class", f"= {kwargs['features_extractor_class']}: rlexp "
                                                               f"builds {policy}'s {extractor}")
    options = kwargs.get("features_extractor_kwargs") or {}
    extra = sorted(set(options) - ({"features_dim"} if image else set())) if isinstance(options, dict) else ["?"]
    if extra:
        problems.add("policy_kwargs.features_extractor_kwargs", f"= {options}: rlexp's {extractor} takes "
                                                                + ("features_dim" if image else "no options"))
    elif "features_dim" in options and not (as_number(options["features_dim"]) or 0.5).is_integer():
        problems.add("policy_kwargs.features_extractor_kwargs.features_dim", "is not a whole number")
    shared = on_policy  # (SB3's default: shared by the actor and critic on-policy, one each off-policy)
    if image and kwargs.get("share_features_extractor", shared) != shared:
        problems.add("policy_kwargs.share_features_extractor", f"= {kwargs['share_features_extractor']}: rlexp's "
                                                               f"{'on' if on_policy else 'off'}-policy image "
                                                               f"networks {'share' if shared else 'do not share'} "
                                                               "their convolutions")


def hidden_sizes(row: ZooRow, net_arch: Any, image: bool) -> list[int]:
    """The hidden layers each head builds (rlexp's heads are towers of one shape): a list of sizes, or
    dict(pi=[...], vf=[...] / qf=[...]), also SB3's older [dict(pi=..., vf=...)]."""
    if net_arch is None:
        if image:
            return []
        return {"td3": [400, 300], "ddpg": [400, 300], "sac": [256, 256], "tqc": [256, 256]}.get(row.algo, [64, 64])
    if isinstance(net_arch, list) and len(net_arch) == 1 and isinstance(net_arch[0], dict):
        net_arch = net_arch[0]  # (SB3 reads it as the dict, with a warning)
    if isinstance(net_arch, dict) and set(net_arch) <= {"pi", "vf", "qf"}:
        towers = [list(tower) for tower in net_arch.values()]
        if any(tower != towers[0] for tower in towers):
            raise row.refuse("policy_kwargs.net_arch", f"= {net_arch}: rlexp's heads are towers of one shape; "
                                                       "give them the same sizes")
        net_arch = towers[0] if towers else []
    if isinstance(net_arch, list) and all(isinstance(units, int) and not isinstance(units, bool) and units > 0
                                          for units in net_arch):
        return [int(units) for units in net_arch]
    raise row.refuse("policy_kwargs.net_arch", f"= {net_arch}: a list of sizes or dict(pi=[...], vf=[...])")


def crossq_sizes(row: ZooRow, net_arch: Any) -> tuple[list[int], list[int]]:
    """sb3-contrib's CrossQ: (the actor's hidden sizes, the critics'); a list sizes both, dict(pi=..., qf=...) each."""
    if net_arch is None:
        return [256, 256], [1024, 1024]
    if isinstance(net_arch, dict) and set(net_arch) <= {"pi", "qf"}:
        pi, qf = (hidden_sizes(row, list(net_arch.get(key, [])), False) for key in ("pi", "qf"))
        if len(pi) != len(qf):
            raise row.refuse("policy_kwargs.net_arch", f"= {net_arch}: rlexp's CrossQ resizes the actor's layers "
                                                       "for its critics; give pi and qf as many layers")
        return pi, qf
    sizes = hidden_sizes(row, net_arch, False)
    return sizes, list(sizes)


def batch_renorm(kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """CrossQ's batch_renorm layer spec from policy_kwargs (None where batch_norm=False)."""
    if not kwargs.get("batch_norm", True):
        return None
    return {"type": "batch_renorm", "momentum": float(kwargs.get("batch_norm_momentum", 0.01)),
            "epsilon": float(kwargs.get("batch_norm_eps", 0.001)),
            "warmup_steps": int(kwargs.get("renorm_warmup_steps", 100_000))}


def lstm_layer(row: ZooRow, kwargs: dict[str, Any]) -> dict[str, Any]:
    """sb3-contrib's LSTM: a memory per head unless shared_lstm; enable_critic_lstm=False (the critic without
    memory) rlexp does not build."""
    if not kwargs.get("enable_critic_lstm", True) and not kwargs.get("shared_lstm", False):
        raise row.refuse("policy_kwargs.enable_critic_lstm", "= False: rlexp's recurrent critic has its own "
                                                             "LSTM or shares the actor's (shared_lstm)")
    if int(kwargs.get("n_lstm_layers", 1)) != 1:
        raise row.refuse("policy_kwargs.n_lstm_layers", "!= 1: rlexp builds one LSTM layer per head")
    if kwargs.get("lstm_kwargs"):
        raise row.refuse("policy_kwargs.lstm_kwargs", f"= {kwargs['lstm_kwargs']}: rlexp's LSTM takes no options")
    layer = {"type": "lstm", "units": int(kwargs.get("lstm_hidden_size", 256))}
    if kwargs.get("shared_lstm", False):
        layer["common"] = True
    return layer


def squared(eps: float) -> float:
    """PyTorch's RMSprop epsilon (outside the square root) as Keras' (inside it), written as the decimal it is:
    1e-5 -> 1e-10, not the 1.0000000000000002e-10 that floating-point squaring gives."""
    return float(f"{eps * eps:.15g}")


def optimizer_options(row: ZooRow, spec: tuple[str | None, dict[str, Any] | None] | None, values: dict[str, Any],
                      problems: Problems) -> dict[str, Any]:
    """The policy's optimizer as SB3 builds it, as agent keys: policy_kwargs' optimizer_class (else Adam; A2C's
    `use_rms_prop`: PyTorch's RMSprop) with its optimizer_kwargs, PyTorch's defaults for what they leave out (SB3's
    on-policy Adam without optimizer_kwargs: eps 1e-5). Adam (betas, eps); PyTorch's RMSprop (alpha; its eps is
    outside the square root, so squared inside Keras'); SB3's RMSpropTFLike (TensorFlow 1's: alpha, eps inside the
    root, momentum, centered; rlexp's rmsprop_tf)."""
    name, kwargs = spec if spec is not None else (None, None)
    if row.algo == "a2c" and values["use_rms_prop"] and name is None:  # (SB3's A2C: its kwargs replace the row's)
        return {"optimizer": "rmsprop", "opt_epsilon": squared(float(values["rms_prop_eps"]))}
    if row.algo == "qrdqn" and name is None:  # (sb3-contrib's QRDQN: its Adam replaces the row's kwargs)
        return {"optimizer": "adam", "opt_epsilon": 0.01 / int(values["batch_size"])}
    name = name or "Adam"
    if kwargs is None:
        kwargs = {"eps": 1e-5} if name == "Adam" and row.algo in ON_POLICY else {}
        if row.algo == "crossq" and name == "Adam":  # (sb3-contrib's CrossQPolicy)
            kwargs = {"betas": [0.5, 0.999]}
    known = {"Adam": {"eps", "betas", "weight_decay", "amsgrad"},
             "RMSprop": {"eps", "alpha", "weight_decay", "momentum", "centered"},
             "RMSpropTFLike": {"eps", "alpha", "weight_decay", "momentum", "centered"}}
    if name not in known:
        problems.add("policy_kwargs.optimizer_class", f"= {name}: rlexp has Adam, RMSprop and RMSpropTFLike")
        return {}
    for key in sorted(set(kwargs) - known[name]):
        problems.add(f"policy_kwargs.optimizer_kwargs.{key}", f"is not an option of PyTorch's {name}; remove it")
    for key, default, why in (("weight_decay", 0, "rlexp's optimizers have no weight decay"),
                              ("amsgrad", False, "rlexp's Adam is not AMSGrad")):
        if kwargs.get(key, default) != default:
            problems.add(f"policy_kwargs.optimizer_kwargs.{key}", f"= {kwargs[key]}: {why}")
    numbers = {key: as_number(kwargs[key]) for key in ("eps", "alpha", "momentum") if key in kwargs}
    betas = kwargs.get("betas", [0.9, 0.999])
    if isinstance(betas, list) and len(betas) == 2:
        numbers |= {"beta1": as_number(betas[0]), "beta2": as_number(betas[1])}
    else:
        numbers["betas"] = None
    for key in [key for key, number in numbers.items() if number is None]:
        problems.add(f"policy_kwargs.optimizer_kwargs.{key}", "is not a number" + (" pair" if key == "betas" else ""))
        numbers.pop(key)
    eps = numbers.get("eps", 1e-8)
    if name == "Adam":
        given = {key: numbers[key] for key in ("beta1", "beta2") if "betas" in kwargs and key in numbers}
        return {"optimizer": "adam", "opt_epsilon": eps, **given}
    rmsprop = {f"opt_{key}": numbers[key] for key in ("momentum",) if key in numbers}
    rmsprop |= {"opt_rho": numbers["alpha"]} if "alpha" in numbers else {}
    rmsprop |= {"opt_centered": bool(kwargs["centered"])} if "centered" in kwargs else {}
    if name == "RMSpropTFLike":
        return {"optimizer": "rmsprop_tf", "opt_epsilon": eps, **rmsprop}
    if rmsprop.get("opt_momentum") or rmsprop.get("opt_centered"):
        problems.add("policy_kwargs.optimizer_kwargs", f"= {kwargs}: rlexp's RMSprop with momentum or centred is "
                                                       "TensorFlow's (optimizer_class=RMSpropTFLike)")
    return {"optimizer": "rmsprop", "opt_epsilon": squared(eps), **rmsprop}
