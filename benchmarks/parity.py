"""Learning parity: rlexp against SB3 and sb3-contrib (TRPO, RecurrentPPO, and RL Zoo's rows as RL Zoo builds them:
DQN, PPO, TD3, ...) on the same env, hyperparameters, network,
initialisation, observation/reward normalisation and env steps, several seeds a side, both scored by 20 episodes of
the deterministic policy with the final weights.

Usage: python benchmarks/parity.py --sb3-python /path/to/sb3-venv/bin/python [--cases CASE ...] [--seeds 0 1 2]
       [--sides rlexp sb3] [--steps N --no-write]   (a smoke test: N env steps a run, nothing recorded)
       python benchmarks/parity.py --rewrite   (parity.md again from parity.json)
Per case and seed the two sides alternate: rlexp through its CLI (run dirs under benchmarks/runs/parity/, the final
evaluation read from the run's summary.json), then benchmarks/sb3_parity_cases.py in the SB3 virtualenv. Every row is
kept in benchmarks/results/parity.json (a run of the same case, side and seed replaces its row, so cases and seeds can
be run in separate invocations, and the two sides in two processes with --sides); benchmarks/results/parity.md is
written from it. Rows are only recorded when the runs trained the case's own step count.
A stopped or killed benchmark continues its unfinished runs when started again: rlexp's run dir for a case and seed
is fixed (benchmarks/runs/parity/<case>-s<seed>-<steps>) and resumed with +resume; the SB3 side saves a checkpoint every
50k env steps (benchmarks/runs/parity/sb3/<case>-s<seed>-<steps>) and continues from it. The SB3 side runs with one PyTorch
thread (OMP_NUM_THREADS=1: these networks are small, and two sides can then share two cores).
"""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
from current import RESULTS, command_line, commit, machine, now, write_table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "benchmarks" / "runs" / "parity"
ROWS = RESULTS / "parity.json"
SB3_CASES = ROOT / "benchmarks" / "sb3_parity_cases.py"
TOOLS = ("rlexp", "sb3")
MIN_SEEDS = 3  # a side's seeds needed for a verdict


class Case(NamedTuple):
    args: list[str]  # rlexp CLI arguments (besides seed, steps and the evaluation settings)
    sb3: str  # the case's name in sb3_parity_cases.py
    steps: int
    origin: str  # where both sides' hyperparameters come from


SB3_ADAM = "agent.opt_epsilon=1e-5"  # SB3's Adam epsilon for on-policy agents (rlexp's default: Keras' 1e-7)
# TRPO's continuous fallback (conf/fallbacks/trpo_continuous_vector.yaml), every value given here so the case does not
# move with the preset: 2 envs x 1024 steps, critic minibatches of 128, 64-64 tanh towers with orthogonal init, log std 0
TRPO_ZOO = ["agent=trpo", "model=mlp", "env.n_envs=2", "agent.n_steps=1024", "agent.mini_batches=16", "agent.gamma=0.99",
            "agent.lam=0.95", "agent.lr=1e-3", "agent.cg_damping=0.1", "agent.critic_iterations=20",
            "agent.fvp_n_steps=1", "agent.entropy_coef=0.0", "agent.normalize_obs=true", "agent.normalize_reward=true",
            "agent.log_std_init=0.0", SB3_ADAM]
