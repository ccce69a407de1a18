"""The real configs compose; tuned presets are picked up per agent+env pair."""
import pytest
from hydra import compose, initialize_config_module

from rlexp.main import agent_class
from rlexp.errors import UserError


def cfg(*overrides):
    with initialize_config_module(config_module="rlexp.conf", version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def test_default_is_ppo_cartpole_with_tuned_values():
    c = cfg()
    assert c.agent._target_ == "rlexp.agents.PPO" and c.env.id == "CartPole-v1"
    assert c.agent.n_steps == 32 and c.agent.gamma == 0.98 and c.run.target_reward == 475


def test_command_line_beats_tuned_preset():
    assert cfg("agent.n_steps=64").agent.n_steps == 64


def test_no_tuned_preset_keeps_agent_defaults():
    c = cfg("agent=ppo", "env=bipedal")
    assert c.agent.n_steps == 128 and c.run.target_reward is None


@pytest.mark.parametrize("agent", ["ppo", "dqn"])
@pytest.mark.parametrize("env", ["cartpole", "pendulum", "lunarlander", "lunarlander_continuous", "bipedal",
                                 "pong", "breakout", "generic"])
def test_every_pair_composes(agent, env):
    c = cfg(f"agent={agent}", f"env={env}")
    assert agent_class(c.agent._target_).__name__ == agent.upper()


def test_dqn_tuned_presets():
    assert cfg("agent=dqn", "env=cartpole").model.vector == "mlp_large"
    assert cfg("agent=dqn", "env=pong").buffer._target_ == "rlexp.buffers.FrameBuffer"


def test_arbitrary_targets_are_refused():
    with pytest.raises(UserError, match="not an rlexp agent"):
        agent_class("os.system")
