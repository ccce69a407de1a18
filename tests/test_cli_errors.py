"""Mistakes on the command line: one line on stderr naming the key and the fix, exit code 2, nothing written;
and run dirs of env=generic named after the env id."""
import os
import re
import shutil
from importlib import resources

import pytest
from omegaconf import DictConfig, OmegaConf

from rlexp.errors import UserError
from test_cli import rlexp, run_dirs


def shipped_config() -> DictConfig:
    return OmegaConf.load(str(resources.files("rlexp.conf").joinpath("config.yaml")))


@pytest.mark.parametrize("choice, env_id, name", [
    ("cartpole", "CartPole-v1", "cartpole"),
    ("generic", "MountainCar-v0", "MountainCar-v0"),
    ("generic", "ALE/Pong-v5", "ALE-Pong-v5"),
    ("generic", "my_envs:Corridor-v0", "Corridor-v0"),
    (None, "Acrobot-v1", "Acrobot-v1"),
])
def test_env_display_name(choice, env_id, name):
    from rlexp.runs.dirs import env_display_name

    assert env_display_name(choice, env_id) == name


@pytest.mark.parametrize("key, value, message", [
    ("run.max_steps", float("inf"), "run.max_steps=inf must be a finite number"),
    ("run.max_steps", "nan", "run.max_steps='nan' must be a finite number"),
    ("run.target_reward", float("nan"), "run.target_reward=nan must be a finite number (null: none)"),
    ("run.checkpoint_interval", "nan", "run.checkpoint_interval='nan' must be a finite number"),
    ("run.history_interval", float("inf"), "run.history_interval=inf must be a finite number"),
    ("run.eval_deterministic", 1, "run.eval_deterministic=1 must be auto, true or false"),
    ("run.mixed_precision", 0, "run.mixed_precision=0 must be auto, false, true, float16 or bfloat16"),
    ("run.progress", 0, "run.progress=0 must be one of auto, bar, log, none"),
    ("run.tf_threads", -1, "run.tf_threads=-1 must be auto or a number of threads (0: all cores)"),
    ("run.tf_inter_threads", 1.5, "run.tf_inter_threads=1.5 must be auto or a number of threads (0: all cores)"),
    ("run.tf_threads", True, "run.tf_threads=True must be auto or a number of threads (0: all cores)"),
])
def test_run_settings_are_refused(key, value, message):
    from rlexp.checks.values import check_settings

    cfg = shipped_config()
    OmegaConf.update(cfg, key, value)
    with pytest.raises(UserError) as error:
        check_settings(cfg)
    assert str(error.value) == message


@pytest.mark.parametrize("key, value", [
    ("run.max_steps", "1e6"), ("run.target_reward", None), ("run.target_reward", -120.5),
    ("run.eval_deterministic", True), ("run.eval_deterministic", False), ("run.mixed_precision", "bfloat16"),
    ("run.mixed_precision", False), ("run.tf_threads", 0), ("run.tf_inter_threads", 3), ("seed", None),
])
def test_valid_run_settings_pass(key, value):
    from rlexp.checks.values import check_settings

    cfg = shipped_config()
    OmegaConf.update(cfg, key, value)
    check_settings(cfg)


@pytest.mark.parametrize("key, value, message", [
    ("fallback", "foo", "fallback='foo' must be auto"),
    ("run", 5, "run=5: run is a section of settings; set its keys instead, e.g. run.max_steps=1e5"),
    ("play", None, "play=None: play is a section of settings"),
])
def test_top_level_values_are_refused(key, value, message):
    from rlexp.checks.values import check_command

    cfg = shipped_config()
    cfg[key] = value
    with pytest.raises(UserError, match="^" + re.escape(message)):
        check_command(cfg)


@pytest.mark.parametrize("key, value, message", [
    ("zoo.rows", "maybe", "zoo.rows='maybe' must be true or false"),
    ("zoo.rows", 1, "zoo.rows=1 must be true or false"),
    ("render", "maybe", "+render='maybe' must be true or false"),
    ("zoo", 5, "zoo=5: zoo is a section of settings; set its keys instead, e.g. zoo.rows=false"),
])
def test_switches_take_true_or_false_only(key, value, message):
    """A word that is not a boolean trained silently (zoo.rows=maybe: the rows on) or played on screen
    (+render=maybe)."""
    from rlexp.checks.values import check_command

    cfg = shipped_config()
    OmegaConf.update(cfg, key, value, force_add=True)
    with pytest.raises(UserError) as error:
        check_command(cfg)
    assert str(error.value) == message
    for flag in (True, False):
        cfg = shipped_config()
        OmegaConf.update(cfg, key if key != "zoo" else "zoo.rows", flag, force_add=True)
        check_command(cfg)


