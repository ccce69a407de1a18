"""The real configs compose; tuned presets are picked up per agent+env pair."""
import gc

import pytest
from hydra import compose, initialize_config_module

from rlexp import main as main_module
from rlexp.build import agent_class, startup_done, thread_counts
from rlexp.errors import UserError


def cfg(*overrides):
    with initialize_config_module(config_module="rlexp.conf", version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def trained(*overrides):
    """The config a run trains: composed, then the pair's RL Zoo row and tuned preset (or fallback) merged."""
    from hydra.core.hydra_config import HydraConfig

    from rlexp.presets.fallbacks import apply_fallback

    with initialize_config_module(config_module="rlexp.conf", version_base="1.3"):
        c = compose(config_name="config", overrides=list(overrides), return_hydra_config=True)
        HydraConfig.instance().set_config(c)
        return apply_fallback(c, dict(c.hydra.runtime.choices), list(overrides))[0]


def test_default_is_ppo_cartpole_with_tuned_values():
    c = trained()
    assert c.agent._target_ == "rlexp.agents.PPO" and c.env.id == "CartPole-v1"
    assert c.agent.n_steps == 32 and c.agent.gamma == 0.98 and c.run.target_reward == 475


def test_command_line_beats_tuned_preset():
    assert cfg("agent.n_steps=64").agent.n_steps == 64


def test_no_tuned_preset_keeps_agent_defaults():
    c = cfg("agent=ppo", "env=bipedal")
    assert c.agent.n_steps == 128 and c.run.target_reward is None


@pytest.mark.parametrize("agent", ["a2c", "acer", "ddpg", "dqn", "ppo", "td3", "trpo"])
@pytest.mark.parametrize("env", ["cartpole", "pendulum", "lunarlander", "lunarlander_continuous", "bipedal",
                                 "pong", "breakout", "generic"])
def test_every_pair_composes(agent, env):
    c = cfg(f"agent={agent}", f"env={env}")
    assert agent_class(c.agent._target_).__name__ == agent.upper()


def test_dqn_tuned_presets():
    cartpole = trained("agent=dqn", "env=cartpole").model  # RL Zoo's net_arch [256, 256], PyTorch's default init
    assert [layer.get("units") for layer in cartpole.layers] == [256, 256, None]
    assert cartpole.initializer == "torch"
    assert trained("agent=dqn", "env=pong").buffer._target_ == "rlexp.buffers.FrameBuffer"


def test_arbitrary_targets_are_refused():
    with pytest.raises(UserError, match="not an rlexp agent"):
        agent_class("os.system")


def class_defaults(cls) -> dict:
    """Keyword defaults of cls.__init__ and its bases' (the subclass wins)."""
    import inspect

    defaults = {}
    for klass in reversed(cls.__mro__):
        if "__init__" in vars(klass):
            for name, p in inspect.signature(klass.__init__).parameters.items():
                if p.default is not inspect.Parameter.empty:
                    defaults[name] = p.default
    return defaults


@pytest.mark.parametrize("agent", ["a2c", "acer", "ddpg", "dqn", "ppo", "td3", "trpo"])
def test_agent_preset_defaults_agree_with_code(agent):
    from omegaconf import OmegaConf

    preset = OmegaConf.to_container(cfg(f"agent={agent}", "env=generic").agent)
    cls = agent_class(preset.pop("_target_"))
    code = class_defaults(cls)
    assert set(preset) <= set(code), f"preset keys the code does not take: {set(preset) - set(code)}"
    not_options = {"model", "buffer", "seed", "clip_rewards", "mixed_precision",  # set from other config groups
                   "seeds", "member_values"}  # and from run.seeds, run.members
    if not cls.recurrent_models:
        not_options.add("sequence_length")
    if "continuous" not in cls.action_spaces:
        not_options |= {"log_std_init", "state_dependent_std", "use_sde", "sde_sample_freq", "use_expln"}
    missing = {k for k in code if k not in preset} - not_options
    assert not missing, f"constructor options missing from conf/agent/{agent}.yaml: {missing}"
    for key, value in preset.items():
        assert value == code[key] or (isinstance(value, float) and abs(value - code[key]) < 1e-12), key


def test_documented_agent_tables_match_the_presets():
    from pathlib import Path

    from rlexp.presets.tables import agent_tables

    reference = (Path(__file__).parents[1] / "docs" / "configuration.md").read_text()
    assert agent_tables().strip() in reference, "docs/configuration.md is stale: run `python -m rlexp.presets`"


def test_the_architecture_map_names_what_is_under_src():
    """docs/architecture.md: every path it names exists under src/, and it names every package and every
    top-level module of src/rlexp."""
    import re
    from pathlib import Path

    root = Path(__file__).parents[1]
    src = root / "src"
    doc = (root / "docs" / "architecture.md").read_text()
    named = set(re.findall(r"`(rlexp/[A-Za-z0-9_/.]*)`", doc))
    assert named, "docs/architecture.md names no rlexp/ paths"
    missing = sorted(path for path in named if not (src / path).exists())
    assert not missing, f"docs/architecture.md names paths that are not under src/: {missing}"
    packages = {f"{p.parent.relative_to(src).as_posix()}/" for p in (src / "rlexp").rglob("__init__.py")} - {"rlexp/"}
    modules = {p.relative_to(src).as_posix() for p in (src / "rlexp").glob("*.py")}
    unnamed = sorted((packages | modules) - named)
    assert not unnamed, f"docs/architecture.md does not name {unnamed}: add a line for each"


def test_the_wheel_lists_every_package_under_src():
    """pyproject.toml names its packages one by one: a package added under src/ and not listed there would be
    missing from the installed wheel (the editable install in development still finds it)."""
    import tomllib
    from pathlib import Path

    root = Path(__file__).parents[1]
    listed = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    under_src = {".".join(p.parent.relative_to(root / "src").parts) for p in (root / "src").rglob("__init__.py")}
    assert not under_src - listed, f"pyproject.toml's packages lack {sorted(under_src - listed)}"


def test_no_module_imports_in_a_circle_and_no_command_imports_another():
    """The import graph of src/rlexp, read from the source: module-level imports form no circle, and no command
    (rlexp.commands.<mode>) imports another, anywhere in its code."""
    import ast
    from pathlib import Path

    src = Path(__file__).parents[1] / "src"
    names = {}
    for path in (src / "rlexp").rglob("*.py"):
        parts = path.relative_to(src).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def imported(path: Path, top_level_only: bool) -> set[str]:
        tree = ast.parse(path.read_text())
        nodes = tree.body if top_level_only else list(ast.walk(tree))
        found = set()
        for node in nodes:
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name in names}
            elif isinstance(node, ast.ImportFrom) and node.module in names:  # a submodule, else the module's name
                found |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in names else node.module
                          for a in node.names}
        return found

    graph = {name: imported(path, True) - {name} for name, path in names.items()}
    done, on_path = set(), []

    def visit(name: str) -> None:
        if name in on_path:
            raise AssertionError(f"import circle: {' -> '.join(on_path[on_path.index(name):] + [name])}")
        if name in done:
            return
        on_path.append(name)
        for other in sorted(graph[name]):
            visit(other)
        on_path.pop()
        done.add(name)

    for name in sorted(graph):
        visit(name)

    def command(module: str) -> str | None:
        parts = module.split(".")
        return parts[2] if len(parts) > 2 and parts[:2] == ["rlexp", "commands"] else None

    crossing = sorted(f"{name} imports {other}" for name, path in names.items() if command(name)
                      for other in imported(path, False) if command(other) not in (None, command(name)))
    assert not crossing, crossing


