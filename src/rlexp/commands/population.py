"""mode=train with run.seeds: the seeds trained as one population in one process (rlexp.agents.base.population).

The run dir holds one ordinary run dir per member, `seed_<s>/`: its config (with its own seed), checkpoints,
history, main.log lines and summary.json, so `mode=play`, `mode=eval`, `mode=plot` and `+resume` take a member as
any run, and `mode=plot '+runs=<run dir>/seed_*'` shows the members as seeds of one configuration.
"""
from __future__ import annotations

import logging
import shutil
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

from rlexp.build import build_agent, check_config, setup_tensorflow, startup_done
from rlexp.errors import RunFailed, UserError
from rlexp.runs.dirs import (choices, claim_run_dir, in_sweep, new_run_dir, run_config, run_dir_key,
                             task_overrides, unclaim_run_dir, write_run_config)
from rlexp.runs.evaluation import deterministic_final_eval, evaluate, make_evaluator, mean_std, write_summary
from rlexp.runs.lock import RunLock

log = logging.getLogger("rlexp")


def member_config(cfg: DictConfig, seed: int, values: dict[str, float]) -> DictConfig:
    """A member's own run config: the population's with its seed and values, as a single run of them has it."""
    member = OmegaConf.merge(cfg, {})
    with open_dict(member):
        member.seed = int(seed)
        member.run.seeds = member.run.members = None
        for key, value in values.items():
            member.agent[key] = value
    return member


def members_of(cfg: DictConfig) -> tuple[list[int], dict[str, list]]:
    """The members' seeds and own values from run.seeds and run.members (members without run.seeds: all `seed`)."""
    from rlexp.agents.base.population import member_seeds

    def plain(node):
        return OmegaConf.to_container(node) if OmegaConf.is_config(node) else node

    values = plain(cfg.run.get("members")) or {}
    if not isinstance(values, dict):
        raise UserError(f"run.members={values!r} must map agent keys to one value per member, e.g. "
                        "'run.members={lr: [3e-4, 1e-3]}'")
    seeds = plain(cfg.run.get("seeds"))
    if seeds is None:
        lengths = {len(v) for v in values.values() if isinstance(v, (list, tuple))}
        seeds = [cfg.get("seed")] * (max(lengths) if lengths else 1)
        if cfg.get("seed") is None:
            raise UserError("run.members without run.seeds gives every member `seed`, which is null; set seed=0")
    return member_seeds(cfg.get("seed"), seeds), values


def member_dirs_and_configs(cfg: DictConfig, run_dir: Path, seeds: list[int],
                            values: dict[str, list]) -> tuple[list[Path], list[DictConfig]]:
    """The members' run dirs, seed_<s> with the member's own values where members have them (member_<i>_... where
    members are alike), and their run configs."""
    own = [{key: float(listed[i]) for key, listed in values.items()} for i in range(len(seeds))]
    names = [f"seed_{seed}" + "".join(f"_{key}_{value:g}" for key, value in mine.items())
             for seed, mine in zip(seeds, own)]
    if len(set(names)) < len(names):
        names = [f"member_{i}_{name}" for i, name in enumerate(names)]
    return [run_dir / name for name in names], [member_config(cfg, seed, mine) for seed, mine in zip(seeds, own)]


def check_population_settings(cfg: DictConfig) -> None:
    """What a population's runs cannot do yet, refused in one line before anything is made."""
    if (cfg.get("logger") or {}).get("name") == "wandb":
        raise UserError("logger=wandb with run.seeds: a population's members write TensorBoard only (<member dir>/tb); "
                        "drop logger=wandb, or train the seeds as single runs")


def is_population_dir(path: Path) -> bool:
    """Whether a run dir is a population's (its config has run.seeds or run.members)."""
    config = path / ".hydra" / "config.yaml"
    if not config.is_file():
        return False
    run = OmegaConf.load(config).get("run") or {}
    return run.get("seeds") is not None or run.get("members") is not None


