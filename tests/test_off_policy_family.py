"""The off-policy family's shared base changes no numbers: short seeded runs of every loop path give the
weights recorded with the code before `agents/off_policy.py` existed (where they were bit-identical,
sha256 of all weights; the tolerance only absorbs another CPU's last bits)."""
import numpy as np
import pytest

from rlexp.agents import DDPG, DQN, TD3, OffPolicyAgent
from rlexp.buffers import ReplayBuffer
from rlexp.envs.make import make_envs

RUNS = {  # name: (agent, env steps, sum of |weights| per model in models() order, before the move)
    "dqn-numpy-acting": (lambda: DQN(make_envs("CartPole-v1", n_envs=1, seed=0), model="mlp", buffer=ReplayBuffer(2000, 100, 32),
                                     seed=0, train_freq=8, gradient_steps=4, target_sync_steps=50),
                         600, [752.739868, 737.39447]),
    "dqn-graph-acting": (lambda: DQN(make_envs("CartPole-v1", n_envs=2, seed=0), model="mlp", buffer=ReplayBuffer(2000, 100, 32),
                                     seed=0, train_freq=8, gradient_steps=4, numpy_acting=False),
                         600, [650.321472, 631.312988]),
    "ddpg-env-copies": (lambda: DDPG(make_envs("Pendulum-v1", n_envs=1, seed=0, vectorization="sync"), model="mlp",
                                     buffer=ReplayBuffer(2000, 100, 64), seed=0),
                        400, [667.018921, 633.302124, 740.530273, 671.790833]),
    "td3-graph-env-grouped": (lambda: TD3(make_envs("Pendulum-v1", n_envs=1, seed=0), model="mlp",
                                          buffer=ReplayBuffer(2000, 100, 64), seed=0),
                              400, [638.148071, 622.030884, 726.590027, 646.180664, 724.676697, 645.21991]),
    "td3-cycles": (lambda: TD3(make_envs("Pendulum-v1", n_envs=2, seed=0, vectorization="sync"), model="mlp",
                               buffer=ReplayBuffer(2000, 100, 64), seed=0, train_freq=2, gradient_steps=3),
                   400, [639.043457, 621.447876, 707.673401, 637.280884, 707.087097, 635.99292]),
}


@pytest.mark.parametrize("name", list(RUNS))
def test_seeded_runs_give_the_weights_of_the_code_before_the_shared_base(name):
    make, steps, expected = RUNS[name]
    agent = make()
    assert isinstance(agent, OffPolicyAgent)
    agent.fit(steps, progress="none")
    sums = [float(np.sum(np.abs(np.concatenate([w.ravel() for w in m.get_weights()])))) for m in agent.models().values()]
    np.testing.assert_allclose(sums, expected, rtol=1e-4)