def test_readme_python_blocks_run(tmp_path, monkeypatch):
    import re
    from pathlib import Path

    root = Path(__file__).parents[1]
    monkeypatch.chdir(tmp_path)
    for name in ("README.md", "docs/python_api.md", "docs/new_algorithm.md"):
        blocks = re.findall(r"```python\n(.*?)```", (root / name).read_text(), re.S)
        assert blocks, name
        for block in blocks:
            namespace: dict = {}
            exec(compile(block, name, "exec"), namespace)
            if "MyPG" in namespace:  # the new algorithm's example trains
                from rlexp import make_envs

                agent = namespace["MyPG"](make_envs("CartPole-v1", n_envs=4, seed=0), seed=0, n_steps=64)
                agent.fit(max_steps=2_000)
                assert agent.steps >= 2_000 and len(agent.history) > 0
    assert (tmp_path / "videos" / "play.mp4").exists() and (tmp_path / "my_run" / "history.parquet").exists()


def test_thread_counts_auto_and_explicit():
    auto = {"tf_threads": "auto", "tf_inter_threads": "auto"}
    assert thread_counts(auto, image_obs=False, cores=2) == (2, 1)  # two small ops side by side
    assert thread_counts(auto, image_obs=False, cores=16) == (2, 8)
    assert thread_counts(auto, image_obs=True, cores=2) == (1, 0)  # one large conv at a time, all cores
    assert thread_counts(auto, image_obs=False, cores=2, wide_ops=True) == (2, 2)  # an on-policy population's XLA
    assert thread_counts(auto, image_obs=False, cores=16, wide_ops=True) == (2, 16)
    assert thread_counts({"tf_threads": 0, "tf_inter_threads": 1}, image_obs=False, cores=2) == (1, 0)
    for bad in ("many", -1, 1.5):
        with pytest.raises(UserError, match="run.tf_threads"):
            thread_counts({"tf_threads": bad}, image_obs=False)