def resume_population(cfg: DictConfig) -> float:
    """+resume=<a population's run dir>: every member from its last checkpoint (or, where none of them wrote one
    yet, the population again from step 0), with this command's run.* settings."""
    from rlexp.runs.checkpoints import resume_checkpoint
    from rlexp.runs.dirs import absolute, check_resume_overrides
    from rlexp.runs.files import check_writable

    key = f"+resume={cfg.resume}"
    run_dir = absolute(str(cfg.resume))
    stored = OmegaConf.load(run_dir / ".hydra" / "config.yaml")
    check_resume_overrides(cfg, stored)
    given = {o.split("=", 1)[0].lstrip("+~")[4:] for o in task_overrides() if o.lstrip("+~").startswith("run.")}
    with open_dict(stored):  # the run's own run.* settings, but those this command sets
        for name in given - {"seeds", "members"}:
            OmegaConf.update(stored.run, name, OmegaConf.select(cfg.run, name), force_add=True)
    check_population_settings(stored)
    check_writable(run_dir, key)
    lock = RunLock(run_dir).acquire(key)
    locks: list[RunLock] = []
    try:
        setup_tensorflow(stored)
        checked = check_config(stored)
        seeds, values = members_of(stored)
        member_dirs, configs = member_dirs_and_configs(stored, run_dir, seeds, values)
        locks = [RunLock(d).acquire(key) for d in member_dirs]  # no member resumed on its own meanwhile
        checkpoints = [resume_checkpoint(d, key) for d in member_dirs]
        from rlexp.runs.files import remove_leftovers

        for d in member_dirs:  # half-written files of the killed run
            remove_leftovers(d, d / "checkpoints", d / "tb")
        agent = build_agent(stored, checked=checked, seeds=seeds, member_values=values)
        startup_done()
        from rlexp.runs.logs import attach_run_log, detach_run_log

        handler = attach_run_log(run_dir)
        try:
            if all(c is not None for c in checkpoints):
                agent.resume_population(checkpoints)
                log.info(f"resumed {len(seeds)} members of {run_dir} at step {agent.steps:,}")
            else:
                log.info(f"{run_dir}: not every member has a checkpoint yet: training the population again from "
                         "step 0")
                for d, record in zip(member_dirs, agent.member_records()):  # its files start over
                    shutil.rmtree(d / "tb", ignore_errors=True)
                    record.history._flushed = -1
            return _train(agent, stored, seeds, member_dirs, configs, checked)
        finally:
            detach_run_log(handler)
    finally:
        for held in locks:
            held.release()
        lock.release()


def trial_spec() -> dict | None:
    """The sweep trial this process runs (rlexp.sweep.trial_spec), or None."""
    from rlexp.sweep import trial_spec as spec

    return spec()


def train_population(cfg: DictConfig) -> float | dict:
    """Train run.seeds' members together; returns the mean of their final evaluations (a sweep trial's: every
    member's objectives, `population_metrics`)."""
    from rlexp.agents.base import TrainingDiverged
    from rlexp.presets.complete import check_presets
    from rlexp.presets.fallbacks import apply_fallback
    from rlexp.runs.logs import attach_run_log, detach_run_log

    if cfg.get("init_from"):
        raise UserError("run.seeds with +init_from: a population starts from its members' own initial weights; "
                        "+init_from takes one run, without run.seeds")
    if cfg.get("resume"):
        return resume_population(cfg)
    if in_sweep() and not (trial_spec() or {}).get("population"):
        raise UserError("run.seeds in a sweep: use hydra.sweeper.seeds_per_trial (the sweeper's own seeds; with "
                        "hydra.sweeper.population=true they train as one population)")
    check_population_settings(cfg)
    seeds, values = members_of(cfg)
    check_presets(cfg, choices())
    cfg, preset_line = apply_fallback(cfg, choices(), task_overrides())
    setup_tensorflow(cfg)
    checked = check_config(cfg)
    run_dir = new_run_dir(cfg)
    made = [p for p in run_dir.parents if not p.exists()]
    run_dir = claim_run_dir(run_dir)
    lock = RunLock(run_dir).acquire(run_dir_key(cfg))
    member_locks: list[RunLock] = []
    try:
        try:
            agent = build_agent(cfg, checked=checked, seeds=seeds, member_values=values)
        except BaseException:
            lock.release()
            unclaim_run_dir(run_dir, made)
            lock = None
            raise
        if preset_line:
            log.info(preset_line)
        startup_done()
        member_dirs, configs = member_dirs_and_configs(cfg, run_dir, seeds, values)
        pack = (trial_spec() or {}).get("pack") if in_sweep() else None
        if pack:  # several sweep trials in one job: each member in its trial's own folder
            member_dirs = [Path(folder) for entry in pack for folder in entry["dirs"]]
        for member_dir, member in zip(member_dirs, configs):
            member_dir.mkdir(parents=bool(pack))
            write_run_config(member_dir, member)
            member_locks.append(RunLock(member_dir).acquire(run_dir_key(cfg)))  # no member resumed alone meanwhile
        write_run_config(run_dir, cfg)
        handler = attach_run_log(run_dir, *([preset_line] if preset_line else []))
        try:
            return _train(agent, cfg, seeds, member_dirs, configs, checked)
        except TrainingDiverged as e:
            raise RunFailed(f"training diverged: {e}") from None
        finally:
            detach_run_log(handler)
    finally:
        for held in member_locks:
            held.release()
        if lock is not None:
            lock.release()


