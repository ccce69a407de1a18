"""A trial's own account, kept from inside its process: the most env steps it can train (declared before it trains,
held against the study's step budget, or the trial does not start), the steps it trained (recorded when it ends,
also when it fails), and the study's learning start, which every trial's rungs count from."""
from __future__ import annotations

import time
from typing import Any, Mapping

from optuna.trial import TrialState

from rlexp.errors import TrialFailed
from rlexp.runs.tracking import Tracker
from rlexp.sweep.storage import claim_lock, make_storage
from rlexp.sweep.trials import CEILING_ATTR, REFUSED_ATTR, RESERVED_ATTR, steps_held

LEARNING_START = "learning_start"  # the study's: env steps before its trials learn, where the pruners start
FIRST_TRIAL_WAIT_S = 120.0  # how long a trial waits for trial 0's learning start, or earlier trials' most steps


def trained_attr(seed_index: int) -> str:
    """The trial's user attribute with the env steps its seed `seed_index` trained (written as the seed ends)."""
    return f"trained_{seed_index}"


def most_steps(agent: Any, max_steps: int) -> int:
    """The most env steps `agent` trains in a run of `max_steps` from step 0 (its last training call is collected
    whole): the agent's own `most_steps(max_steps)` where it has one; an on-policy agent's whole rollouts of
    n_steps x n_envs; an off-policy agent's last call of one cycle, train_freq x n_envs steps, begun before
    max_steps; max_steps for an agent without any of these."""
    own = getattr(agent, "most_steps", None)
    if callable(own):
        return int(own(max_steps))
    n_envs = int(getattr(agent, "member_envs", None) or getattr(agent, "n_envs", 1) or 1)  # a population's: a member's
    if hasattr(agent, "train_freq"):  # (its random warm-up stops at max_steps, in whole vector steps)
        return max_steps + int(agent.train_freq) * n_envs - 1
    if hasattr(agent, "n_steps"):
        rollout, start = int(agent.n_steps) * n_envs, int(getattr(agent, "steps", 0) or 0)
        return start + -(-max(0, max_steps - start) // rollout) * rollout
    return max_steps


class TrialSteps(Tracker):
    """The tracker of a trial's seed in rlexp's sweeps: before training, its most steps (`most_steps`, per seed)
    replace the trial's reservation (every seed's, under the claim lock); where the study's step budget can't hold
    them the trial is refused (REFUSED_ATTR, not counted) and no seed of it trains. When the seed ends (done,
    pruned, failed or interrupted) the steps it trained go to the trial's `trained_<seed index>` attribute: the
    budget counts them, not the step of its history's last episode end."""

    def __init__(self, spec: Mapping[str, Any], most: int | None = None) -> None:
        self.storage = make_storage(spec["storage"])
        self.url, self.study_name = str(spec["storage"]), str(spec["study"])
        self.trial_id, self.seed_index = int(spec["trial_id"]), int(spec.get("seed_index", 0))
        self.trained_steps = 0  # what the agent has trained: a training episode's end step can lie before it
        if most is not None:
            self.declare(int(most), spec.get("max_env_steps"), int(spec.get("seeds", 1)))

    def declare(self, most: int, cap: int | None, seeds: int) -> None:
        """Hold `most` steps for each of the trial's seeds, or refuse the trial where the budget can't hold them. The
        trials claimed before this one decide first (it waits for them while they run, up to FIRST_TRIAL_WAIT_S);
        those claimed after it decide after it, so they don't count here: none trains before it has decided."""
        deadline = time.monotonic() + FIRST_TRIAL_WAIT_S
        while True:
            with claim_lock(self.storage, self.url, self.study_name):
                me = self.storage.get_trial(self.trial_id)
                attrs = me.user_attrs
                if CEILING_ATTR in attrs or attrs.get(REFUSED_ATTR):
                    break  # another seed of the trial decided
                study_id = self.storage.get_study_id_from_name(self.study_name)
                undecided = {t.number for t in self.storage.get_all_trials(study_id, deepcopy=False)
                             if t.state == TrialState.RUNNING and t.number != me.number
                             and CEILING_ATTR not in t.user_attrs and not t.user_attrs.get(REFUSED_ATTR)}
                if not any(n < me.number for n in undecided) or time.monotonic() > deadline:
                    others = [t for t in self.storage.get_all_trials(study_id, deepcopy=False)
                              if t.number != me.number and not (t.number > me.number and t.number in undecided)]
                    refused = cap is not None and steps_held(others) + seeds * most > int(cap)
                    self.storage.set_trial_user_attr(self.trial_id, CEILING_ATTR, most)  # (the next claims' too)
                    self.storage.set_trial_user_attr(self.trial_id, RESERVED_ATTR, 0 if refused else seeds * most)
                    if refused:
                        self.storage.set_trial_user_attr(self.trial_id, REFUSED_ATTR, True)
                    attrs = {REFUSED_ATTR: refused}
                    break
            time.sleep(0.05)
        if attrs.get(REFUSED_ATTR):
            raise TrialFailed(f"not started: each of its seeds can train up to {most:,} env steps (its last rollout "
                              "or fused call is collected whole), more than hydra.sweeper.max_env_steps has left")

    def trained(self, steps: int) -> None:
        self.trained_steps = max(self.trained_steps, int(steps))

    def close(self, failed: bool = False) -> None:
        self.storage.set_trial_user_attr(self.trial_id, trained_attr(self.seed_index), self.trained_steps)


def study_learning_start(storage: Any, url: str, study_name: str, number: int, own: int,
                         wait: float = FIRST_TRIAL_WAIT_S) -> int:
    """The env steps the study's pruners count from, the same for every trial: trial 0's warm-up (the baseline's,
    where the study has one), which its first seed records in the study. Another trial waits for that while trial
    0 runs (up to `wait` seconds); where trial 0 ended without recording it (a study made before it was recorded),
    the first trial to get here records its own (`own`)."""
    study_id = storage.get_study_id_from_name(study_name)
    deadline = time.monotonic() + wait
    while True:
        recorded = storage.get_study_user_attrs(study_id).get(LEARNING_START)
        if recorded is not None:
            return int(recorded)
        first = storage.get_trial(storage.get_trial_id_from_study_id_trial_number(study_id, 0))
        if number == 0 or first.state != TrialState.RUNNING or time.monotonic() > deadline:
            with claim_lock(storage, url, study_name):
                recorded = storage.get_study_user_attrs(study_id).get(LEARNING_START)
                if recorded is None:
                    storage.set_study_user_attr(study_id, LEARNING_START, int(own))
                    return int(own)
                return int(recorded)
        time.sleep(0.05)