def test_startup_runs_without_the_cyclic_gc_then_the_run_with_startup_objects_frozen(monkeypatch):
    seen = {}

    def mode(cfg):
        seen["startup"] = gc.isenabled()
        startup_done()  # what train/play/eval call once the agent is built
        seen["run"] = (gc.isenabled(), gc.get_freeze_count() > 0)
        return 1.5

    monkeypatch.setitem(main_module.MODES, "train", mode)
    assert main_module.main(cfg()) == 1.5
    assert seen == {"startup": False, "run": (True, True)}
    assert gc.isenabled() and gc.get_freeze_count() == 0  # a sweep's next trial starts afresh


def test_the_cartpole_novel_preset_takes_sb3_s_adam_epsilon():
    """RL Zoo's ppo_lstm values were tuned on SB3's Adam (epsilon 1e-5); with Keras' 1e-7 every seed of
    PPO-LSTM CartPole-NoVel at 20k steps ended below sb3-contrib's (benchmarks/results/parity.md)."""
    c = cfg("agent=ppo", "env=cartpole_novel", "model=lstm")
    assert c.agent.opt_epsilon == 1e-5 and c.agent.n_steps == 32 and c.agent.normalize_obs is True
    assert cfg("agent=ppo", "env=cartpole").agent.opt_epsilon == 1e-7


@pytest.mark.parametrize("args, added", [
    (["agent=a2c", "env.id=Acrobot-v1"], "env=acrobot"),  # its preset, tuned/a2c_acrobot.yaml with it
    (["env.id=CartPole-v1"], "env=cartpole"),  # the id's own preset, not cartpole_novel (which inherits it)
    (["env.id=MountainCar-v0"], "env=generic"),  # no preset: as env=generic env.id=MountainCar-v0
    (["-m", "env.id=Acrobot-v1,MountainCar-v0"], "env=generic"),  # a sweep over ids: each as env=generic
    (["env=cartpole", "env.id=Acrobot-v1"], None),  # env= given: the run checks the two agree
    (["env=generic", "env.id=Acrobot-v1"], None),
    (["+resume=outputs/r", "env.id=Acrobot-v1"], None),  # a resumed run keeps its env
    (["agent.lr=1e-3"], None),
])
def test_an_env_id_alone_picks_its_env_preset(args, added):
    """env.id=Acrobot-v1 alone trained Acrobot under env=cartpole's tuned preset, stop rule and run name."""
    assert main_module.with_env_preset(args) == args + ([added] if added else [])


def test_an_env_id_picks_your_own_preset_first(tmp_path):
    from rlexp.presets.sources import env_preset_for_id

    (tmp_path / "env").mkdir()
    (tmp_path / "env" / "corridor.yaml").write_text("defaults: [generic]\nid: my_envs:Corridor-v0\n")
    (tmp_path / "env" / "acrobot.yaml").write_text("defaults: [generic]\nid: Acrobot-v0\n")  # yours replaces it
    assert main_module.with_env_preset(["--config-dir", str(tmp_path), "env.id=my_envs:Corridor-v0"])[-1] == \
        "env=corridor"
    assert env_preset_for_id("Acrobot-v1", str(tmp_path)) is None
    assert env_preset_for_id("Acrobot-v1") == "acrobot"