def test_a_group_without_a_default_given_without_its_plus_is_one_line():
    from hydra.errors import ConfigCompositionException

    from rlexp.errors import hydra_error_line

    error = ConfigCompositionException("Could not override 'sweep'. No match in the defaults list.\n"
                                       "To append to your default list use +sweep=ppo")
    assert hydra_error_line(error) == "sweep=ppo: sweep is a config group without a default; add it with +sweep=ppo"


@pytest.mark.parametrize("override, message", [
    ("+resum=outputs/x", "+resum: no such option; did you mean +resume=outputs/x?"),
    ("+video_dri=videos/", "+video_dri: no such option; did you mean +video_dir=videos/?"),
    ("+checkpoints=outputs/x", "+checkpoints: no such option; did you mean +checkpoint=outputs/x?"),
])
def test_a_misspelt_plus_option_is_refused(override, message):
    """Hydra adds any key given with a +: +resum=<run dir> started a new run, +video_dri= played without a video."""
    from rlexp.checks.values import check_plus_options

    with pytest.raises(UserError) as error:
        check_plus_options([override, "agent.lr=1e-3"])
    assert str(error.value) == message
    check_plus_options(["+resume=outputs/x", "+video_dir=videos/", "+my_tag=x", "+env.kwargs.foo=1",
                        "run.max_steps=5"])


@pytest.mark.parametrize("args, expected", [
    (["agent=ppo", "--config-dir", "x", "seed=1"], ["--config-dir", "x", "agent=ppo", "seed=1"]),
    (["agent=ppo", "-m", "seed=0,1", "-cd", "x"], ["-m", "-cd", "x", "agent=ppo", "seed=0,1"]),
    (["agent=ppo", "--config-dir=x", "--cfg", "job", "env=pong"], ["--config-dir=x", "--cfg", "job", "agent=ppo",
                                                                   "env=pong"]),
    (["--info", "agent=ppo"], ["--info=all", "agent=ppo"]),
    (["agent=ppo", "--info", "defaults"], ["--info", "defaults", "agent=ppo"]),
    (["agent=ppo", "-cd=x", "env=pong"], ["-cd=x", "agent=ppo", "env=pong"]),
    (["seed=1", "-c=job", "--config-name=mine", "env=pong"], ["-c=job", "--config-name=mine", "seed=1", "env=pong"]),
    (["--info", "~agent.x"], ["--info=all", "~agent.x"]),
    (["-i", "+agent.foo=1", "-m"], ["-i=all", "-m", "+agent.foo=1"]),
    (["seed=1", "--info"], ["--info=all", "seed=1"]),
])
def test_hydra_options_go_before_the_overrides(args, expected):
    from hydra._internal.utils import get_args_parser

    from rlexp.main import options_first

    assert options_first(args) == expected
    parsed = get_args_parser().parse_args(expected)
    assert parsed.overrides == [a for a in args if a.startswith(("~", "+")) or "=" in a and not a.startswith("-")]
    assert parsed.info in (None, "all", "defaults")


def test_init_refuses_a_directory_it_cannot_write(tmp_path, monkeypatch):
    from rlexp.runs import files as init
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UserError, match=r"^\+dir=d: .*/file is a file, so .*/file/conf can't be made"):
        init.check_writable(blocker / "conf", "+dir=d")
    monkeypatch.setattr(init.os, "access", lambda path, mode: False)
    with pytest.raises(UserError, match=r"^\+dir=d: .* is not writable; pick a directory you can write to"):
        init.check_writable(tmp_path / "new" / "conf", "+dir=d")
    assert not (tmp_path / "new").exists()


