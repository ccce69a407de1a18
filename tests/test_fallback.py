"""Fallback presets for agent+env pairs without a tuned preset: chosen by the env's kind, under the values the
user set (the command line's, their own presets'), and fitted to recurrent models."""
import importlib.resources

import pytest
import yaml
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from rlexp.presets import sources
from rlexp.presets.fallbacks import fallback_name, merge_fallback
from test_cli import rlexp

FALLBACKS = sorted(p.name[:-5] for p in (importlib.resources.files("rlexp.conf") / "fallbacks").iterdir()
                   if p.name.endswith(".yaml"))


def test_fallback_names_follow_the_env_kind():
    assert fallback_name("ppo", "discrete_vector") == "ppo_discrete_vector"
    assert fallback_name("ppo", "discrete_image") == "ppo_discrete_image"
    assert fallback_name("td3", "continuous_vector") == "td3_continuous_vector"
    assert fallback_name("trpo", "continuous_vector") == "trpo_continuous_vector"
    assert fallback_name("td3", "discrete_vector") is None  # no such pairing: the agent's own values
    assert fallback_name("acer", "discrete_vector") is None
    assert len(FALLBACKS) >= 10


@pytest.mark.parametrize("name", FALLBACKS)
def test_every_fallback_sets_only_keys_its_agent_has(name):
    agent = name.split("_")[0]
    with initialize_config_module(config_module="rlexp.conf", version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"agent={agent}", "env=generic"])
    preset = OmegaConf.load(importlib.resources.files("rlexp.conf") / "fallbacks" / f"{name}.yaml")
    for section in preset:
        unknown = set(preset[section]) - set(cfg[section])
        assert not unknown, f"{name}: {section}.{unknown}"


def saved(path):
    return yaml.safe_load((path / ".hydra" / "config.yaml").read_text())


def test_an_untuned_pair_takes_the_fallback_under_the_command_line(tmp_path):
    tiny = ["run.max_steps=600", "run.eval_episodes=1"]
    result = rlexp(tmp_path, "env=generic", "env.id=Acrobot-v1", "zoo.rows=false", "agent.lr=1e-3", *tiny, "run_dir=outputs/a")
    assert result.returncode == 0, result.stderr
    assert "using fallbacks/ppo_discrete_vector.yaml" in result.stdout
    config = saved(tmp_path / "outputs/a")
    assert config["fallback"] == "ppo_discrete_vector"
    assert config["agent"]["n_steps"] == 256 and config["env"]["n_envs"] == 8  # the fallback's
    assert config["agent"]["lr"] == 1e-3  # the command line's, over the fallback's 3e-4
    own = rlexp(tmp_path, "env=generic", "env.id=Acrobot-v1", "zoo.rows=false", "fallback=none", *tiny, "run_dir=outputs/b")
    assert own.returncode == 0 and saved(tmp_path / "outputs/b")["agent"]["n_steps"] == 128  # the agent preset's
    tuned = rlexp(tmp_path, "env=cartpole", *tiny, "run_dir=outputs/c")
    assert tuned.returncode == 0 and saved(tmp_path / "outputs/c")["fallback"] == "auto"  # tuned/ppo_cartpole
    assert saved(tmp_path / "outputs/c")["agent"]["ppo_epochs"] == 20
    (tmp_path / "my/tuned").mkdir(parents=True)
    (tmp_path / "my/tuned/ppo_generic.yaml").write_text("# @package _global_\nagent: {n_steps: 64}\n")
    mine = rlexp(tmp_path, "--config-dir", "my", "env=generic", "env.id=Acrobot-v1", "zoo.rows=false", *tiny, "run_dir=outputs/d")
    assert mine.returncode == 0 and saved(tmp_path / "outputs/d")["agent"]["n_steps"] == 64  # a user's tuned preset
    resumed = rlexp(tmp_path, "env=generic", "env.id=Acrobot-v1", "zoo.rows=false", "agent.lr=1e-3", "run.max_steps=1200",
                    "run.eval_episodes=1", "+resume=outputs/a")
    assert resumed.returncode == 0, resumed.stderr
    assert saved(tmp_path / "outputs/a")["agent"]["n_steps"] == 256  # the run keeps its values