def _train(agent, cfg: DictConfig, seeds: list[int], member_dirs: list[Path], configs: list[DictConfig],
           checked) -> float:
    precision = int(cfg.agent.display_precision)
    log.info(f"training {type(agent).__name__} on {cfg.env.id}: a population of {len(seeds)} members (seeds "
             f"{', '.join(map(str, seeds))}) in one process -> {member_dirs[0].parent}/{member_dirs[0].name.split('_')[0]}_*")
    from rlexp.runs.tracking import TensorBoard
    from rlexp.sweep.member_trials import (STOPPED_BY_TRIAL, diverged_member, member_trials, pack_metrics,
                                           population_metrics)

    records = agent.member_records()
    trackers = [TensorBoard(d / "tb", resume=(r.history.rows, r.steps) if r.steps else None)
                for d, r in zip(member_dirs, records)]
    # in a sweep, each trial's first member reports to its trial (one trial's seeds, or each of a packed job's)
    trials = member_trials(trackers, int(float(cfg.run.max_steps)), agent, len(seeds))
    evaluators = [make_evaluator(member, member_dir) for member, member_dir in zip(configs, member_dirs)]
    for evaluator, record in zip(evaluators, records):  # a resumed member's evaluations up to its step
        if evaluator is not None:
            evaluator.restore(record.steps)
    failed = True
    try:
        summaries = agent.fit_population(cfg.run.max_steps, cfg.run.target_reward, run_dirs=member_dirs,
                                         checkpoint_interval=float(cfg.run.checkpoint_interval),
                                         history_interval=float(cfg.run.history_interval), config=run_config(cfg),
                                         trackers=trackers, verbose=0 if cfg.agent.get("quiet") else 1,
                                         evaluators=evaluators if any(evaluators) else None,
                                         make_single=lambda i: build_agent(configs[i], checked=checked, threads=False))
        for tracker in trackers:
            tracker.end_of_training()
        failed = False
    finally:
        for tracker in trackers:
            tracker.close(failed)
        for evaluator in evaluators:
            if evaluator is not None:
                evaluator.close()
    agent.envs.close()
    means = []
    interrupted = agent.stop_signal
    for i, (member_dir, member, summary) in enumerate(zip(member_dirs, configs, summaries)):
        returns: list[float] = []
        # diverged: its weights are not finite; pruned or never started: its trial's result is not wanted
        stopped = str(summary["reason"]).startswith(("diverged", *STOPPED_BY_TRIAL))
        if not interrupted and not stopped:  # each member's final evaluation, by a single agent holding its weights
            single = build_agent(member, checked=checked, threads=False)  # the population's pools
            single.load(member_dir / "checkpoints" / "last.ckpt", weights_only=True)
            returns = evaluate(single, member, deterministic_final_eval(member))
            single.envs.close()
        write_summary(member_dir, summary, returns, member)
        mean, std = mean_std(returns)
        means.append(mean)
        log.info(f"member {i} seed {seeds[i]} ({summary['reason']}): {summary['steps']:,} steps, "
                 + (f"eval {mean:.{precision}f} ± {std:.{precision}f} over {len(returns)} episodes"
                    if returns else "no eval") + f" | {member_dir}")
    seconds = max(s["seconds"] for s in summaries)
    steps = sum(s["steps"] for s in summaries)
    log.info(f"done: {len(seeds)} members, {steps:,} steps in {seconds:.1f} s ({steps / max(seconds, 1e-9):,.0f} "
             f"steps/s) | run dirs: {member_dirs[0].parent}/{member_dirs[0].name.split('_')[0]}_*")
    log.info(f"next: python -m rlexp mode=plot '+runs={member_dirs[0].parent}/{member_dirs[0].name.split('_')[0]}_*' | python -m rlexp mode=play "
             f"+checkpoint={member_dirs[0]} | python -m rlexp +resume={member_dirs[0].parent} (every member)")
    if interrupted:
        if in_sweep():  # the sweep's own stop: not a result
            raise KeyboardInterrupt
        raise SystemExit(128 + int(interrupted))
    if in_sweep() and trials:
        if (trial_spec() or {}).get("pack"):  # several trials: each its own outcome
            return pack_metrics(trials, means, summaries, seconds, seeds)
        if trials[0].pruned is not None:  # the trial's budget counts every member's steps
            trials[0].pruned.steps = sum(int(s["steps"]) for s in summaries)
            raise trials[0].pruned
        error = diverged_member(summaries, seeds, range(len(seeds)))
        if error is not None:  # as a seed's own job fails (training diverged): the trial fails
            raise RunFailed(error)
        return population_metrics(means, summaries, seconds)
    finite = [m for m in means if m == m]
    return float(sum(finite) / len(finite)) if finite else float("nan")
