"""Evaluations during a population's training (run.eval_interval): each member evaluated on its own eval envs as
its single run is (`rlexp.runs.evaluation.Evaluator`), by a single agent holding the member's weights, its best
evaluation its best.ckpt."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable


class MemberView:
    """Member `member` of a population as an `Evaluator` sees an agent: its env steps, its policy evaluated by a
    single agent (built by `make_single` at the first evaluation) into which its weights are copied, and its
    weights-only checkpoints."""

    def __init__(self, population: Any, member: int, make_single: Callable[[], Any]) -> None:
        self.population, self.member, self.make_single = population, member, make_single
        self.single = None

    @property
    def steps(self) -> int:
        return self.population.member_records()[self.member].steps

    def evaluate(self, envs: Any, episodes: int, deterministic: bool = True) -> list[float]:
        if self.single is None:
            self.single = self.make_single()
        population, single, member = self.population, self.single, self.member
        mine = single.models()
        for name, model in population.models().items():
            mine[name].set_weights([w[member] for w in model.get_weights()])
        single.normalizer.load_state_dict(population.member_normalizer(member).state_dict())
        own = single.extra_variables()
        for name, variable in population.extra_variables().items():
            own[name].assign(population._slice(variable.numpy(), member))
        return single.evaluate(envs, episodes, deterministic)

    def save(self, path: str | Path, full: bool = True) -> None:
        self.population.save_member(self.member, path, full=full)

    def close(self) -> None:
        if self.single is not None:
            self.single.envs.close()
            self.single = None


def evaluate_due_members(population: Any, evaluators: list[Any], views: list[MemberView], training: list[int],
                         log: Any, precision: int = 2) -> None:
    """Each training member's evaluation, if due at the population's step: logged, tracked (`eval/` scalars), and
    its best.ckpt written when it is the member's best."""
    for i in training:
        evaluator, record = evaluators[i], population.member_records()[i]
        if evaluator is None or not evaluator.due(record.steps):
            continue
        row = evaluator(views[i], record.train_time)
        if record.tracker is not None:
            record.tracker.scalars(record.steps, {"eval/mean_return": row["mean_return"],
                                                  "eval/std_return": row["std_return"]})
        log.info(f"member {i} (seed {record.seed}) eval at step {record.steps:,}: {row['mean_return']:.{precision}f} "
                 f"± {row['std_return']:.{precision}f} over {row['episodes']} "
                 f"{'' if evaluator.deterministic else 'stochastic '}episodes"
                 + (" (best)" if row["improved"] else ""))
