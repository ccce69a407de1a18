"""Replay buffers for off-policy agents: a general ring buffer, prioritized replay on a sum-tree, and a
frame-efficient one for Atari.

One module per part: `replay` (the uniform ring, with n-step returns), `prioritized` (prioritized replay,
DQfD's included) on `sumtree` (compiled sum and min trees), `graph` (the ring in TensorFlow variables), `her` (Hindsight Experience Replay's relabelling), `frames` (stacked frames
stored once) and `rollouts` (ACER's whole rollouts). Presets name them here: `_target_: rlexp.buffers.<Name>`.
"""
from rlexp.buffers.frames import FrameBuffer
from rlexp.buffers.graph import GraphReplayBuffer
from rlexp.buffers.her import HerReplayBuffer
from rlexp.buffers.prioritized import PrioritizedNStepReplayBuffer, PrioritizedReplayBuffer
from rlexp.buffers.replay import NStepReplayBuffer, ReplayBuffer
from rlexp.buffers.rollouts import RolloutBuffer
from rlexp.buffers.sumtree import SumTree

__all__ = ["FrameBuffer", "GraphReplayBuffer", "HerReplayBuffer", "NStepReplayBuffer", "PrioritizedNStepReplayBuffer",
           "PrioritizedReplayBuffer", "ReplayBuffer", "RolloutBuffer", "SumTree"]
