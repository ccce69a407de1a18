"""Sweep benchmarks, written to benchmarks/results/sweeps.md (+ sweeps.json):

1. A trial's fixed cost: 4 trials of 1,000 PPO CartPole steps, one at a time, with rlexp's local launcher
   (trials forked from a forkserver that imported TensorFlow once) and with submitit's local launcher (a new
   interpreter per trial, polled), alternating; per-trial seconds as the sweeper measured them.
2. A 20-trial PPO CartPole study (conf/sweep/ppo.yaml's space, 50k steps a trial) with 3 seeds per trial and
   a confirmation round (top 5 on 5 fresh seeds): wall time, and the raw ranking next to the confirmed one.
3. Job slots: a 20-trial PPO CartPole study with the median pruner at n_jobs=2, with this code and with an earlier
   rlexp installed in another virtualenv (--before-python; it ran trials in batches of n_jobs), alternating:
   wall time and the fraction of slot-time idle, from each job's own files (its console log is created when its
   process starts; its run dir's newest file is its end).
4. Workers: the same command twice at once on one journal file (and on PostgreSQL where RLEXP_TEST_POSTGRES names
   a database, as .ci/postgres.sh sets it): the trials the study holds against n_trials.
5. Packed trials: a 20-trial PPO CartPole study on RL Zoo's row, searching what members may differ in (lr, gamma,
   GAE lambda, entropy coefficient), with each trial a job (trials_per_job=1) and with 10 trials a job
   (trials_per_job=10), both at n_jobs=2 without pruning (the same training work), alternating: wall time, the
   trials' values, and the peak memory of all processes.

Usage: python benchmarks/sweeps.py [--reps 3] [--trials 20] [--skip-fixed-cost] [--skip-study]
                                   [--before-python PATH] [--skip-slots] [--skip-workers] [--skip-packing]
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
from current import RESULTS, commit, machine, now, write_table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "benchmarks" / "runs" / "sweeps"
LAUNCHERS = {"rlexp_local (forkserver)": ["hydra/launcher=rlexp_local"],
             "submitit_local": ["hydra/launcher=submitit_local", "hydra.launcher.timeout_min=600"]}


def rlexp(*args: str, python: str = sys.executable) -> tuple[subprocess.CompletedProcess, float]:
    WORK.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    result = subprocess.run([python, "-m", "rlexp", *args], cwd=WORK, capture_output=True, text=True)
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


SLOTS_STUDY = ["+sweep=ppo", "agent=ppo", "env=cartpole", "run.max_steps=2e4", "run.eval_interval=2000",
               "run.eval_episodes=5", "hydra.sweeper.n_jobs=2", "hydra.sweeper.pruner=median",
               "hydra.sweeper.warmup_trials=3", "hydra.sweeper.warmup_steps=4000"]


def job_spans(folder: Path) -> list[tuple[float, float]]:
    """(start, end) wall-clock seconds of each search job: its log's first line (the run starting, after the process
    composed its config), its run dir's newest file (the run's last write)."""
    from datetime import datetime

    spans = []
    for log in sorted(folder.glob("trial_*/main.log")):
        first = log.read_text().split("\n", 1)[0]
        start = datetime.strptime(first[1:24], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        end = max(p.stat().st_mtime for p in log.parent.rglob("*") if p.is_file())
        spans.append((start, end))
    return spans


def slot_study(label: str, python: str, rep: int, trials: int) -> dict:
    name = f"slots_{label}_{rep}"
    shutil.rmtree(WORK / "multirun" / name, ignore_errors=True)
    _, wall = rlexp("-m", *SLOTS_STUDY, f"hydra.sweeper.n_trials={trials}", f"hydra.sweeper.study_name={name}",
                    f"hydra.sweep.dir=multirun/{name}", python=python)
    spans = job_spans(WORK / "multirun" / name)
    first, last = min(s for s, _ in spans), max(e for _, e in spans)
    busy = sum(e - s for s, e in spans)
    done = study_trials(name)
    return dict(label=label, rep=rep, wall_s=round(wall, 1), jobs=len(spans), slot_span_s=round(last - first, 1),
                idle=round(1 - busy / (2 * (last - first)), 3),
                states={s: sum(t.state.name == s for t in done) for s in ("COMPLETE", "PRUNED", "FAIL")})


def slots(before: str | None, reps: int, trials: int) -> list[dict]:
    rows = []
    for rep in range(reps):
        for label, python in ([("before", before)] if before else []) + [("after", sys.executable)]:
            rows.append(slot_study(label, python, rep, trials))
            print(json.dumps(rows[-1]), flush=True)
    return rows


def workers(trials: int = 10) -> list[dict]:
    """Two workers at once on one storage: the study's trials, and how many each worker ran."""
    import os

    storages = {"journal file": f"journal:///{WORK}/workers/study.log"}
    if os.environ.get("RLEXP_TEST_POSTGRES"):
        storages["PostgreSQL"] = os.environ["RLEXP_TEST_POSTGRES"]
    shutil.rmtree(WORK / "workers", ignore_errors=True)
    rows = []
    for label, url in storages.items():
        name = f"workers_{int(time.time())}"
        args = [sys.executable, "-m", "rlexp", "-m", "agent=ppo", "env=cartpole", "run.max_steps=2048",
                "run.eval_episodes=2", "agent.lr=tag(log,interval(1e-4,1e-2))", f"hydra.sweeper.n_trials={trials}",
                "hydra.sweeper.n_jobs=1", f"hydra.sweeper.storage={url}", f"hydra.sweeper.study_name={name}",
                f"hydra.sweep.dir=multirun/{name}"]
        procs = [subprocess.Popen(args, cwd=WORK, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for _ in range(2)]
        outputs = [p.communicate()[0] for p in procs]
        if any(p.returncode for p in procs):
            raise SystemExit("\n".join(o[-3000:] for o in outputs))
        from rlexp.sweep import make_storage

        study = optuna.load_study(study_name=name, storage=make_storage(url) if url.startswith("journal") else url)
        numbers = sorted(t.number for t in study.trials)
        rows.append(dict(storage=label, n_trials=trials, trials=len(numbers), numbers=numbers,
                         per_worker=[sum(line.startswith("trial ") for line in o.splitlines()) for o in outputs],
                         states={s: sum(t.state.name == s for t in study.trials) for s in ("COMPLETE", "PRUNED", "FAIL")}))
        print(json.dumps(rows[-1]), flush=True)
    return rows


SECTIONS = ("fixed_cost", "study", "slots", "workers", "packing")
PACKED_SPACE = ["agent=ppo", "env=cartpole", "run.max_steps=5e4", "hydra.sweeper.n_jobs=2", "hydra.sweeper.pruner=none",
                "agent.lr=tag(log,interval(1e-5,1e-2))", "agent.gamma=choice(0.9,0.95,0.98,0.99,0.995,0.999)",
                "agent.lam=choice(0.8,0.9,0.92,0.95,0.98,0.99,1.0)", "agent.entropy_coef=tag(log,interval(1e-8,1e-1))"]


def packing(reps: int, trials: int) -> list[dict]:
    """The packed-trials study with trials_per_job 1 and 10, alternating: wall time, peak memory of the process
    tree, the jobs run and the trials' values."""
    rows = []
    for rep in range(reps):
        for per_job in (1, 10):
            name = f"packing_{rep}_{per_job}"
            shutil.rmtree(WORK / "multirun" / name, ignore_errors=True)
            peak, (result, wall) = sampled_rss(lambda: rlexp("-m", *PACKED_SPACE, f"hydra.sweeper.n_trials={trials}",
                                                             f"hydra.sweeper.trials_per_job={per_job}",
                                                             f"hydra.sweeper.study_name={name}"))
            done = study_trials(name)
            values = [t.value for t in done if t.value is not None]
            row = dict(trials_per_job=per_job, rep=rep, wall_s=round(wall, 1), peak_rss_gb=round(peak / 2**30, 2),
                       jobs=len(list((WORK / "multirun" / name / ".launcher").glob("job_*.out"))),
                       complete=len(values), median_value=statistics.median(values) if values else float("nan"),
                       at_500=sum(v >= 475 for v in values))
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def tree_rss(root: int) -> int:
    """The summed resident memory (bytes) of `root`'s descendants, from /proc."""
    import os

    parents, rss = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
            rss[int(entry)] = int(Path(f"/proc/{entry}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            continue
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier and pid not in found}
        found |= frontier
    return sum(rss.get(pid, 0) for pid in found)


def sampled_rss(run) -> tuple[int, object]:
    """Run `run()` while sampling the summed resident memory of this process's descendants (the sweep and its
    jobs) every 0.2 s; (the peak in bytes, run's result)."""
    import os
    import threading

    peak, done = [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], tree_rss(os.getpid()))
            time.sleep(0.2)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        result = run()
    finally:
        done.set()
        thread.join()
    return peak[0], result


def previous_stamp() -> dict:
    """When and where sweeps.md was last written (a section measured before sections kept their own)."""
    import re

    text = (RESULTS / "sweeps.md").read_text() if (RESULTS / "sweeps.md").exists() else ""
    written = re.search(r"Written (.+?) at commit (\S+?) by", text)
    cpu = re.search(r"Machine: (.+?), \d+ GiB", text)
    return dict(date=written.group(1) if written else "?", commit=written.group(2) if written else "?",
                machine=cpu.group(1) if cpu else "?")


def provenance(measured: dict | None, section: str) -> list[str]:
    stamp = (measured or {}).get(section)
    return [f"Measured {stamp['date']} at commit {stamp['commit']}, {stamp['machine']}.", ""] if stamp else []


def markdown(fixed: list[dict], study: dict | None, slot_rows: list[dict] | None = None,
             worker_rows: list[dict] | None = None, measured: dict | None = None,
             packed: list[dict] | None = None) -> str:
    lines = []
    if packed:
        lines += ["## Packed trials: 20 trials in 2 jobs", "", *provenance(measured, "packing"),
                  f"`python -m rlexp -m {' '.join(PACKED_SPACE)} hydra.sweeper.n_trials=20 "
                  "hydra.sweeper.trials_per_job=K`: RL Zoo's PPO CartPole row (n_steps 32, 8 envs, 50k steps a "
                  "trial), searching what a population's members may differ in; no pruning, so both ways train the "
                  "same 20 x 50k steps. K=1: each trial its own process, two at a time; K=10: two processes of 10 "
                  "members each. Peak memory: the sweep's process tree summed, sampled every 0.2 s. Values: each "
                  "trial's final evaluation (20 episodes); the trials differ between the two ways (TPE samples "
                  "10 trials at once when it packs them).", "",
                  "| trials_per_job | rep | jobs | wall s | peak memory GB | complete | median value | trials >= 475 |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in packed:
            lines.append(f"| {r['trials_per_job']} | {r['rep']} | {r['jobs']} | {r['wall_s']:.1f} | "
                         f"{r['peak_rss_gb']:.2f} | {r['complete']} | {r['median_value']:.1f} | {r['at_500']} |")
        walls = {k: statistics.median(r["wall_s"] for r in packed if r["trials_per_job"] == k) for k in (1, 10)}
        mems = {k: statistics.median(r["peak_rss_gb"] for r in packed if r["trials_per_job"] == k) for k in (1, 10)}
        lines += ["", f"Medians: one trial a job {walls[1]:.1f} s and {mems[1]:.2f} GB; ten trials a job "
                      f"{walls[10]:.1f} s and {mems[10]:.2f} GB (wall ratio {walls[1] / walls[10]:.2f}x).", ""]
    if slot_rows:
        lines += ["## Job slots: pruned trials free their slot at once", "", *provenance(measured, "slots"),
                  f"`python -m rlexp -m {' '.join(SLOTS_STUDY)} hydra.sweeper.n_trials=20`: 20k steps a trial, "
                  "evaluations every 2,000, the median pruner after 3 complete trials and 4,000 steps; `before` is "
                  "rlexp at commit 5f1e77b in its own virtualenv (trials in batches of n_jobs, the sweeper waiting "
                  "for the whole batch), `after` this code (each job launched alone as a slot frees), alternating. "
                  "Idle: 1 - the jobs' busy seconds / (2 slots x the span from the first job's start to the last "
                  "one's end); a job is busy from its log's first line to its run dir's last write (the process's "
                  "start-up before it, about a second, counts as idle for both).", "",
                  "| code | rep | wall s | slot span s | idle | trials |", "|---|---:|---:|---:|---:|---|"]
        for r in slot_rows:
            lines.append(f"| {r['label']} | {r['rep']} | {r['wall_s']:.1f} | {r['slot_span_s']:.1f} | "
                         f"{r['idle']:.1%} | {r['states']} |")
        labels = sorted({r["label"] for r in slot_rows})
        if len(labels) == 2:
            med = {label: (statistics.median(r["wall_s"] for r in slot_rows if r["label"] == label),
                           statistics.median(r["idle"] for r in slot_rows if r["label"] == label)) for label in labels}
            lines += ["", f"Medians: before {med['before'][0]:.1f} s wall, {med['before'][1]:.1%} idle; after "
                          f"{med['after'][0]:.1f} s, {med['after'][1]:.1%} idle (wall ratio after/before "
                          f"{med['after'][0] / med['before'][0]:.2f}). Trials differ between the two (the sampler "
                          "draws as trials are asked, and pruning depends on which trials finished first)."]
        lines.append("")
    if worker_rows:
        lines += ["## Two workers, one study", "", *provenance(measured, "workers"),
                  "The same command started twice at once (`hydra.sweeper.n_trials=10 hydra.sweeper.n_jobs=1`, "
                  "PPO CartPole trials of 2,048 steps) against one storage:", "",
                  "| storage | n_trials | trials in the study | trial numbers | trials per worker | states |",
                  "|---|---:|---:|---|---|---|"]
        for r in worker_rows:
            lines.append(f"| {r['storage']} | {r['n_trials']} | {r['trials']} | {r['numbers'][0]}-{r['numbers'][-1]} | "
                         f"{' + '.join(map(str, r['per_worker']))} | {r['states']} |")
        lines.append("")
    if fixed:
        lines += ["## A trial's fixed cost", "", *provenance(measured, "fixed_cost"),
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
        lines += ["## 20 trials x 3 seeds, then a confirmation round", "", *provenance(measured, "study"),
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
    parser.add_argument("--before-python", help="python of a virtualenv with an earlier rlexp, for the slots table")
    parser.add_argument("--skip-slots", action="store_true")
    parser.add_argument("--skip-workers", action="store_true")
    parser.add_argument("--skip-packing", action="store_true")
    args = parser.parse_args()
    started = now()
    saved = RESULTS / "sweeps.json"
    old = json.loads(saved.read_text()) if saved.exists() else {}
    measured = {section: old.get("measured", {}).get(section) or previous_stamp() for section in SECTIONS}
    stamp = dict(date=started, commit=commit(), machine=machine().split(",")[0])
    fixed = old.get("fixed_cost", []) if args.skip_fixed_cost else fixed_cost(args.reps)
    slot_rows = old.get("slots", []) if args.skip_slots else slots(args.before_python, args.reps, args.trials)
    worker_rows = old.get("workers", []) if args.skip_workers else workers()
    study = old.get("study") if args.skip_study else confirmed_study(args.trials)
    packed = old.get("packing", []) if args.skip_packing else packing(args.reps, args.trials)
    for section, skipped in zip(SECTIONS, (args.skip_fixed_cost, args.skip_study, args.skip_slots, args.skip_workers,
                                           args.skip_packing)):
        if not skipped:
            measured[section] = stamp
    if study:
        print(json.dumps({k: v for k, v in study.items() if k != "seed_values"}), flush=True)
    RESULTS.mkdir(exist_ok=True)
    saved.write_text(json.dumps({"fixed_cost": fixed, "study": study, "slots": slot_rows, "workers": worker_rows,
                                 "packing": packed, "measured": measured}, indent=1))
    body = markdown(fixed, study, slot_rows, worker_rows, measured, packed)
    print(body)
    print(write_table("sweeps", "Sweeps: job slots, workers, trial fixed cost, seeds per trial and confirmation", body,
                      started))


if __name__ == "__main__":
    main()