def test_env_kwargs_the_constructor_refuses_are_one_line():
    from rlexp.envs.make import make_envs

    with pytest.raises(UserError) as error:
        make_envs("CartPole-v1", kwargs={"foo": 1}, vectorization="sync")
    assert str(error.value) == ("env.kwargs={'foo': 1}: CartPole-v1 rejected them (CartPoleEnv.__init__() got an "
                                "unexpected keyword argument 'foo'); CartPole-v1 takes sutton_barto_reward; fix or "
                                "remove them (~env.kwargs.<name> removes one)")
    with pytest.raises(UserError, match=r"^env.kwargs=5 must be a mapping"):
        make_envs("CartPole-v1", kwargs=5)
    envs = make_envs("CartPole-v1", kwargs={"sutton_barto_reward": True}, vectorization="sync")
    envs.close()


def one_error_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-3000:]
    assert "Traceback" not in result.stdout + result.stderr
    return lines[0]


@pytest.mark.parametrize("args, message", [
    (["run.max_steps=inf"], "run.max_steps=inf must be a finite number"),
    (["run.target_reward=nan"], "run.target_reward=nan must be a finite number"),
    (["run.eval_deterministic=1"], "run.eval_deterministic=1 must be auto, true or false"),
    (["play=3"], "play=3: play is a section of settings; set its keys instead, e.g. play.episodes=3"),
    (["fallback=foo"], "fallback='foo' must be auto"),
    (["+env.kwargs.foo=1"], "CartPole-v1 rejected them (CartPoleEnv.__init__() got an unexpected keyword argument "
                            "'foo'); CartPole-v1 takes sutton_barto_reward"),
    (["env.kwargs=5"], "env.kwargs=5 must be a mapping of the env's keyword arguments"),
    (["--config-dir", "no/such/dir"], "--config-dir no/such/dir: "),
    (["mode=init", "+dir=blocker/conf"], "+dir=blocker/conf: "),
    (["agent=ppp"], "agent=ppp: Could not find 'agent/ppp' (no such preset); did you mean agent=ppo? agent presets: "
                    "a2c, acer, ars, crossq, ddpg, dqfd, dqn, naf, ppo, qrdqn, sac, td3, tqc, trpo, vpg"),
    (["agent.learning_rate=1e-3"], "agent.learning_rate: no such setting; did you mean agent.lr=1e-3?"),
    (["agent=dqn", "agent.batch_size=64"], "agent.batch_size: no such setting; did you mean buffer.batch_size=64?"),
    (["run.max_step=5"], "run.max_step: no such setting; did you mean run.max_steps=5?"),
    (["+agent.lr=1"], "+agent.lr: agent.lr is a setting already; set it without the +: agent.lr=1"),
    (["env.kwargs.foo=1"], "env.kwargs.foo: env.kwargs has no key 'foo' yet; add it with +env.kwargs.foo=1"),
    (["agent.lr.x=3"], "agent.lr.x: agent.lr is a value, not a section; set it with agent.lr=<value>"),
    (["+run.max_steps.x.y=3"], "run.max_steps.x.y: run.max_steps is a value, not a section; set it with "
                               "run.max_steps=<value>"),
    (["env.n_envs=abc"], "error: env.n_envs='abc' must be an integer"),
    (["seed=99999999999999999999999"], "error: seed=99999999999999999999999 is outside NumPy's seed range; use an "
                                       "integer from 0 to 4294967295"),
    (["hydra.run.dir=/proc/rlexp-run"], "error: hydra.run.dir=/proc/rlexp-run: can't make /proc/rlexp-run ("),
    (["run_dir=/proc/rlexp-run"], "error: run_dir=/proc/rlexp-run: /proc "),  # root: can't hold a new directory
    (["mode=play", "video_dir=videos/"], "error: video_dir: no such setting; did you mean +video_dir=videos/?"),
    (["render=true"], "error: render: no such setting; did you mean +render=true?"),
    (["zoo.rows=maybe"], "error: zoo.rows='maybe' must be true or false"),
], ids=["max-steps-inf", "target-nan", "eval-deterministic-int", "play-section", "fallback", "env-kwargs-refused",
        "env-kwargs-type", "config-dir-missing", "init-dir-under-file", "preset-typo", "key-typo",
        "key-in-other-section", "run-key-typo", "plus-on-existing-key", "new-env-kwarg", "key-below-a-value",
        "new-key-below-a-value", "n-envs-type", "seed-range", "hydra-run-dir-unwritable", "run-dir-unwritable",
        "plus-option-without-plus", "plus-option-not-run-dir", "switch-not-boolean"])