def test_an_env_id_that_is_not_the_chosen_presets_is_refused_and_its_own_preset_trains_it():
    """env=cartpole env.id=Acrobot-v1 is one line naming the preset to use; env=acrobot (what env.id=Acrobot-v1
    alone now composes) trains Acrobot's row with no CartPole stop rule, in a run dir named after acrobot."""
    from hydra.core.hydra_config import HydraConfig

    from rlexp.presets.complete import check_presets
    from rlexp.presets.fallbacks import apply_fallback

    with initialize_config_module(config_module="rlexp.conf", version_base="1.3"):
        mixed = compose(config_name="config", overrides=["env=cartpole", "env.id=Acrobot-v1"],
                        return_hydra_config=True)
        HydraConfig.instance().set_config(mixed)
        with pytest.raises(UserError) as error:
            check_presets(mixed, dict(mixed.hydra.runtime.choices))
        overrides = main_module.with_env_preset(["env.id=Acrobot-v1"])
        own = compose(config_name="config", overrides=overrides, return_hydra_config=True)
        HydraConfig.instance().set_config(own)
        check_presets(own, dict(own.hydra.runtime.choices))
        trains, line = apply_fallback(own, dict(own.hydra.runtime.choices), overrides)
        name = own.run_name
    assert str(error.value) == ("env.id=Acrobot-v1: env=cartpole is the preset of CartPole-v1 (its tuned presets and "
                                "the run's name are CartPole-v1's); train Acrobot-v1 with env=acrobot, its preset")
    assert line == "RL Zoo's row for ppo+acrobot: ppo.yml Acrobot-v1 (rl-baselines3-zoo 2.9.0a2)"
    assert trains.env.id == "Acrobot-v1" and trains.run.target_reward is None and name == "ppo_acrobot"


def shipped(name: str) -> str:
    from importlib import resources

    return resources.files("rlexp.conf").joinpath(name).read_text()


def trained_with_own(config_dir, monkeypatch, caplog, *overrides):
    """`trained` with --config-dir `config_dir` (your presets first); also the lines the merge logged."""
    import logging

    monkeypatch.setattr("sys.argv", ["rlexp", "--config-dir", str(config_dir), *overrides])
    from hydra.core.hydra_config import HydraConfig

    from rlexp.presets.fallbacks import apply_fallback

    caplog.clear()
    with caplog.at_level(logging.INFO, logger="rlexp"), \
            initialize_config_module(config_module="rlexp.conf", version_base="1.3"):
        c = compose(config_name="config", overrides=list(overrides), return_hydra_config=True)
        HydraConfig.instance().set_config(c)
        merged, line = apply_fallback(c, dict(c.hydra.runtime.choices), list(overrides))
    said = [r.getMessage() for r in caplog.records if r.name == "rlexp"]
    return merged, [*said, line]