TRPO_MUJOCO = [*TRPO_ZOO, "agent.cg_iterations=25"]  # RL Zoo's MuJoCo rows: cg_max_steps 25 (max_kl: per case)
LSTM = ["agent=ppo", "model=lstm", SB3_ADAM]  # the tuned preset supplies the rest
CASES = {
    "trpo-hopper-1m": Case([*TRPO_MUJOCO, "agent.max_kl=0.01", "env=hopper"], "trpo-hopper", 1_000_000,
                           "RL Zoo's trpo.yml Hopper-v4 row (its MuJoCo defaults) on SB3's TRPO defaults; rlexp: the "
                           "same values on the command line"),
    "trpo-halfcheetah-1m": Case([*TRPO_MUJOCO, "agent.max_kl=0.04", "env=halfcheetah"], "trpo-halfcheetah", 1_000_000,
                                "RL Zoo's trpo.yml HalfCheetah-v4 row (MuJoCo defaults, target_kl 0.04) on SB3's TRPO "
                                "defaults; rlexp: the same values on the command line"),
    "trpo-lunarlander-continuous-200k": Case([*TRPO_ZOO, "agent.cg_iterations=15", "agent.max_kl=0.01",
                                                   "env=lunarlander_continuous"],
                                             "trpo-lunarlander-continuous", 200_000,
                                             "RL Zoo's trpo.yml LunarLanderContinuous-v3 row on SB3's TRPO defaults "
                                             "(cg_max_steps 15), RL Zoo's benchmark budget; rlexp: its continuous "
                                             "fallback, which holds that row, on the command line"),
    "dqn-mountaincar-zoo": Case(["agent=dqn", "env=generic", "env.id=MountainCar-v0"], "dqn-mountaincar-zoo",
                                120_000, "RL Zoo's dqn.yml MountainCar-v0 row: rlexp's translation of it "
                                "(env=generic finds the row), SB3's DQN built from it as RL Zoo builds it "
                                "(benchmarks/sb3_zoo_row.py)"),
    "dqn-cartpole-zoo": Case(["agent=dqn", "env=cartpole"], "dqn-cartpole-zoo", 50_000,
                             "RL Zoo's dqn.yml CartPole-v1 row, as dqn-mountaincar-zoo (env=cartpole: the row under "
                             "tuned/dqn_cartpole.yaml, which sets only the stop rule, off here)"),
    "dqn-acrobot-zoo": Case(["agent=dqn", "env=generic", "env.id=Acrobot-v1"], "dqn-acrobot-zoo", 100_000,
                            "RL Zoo's dqn.yml Acrobot-v1 row, as dqn-mountaincar-zoo"),
    "ppo-hopper-zoo": Case(["agent=ppo", "env=hopper"], "ppo-hopper-zoo", 1_000_448,
                           "RL Zoo's ppo.yml Hopper-v4 row on gymnasium's Hopper-v5, as dqn-mountaincar-zoo (1,000,448 "
                           "env steps: the whole rollouts of 512 that pass its 1,000,000); a mean near 1,000 is a hopper "
                           "standing for the whole 1,000-step episode (Hopper-v5's healthy reward, no forward progress), "
                           "where SB3's seeds all end: RL Zoo's 2,410.4 is of Hopper-v3"),
    "ppo-halfcheetah-zoo": Case(["agent=ppo", "env=halfcheetah"], "ppo-halfcheetah-zoo", 1_000_448,
                                "RL Zoo's ppo.yml HalfCheetah-v4 row on gymnasium's HalfCheetah-v5, as "
                                "dqn-mountaincar-zoo (1,000,448 env steps: the whole rollouts of 512 that pass its "
                                "1,000,000)"),
    "ppo-ant-zoo": Case(["agent=ppo", "env=ant"], "ppo-ant-zoo", 1_001_472,
                        "RL Zoo's ppo.yml Ant-v4 row (its MuJoCo defaults: SB3's PPO defaults with observations and "
                        "rewards normalised) on gymnasium's Ant-v5, as dqn-mountaincar-zoo (1,001,472 env steps: the "
                        "whole rollouts of 2,048 that pass its 1,000,000); RL Zoo's 1,327 is of Ant-v3"),
    "trpo-mountaincar-zoo": Case(["agent=trpo", "env=generic", "env.id=MountainCar-v0"], "trpo-mountaincar-zoo",
                                 100_352, "RL Zoo's trpo.yml MountainCar-v0 row, as dqn-mountaincar-zoo (100,352 env "
                                 "steps: the whole rollouts that pass its 100,000)"),
    "trpo-swimmer-zoo": Case(["agent=trpo", "env=generic", "env.id=Swimmer-v5"], "trpo-swimmer-zoo", 1_001_472,
                             "RL Zoo's trpo.yml Swimmer-v4 row on gymnasium's Swimmer-v5, as dqn-mountaincar-zoo "
                             "(1,001,472 env steps: the whole rollouts that pass its 1,000,000)"),
    "td3-lunarlander-continuous-zoo": Case(["agent=td3", "env=lunarlander_continuous", "run.mixed_precision=false"],
                                           "td3-lunarlander-continuous-zoo", 300_000,
                                           "RL Zoo's td3.yml LunarLanderContinuous-v3 row, as dqn-mountaincar-zoo; rlexp "
                                           "in float32, TD3's `auto` (learning.md's td3-lunarlander-continuous-bf16 "
                                           "rows: the same seeds in bfloat16)"),
    "ddpg-invertedpendulum-fallback": Case(["agent=ddpg", "env=generic", "env.id=InvertedPendulum-v5"],
                                           "ddpg-invertedpendulum-fallback", 30_000,
                                           "rlexp: conf/fallbacks/ddpg_continuous_vector.yaml (env=generic, no tuned "
                                           "preset), at learning.md's fallback-ddpg-invertedpendulum budget; SB3: "
                                           "ddpg.yml's HalfCheetah-v4 row (its MuJoCo defaults, the fallback's "
                                           "values) on InvertedPendulum-v5, as dqn-mountaincar-zoo"),
    "qrdqn-cartpole-zoo": Case(["agent=qrdqn", "env=cartpole"], "qrdqn-cartpole-zoo", 50_000,
                               "RL Zoo's qrdqn.yml CartPole-v1 row, as dqn-mountaincar-zoo (sb3-contrib's QRDQN)"),
    "qrdqn-acrobot-zoo": Case(["agent=qrdqn", "env=acrobot"], "qrdqn-acrobot-zoo", 100_000,
                              "RL Zoo's qrdqn.yml Acrobot-v1 row, as qrdqn-cartpole-zoo"),
    "qrdqn-lunarlander-zoo": Case(["agent=qrdqn", "env=lunarlander"], "qrdqn-lunarlander-zoo", 100_000,
                                  "RL Zoo's qrdqn.yml LunarLander-v3 row, as qrdqn-cartpole-zoo"),
    "tqc-pendulum-zoo": Case(["agent=tqc", "env=pendulum"], "tqc-pendulum-zoo", 20_000,
                             "RL Zoo's tqc.yml Pendulum-v1 row, as dqn-mountaincar-zoo (sb3-contrib's TQC)"),
    "crossq-pendulum-zoo": Case(["agent=crossq", "env=pendulum"], "crossq-pendulum-zoo", 20_000,
                                "RL Zoo's crossq.yml Pendulum-v1 row, as dqn-mountaincar-zoo (sb3-contrib's CrossQ)"),
    "tqc-fetchreach-zoo": Case(["agent=tqc", "env=generic", "env.id=FetchReach-v4"], "tqc-fetchreach-zoo", 20_000,
                               "RL Zoo's tqc.yml FetchReach-v1 row (HER) on gymnasium-robotics' FetchReach-v4, as "
                               "dqn-mountaincar-zoo (sb3-contrib's TQC with SB3's HerReplayBuffer)"),
    "ars-cartpole-zoo": Case(["agent=ars", "env=cartpole"], "ars-cartpole-zoo", 50_000,
                             "RL Zoo's ars.yml CartPole-v1 row, as dqn-mountaincar-zoo (sb3-contrib's ARS; rlexp runs "
                             "the 4 candidates of an update in 4 env copies, sb3-contrib one after another in 1)"),
    "ars-pendulum-zoo": Case(["agent=ars", "env=pendulum"], "ars-pendulum-zoo", 2_000_000,
                             "RL Zoo's ars.yml Pendulum-v1 row, as ars-cartpole-zoo (8 env copies)"),
    "ppo-lstm-cartpole-novel-20k": Case([*LSTM, "env=cartpole_novel"], "ppo-lstm-cartpole-novel", 20_000,
                                        "RL Zoo's ppo_lstm.yml CartPoleNoVel-v1 row with observations normalised, "
                                        "rewards not (RL Zoo's current row normalises both); rlexp: "
                                        "conf/tuned/ppo_cartpole_novel.yaml with model=lstm"),
    "ppo-lstm-cartpole-novel-50k": Case([*LSTM, "env=cartpole_novel"], "ppo-lstm-cartpole-novel", 50_000,
                                        "as ppo-lstm-cartpole-novel-20k; the schedules decay over 50k steps"),
    "ppo-lstm-pendulum-novel-100k": Case([*LSTM, "env=pendulum_novel"], "ppo-lstm-pendulum-novel", 100_000,
                                         "RL Zoo's ppo_lstm.yml PendulumNoVel-v1 row (gSDE, observations and rewards "
                                         "normalised) on RecurrentPPO's defaults (batch 128); rlexp: "
                                         "conf/tuned/ppo_pendulum_novel.yaml with model=lstm"),
}
FAMILIES = {"trpo": "TRPO (rlexp's TRPO, sb3-contrib's TRPO)", "dqn": "DQN (rlexp's DQN, SB3's DQN)",
            "td3": "TD3 (rlexp's TD3, SB3's TD3)",
            "ddpg": "DDPG (rlexp's DDPG, SB3's DDPG)",
            "qrdqn": "QR-DQN (rlexp's QRDQN, sb3-contrib's QRDQN)", "ars": "ARS (rlexp's ARS, sb3-contrib's ARS)", "tqc": "TQC (rlexp's TQC, sb3-contrib's TQC)",
            "crossq": "CrossQ (rlexp's CrossQ, sb3-contrib's CrossQ)",
            "ppo-lstm": "Recurrent PPO (rlexp's PPO with model=lstm, sb3-contrib's RecurrentPPO)"}