def test_bad_command_line_is_one_line_on_stderr(tmp_path, args, message):
    (tmp_path / "blocker").write_text("x")
    result = rlexp(tmp_path, *args, "run.max_steps=100" if not args[0].startswith("run.max_step") else "seed=0")
    assert message in one_error_line(result)
    assert result.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blocker"]


@pytest.mark.parametrize("config_dir", [["--config-dir", "mine"], ["-cd=mine"]])
def test_config_dir_may_follow_the_overrides(tmp_path, config_dir):
    (tmp_path / "mine" / "env").mkdir(parents=True)
    (tmp_path / "mine" / "env" / "acro.yaml").write_text("defaults: [generic]\nid: Acrobot-v1\n")
    result = rlexp(tmp_path, "agent=dqn", *config_dir, "env=acro", "--cfg", "job", "--resolve")
    assert result.returncode == 0, result.stderr
    assert "id: Acrobot-v1" in result.stdout and "run_name: dqn_acro" in result.stdout


def test_generic_env_runs_are_named_after_the_env_id_and_found_by_play_and_eval(tmp_path):
    env = ["env=generic", "env.id=Acrobot-v1"]
    tiny = ["agent.n_steps=16", "env.n_envs=2", "agent.mini_batches=1", "run.max_steps=64", "run.eval_episodes=0"]
    train = rlexp(tmp_path, *env, *tiny)
    assert train.returncode == 0, train.stderr[-2000:]
    (run,) = run_dirs(tmp_path)
    assert run.name.endswith("_ppo_Acrobot-v1")
    assert OmegaConf.load(run / ".hydra" / "config.yaml").run_name == "ppo_Acrobot-v1"
    nothing = rlexp(tmp_path, "mode=eval", *env)  # the run's own run.eval_episodes=0
    assert "mode=eval: run.eval_episodes=0 (the run's own setting unless set here) evaluates nothing; pass " \
           "run.eval_episodes=20" in one_error_line(nothing)
    evaluated = rlexp(tmp_path, "mode=eval", *env, "run.eval_episodes=1")
    assert evaluated.returncode == 0 and "eval: " in evaluated.stdout and " over 1 " in evaluated.stdout, \
        evaluated.stderr[-2000:]
    assert f"loaded {run}" in evaluated.stdout
    other = rlexp(tmp_path, "mode=play", "env=generic", "env.id=MountainCar-v0")
    assert "no trained run of agent=ppo on MountainCar-v0 under outputs/ or multirun/; train first (python -m rlexp " \
           "agent=ppo env=generic env.id=MountainCar-v0)" in one_error_line(other)
    # a sweep's trial, newer than the training run: the training run is the one played; without it, the trial
    trial = tmp_path / "multirun/ppo_Acrobot-v1_abc123/trial_0"
    shutil.copytree(run, trial)
    os.utime(trial / "checkpoints/last.ckpt")
    preferred = rlexp(tmp_path, "mode=eval", *env, "run.eval_episodes=1")
    assert preferred.returncode == 0 and f"loaded {run}" in preferred.stdout, preferred.stderr[-2000:]
    shutil.rmtree(tmp_path / "outputs")
    swept = rlexp(tmp_path, "mode=eval", *env, "run.eval_episodes=1")
    assert swept.returncode == 0 and f"loaded {trial}" in swept.stdout, swept.stderr[-2000:]
    assert f"no training run of this agent and env under outputs/: the newest sweep trial's, {trial}" in swept.stdout


def test_broken_user_presets_are_one_line(tmp_path):
    (tmp_path / "mine" / "env").mkdir(parents=True)
    (tmp_path / "mine" / "env" / "broken.yaml").write_text("defaults: [generic]\nid: [unclosed\n")
    (tmp_path / "mine" / "env" / "dangling.yaml").write_text("defaults: [generic]\nid: ${nope.x}\n")
    broken = rlexp(tmp_path, "--config-dir", "mine", "env=broken")
    assert one_error_line(broken).endswith("mine/env/broken.yaml, line 3, column 1: not valid YAML (while parsing a "
                                           "flow sequence; expected ',' or ']', but got '<stream end>'); fix the file")
    dangling = rlexp(tmp_path, "--config-dir", "mine", "env=dangling", "run.max_steps=100")
    assert one_error_line(dangling) == ("error: env.id: Interpolation key 'nope.x' not found; fix that ${...} in your "
                                        "preset or on the command line")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]