def test_your_own_edited_presets_win_over_the_shipped_row_and_tuned_preset(tmp_path, monkeypatch, caplog):
    """RL Zoo's CartPole row sets gae_lambda 0.8 and lr lin_0.001 (and tuned/ppo_cartpole.yaml the stop rule 475):
    unchanged copies (mode=init) change nothing; a lam changed in your agent/ppo.yaml and an lr changed in your
    agent_base.yaml win over the row, said in one line; the command line wins over both. Before, the row's values
    replaced yours and a line told you to repeat them on the command line."""
    (tmp_path / "agent").mkdir()
    (tmp_path / "tuned").mkdir()
    (tmp_path / "agent" / "ppo.yaml").write_text(shipped("agent/ppo.yaml"))
    (tmp_path / "agent_base.yaml").write_text(shipped("agent_base.yaml"))
    (tmp_path / "tuned" / "ppo_cartpole.yaml").write_text(shipped("tuned/ppo_cartpole.yaml"))
    copy = tmp_path / "tuned" / "ppo_cartpole.yaml"
    cfg, said = trained_with_own(tmp_path, monkeypatch, caplog)
    assert (cfg.agent.lam, cfg.agent.lr, cfg.agent.n_steps, cfg.run.target_reward) == (0.8, 1e-3, 32, 475)
    assert said == [f"RL Zoo's row for ppo+cartpole: ppo.yml CartPole-v1 (rl-baselines3-zoo 2.9.0a2), with "
                    f"tuned/ppo_cartpole.yaml (your unchanged copy: {copy}) over it"]

    for name, old, new in (("agent/ppo.yaml", "lam: 0.95 ", "lam: 0.9  "),
                           ("agent_base.yaml", "lr: 7.0e-4 ", "lr: 5.0e-4 ")):
        text = (tmp_path / name).read_text()
        assert old in text
        (tmp_path / name).write_text(text.replace(old, new))
    cfg, said = trained_with_own(tmp_path, monkeypatch, caplog)
    assert (cfg.agent.lam, cfg.agent.lr, cfg.agent.n_steps, cfg.run.target_reward) == (0.9, 5e-4, 32, 475)
    assert said[0] == (f"your own presets win over RL Zoo's row ppo.yml CartPole-v1: agent.lam 0.9 (its 0.8) from "
                       f"{tmp_path}/agent/ppo.yaml; agent.lr 0.0005 (its 0.001) from {tmp_path}/agent_base.yaml")
    cfg, said = trained_with_own(tmp_path, monkeypatch, caplog, "agent.lam=0.85")
    assert (cfg.agent.lam, cfg.agent.lr) == (0.85, 5e-4)
    assert said[0] == (f"your own presets win over RL Zoo's row ppo.yml CartPole-v1: agent.lr 0.0005 (its 0.001) "
                       f"from {tmp_path}/agent_base.yaml")

    # your own tuned preset (changed from rlexp's) stays over the row, as its first lines say, and over your presets
    copy.write_text(shipped("tuned/ppo_cartpole.yaml").replace("run: {target_reward: 475}",
                                                               "run: {target_reward: 400}\nagent: {lam: 0.7}"))
    cfg, said = trained_with_own(tmp_path, monkeypatch, caplog)
    assert (cfg.agent.lam, cfg.agent.lr, cfg.agent.n_steps, cfg.run.target_reward) == (0.7, 5e-4, 32, 400)
    assert said == [f"your own presets win over RL Zoo's row ppo.yml CartPole-v1: agent.lr 0.0005 (its 0.001) from "
                    f"{tmp_path}/agent_base.yaml",
                    f"tuned/ppo_cartpole.yaml sets agent.lam ({tmp_path}/agent/ppo.yaml) over your own presets: set "
                    "them on the command line to keep yours",
                    f"RL Zoo's row for ppo+cartpole: ppo.yml CartPole-v1 (rl-baselines3-zoo 2.9.0a2), with "
                    f"tuned/ppo_cartpole.yaml (your own: {copy}) over it"]


def test_your_own_edited_agent_preset_wins_over_a_shipped_tuned_preset(tmp_path, monkeypatch, caplog):
    """tuned/acer_cartpole.yaml (the pair's whole values, no row) sets entropy_coef 0.0 over agent/acer.yaml's."""
    (tmp_path / "agent").mkdir()
    text = shipped("agent/acer.yaml")
    assert "entropy_coef: 0.01 " in text
    (tmp_path / "agent" / "acer.yaml").write_text(text.replace("entropy_coef: 0.01 ", "entropy_coef: 0.02 "))
    cfg, said = trained_with_own(tmp_path, monkeypatch, caplog, "agent=acer", "env=cartpole")
    assert cfg.agent.entropy_coef == 0.02 and cfg.agent.trust_region is False  # yours; the tuned preset's
    assert said == [f"your own presets win over tuned/acer_cartpole.yaml: agent.entropy_coef 0.02 (its 0.0) from "
                    f"{tmp_path}/agent/acer.yaml", "tuned preset for acer+cartpole: tuned/acer_cartpole.yaml "
                    "(shipped with rlexp)"]


def test_a2c_rows_rmsprop_epsilon_is_saved_as_written():
    """RL Zoo's A2C rows: PyTorch's RMSprop eps 1e-5 (outside the root) is Keras' 1e-10 (inside it); squaring the
    float saved `opt_epsilon: 1.0000000000000002e-10` in the run config."""
    from omegaconf import OmegaConf

    c = trained("agent=a2c", "env=cartpole")
    assert c.agent.optimizer == "rmsprop" and c.agent.opt_epsilon == 1e-10
    assert "opt_epsilon: 1.0e-10\n" in OmegaConf.to_yaml(c.agent)