@pytest.mark.parametrize("name,model,overrides,length", [
    ("ppo_discrete_vector", "lstm", [], 64),  # 8 envs x 256 steps in 32 minibatches: 32 sequences of 64 steps
    ("ppo_continuous_vector", "gru", [], 64),  # 4 envs x 512 steps in 32 minibatches: 32 sequences of 64 steps
    ("ppo_discrete_image", "lstm", [], None),  # 8 whole 128-step rollouts split into 4 minibatches already
    ("ppo_discrete_vector", "mlp", [], None),  # feed-forward: minibatches of transitions
    ("ppo_discrete_vector", "lstm", ["agent.n_steps=16"], 4),  # 8 envs x 16 steps: 32 sequences of 4 steps
    ("ppo_discrete_vector", "lstm", ["agent.sequence_length=128"], 128),  # the user's own: kept (and checked)
])
def test_a_recurrent_model_makes_the_fallbacks_minibatches_whole_sequences(name, model, overrides, length):
    with initialize_config_module(config_module="rlexp.conf", version_base="1.3"):
        cfg = compose(config_name="config", overrides=["agent=ppo", "env=generic", f"model={model}", *overrides])
    merged = merge_fallback(cfg, name, overrides, choices={})
    assert merged.agent.sequence_length == length


def test_a_recurrent_ppo_trains_on_an_untuned_env_with_the_fallback(tmp_path):
    result = rlexp(tmp_path, "agent=ppo", "env=generic", "env.id=Acrobot-v1", "zoo.rows=false", "model=lstm", "agent.n_steps=16",
                   "agent.ppo_epochs=1", "run.max_steps=128", "run.eval_episodes=1", "run_dir=outputs/lstm")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "using fallbacks/ppo_discrete_vector.yaml" in result.stdout and "agent.sequence_length=4" in result.stdout
    config = saved(tmp_path / "outputs/lstm")
    assert config["agent"]["mini_batches"] == 32 and config["env"]["n_envs"] == 8  # the fallback's
    assert config["agent"]["sequence_length"] == 4  # 16-step rollouts of 8 envs: 32 sequences of 4 steps


def test_the_users_own_presets_win_over_the_fallback(tmp_path):
    tiny = ["agent.n_steps=16", "run.max_steps=128", "run.eval_episodes=1"]
    conf = tmp_path / "myconf"
    (conf / "env").mkdir(parents=True)
    (conf / "env/myenv.yaml").write_text("defaults: [generic]\nid: Acrobot-v1\nn_envs: 4\n")
    own = rlexp(tmp_path, "--config-dir", "myconf", "env=myenv", "zoo.rows=false", *tiny, "run_dir=outputs/own")
    assert own.returncode == 0, own.stderr[-2000:]
    config = saved(tmp_path / "outputs/own")
    assert config["fallback"] == "ppo_discrete_vector" and config["agent"]["mini_batches"] == 32  # the fallback's
    assert config["env"]["n_envs"] == 4  # the user's env preset's, over the fallback's 8

    shipped = importlib.resources.files("rlexp.conf")
    (conf / "agent").mkdir()
    (conf / "env/generic.yaml").write_text((shipped / "env/generic.yaml").read_text())  # an unchanged copy
    edited = (shipped / "agent/ppo.yaml").read_text().replace("ppo_epochs: 4 ", "ppo_epochs: 3 ")
    assert "ppo_epochs: 3 " in edited
    (conf / "agent/ppo.yaml").write_text(edited)
    copies = rlexp(tmp_path, "--config-dir", "myconf", "env=generic", "env.id=Acrobot-v1", "zoo.rows=false", *tiny,
                   "run_dir=outputs/copies")
    assert copies.returncode == 0, copies.stderr[-2000:]
    config = saved(tmp_path / "outputs/copies")
    assert config["agent"]["ppo_epochs"] == 3  # the value the user changed in their copy
    assert config["env"]["n_envs"] == 8 and config["agent"]["lr"] == 3e-4  # unchanged copies: the fallback's
    assert config["agent"]["n_steps"] == 16  # the command line's


