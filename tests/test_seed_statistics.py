"""Seed statistics: rlexp.analysis.stats against direct NumPy/SciPy formulations, the sweep objectives on hand-computed
curves, and mode=plot's grouping of seeds on fabricated runs."""
import itertools

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats as scipy_stats

from rlexp.analysis.plots import band, curves, group_runs, load_run, statistics, step_grid
from rlexp.analysis.stats import interval_estimates, iqm, pointwise_interval, probability_of_improvement
from rlexp.sweep import curve_objectives


def test_iqm_is_the_mean_of_the_middle_half():
    assert iqm([1, 2, 3, 4, 100]) == pytest.approx(3.0)  # 1 and 100 cut
    values = np.random.default_rng(0).normal(size=40)
    assert iqm(values) == pytest.approx(scipy_stats.trim_mean(values, 0.25))
    assert iqm(values) == pytest.approx(np.sort(values)[10:30].mean())


def test_interval_estimates_point_is_the_aggregate_and_the_interval_holds_it():
    scores = {"a": [1.0, 2.0, 3.0, 10.0], "b": [5.0, 5.0, 5.0, 5.0]}
    out = interval_estimates(scores, "mean")
    assert out["a"][0] == pytest.approx(4.0) and out["a"][1] <= 4.0 <= out["a"][2]
    assert out["b"] == pytest.approx((5.0, 5.0, 5.0))  # no spread, no interval
    # a bootstrap mean can't leave the range of the data
    assert 1.0 <= out["a"][1] and out["a"][2] <= 10.0


def test_probability_of_improvement_counts_pairs_and_half_ties():
    x, y = np.array([3.0, 4.0, 5.0]), np.array([1.0, 2.0, 3.0])
    direct = np.mean([1.0 if a > b else 0.5 if a == b else 0.0 for a, b in itertools.product(x, y)])
    point, low, high = probability_of_improvement(x, y)
    assert point == pytest.approx(direct) == pytest.approx(8.5 / 9)
    assert low <= point <= high <= 1.0


def test_pointwise_band_is_the_column_mean():
    matrix = np.random.default_rng(1).normal(size=(5, 7))
    mean, low, high = pointwise_interval(matrix)
    assert mean == pytest.approx(matrix.mean(axis=0))
    assert np.all(low <= mean) and np.all(mean <= high)
    assert np.all(low >= matrix.min(axis=0) - 1e-9) and np.all(high <= matrix.max(axis=0) + 1e-9)


def test_curve_objectives_by_hand():
    points = [(1000, 10.0), (2000, 30.0), (3000, 20.0)]
    out = curve_objectives(points, last=2)
    assert out["mean_last_evals"] == pytest.approx(25.0)
    assert out["auc"] == pytest.approx((20.0 * 1000 + 25.0 * 1000) / 2000)  # trapezoids / span = 22.5
    assert curve_objectives([(500, 7.0)], last=3) == {"mean_last_evals": 7.0, "auc": 7.0}


