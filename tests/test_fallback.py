"""Fallback presets for agent+env pairs without a tuned preset: chosen by the env's kind, under the command line."""
import importlib.resources

import pytest
import yaml
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from rlexp.fallback import fallback_name
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
    result = rlexp(tmp_path, "env=generic", "env.id=Acrobot-v1", "agent.lr=1e-3", *tiny, "run_dir=outputs/a")
    assert result.returncode == 0, result.stderr
    assert "using fallbacks/ppo_discrete_vector.yaml" in result.stdout
    config = saved(tmp_path / "outputs/a")
    assert config["fallback"] == "ppo_discrete_vector"
    assert config["agent"]["n_steps"] == 256 and config["env"]["n_envs"] == 8  # the fallback's
    assert config["agent"]["lr"] == 1e-3  # the command line's, over the fallback's 3e-4
    own = rlexp(tmp_path, "env=generic", "env.id=Acrobot-v1", "fallback=none", *tiny, "run_dir=outputs/b")
    assert own.returncode == 0 and saved(tmp_path / "outputs/b")["agent"]["n_steps"] == 128  # the agent preset's
    tuned = rlexp(tmp_path, "env=cartpole", *tiny, "run_dir=outputs/c")
    assert tuned.returncode == 0 and saved(tmp_path / "outputs/c")["fallback"] == "auto"  # tuned/ppo_cartpole
    assert saved(tmp_path / "outputs/c")["agent"]["ppo_epochs"] == 20
    (tmp_path / "my/tuned").mkdir(parents=True)
    (tmp_path / "my/tuned/ppo_generic.yaml").write_text("# @package _global_\nagent: {n_steps: 64}\n")
    mine = rlexp(tmp_path, "--config-dir", "my", "env=generic", "env.id=Acrobot-v1", *tiny, "run_dir=outputs/d")
    assert mine.returncode == 0 and saved(tmp_path / "outputs/d")["agent"]["n_steps"] == 64  # a user's tuned preset
    resumed = rlexp(tmp_path, "env=generic", "env.id=Acrobot-v1", "agent.lr=1e-3", "run.max_steps=1200",
                    "run.eval_episodes=1", "+resume=outputs/a")
    assert resumed.returncode == 0, resumed.stderr
    assert saved(tmp_path / "outputs/a")["agent"]["n_steps"] == 256  # the run keeps its values
