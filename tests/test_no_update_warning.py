"""The warning that run.max_steps ends a run before its first gradient step: it fires exactly when training
makes none (an on-policy rollout is collected whole; DQN learns in the iteration that fills its buffer; TD3
warms up to buffer.initial_size and learns from the next iteration)."""
import logging

import pytest
from omegaconf import OmegaConf
from test_cli import TINY_PPO, rlexp

from rlexp.agents import DQN, PPO, TD3
from rlexp.buffers import ReplayBuffer
from rlexp.commands.train import warn_if_no_update
from rlexp.envs.make import make_envs


def ppo():
    return PPO(make_envs("CartPole-v1", n_envs=2, seed=0), seed=0, n_steps=8, mini_batches=1)  # rollouts of 16


def dqn():  # collects 4 steps per iteration; the buffer is ready at 10, after the third
    return DQN(make_envs("CartPole-v1", seed=0), buffer=ReplayBuffer(1000, 10, 4), seed=0, train_freq=4)


def td3():  # the warm-up ends at 12 steps (6 vector steps of 2 envs)
    return TD3(make_envs("Pendulum-v1", n_envs=2, seed=0), buffer=ReplayBuffer(1000, 11, 4), seed=0)


CASES = [(ppo, 1, True), (ppo, 16, True), (dqn, 8, False), (dqn, 9, True), (td3, 12, False), (td3, 13, True)]


@pytest.mark.parametrize("make, max_steps, learns", CASES, ids=[f"{m.__name__}-{s}" for m, s, _ in CASES])
def test_the_warning_fires_exactly_when_no_gradient_step_is_made(make, max_steps, learns, caplog):
    agent = make()
    with caplog.at_level(logging.WARNING, logger="rlexp"):
        warn_if_no_update(agent, OmegaConf.create({"run": {"max_steps": max_steps}}))
    agent.fit(max_steps, progress="none")
    gradient_steps = sum(int(o.iterations) for o in agent.optimizers().values())
    assert (gradient_steps > 0) == learns
    assert [r.getMessage() for r in caplog.records if "first gradient step" in r.getMessage()] == ([] if learns else [
        f"warning: run.max_steps={max_steps} ends before the first gradient step (after buffer.initial_size "
        f"transitions), which needs run.max_steps >= {max_steps + 1}; nothing will be learned"])


def test_a_run_of_exactly_one_rollout_does_not_warn(tmp_path):
    result = rlexp(tmp_path, *TINY_PPO, "run.max_steps=128", "run.eval_episodes=0")  # 4 envs x 32 steps
    assert result.returncode == 0, result.stderr[-2000:]
    assert "first gradient step" not in result.stdout + result.stderr
    assert "128 steps in" in result.stdout + result.stderr