# What differs between the implementations with the same settings, read from both sides' code
DIFFERENCES = {
    "trpo": [
        "line search: rlexp's step shrinks by agent.line_search_shrink each try (0.5, xagents', by default; RL Zoo's "
        "rows and the fallbacks: SB3's 0.8; the rows below ran at 0.5), both 10 tries, both from the step whose quadratic "
        "KL estimate equals the bound (rlexp with x0.8 on trpo-halfcheetah-1m seeds 1 and 2, where it ends near "
        "1,850: 1,884.9 and 1,854.9, against 1,850.8 and 1,854.9 halving; on trpo-lunarlander-continuous-200k "
        "seeds 0-2 the same 212.6 / 168.9 / 225.4: there every first try is accepted, so the factor is not the "
        "cause of that gap)",
        "KL units (found by comparing one update step by step, benchmarks/trpo_step.py; fixed): SB3 averages a "
        "Gaussian policy's KL over the action dimensions as well as the rows, so its target_kl and cg_damping are per "
        "dimension; rlexp summed the dimensions and with the same values took steps n_actions times smaller in KL "
        "(LunarLanderContinuous 2x, Hopper 3x, HalfCheetah 6x). With agent.kl_reduction=mean (the default) one update "
        "from the same weights and rollout moves the actor as sb3-contrib's does to 5.5e-4 (relative). With the sum, "
        "rlexp's LunarLanderContinuous seeds were 212.6 / 168.9 / 225.4 / 167.6 / 219.0 / 228.6 / 196.7 / 214.9 "
        "(mean 204), HalfCheetah's 4854.5 / 1850.8 / 1854.9 / 1974.5 / 220.3, Hopper's 3461.2 / 2086.8 / 2284.2: "
        "the mean is not better on LunarLanderContinuous (170), better on HalfCheetah and Hopper; SB3's seeds 3 and 4 "
        "(80.2, 227.4) put both LunarLanderContinuous means inside the other side's spread",
        "line-search KL: rlexp checks KL(old || new) <= bound, SB3 KL(new || old) < bound (the same Fisher matrix)",
        "Adam's epsilon: Keras adds it to the uncorrected sqrt(v), PyTorch to the bias-corrected one, so in the "
        "first few thousand critic steps rlexp's epsilon weighs up to 1/sqrt(1 - 0.999^t) times more",
        "conjugate gradient starts from zeros in rlexp, from 1e-4 Gaussian noise in SB3",
        "critic loss: half the MSE in rlexp, the MSE in SB3 (Adam makes the scale nearly moot)",
        "advantage normalisation: population std in rlexp, sample std (n-1) in SB3, both over the whole rollout",
        "sub-sampling: rlexp's fvp_n_steps thins only the Fisher-vector products; SB3's sub_sampling_factor thins the "
        "whole policy step (1 in these cases: none)",
        "the surrogate carries an entropy bonus in rlexp (coefficient 0 here), none in SB3",
        "hidden and output layers: Keras' orthogonal initializer (gains sqrt 2, 0.01 policy, 1 value) against "
        "PyTorch's orthogonal_, biases zero on both sides; rlexp's critic is its own model with its own Adam, SB3's "
        "optimizer holds the whole policy but only the value net gets gradients",
        "normalisation: both update the observation statistics on each step's observations before scaling, scale the "
        "truncated episode's final observation without updating, and scale rewards by the running std of the "
        "discounted return (reset at episode ends), clipped to +-10",
    ],
    "td3": [
        "the same update, read from both sides' code: one critic step per env step once 10,000 uniform random actions "
        "are stored, on 256 transitions drawn with replacement; the sum of both critics' MSE to r + gamma (1 - "
        "terminated) min_i Q'_i(s', clip(mu'(s') + clip(N(0, 0.2), +-0.5), +-1)); every second critic step an actor "
        "step through the first critic, then Polyak updates (tau 0.005) of all targets; exploration N(0, 0.1) in "
        "[-1, 1] units, clipped; a time limit's end bootstraps",
        "precision: float32 on both sides (rlexp's `auto` for TD3; in bfloat16, asked for with "
        "run.mixed_precision=bfloat16, the same seeds learned worse here: learning.md)",
        "Adam's epsilon (1e-8 on both sides): Keras adds it to the uncorrected sqrt(v), PyTorch to the corrected one",
        "warm-up: rlexp's first 10,000 actions are uniform in [-1, 1]; SB3 adds its N(0, 0.1) exploration noise to "
        "its uniform warm-up actions too, clipped",
        "initialisation: the same law (PyTorch's nn.Linear default: weights and biases uniform in +-1/sqrt(fan-in)), "
        "different draws; the targets start as copies on both sides. rlexp's rows here ran after commit a3c8d8b; "
        "before it each layer's bias was a copy of its kernel's first row (one seeded Keras initializer drawn "
        "twice), and the same 3 seeds scored 242.7 / 214.4 / 242.6",
        "random streams: exploration, smoothing noise and batch draws come from different generators",
    ],
    "qrdqn": [
        "the same update, read from both sides' code: n_quantiles outputs per action, Q(s, a) their mean; the target "
        "network's greedy action by its mean quantiles gives the target quantiles r + gamma (1 - done) z; the quantile "
        "Huber loss (kappa 1) summed over the estimates and averaged over the targets and the batch; Adam with epsilon "
        "0.01 / batch_size, no gradient clipping; the target network copied and the epsilon schedule as DQN's (above)",
        "random streams: the two sides draw exploration, replay indices and initial weights from their own generators",
    ],
    "tqc": [
        "the same update, read from both sides' code: SAC's actor, entropy tuning, replay and Polyak updates; 2 critics "
        "of 25 quantiles each; the target pools the target critics' quantiles at (s', a'), sorts them and drops the "
        "2 x 2 largest; each critic's loss is the quantile Huber loss averaged over critics, quantiles and targets; the "
        "actor ascends the mean of all quantiles",
        "order within an update: sb3-contrib steps the entropy coefficient, then the critics, then the actor; rlexp the "
        "critics, the actor, then the entropy coefficient. Both use the coefficient's value from before its step in all "
        "three losses, and the actor's log-probabilities from before the actor's step in the coefficient's loss",
        "random streams: as QR-DQN's",
    ],
    "crossq": [
        "the same update, read from both sides' code: no target networks; a' ~ pi(s') with the actor's running "
        "statistics; both critics run once in training mode on the joint batch [(s, a); (s', a')] and the target is "
        "the minimum of its second half; the actor and entropy coefficient step every policy_delay critic steps, the "
        "actor's batch renormalisation learning in that step, the critics' not; Batch Renormalization with momentum "
        "0.01, epsilon 0.001, 100k warm-up steps; Adam betas (0.5, 0.999) for the actor and critics, PyTorch's "
        "defaults for the entropy coefficient",
        "order within an update: as TQC's",
        "random streams: as QR-DQN's",
    ],
    "ars": [
        "the same search, read from both sides' code: n_delta Gaussian directions, one episode at +-delta_std each, "
        "the n_top directions by their better return, a step of lr / (n_top x the kept returns' std, n - 1) along "
        "sum((r+ - r-) delta); LinearPolicy without bias, its actions clipped; MlpPolicy with biases, ReLU, tanh "
        "rescaled to the bounds; observation statistics updated by the candidates' steps",
        "candidates: rlexp runs an update's candidates in parallel env copies, each from a fresh reset; sb3-contrib "
        "one after another in one env. The observation statistics therefore see the steps in another order",
    ],
    "ddpg": [
        "the same update, read from both sides' code: TD3's (above) with one critic, no target smoothing noise, and "
        "an actor step and Polyak updates (tau 0.005) after every critic step; the actor's tanh output is in [-1, 1], "
        "exploration N(0, 0.1) is added there and clipped, the clipped action is stored and rescaled to the env's "
        "bounds (+-3 on InvertedPendulum); no gradient clipping or weight decay on either side",
        "warm-up, Adam's epsilon, initialisation and random streams: as TD3's (above)",
        "tanh in float32: TensorFlow's CPU kernel returns exactly +-1 beyond about +-8, PyTorch's beyond about +-9; "
        "past either the actor's gradient through it is exactly 0",
        "rlexp's seed 3 (2.0): its final actor's pre-tanh outputs on 1,000 states of random play lie between -34.5 "
        "and -10.2, past both libraries' saturation points, and its checkpoint at step 10,200 (200 updates in) gives "
        "the same outputs: once saturated, the actor gets no gradient and every episode falls in 2-3 steps while the "
        "critic trains on; seeds 2 and 4 (1000.0) leave 20-25% of those states past +-8",
    ],
    "ppo-lstm": [
        "LSTM initialisation: Keras' LSTMCell (Glorot-uniform input kernel, orthogonal recurrent kernel, zero biases "
        "with the forget gate's at 1) against PyTorch's nn.LSTM (every weight and bias uniform in +-1/sqrt(64)); "
        "dense and output layers Glorot-uniform with zero biases in rlexp, PyTorch's nn.Linear default in SB3 "
        "(ortho_init off: weights and biases uniform in +-1/sqrt(fan-in))",
        "sequences: rlexp trains on each env's whole rollout (CartPole) or on fixed 128-step slices (Pendulum), the "
        "state reset inside a sequence where an episode starts; sb3-contrib cuts sequences at episode starts and at "
        "minibatch edges after a random rotation of the env-major rollout, padding and masking them",
        "schedules: rlexp sets the learning rate and clip range from the steps before a rollout, SB3 from those after "
        "it (one rollout later: SB3's last update runs at rate 0)",
        "advantage normalisation per minibatch: population std in rlexp, sample std of the unpadded rows in SB3",
        "value loss: value_loss_coef 1.0 x half the MSE in rlexp = SB3's vf_coef 0.5 x the MSE; no value clipping on "
        "either side; gradients clipped to global norm 0.5 on both",
        "gSDE (Pendulum): both draw the exploration matrix every 4 steps and at each rollout start, with "
        "state-independent log std 0 and features gradient-stopped; rlexp adds 1e-6 to the variance as SB3 does",
        "truncation bootstrap: both add gamma x V(final observation) from the state after the step",
    ],
}


