"""A stand-in agent for the sweeper's tests: rlexp's real training loop, trackers, evaluations and checkpoints
around an update that learns nothing and costs nothing. Its score is a known function of its learning rate and
the steps it trained, so a test knows what every report should say.

    score(step) = 100 x (quality(lr) x p + crossing x early(lr) x (1 - p)),   p = max(0, step - warmup) / scale
    quality(lr) = exp(-(log10(lr) + 3)^2),   early(lr) = exp(-(log10(lr) + 1.5)^2)

(linear in the steps; with `crossing` c > 0 the learning rates that lead early, around 0.03, fall behind those
that lead at the end, around 1e-3, at p = c / (1 + c): a trial can be ahead at one report and behind at the next,
late in the run with scale = max_steps), plus Gaussian noise of std `noise` on every episode and evaluation. A training iteration takes `rollout` env steps
at once (an on-policy rollout or a fused call: collected whole, past max_steps), an episode ends every
`episode_length` steps with the score at its last step as its return, and `delay` seconds pass per iteration.
With `off_policy`, the first `warmup` steps are an off-policy agent's random warm-up instead: iterations of up to
1,000 steps that stop at the warm-up's end or at max_steps, whichever comes first.
With `ledger` (a file path), each iteration appends "<run dir> <steps trained>" to it: the test's own record of
what every run trained, whatever the sweeper recorded."""
from __future__ import annotations

import math
import time

from rlexp.agents import AGENTS
from rlexp.agents.base import Agent


def quality(lr: float) -> float:
    return math.exp(-(math.log10(lr) + 3) ** 2)


def early(lr: float) -> float:
    return math.exp(-(math.log10(lr) + 1.5) ** 2)


def score(lr: float, step: int, warmup: int = 0, scale: int = 1000, crossing: float = 0.0) -> float:
    """The stand-in's noise-free score after `step` env steps."""
    progress = max(0, step - warmup) / scale
    return 100.0 * (quality(lr) * progress + crossing * early(lr) * (1.0 - progress))


class StandIn(Agent):
    """See the module's docstring."""

    def __init__(self, envs, model=None, buffer=None, *, rollout: int = 64, warmup: int = 0, noise: float = 0.0,
                 delay: float = 0.0, episode_length: int = 10, scale: int = 1000, crossing: float = 0.0,
                 off_policy: bool = False, ledger: str | None = None, **kwargs) -> None:
        self.rollout, self.warmup, self.noise, self.delay = int(rollout), int(warmup), float(noise), float(delay)
        self.off_policy = bool(off_policy)
        self.crossing = float(crossing)
        self.ledger = ledger
        self.episode_length, self.scale = int(episode_length), int(scale)
        super().__init__(envs, model, buffer, **kwargs)

    def build(self) -> None:
        pass

    def models(self) -> dict:
        return {}

    def optimizers(self) -> dict:
        return {}

    def first_update_step(self) -> int:
        return self.warmup + 1 if self.warmup else 0  # a run of `warmup` steps learns nothing

    def most_steps(self, max_steps: int) -> int:
        """The most env steps a run of max_steps trains: whole rollouts (after an off-policy warm-up, which stops
        at max_steps)."""
        start = min(self.warmup, max_steps) if self.off_policy else 0
        return start + -(-max(0, max_steps - start) // self.rollout) * self.rollout

    def noisy(self, step: int) -> float:
        value = score(self.lr, step, self.warmup, self.scale, self.crossing)
        return value + float(self.rng.normal(0.0, self.noise)) if self.noise else value

    def train_iteration(self) -> dict[str, float]:
        size = self.rollout
        if self.off_policy and self.steps < self.warmup:
            size = max(1, min(self.warmup - self.steps, 1000, self.steps_left()))
        start, self.steps = self.steps, self.steps + size
        first_end = (start // self.episode_length + 1) * self.episode_length
        for end in range(first_end, self.steps + 1, self.episode_length):
            self._finished.append((end, self.noisy(end)))
        if self.ledger and self.history.path is not None:
            with open(self.ledger, "a") as f:
                f.write(f"{self.history.path.parent} {self.steps}\n")
        if self.delay:
            time.sleep(self.delay)
        return {"loss": 0.0}

    def evaluate(self, envs, episodes: int, deterministic: bool = True) -> list[float]:
        return [self.noisy(self.steps) for _ in range(episodes)]


def register() -> None:
    AGENTS["standin"] = StandIn