def test_the_users_agent_base_wins_over_the_fallback(tmp_path):
    init = rlexp(tmp_path, "mode=init", "+dir=myconf")
    assert init.returncode == 0, init.stderr[-2000:]
    base = tmp_path / "myconf/agent_base.yaml"
    edited = base.read_text().replace("lr: 7.0e-4 ", "lr: 5.0e-4 ")
    assert "lr: 5.0e-4 " in edited
    base.write_text(edited)
    result = rlexp(tmp_path, "--config-dir", "myconf", "env=generic", "env.id=Acrobot-v1", "zoo.rows=false", "agent.n_steps=16",
                   "run.max_steps=128", "run.eval_episodes=1", "run_dir=outputs/base")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "using fallbacks/ppo_discrete_vector.yaml" in result.stdout
    config = saved(tmp_path / "outputs/base")
    assert config["agent"]["lr"] == 5e-4  # the user's agent_base.yaml, over the fallback's 3e-4
    assert config["agent"]["mini_batches"] == 32 and config["env"]["n_envs"] == 8  # the fallback's


SHADOWED = "defaults: [/base@_here_]\nlr: 1.0\n"  # an agent preset setting lr after its base


@pytest.mark.parametrize("shipped_agent, user_agent, expected", [
    ("defaults: [/base@_here_]\nsteps: 5\n", None, {"lr", "extra"}),  # the user's base, through a shipped preset
    (SHADOWED, None, {"extra"}),  # the agent preset's own lr is merged after the base's
    (SHADOWED, SHADOWED, {"extra"}),  # an unchanged copy of it: the same
    (SHADOWED, SHADOWED.replace("1.0", "2.0"), {"lr", "extra"}),  # the user changed the agent preset's lr
    ("defaults: [_self_, /base@_here_]\nlr: 1.0\n", None, {"lr", "extra"}),  # the base merged after it
    ("defaults: [/base@_here_, /other@_here_]\n", None, {"extra"}),  # the shipped other.yaml sets lr again
    ("defaults: [/base@model]\n", None, set()),  # merged into another section
])
def test_own_keys_follow_the_defaults_in_hydras_order(tmp_path, monkeypatch, shipped_agent, user_agent, expected):
    shipped = {"base": "lr: 0.1\ngamma: 0.9\n", "other": "lr: 0.3\n", "agent/a": shipped_agent}
    user = {"base": "lr: 0.2\ngamma: 0.9\nextra: 1\n", **({"agent/a": user_agent} if user_agent else {})}
    for source, files in (("shipped", shipped), ("user", user)):
        for name, text in files.items():
            (tmp_path / source / f"{name}.yaml").parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / source / f"{name}.yaml").write_text(text)

    def hydra_preset(group, name):  # the user's directory first, as with --config-dir
        for source, users in (("user", True), ("shipped", False)):
            if (tmp_path / source / group / f"{name}.yaml").is_file():
                return tmp_path / source / group / f"{name}.yaml", users
        return None, False

    monkeypatch.setattr(sources, "hydra_preset", hydra_preset)
    monkeypatch.setattr(sources, "shipped_file", lambda group, name: tmp_path / "shipped" / group / f"{name}.yaml")
    assert sources.own_keys("agent", "a") == expected