def rlexp_run(case: str, seed: int, steps: int) -> dict:
    """One rlexp training run through the CLI in the case and seed's own run dir (an unfinished one resumed);
    its final evaluation from the run's summary.json."""
    run_dir = WORK / f"{case}-s{seed}-{steps}"
    unfinished = (run_dir / "checkpoints" / "last.ckpt").exists() and not (run_dir / "summary.json").exists()
    if not unfinished:
        shutil.rmtree(run_dir, ignore_errors=True)
    WORK.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "rlexp", *CASES[case].args, f"seed={seed}", f"run.max_steps={steps}",
               "run.eval_episodes=20", "run.eval_deterministic=true", "run.target_reward=null", "run.progress=none"]
    command += [f"+resume={run_dir}"] if unfinished else [f"run_dir={run_dir}"]
    start = time.perf_counter()
    result = subprocess.run(command, cwd=WORK, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if result.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
    summary = json.loads((run_dir / "summary.json").read_text())
    final = summary["final_eval"]
    return dict(steps=summary["steps"], seconds=summary["train_seconds"], wall_s=round(wall, 1),
                eval_mean=final["mean_return"], eval_std=final["std_return"], run_dir=str(run_dir),
                resumed=unfinished)


def sb3_run(python: str, case: str, seed: int, steps: int) -> dict:
    """One run of the SB3 side in its own virtualenv, continued from its checkpoint if an earlier one stopped."""
    checkpoints = WORK / "sb3" / f"{case}-s{seed}-{steps}"
    command = [python, str(SB3_CASES), CASES[case].sb3, str(seed), str(steps), "--checkpoint-dir", str(checkpoints)]
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, env=os.environ | dict(OMP_NUM_THREADS="1"))
    wall = time.perf_counter() - start
    if result.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
    shutil.rmtree(checkpoints, ignore_errors=True)  # finished: a later run of the case and seed starts afresh
    row = json.loads(result.stdout.strip().splitlines()[-1])
    return {k: row[k] for k in ("steps", "seconds", "eval_mean", "eval_std", "evals", "resumed")} | dict(
        wall_s=round(wall, 1))