def fake_run(root, name, lr, seed, steps, means, evaluations=None, agent=None, max_steps=3000):
    """A run dir: its config (agent.lr, agent.gamma=0.99 and `agent`'s keys), history and, given `evaluations`
    (a score at the last step, or a list of (step, mean return)), evaluations.parquet."""
    run = root / name
    (run / ".hydra").mkdir(parents=True)
    config = {"seed": seed, "run_dir": str(run), "run_name": "ppo_cartpole",
              "agent": {"lr": lr, "gamma": 0.99, **(agent or {})}, "env": {"id": "CartPole-v1"},
              "run": {"max_steps": max_steps, "progress": "log", "target_reward": 475}}
    (run / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    n = len(steps)
    pd.DataFrame({"episode": range(1, n + 1), "step": steps, "time": np.arange(n, dtype=float),
                  "episode_reward": means, "mean_reward": means, "best_reward": np.maximum.accumulate(means)}
                 ).to_parquet(run / "history.parquet")
    if evaluations is not None:
        rows = evaluations if isinstance(evaluations, list) else [(steps[-1], evaluations)]
        pd.DataFrame({"step": [s for s, _ in rows], "mean_return": [float(v) for _, v in rows]}
                     ).to_parquet(run / "evaluations.parquet")
    return run


def test_seeds_are_grouped_by_config_and_a_groups_mean_spans_its_runs_overlap(tmp_path):
    runs = [fake_run(tmp_path, "a0", 1e-3, 0, [100, 1000, 2000], [10.0, 20.0, 40.0]),
            fake_run(tmp_path, "a1", 1e-3, 1, [200, 1500, 3000], [12.0, 30.0, 60.0]),
            fake_run(tmp_path, "b0", 3e-4, 0, [100, 2500], [5.0, 15.0], evaluations=99.0),
            fake_run(tmp_path, "b1", 3e-4, 1, [100, 2500], [6.0, 16.0], evaluations=101.0)]
    groups = group_runs([load_run(r) for r in runs])
    assert sorted(g.label for g in groups) == ["lr=0.0003", "lr=0.001"]
    a = next(g for g in groups if g.label == "lr=0.001")
    assert sorted(r.path.name for r in a.runs) == ["a0", "a1"]
    grid = step_grid(a)
    assert grid[0] == 0 and grid[-1] == 2000  # the last step both of the group's runs reached
    matrix = curves(a, grid)
    assert matrix[0] == pytest.approx(np.where(grid < 100, np.nan, np.interp(grid, [100, 1000, 2000], [10, 20, 40])),
                                      nan_ok=True)
    mean, _, _ = band(matrix)
    both = grid >= 200
    assert mean[both] == pytest.approx(matrix[:, both].mean(axis=0))
    assert np.isnan(mean[~both]).all()  # before the second run's first episode
    table, pairs = statistics(groups, gamma=50.0)
    row = table.set_index("group").loc["lr=0.0003"]
    assert row["runs"] == 2 and row["mean"] == pytest.approx(100.0)  # final score: the last evaluation
    row = table.set_index("group").loc["lr=0.001"]
    assert row["mean"] == pytest.approx(50.0) and row["optimality_gap"] == pytest.approx(np.mean([50 - 40, 0]))
    p = pairs.set_index(["x", "y"]).loc[("lr=0.0003", "lr=0.001"), "p_x_beats_y"]
    assert p == pytest.approx(1.0)


def test_plot_mode_writes_the_png_and_its_tables(tmp_path):
    from test_cli import rlexp

    for name, lr, seed, means in (("a0", 1e-3, 0, [10.0, 40.0]), ("a1", 1e-3, 1, [12.0, 44.0]),
                                  ("b0", 3e-4, 0, [5.0, 8.0]), ("b1", 3e-4, 1, [6.0, 9.0])):
        fake_run(tmp_path / "outputs", name, lr, seed, [100, 2000], means)
    result = rlexp(tmp_path, "mode=plot", "+runs=outputs/*", "+output=cmp.png")
    assert result.returncode == 0, result.stderr
    assert "4 runs in 2 group(s)" in result.stdout
    table = (tmp_path / "cmp.md").read_text()
    assert "| lr=0.001 | CartPole-v1 | 2 | 42 [" in table and "optimality gap (γ=475)" in table
    assert "P(X > Y)" in table and (tmp_path / "cmp_pairs.csv").exists() and (tmp_path / "cmp.png").exists()
    assert pd.read_csv(tmp_path / "cmp.csv")["runs"].tolist() == [2, 2]


def test_improvement_is_rliables_probability_of_improvement():
    from rliable import metrics

    from rlexp.analysis.stats import improvement

    rng = np.random.default_rng(2)
    x, y = rng.integers(0, 4, size=(5, 3)).astype(float), rng.integers(0, 4, size=(4, 3)).astype(float)  # ties
    assert improvement(x, y) == pytest.approx(metrics.probability_of_improvement(x, y))
    assert improvement(x, x) == 0.5
    assert probability_of_improvement(x[:, 0], y[:, 0])[0] == pytest.approx(
        metrics.probability_of_improvement(x[:, :1], y[:, :1]))


def test_labels_name_every_differing_key_and_never_collide(tmp_path):
    from rlexp.analysis.plots import Run

    history = pd.DataFrame({"step": [10], "mean_reward": [1.0]})
    configs = [{"agent": {"gamma": 0.9, "lr": 1}, "buffer": {"gamma": 0.5}},
               {"agent": {"gamma": 0.9, "lr": "1"}, "buffer": {"gamma": 0.5}},
               {"agent": {"gamma": 0.8, "lr": 1}, "buffer": {"gamma": 0.6}},
               {"agent": {"gamma": 0.8, "lr": 1}}]
    groups = group_runs([Run(tmp_path / str(i), c, history) for i, c in enumerate(configs)])
    # 1 and "1" print alike: the labels give their Python form; gamma is in two sections: each is named whole
    assert [g.label for g in groups] == ["agent.gamma=0.9 lr=1 buffer.gamma=0.5",
                                         "agent.gamma=0.9 lr='1' buffer.gamma=0.5",
                                         "agent.gamma=0.8 lr=1 buffer.gamma=0.6",
                                         "agent.gamma=0.8 lr=1 buffer.gamma=<unset>"]


def test_groups_alike_in_their_first_keys_get_their_own_label_and_statistics(tmp_path, monkeypatch, caplog):
    """Five configurations, four of them equal in clip_schedule, gamma and lam (the first keys that differ)."""
    from omegaconf import OmegaConf

    from rlexp.commands.plot import plot_runs

    linear, constant = {"clip_schedule": "linear", "gamma": 0.98, "lam": 0.8}, \
        {"clip_schedule": "constant", "gamma": 0.99, "lam": 0.95}
    finals = {("a", 1e-3, 3000, "linear"): [100.0, 200.0, 300.0, 1000.0], ("b", 3e-4, 3000, "linear"): [141.2],
              ("c", 1e-3, 5000, "linear"): [481.6], ("d", 3e-4, 5000, "linear"): [500.0],
              ("e", 1e-3, 3000, "constant"): [20.0]}
    for (name, lr, max_steps, schedule), scores in finals.items():
        for seed, score in enumerate(scores):
            fake_run(tmp_path / "outputs", f"{name}{seed}", lr, seed, [100, 2000], [1.0, 2.0], evaluations=score,
                     agent=linear if schedule == "linear" else constant, max_steps=max_steps)
    monkeypatch.chdir(tmp_path)
    with caplog.at_level("INFO", logger="rlexp"):
        assert plot_runs(OmegaConf.create({"runs": "outputs/*", "output": "cmp.png"})) == 8
    printed = [record.getMessage() for record in caplog.records]
    label = "clip_schedule={} gamma={} lam={} lr={} max_steps={}".format
    expected = {label("linear", 0.98, 0.8, 0.001, 3000): (250.0, 400.0),  # IQM: the mean of 200 and 300
                label("linear", 0.98, 0.8, 0.0003, 3000): (141.2, 141.2),
                label("linear", 0.98, 0.8, 0.001, 5000): (481.6, 481.6),
                label("linear", 0.98, 0.8, 0.0003, 5000): (500.0, 500.0),
                label("constant", 0.99, 0.95, 0.001, 3000): (20.0, 20.0)}
    table = pd.read_csv(tmp_path / "cmp.csv").set_index("group")
    assert sorted(table.index) == sorted(expected)
    for group, (iqm_, mean) in expected.items():
        assert (table.loc[group, "iqm"], table.loc[group, "mean"]) == pytest.approx((iqm_, mean))
        assert any(line.startswith(f"{group}: IQM {iqm_:.4g} [") for line in printed)
    pairs = pd.read_csv(tmp_path / "cmp_pairs.csv").set_index(["x", "y"])["p_x_beats_y"]
    a, b, c, d = list(expected)[:4]
    assert (pairs[a, b], pairs[b, a], pairs[d, c], pairs[c, d]) == pytest.approx((0.75, 0.25, 1.0, 0.0))
    assert printed[0] == "plot: reading 8 run dirs"  # before the work, a line on what it does


def test_each_run_is_drawn_whole_and_by_its_evaluations_where_it_has_them(tmp_path):
    from rlexp.analysis.plots import figure

    a0 = fake_run(tmp_path, "a0", 1e-3, 0, [100, 1000, 2000], [10.0, 20.0, 40.0],
                  evaluations=[(500, 5.0), (1500, 50.0), (2000, 70.0)])
    a1 = fake_run(tmp_path, "a1", 1e-3, 1, [200, 1500, 3000], [12.0, 30.0, 60.0],
                  evaluations=[(1000, 30.0), (2000, 60.0), (3000, 90.0)])
    b0 = fake_run(tmp_path, "b0", 3e-4, 0, [100, 2500, 73000], [1.0, 2.0, 3.0])  # no evaluations: training mean
    c0 = fake_run(tmp_path, "c0", 1e-4, 0, [100, 4700], [4.0, 5.0])
    c1 = fake_run(tmp_path, "c1", 1e-4, 1, [300, 2000, 30000], [6.0, 7.0, 8.0])
    groups = group_runs([load_run(r) for r in (a0, a1, b0, c0, c1)])
    fig = figure(groups)
    ax = fig.axes[0]
    lines = {line.get_gid(): line for line in ax.get_lines()}
    drawn = {run: (list(lines[str(run)].get_xdata()), list(lines[str(run)].get_ydata()))
             for run in (a0, a1, b0, c0, c1)}
    assert drawn == {a0: ([500, 1500, 2000], [5, 50, 70]), a1: ([1000, 2000, 3000], [30, 60, 90]),
                     b0: ([100, 2500, 73000], [1, 2, 3]), c0: ([100, 4700], [4, 5]),
                     c1: ([300, 2000, 30000], [6, 7, 8])}
    # group a's mean: of its evaluations, from 1000 (a1's first) to 2000 (a0's last)
    index = next(i for i, g in enumerate(groups) if g.label == "lr=0.001")
    x, mean = lines[f"mean {index}"].get_xdata(), lines[f"mean {index}"].get_ydata()
    both = (x >= 1000) & (x <= 2000)
    direct = (np.interp(x, [500, 1500, 2000], [5, 50, 70]) + np.interp(x, [1000, 2000, 3000], [30, 60, 90])) / 2
    assert x[-1] == 2000 and mean[-1] == pytest.approx(65.0)
    assert mean[both] == pytest.approx(direct[both]) and np.isnan(mean[~both]).all()
    assert len(ax.collections) == 2  # a band for each group of more than one run
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == ["lr=0.001 (2 runs, evaluations)", "lr=0.0003 (1 run, training mean)",
                      "lr=0.0001 (2 runs, training mean)"]
    assert lines[str(b0)].get_linestyle() == "--" and lines[str(a0)].get_linestyle() == "-"
    assert ax.get_ylabel() == "mean return (evaluations or training mean: see legend)"
    assert fig.get_suptitle() == "CartPole-v1: mean return of 5 runs in 3 configurations"
    assert "band: the 95% stratified-bootstrap interval of that mean" in ax.get_title().replace("\n", " ")


@pytest.mark.parametrize("target,new_keys", [
    ("rlexp.agents.PPO", {"use_expln": False, "opt_rho": 0.99, "opt_momentum": 0.0, "opt_centered": False}),
    ("rlexp.agents.SAC", {"use_expln": False, "clip_mean": 2.0, "opt_rho": 0.99, "opt_momentum": 0.0,
                          "opt_centered": False})])
def test_a_run_saved_before_the_rmsprop_and_gsde_keys_groups_with_the_same_run_saved_after_them(tmp_path, target,
                                                                                             new_keys):
    """The keys runs gained (RMSprop's rho, momentum and centring, gSDE's expln and SAC's mean clip) at the values
    that are what older runs did: an older run and a newer one of the same configuration are seeds of one group."""
    old = fake_run(tmp_path, "old", 1e-3, 0, [100, 200], [1.0, 2.0], agent={"_target_": target})
    new = fake_run(tmp_path, "new", 1e-3, 1, [100, 200], [1.0, 2.0], agent={"_target_": target, **new_keys})
    groups = group_runs([load_run(old), load_run(new)])
    assert len(groups) == 1 and len(groups[0].runs) == 2