def test_fallback_null_is_none(tmp_path):
    tiny = ["env=generic", "env.id=Acrobot-v1", "run.eval_episodes=1"]
    result = rlexp(tmp_path, *tiny, "fallback=null", "run.max_steps=128", "run_dir=outputs/null")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "using fallbacks" not in result.stdout
    config = saved(tmp_path / "outputs/null")
    assert config["fallback"] == "none" and config["agent"]["n_steps"] == 128  # the agent preset's own
    resumed = rlexp(tmp_path, *tiny, "run.max_steps=256", "+resume=outputs/null")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert saved(tmp_path / "outputs/null")["agent"]["n_steps"] == 128


@pytest.mark.parametrize("agent", ["dqn", "sac", "td3", "ddpg"])
def test_off_policy_fallbacks_start_from_pytorchs_init_over_any_shipped_network(agent):
    import numpy as np

    from rlexp.models.networks import build_model

    env = "env.id=CartPole-v1" if agent == "dqn" else "env.id=Pendulum-v1"
    name = f"{agent}_{'discrete' if agent == 'dqn' else 'continuous'}_vector"
    with initialize_config_module(config_module="rlexp.conf", version_base="1.3"):
        default = compose(config_name="config", overrides=[f"agent={agent}", "env=generic", env])
        chosen = compose(config_name="config", overrides=[f"agent={agent}", "env=generic", env, "model=mlp"])
        recurrent = compose(config_name="config", overrides=[f"agent={agent}", "env=generic", env, "model=lstm"])
    for cfg, overrides in ((default, []), (chosen, ["model=mlp"])):  # (a search's model: choice(mlp, mlp_large))
        merged = merge_fallback(cfg, name, overrides, choices={})
        assert merged.model.initializer == "torch"
        model = build_model(OmegaConf.to_container(merged.model), (3,), {"q": 1})
        hidden = [layer for layer in model.layers if getattr(layer, "kernel", None) is not None][1]
        kernel, bias = (np.abs(w.numpy()) for w in (hidden.kernel, hidden.bias))
        bound = 1 / np.sqrt(kernel.shape[0])  # PyTorch's nn.Linear: weights and biases U(+-1/sqrt(fan_in))
        assert 0.97 * bound < kernel.max() <= bound
        assert 0.9 * bound < bias.max() <= bound
    assert merge_fallback(recurrent, name, ["model=lstm"], choices={}).model.initializer == "glorot_uniform"
    mine = merge_fallback(default, name, ["model.initializer=orthogonal"], choices={})
    assert mine.model.initializer == "orthogonal"  # the command line's value wins


def test_a_fallback_says_what_it_sets_over_a_chosen_model(caplog):
    from test_zoo_rows import resolved

    with caplog.at_level("INFO", logger="rlexp"):
        cfg, _ = resolved("agent=dqn", "env=generic", "env.id=CartPole-v1", "zoo.rows=false", "model=mlp_large")
    assert caplog.messages == ["fallbacks/dqn_discrete_vector.yaml sets model.initializer over model=mlp_large (the "
                               "command line's choice): to train the chosen preset's values, set them on the command "
                               "line or fallback=none"]
    assert cfg.model.initializer == "torch" and [layer.get("units") for layer in cfg.model.layers] == [256, 256, None]
    caplog.clear()
    with caplog.at_level("INFO", logger="rlexp"):
        resolved("agent=dqn", "env=generic", "env.id=CartPole-v1", "zoo.rows=false")
        cfg, _ = resolved("agent=dqn", "env=generic", "env.id=CartPole-v1", "zoo.rows=false", "model=mlp_large",
                          "model.initializer=glorot_uniform")
    assert caplog.messages == []  # no model chosen, or the command line's own initializer: nothing to say
    assert cfg.model.initializer == "glorot_uniform"


def test_on_policy_fallbacks_keep_orthogonal_init():
    with initialize_config_module(config_module="rlexp.conf", version_base="1.3"):
        cfg = compose(config_name="config", overrides=["agent=ppo", "env=generic"])
    assert merge_fallback(cfg, "ppo_discrete_vector", [], choices={}).model.initializer == "orthogonal"
