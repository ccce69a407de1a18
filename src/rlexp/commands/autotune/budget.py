"""The study's size from autotune.*: trials, seeds, successive halving's rungs and the trials' length within
the env-step budget, the job slots and the portfolio's trials."""
from __future__ import annotations

import logging
from dataclasses import dataclass

from omegaconf import DictConfig, OmegaConf

from rlexp.checks.values import _number, _one_of
from rlexp.commands.autotune.request import Overrides
from rlexp.errors import UserError

log = logging.getLogger("rlexp")


@dataclass
class Budget:
    """The study's size: at most `trials` trials on `seeds` seeds each, within `budget` x `max_steps` env steps
    in all. Successive halving compares trials at `rungs` lengths, `eval_interval` x 1, 3, 9, ... env steps up
    to `trial_steps`, each an evaluation of `eval_episodes` episodes (greedy or sampled actions:
    `eval_deterministic`, as run.eval_deterministic); a third of a rung's trials go on to the next. Trials 1 to
    `portfolio` train the agent's tuned presets for other envs of the kind (rlexp.presets.portfolio)."""

    budget: float
    max_steps: int
    trials: int
    seeds: int
    rungs: int
    trial_steps: int
    eval_interval: int
    eval_episodes: int
    eval_deterministic: bool | str = False
    learning_start: int = 0    # buffer.initial_size: random steps before an off-policy trial learns
    final_deterministic: bool | str = "auto"  # a trial's final evaluation (its score): as the pair's training's
    portfolio: int = 4          # trials after the baseline that train the agent's tuned values for similar envs

    @property
    def rung_steps(self) -> list[int]:
        """Where trials are compared: learning_start + L x 1, 3, ... before the trial's end, each moved up to the
        next evaluation step (a multiple of L), as the trials' pruner places them."""
        from rlexp.sweep.pruning import halving_rungs

        return halving_rungs(self.trial_steps, self.learning_start, self.eval_interval, grid=self.eval_interval)

    @property
    def env_steps(self) -> int:
        """The study's env steps, all trials and seeds together (hydra.sweeper.max_env_steps)."""
        return int(self.budget * self.max_steps)

    @property
    def warmup(self) -> int:
        """Trials before the sampler models (RL Zoo's 5, fewer in a small study)."""
        return min(5, max(1, self.trials // 3))

def first_rungs(trials: int, rungs: int, in_flight: int = 1) -> float:
    """The env steps (after each trial's warm-up) a study of `trials` trials needs on one seed, in first-rung
    lengths L: trial 0 (the baseline, first at every rung) trains all m = 3^(rungs-1) of them; each other trial
    is expected to train e = 1 + 2 (rungs - 1) / 3 (the first; the third of them that goes on, the next rung's
    2/3 of its length; the ninth the one after: 2/3 again). A trial starts only where the budget holds it at its
    full length, as it does the `in_flight` trials running beside the last one: m - e more for each."""
    m, e = 3 ** (rungs - 1), 1 + 2 * (rungs - 1) / 3
    return m + (trials - 1) * e + in_flight * (m - e)

def job_slots(overrides: Overrides) -> int:
    """The study's job slots: hydra.sweeper.n_jobs on the command line, else the sweeper's default 2."""
    text = next((o.split("=", 1)[1] for o in overrides.study if o.startswith("hydra.sweeper.n_jobs=")), "2")
    try:
        return max(1, int(float(text)))
    except ValueError:
        return 1  # the study's check of its settings names it

def check_budget(cfg: DictConfig, max_steps: int, learning_start: int = 0, slots: int = 1) -> Budget:
    """autotune.* checked, and the trials' lengths derived from them: budget x max_steps env steps in all, each
    trial `learning_start` random steps then up to 3^(rungs-1) first-rung lengths L (`first_rungs`, with
    `slots` job slots, each trial taking autotune.seeds of them), and no trial longer than max_steps: a trial's
    score is meant to predict a training of max_steps (a larger budget than that needs is left unspent)."""
    section = cfg.get("autotune")
    if not isinstance(section, DictConfig):
        raise UserError(f"autotune={section!r}: autotune is a section of settings; set its keys instead, e.g. "
                        "autotune.trials=10")
    budget = _number("autotune.budget", section.get("budget"), above=0)
    trials, seeds, rungs, episodes = (
        int(_number(f"autotune.{key}", section.get(key), minimum=1, integer=True))
        for key in ("trials", "seeds", "rungs", "eval_episodes"))
    deterministic = section.get("eval_deterministic")
    if not _one_of(deterministic, ("auto", True, False)):
        raise UserError(f"autotune.eval_deterministic={deterministic!r} must be auto, true or false (as "
                        "run.eval_deterministic; false: the trials' evaluations draw actions from the policy)")
    in_flight_trials = max(1, slots // seeds)
    first_rung = int((budget * max_steps / seeds - trials * learning_start) / first_rungs(trials, rungs,
                                                                                       in_flight_trials))
    first_rung = min(first_rung, (max_steps - learning_start) // 3 ** (rungs - 1))  # no trial past the training's end
    if first_rung < 1:
        warmup = (f" past each trial's buffer.initial_size={learning_start:,} random steps" if learning_start
                  else "")
        raise UserError(f"autotune.budget={budget:g}: {budget:g} x run.max_steps={max_steps:,} over autotune.trials="
                        f"{trials} x autotune.seeds={seeds} with autotune.rungs={rungs} leaves trials no env steps"
                        f"{warmup}; raise autotune.budget or run.max_steps, or lower autotune.trials, autotune.seeds "
                        "or autotune.rungs" + (", or set a smaller buffer.initial_size" if learning_start else ""))
    final = OmegaConf.select(cfg, "run.eval_deterministic", default="auto")
    portfolio_size = int(_number("autotune.portfolio", section.get("portfolio", 4), minimum=0, integer=True))
    return Budget(budget, max_steps, trials, seeds, rungs, learning_start + first_rung * 3 ** (rungs - 1), first_rung,
                  episodes, deterministic, learning_start, "auto" if final is None else final, portfolio_size)

def portfolio_size(budget: Budget, overrides: Overrides) -> int:
    """The portfolio's trials: autotune.portfolio, fewer than the study's trials; none where your command line
    sets the first trials itself (hydra.sweeper.baseline or enqueue) or picks the grid sampler, which runs its
    points only."""
    own = ("hydra.sweeper.baseline=", "hydra.sweeper.enqueue=", "hydra/sweeper/sampler=grid")
    if any(o.lstrip("+~").startswith(own) for o in overrides.study):
        return 0
    return min(budget.portfolio, budget.trials - 1)
