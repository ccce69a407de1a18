"""RL Zoo's CarRacing row (ppo.yml): its wrappers as rlexp builds them, frame skip and channels-last frame stacking
checked on envs whose frames and rewards are known, and the row's env built as RL Zoo builds it."""
import gymnasium as gym
import numpy as np

from rlexp.envs.make import make_envs
from rlexp.envs.wrappers import FrameSkip, StackFramesLast
from rlexp.presets.zoo import find_row, translate


class Counter(gym.Env):
    """Frame t is a 2x2 image filled with t; reward t; the episode ends after `length` steps."""

    observation_space = gym.spaces.Box(0, 255, (2, 2, 1), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, length=5):
        self.length, self.t = length, 0

    def reset(self, seed=None, options=None):
        self.t = 0
        return np.zeros((2, 2, 1), np.uint8), {}

    def step(self, action):
        self.t += 1
        return np.full((2, 2, 1), self.t, np.uint8), float(self.t), self.t >= self.length, False, {}


def test_frame_skip_repeats_the_action_and_sums_rewards_to_the_episodes_end():
    env = FrameSkip(Counter(length=5), skip=2)
    env.reset()
    obs, reward, terminated, _, _ = env.step(0)
    assert (obs[0, 0, 0], reward, terminated) == (2, 1.0 + 2.0, False)
    env.step(0)
    obs, reward, terminated, _, _ = env.step(0)  # frame 5 ends the episode: the skip stops there
    assert (obs[0, 0, 0], reward, terminated) == (5, 5.0, True)


def test_frames_stack_on_the_channel_axis_from_zeros_as_sb3s_vecframestack():
    env = StackFramesLast(Counter(), n_stack=3)
    assert env.observation_space.shape == (2, 2, 3)
    obs, _ = env.reset()
    assert obs[0, 0].tolist() == [0, 0, 0]
    for expected in ([0, 0, 1], [0, 1, 2], [1, 2, 3]):
        obs = env.step(0)[0]
        assert obs[0, 0].tolist() == expected
    assert env.reset()[0][0, 0].tolist() == [0, 0, 0]


def test_ppo_carracing_row_builds_rl_zoos_env():
    t = translate(find_row("ppo", "CarRacing-v3", atari=False))
    assert [w["_target_"].rsplit(".", 1)[-1] for w in t["env"]["wrappers"]] == [
        "FrameSkip", "ResizeObservation", "GrayscaleObservation", "StackFramesLast"]
    assert (t["env"]["n_envs"], t["agent"]["use_sde"], t["agent"]["normalize_reward"]) == (8, True, True)
    assert not t["agent"]["normalize_obs"] and t["model"]["layers"][-2] == {"type": "dense", "units": 256,
                                                                           "activation": "gelu"}
    envs = make_envs("CarRacing-v3", n_envs=1, seed=0, wrappers=t["env"]["wrappers"], vectorization="sync")
    obs, _ = envs.reset(seed=0)
    assert envs.single_observation_space.shape == (64, 64, 2) and obs.dtype == np.uint8
    assert (obs[0, ..., 0] == 0).all() and obs[0, ..., 1].any()  # one frame so far, after a zero frame
    envs.close()