def sb3_versions(python: str) -> str:
    code = ("from importlib.metadata import version as v; "
            "print(f\"SB3 {v('stable-baselines3')}, sb3-contrib {v('sb3-contrib')}, PyTorch {v('torch')}\")")
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def load() -> list[dict]:
    return json.loads(ROWS.read_text()) if ROWS.exists() else []


def record(rows: list[dict]) -> None:
    """Merge `rows` into parity.json (replacing the same case, side and seed) and rewrite parity.md; under a lock,
    as the two sides may run in two processes."""
    RESULTS.mkdir(exist_ok=True)
    WORK.mkdir(parents=True, exist_ok=True)
    with open(WORK / "record.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        merge(rows)


def merge(rows: list[dict]) -> None:
    new = {(r["case"], r["tool"], r["seed"]) for r in rows}
    merged = [r for r in load() if (r["case"], r["tool"], r["seed"]) not in new] + rows
    order = list(CASES)
    merged.sort(key=lambda r: (order.index(r["case"]) if r["case"] in order else len(order), r["case"],
                               TOOLS.index(r["tool"]), r["seed"]))
    ROWS.write_text(json.dumps(merged, indent=1) + "\n")
    print(write_table("parity", "Learning parity: rlexp against SB3 / sb3-contrib", markdown(merged)))


def verdict(rlexp: list[float], sb3: list[float]) -> str:
    """Where rlexp's mean lies against SB3's seeds (and SB3's mean against rlexp's), given enough seeds a side."""
    if len(rlexp) < MIN_SEEDS or len(sb3) < MIN_SEEDS:
        return f"no verdict (fewer than {MIN_SEEDS} seeds a side)"

    def place(mean: float, values: list[float]) -> str:
        return "inside" if min(values) <= mean <= max(values) else "below" if mean < min(values) else "above"

    return (f"rlexp's mean {place(statistics.mean(rlexp), sb3)} SB3's seeds; "
            f"SB3's mean {place(statistics.mean(sb3), rlexp)} rlexp's")


def markdown(rows: list[dict]) -> str:
    lines = ["Each case trains both sides on the same env, hyperparameters, network, initialisation choices, "
             "normalisation and env steps: rlexp through `python -m rlexp <case's args> seed=<s> run.max_steps=<steps> "
             "run.eval_episodes=20 run.eval_deterministic=true run.target_reward=null` (args in benchmarks/parity.py), "
             "SB3 / sb3-contrib through benchmarks/sb3_parity_cases.py; each run is scored by 20 episodes of the "
             "deterministic policy with its final weights (observation statistics frozen, the env's own rewards). "
             f"Verdict: with {MIN_SEEDS}+ seeds a side, whether rlexp's mean over its seeds lies inside [min, max] of "
             "SB3's seeds (and the reverse), else below or above.", "",
             "| case | steps | side | seeds | eval mean per seed | mean | min - max | train s (median) | verdict |",
             "|---|---:|---|---|---|---:|---|---:|---|"]
    for case, spec in CASES.items():
        sides = {tool: [r for r in rows if r["case"] == case and r["tool"] == tool] for tool in TOOLS}
        if not any(sides.values()):
            continue
        means = {tool: [r["eval_mean"] for r in side] for tool, side in sides.items()}
        for tool, side in sides.items():
            if not side:
                lines.append(f"| {case} | {spec.steps:,} | {tool} | none yet | | | | | |")
                continue
            values = means[tool]
            lines.append(f"| {case} | {spec.steps:,} | {tool} | {', '.join(str(r['seed']) for r in side)} | "
                         + " / ".join(f"{v:.1f}" for v in values)
                         + f" | {statistics.mean(values):.1f} | {min(values):.1f} - {max(values):.1f} | "
                         f"{statistics.median(r['seconds'] for r in side):.0f} | "
                         + (verdict(means["rlexp"], means["sb3"]) if tool == "rlexp" else "") + " |")
    lines += ["", "## Hyperparameters' origin", ""]
    lines += [f"- {case}: {spec.origin}; rlexp args `{' '.join(spec.args)}`" for case, spec in CASES.items()]
    lines += ["", "## Known differences between the implementations", ""]
    for family, items in DIFFERENCES.items():
        lines += [f"{FAMILIES[family]}:", *(f"- {item}" for item in items), ""]
    measured = sorted({(r["date"][:10], r["commit"], r["machine"], r.get("versions", "")) for r in rows})
    lines += ["## Runs", ""] + [f"- {date}, commit {at}, {where}" + (f", {versions}" if versions else "")
                                for date, at, where, versions in measured]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES), metavar="CASE")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--sb3-python", help="the SB3 virtualenv's interpreter (without it: rlexp's side only)")
    parser.add_argument("--sides", nargs="+", default=list(TOOLS), choices=TOOLS, help="which sides to run")
    parser.add_argument("--steps", type=int, help="env steps a run instead of the case's (a smoke test: not recorded)")
    parser.add_argument("--no-write", action="store_true", help="print the rows only")
    parser.add_argument("--rewrite", action="store_true", help="only rewrite parity.md from parity.json")
    opts = parser.parse_args()
    if opts.rewrite:
        return record([])
    versions = sb3_versions(opts.sb3_python) if opts.sb3_python else ""
    where = dict(commit=commit(), machine=machine().split(",")[0], command=command_line())
    for case in opts.cases:
        steps = opts.steps or CASES[case].steps
        write = not opts.no_write and steps == CASES[case].steps
        for seed in opts.seeds:
            runs = [("rlexp", lambda: rlexp_run(case, seed, steps))] if "rlexp" in opts.sides else []
            if opts.sb3_python and "sb3" in opts.sides:
                runs.append(("sb3", lambda: sb3_run(opts.sb3_python, case, seed, steps)))
            for tool, run in runs:
                row = dict(case=case, tool=tool, seed=seed) | run() | where | dict(date=now())
                row |= dict(versions=versions) if tool == "sb3" else {}
                row["steps_per_s"] = round(row["steps"] / row["seconds"], 1)
                print(json.dumps({k: v for k, v in row.items() if k != "evals"}), flush=True)
                if write:  # after each run: a stopped benchmark keeps its rows
                    record([row])


if __name__ == "__main__":
    main()
