"""Sweep benchmarks, written to benchmarks/results/sweeps.md (+ sweeps.json):

1. A trial's fixed cost: 4 trials of 1,000 PPO CartPole steps, one at a time, with rlexp's local launcher
   (trials forked from a forkserver that imported TensorFlow once) and with submitit's local launcher (a new
   interpreter per trial, polled), alternating; per-trial seconds as the sweeper measured them.
2. A 20-trial PPO CartPole study (conf/sweep/ppo.yaml's space, 50k steps a trial) with 3 seeds per trial and
   a confirmation round (top 5 on 5 fresh seeds): wall time, and the raw ranking next to the confirmed one.

Usage: python benchmarks/sweeps.py [--reps 3] [--trials 20] [--skip-fixed-cost] [--skip-study]
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from current import RESULTS, now, write_table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "benchmarks" / "runs" / "sweeps"
LAUNCHERS = {"rlexp_local (forkserver)": ["hydra/launcher=rlexp_local"],
             "submitit_local": ["hydra/launcher=submitit_local", "hydra.launcher.timeout_min=600"]}


def rlexp(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    WORK.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "rlexp", *args], cwd=WORK, capture_output=True, text=True)
    if result.returncode:
        raise SystemExit(f"rlexp {' '.join(args)} failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
    return result, time.perf_counter() - start


def study_trials(name: str) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{WORK}/multirun/{name}/optuna.db").trials


def fixed_cost(reps: int) -> list[dict]:
    rows = []
    for rep in range(reps):
        for label, launcher in LAUNCHERS.items():
            name = f"fixed_{rep}_{launcher[0].split('=')[1]}"
            shutil.rmtree(WORK / "multirun" / name, ignore_errors=True)
            _, wall = rlexp("-m", "agent=ppo", "env=cartpole", "run.max_steps=1000", "agent.lr=1e-3,2e-3,3e-3,4e-3",
                            "hydra.sweeper.n_jobs=1", f"hydra.sweeper.study_name={name}", *launcher)
            seconds = [t.user_attrs["seconds"] for t in sorted(study_trials(name), key=lambda t: t.number)]
            row = dict(launcher=label, rep=rep, sweep_wall_s=round(wall, 2), trial_s=seconds)
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def confirmed_study(trials: int) -> dict:
    name = "ppo_cartpole_confirmed"
    shutil.rmtree(WORK / "multirun" / name, ignore_errors=True)
    result, wall = rlexp("-m", "+sweep=ppo", "agent=ppo", "env=cartpole", f"hydra.sweeper.n_trials={trials}",
                         "hydra.sweeper.seeds_per_trial=3", "hydra.sweeper.confirm={top_k:5,seeds:5}",
                         f"hydra.sweeper.study_name={name}")
    folder = WORK / "multirun" / name
    done = study_trials(name)
    table = pd.read_csv(folder / "confirmation.csv")
    confirm_s = next((float(line.split("took ")[1].split(" s")[0]) for line in result.stdout.splitlines()
                      if line.startswith("confirmation took")), float("nan"))
    return dict(trials=len(done), wall_s=round(wall, 1), confirm_s=confirm_s,
                states={s: sum(t.state.name == s for t in done) for s in ("COMPLETE", "PRUNED", "FAIL")},
                confirmation=table.to_dict("records"),
                seed_values={t.number: t.user_attrs.get("seed_values") for t in done})


def markdown(fixed: list[dict], study: dict | None) -> str:
    lines = []
    if fixed:
        lines += ["## A trial's fixed cost", "",
                  "4 trials of 1,000 PPO CartPole steps (`run.max_steps=1000`, 20 final evaluation episodes), one at "
                  "a time (`hydra.sweeper.n_jobs=1`); seconds per trial as the sweeper measured them (launch to "
                  "result), medians over the repetitions. The first trial of rlexp's launcher includes starting "
                  "the forkserver (importing TensorFlow once).", "",
                  "| launcher | first trial (s) | later trials (s) | whole sweep (s) |", "|---|---:|---:|---:|"]
        for label in LAUNCHERS:
            rows = [r for r in fixed if r["launcher"] == label]
            first = statistics.median(r["trial_s"][0] for r in rows)
            later = statistics.median(s for r in rows for s in r["trial_s"][1:])
            wall = statistics.median(r["sweep_wall_s"] for r in rows)
            lines.append(f"| {label} | {first:.1f} | {later:.1f} | {wall:.1f} |")
        lines.append("")
    if study:
        lines += ["## 20 trials x 3 seeds, then a confirmation round", "",
                  "`python -m rlexp -m +sweep=ppo agent=ppo env=cartpole hydra.sweeper.n_trials=20 "
                  "hydra.sweeper.seeds_per_trial=3 hydra.sweeper.confirm={top_k:5,seeds:5}`: 50k steps a trial, "
                  "objective the mean over the 3 seeds of the final evaluation (20 episodes), median pruner; "
                  "the top 5 re-run on seeds 10000-10004.", "",
                  f"Wall time {study['wall_s']:.0f} s ({study['confirm_s']:.0f} s of it the confirmation round); "
                  f"trials: {study['states']}.", "",
                  "| trial | search rank | search value (3 seeds) | per seed | confirmed rank | confirmed mean (5 seeds) | 95% CI |",
                  "|---:|---:|---:|---|---:|---:|---|"]
        for row in sorted(study["confirmation"], key=lambda r: r["search_rank"]):
            seeds = study["seed_values"].get(row["trial"]) or study["seed_values"].get(str(row["trial"])) or []
            lines.append(f"| {row['trial']} | {row['search_rank']} | {row['search_value']:.1f} | "
                         f"{', '.join(f'{v:.0f}' for v in seeds)} | {row['confirmed_rank']} | "
                         f"{row['confirmed_mean']:.1f} | [{row['ci_low']:.1f}, {row['ci_high']:.1f}] |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--skip-fixed-cost", action="store_true")
    parser.add_argument("--skip-study", action="store_true")
    args = parser.parse_args()
    started = now()
    saved = RESULTS / "sweeps.json"
    old = json.loads(saved.read_text()) if saved.exists() else {}
    fixed = old.get("fixed_cost", []) if args.skip_fixed_cost else fixed_cost(args.reps)
    study = old.get("study") if args.skip_study else confirmed_study(args.trials)
    if study:
        print(json.dumps({k: v for k, v in study.items() if k != "seed_values"}), flush=True)
    RESULTS.mkdir(exist_ok=True)
    saved.write_text(json.dumps({"fixed_cost": fixed, "study": study}, indent=1))
    body = markdown(fixed, study)
    print(body)
    print(write_table("sweeps", "Sweeps: trial fixed cost, seeds per trial and confirmation", body, started))


if __name__ == "__main__":
    main()
