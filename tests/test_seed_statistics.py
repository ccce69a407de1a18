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


def fake_run(root, name, lr, seed, steps, means, evaluations=None):
    run = root / name
    (run / ".hydra").mkdir(parents=True)
    config = {"seed": seed, "run_dir": str(run), "run_name": "ppo_cartpole", "agent": {"lr": lr, "gamma": 0.99},
              "env": {"id": "CartPole-v1"}, "run": {"max_steps": 3000, "progress": "log", "target_reward": 475}}
    (run / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    n = len(steps)
    pd.DataFrame({"episode": range(1, n + 1), "step": steps, "time": np.arange(n, dtype=float),
                  "episode_reward": means, "mean_reward": means, "best_reward": np.maximum.accumulate(means)}
                 ).to_parquet(run / "history.parquet")
    if evaluations is not None:
        pd.DataFrame({"step": [steps[-1]], "mean_return": [evaluations]}).to_parquet(run / "evaluations.parquet")
    return run


def test_seeds_are_grouped_by_config_and_curves_share_a_grid(tmp_path):
    runs = [fake_run(tmp_path, "a0", 1e-3, 0, [100, 1000, 2000], [10.0, 20.0, 40.0]),
            fake_run(tmp_path, "a1", 1e-3, 1, [200, 1500, 3000], [12.0, 30.0, 60.0]),
            fake_run(tmp_path, "b0", 3e-4, 0, [100, 2500], [5.0, 15.0], evaluations=99.0),
            fake_run(tmp_path, "b1", 3e-4, 1, [100, 2500], [6.0, 16.0], evaluations=101.0)]
    groups = group_runs([load_run(r) for r in runs])
    assert sorted(g.label for g in groups) == ["lr=0.0003", "lr=0.001"]
    a = next(g for g in groups if g.label == "lr=0.001")
    assert sorted(r.path.name for r in a.runs) == ["a0", "a1"]
    grid = step_grid(groups)
    assert grid[0] == 0 and grid[-1] == 2000  # the last step every run reached
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
