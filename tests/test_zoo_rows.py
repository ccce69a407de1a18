"""RL Zoo's rows as rlexp's config: each kind of entry translated against values worked out by hand from the
row's text, SB3's defaults and the conventions rlexp's agents document (half-MSE value loss, minibatch counts,
Keras' RMSprop epsilon inside the square root); refused keys; a user's own file; the precedence message."""
import math
from pathlib import Path

import numpy as np
import pytest
from forked_cli import run_cli
import yaml

from rlexp.errors import UserError
from rlexp.presets.zoo import ZooRow, ZooRowError, find_row, translate
from rlexp.presets.zoo.rows import literal_dict, row_name


def shipped(algo, key):
    row = find_row(algo, key, atari=key == "atari", row=key)
    assert row is not None and row.key == key
    return translate(row)


def test_ppo_hopper_row():
    t = shipped("ppo", "Hopper-v4")
    a = t["agent"]
    assert t["env"] == {"n_envs": 1} and t["run"] == {"max_steps": 1_000_000, "target_reward": None}
    assert a["n_steps"] == 512 and a["mini_batches"] == 16  # 512 x 1 env in batches of 32
    assert a["value_loss_coef"] == pytest.approx(1.671342)  # vf_coef 0.835671 of the whole MSE
    assert (a["lr"], a["lr_schedule"]) == (9.80828e-05, "constant")
    assert (a["clip_norm"], a["clip_schedule"]) == (0.2, "constant")
    assert (a["ppo_epochs"], a["gamma"], a["lam"], a["grad_norm"]) == (5, 0.999, 0.99, 0.7)
    assert a["entropy_coef"] == 0.00229519 and a["log_std_init"] == -2.0
    assert a["optimizer"] == "adam" and a["opt_epsilon"] == 1e-5  # SB3's ActorCriticPolicy Adam
    assert a["normalize_obs"] is True and a["normalize_reward"] is True
    m = t["model"]
    assert m["initializer"] == "torch" and m["gain"] == 1.0 and m["heads"] == {}  # ortho_init=False
    assert m["layers"] == [{"type": "dense", "units": 256, "activation": "relu"}] * 2 + [{"type": "dense", "output": True}]


def test_ppo_default_mujoco_row_takes_sb3_defaults():
    a = shipped("ppo", "Ant-v4")["agent"]  # normalize, n_timesteps and the policy only
    assert (a["n_steps"], a["mini_batches"], a["ppo_epochs"], a["lr"]) == (2048, 32, 10, 3e-4)
    assert (a["lam"], a["clip_norm"], a["entropy_coef"], a["value_loss_coef"]) == (0.95, 0.2, 0.0, 1.0)
    m = shipped("ppo", "Ant-v4")["model"]
    assert m["initializer"] == "orthogonal" and m["gain"] == pytest.approx(math.sqrt(2))
    assert m["heads"]["policy"] == {"gain": 0.01} and m["heads"]["value"] == {"gain": 1.0}
    assert [layer.get("activation") for layer in m["layers"]] == ["tanh", "tanh", None]


def test_a2c_atari_row():
    t = shipped("a2c", "atari")
    env, a = t["env"], t["agent"]
    assert env["preprocess"] is True and env["frame_stack"] == 4 and env["n_envs"] == 16
    assert env["life_loss_terminal"] is True and env["clip_rewards"] is True and env["noop_max"] == 30
    assert a["optimizer"] == "rmsprop_tf" and a["opt_epsilon"] == 1e-5  # RMSpropTFLike: TensorFlow 1's RMSProp
    assert a["value_loss_coef"] == 0.5 and a["entropy_coef"] == 0.01 and a["n_steps"] == 5 and a["lam"] == 1.0
    assert t["run"]["max_steps"] == 10_000_000
    convs = [layer for layer in t["model"]["layers"] if layer["type"] == "conv"]
    assert [(c["filters"], c["kernel"], c["stride"]) for c in convs] == [(32, 8, 4), (64, 4, 2), (64, 3, 1)]


def test_a2c_mujoco_row_uses_sb3s_rmsprop():
    a = shipped("a2c", "Hopper-v4")["agent"]
    assert a["optimizer"] == "rmsprop" and a["opt_epsilon"] == pytest.approx(1e-10)  # (1e-5 outside the root)^2
    assert a["entropy_coef"] == 0.0 and a["n_steps"] == 5 and a["lr"] == 7e-4  # SB3's A2C, not rlexp's preset
    assert a["normalize_obs"] is True and a["normalize_reward"] is True


def test_trpo_hopper_row():
    a = shipped("trpo", "Hopper-v4")["agent"]
    assert a["cg_iterations"] == 25 and a["cg_damping"] == 0.1 and a["line_search_shrink"] == 0.8
    assert a["n_steps"] == 1024 and a["mini_batches"] == 2 * 1024 // 128 and a["critic_iterations"] == 20
    assert a["max_kl"] == 0.01 and a["opt_epsilon"] == 1e-5 and a["actor_iterations"] == 10


def test_dqn_mountaincar_row():
    t = shipped("dqn", "MountainCar-v0")
    a, b = t["agent"], t["buffer"]
    assert a["epsilon_decay_steps"] == 24_000  # exploration_fraction 0.2 of 120,000 steps
    assert (a["epsilon_start"], a["epsilon_end"], a["target_sync_steps"]) == (1.0, 0.07, 600)
    assert (a["train_freq"], a["gradient_steps"], a["lr"], a["gamma"], a["grad_norm"]) == (16, 8, 4e-3, 0.98, 10.0)
    assert a["opt_epsilon"] == 1e-8  # PyTorch's Adam
    assert b == {"max_size": 10000, "initial_size": 1000, "batch_size": 128}
    assert [layer.get("units") for layer in t["model"]["layers"]] == [256, 256, None]
    assert t["model"]["initializer"] == "torch"


def test_td3_and_sac_mountaincar_continuous_rows():
    td3 = shipped("td3", "MountainCarContinuous-v0")
    assert td3["agent"]["noise_type"] == "ornstein_uhlenbeck" and td3["agent"]["step_noise_coef"] == 0.5
    assert td3["agent"]["policy_delay"] == 2 and td3["agent"]["policy_noise_coef"] == 0.2
    assert td3["buffer"] == {"max_size": 1_000_000, "initial_size": 100, "batch_size": 256}
    sac = shipped("sac", "MountainCarContinuous-v0")
    a = sac["agent"]
    assert a["ent_coef"] == 0.1 and a["use_sde"] is True and a["log_std_init"] == -3.67 and a["tau"] == 0.01
    assert (a["train_freq"], a["gradient_steps"], a["gamma"]) == (32, 32, 0.9999)
    assert sac["buffer"] == {"max_size": 50000, "initial_size": 0, "batch_size": 512}


def test_ddpg_row_without_noise_type_explores_without_noise():
    row = ZooRow("ddpg", "Pendulum-v1", {"n_timesteps": 20000, "policy": "MlpPolicy"}, "ddpg.yml", "test")
    a = translate(row)["agent"]
    assert a["step_noise_coef"] == 0.0  # SB3's action_noise=None


def test_lookup_by_env_id():
    rows = {"Hopper-v4": {}, "atari": {}, "CartPoleNoVel-v1": {}, "CartPole-v1": {}}
    assert row_name(rows, "Hopper-v5", atari=False) == "Hopper-v4"
    assert row_name(rows, "ALE/Seaquest-v5", atari=True) == "atari"
    assert row_name(rows, "CartPole-v1", atari=False, masked_velocity=True) == "CartPoleNoVel-v1"
    assert row_name(rows, "CartPole-v1", atari=False) == "CartPole-v1"
    assert row_name(rows, "Walker2d-v5", atari=False) is None


def test_strings_are_parsed_never_evaluated(tmp_path):
    row = ZooRow("ppo", "X-v0", {}, "ppo.yml", "test")
    text = "dict(log_std_init=-2, ortho_init=False, activation_fn=nn.ReLU, net_arch=dict(pi=[64], vf=[64]))"
    assert literal_dict(text, "policy_kwargs", row) == {"log_std_init": -2, "ortho_init": False,
                                                        "activation_fn": "nn.ReLU", "net_arch": {"pi": [64], "vf": [64]}}
    marker = tmp_path / "ran"
    with pytest.raises(ZooRowError, match="policy_kwargs"):
        literal_dict(f"dict(x=open({str(marker)!r}, 'w'))", "policy_kwargs", row)
    assert not marker.exists()


@pytest.mark.parametrize("algo, key, values, refused", [
    ("ppo_lstm", "CarRacing-v3", None, "enable_critic_lstm"),
    ("sac", "Mine-v0", {"replay_buffer_class": "DictReplayBuffer"}, "replay_buffer_class = DictReplayBuffer"),
    ("ppo", "Mine-v0", {"policy": "MlpPolicy", "n_envs": 4, "foo": 1}, "foo is not an option"),
    ("ppo", "Mine-v0", {"policy": "MlpPolicy", "callback": "rl_zoo3.callbacks.X"}, "callback"),
    ("ppo", "Mine-v0", {"n_steps": 100, "batch_size": 64}, "batch_size = 64 does not divide"),
    ("dqn", "Mine-v0", {"train_freq": [1, "epoch"]}, "train_freq"),
])
def test_a_key_rlexp_cannot_honour_is_refused_naming_row_and_key(algo, key, values, refused):
    row = (find_row(algo, key, atari=False, row=key) if values is None
           else ZooRow(algo, key, values, "mine.yml", "test"))
    with pytest.raises(ZooRowError, match=refused) as error:
        translate(row)
    assert f" {key}: " in str(error.value) and isinstance(error.value, UserError)


def rlexp(cwd, *args):
    return run_cli(args, cwd, timeout=600)


@pytest.mark.e2e
def test_a_shipped_row_trains_and_a_users_file_wins(tmp_path):
    tiny = ["run.eval_episodes=1", "run.progress=none"]
    shipped_run = rlexp(tmp_path, "agent=trpo", "env=generic", "env.id=Acrobot-v1", "run.max_steps=512",
                        "agent.n_steps=256", *tiny, "run_dir=outputs/a")
    assert shipped_run.returncode == 0, shipped_run.stderr[-2000:]
    assert shipped_run.stdout.splitlines()[0] == ("RL Zoo's row for trpo+Acrobot-v1: trpo.yml Acrobot-v1 "
                                                  "(rl-baselines3-zoo 2.9.0a2)")
    config = yaml.safe_load((tmp_path / "outputs/a/.hydra/config.yaml").read_text())
    assert config["agent"]["n_steps"] == 256 and config["env"]["n_envs"] == 2  # the command line's, the row's
    assert config["agent"]["cg_iterations"] == 15 and config["agent"]["line_search_shrink"] == 0.8  # SB3's
    assert config["run"]["max_steps"] == 512
    mine = tmp_path / "ppo.yml"
    mine.write_text("Acrobot-v1:\n  n_timesteps: 300\n  policy: MlpPolicy\n  n_envs: 2\n  n_steps: 32\n"
                    "  batch_size: 16\n  learning_rate: lin_1e-3\n  policy_kwargs: \"dict(net_arch=[16])\"\n")
    users = rlexp(tmp_path, "env=generic", "env.id=Acrobot-v1", f"zoo.file={mine}", *tiny, "run_dir=outputs/b")
    assert users.returncode == 0, users.stderr[-2000:]
    assert users.stdout.splitlines()[0] == f"RL Zoo's row for ppo+Acrobot-v1: {mine} Acrobot-v1 (your own file)"
    config = yaml.safe_load((tmp_path / "outputs/b/.hydra/config.yaml").read_text())
    assert config["agent"]["mini_batches"] == 4 and config["agent"]["lr_schedule"] == "linear"
    assert [layer.get("units") for layer in config["model"]["layers"]] == [16, None]
    mine.write_text("Acrobot-v1:\n  n_timesteps: 300\n  her_kwargs: 1\n")
    refused = rlexp(tmp_path, "env=generic", "env.id=Acrobot-v1", f"zoo.file={mine}", *tiny, "run_dir=outputs/c")
    assert refused.returncode != 0 and not (tmp_path / "outputs/c").exists()
    assert refused.stderr.strip().splitlines()[-1].startswith(f"error: RL Zoo row {mine} Acrobot-v1: her_kwargs")


@pytest.mark.e2e
def test_a_users_agent_preset_over_a_row_and_under_their_tuned_preset_is_said(tmp_path):
    """myconf/agent/td3.yaml changes lr (which RL Zoo's Pendulum row sets: the user's value wins over the shipped
    row) and opt_epsilon (which the user's own tuned/td3_pendulum.yaml sets over the row: that one wins): one line
    for each layer, naming it, the key and the user's file."""
    (tmp_path / "my/agent").mkdir(parents=True)
    (tmp_path / "my/tuned").mkdir()
    (tmp_path / "my/tuned/td3_pendulum.yaml").write_text(
        "# @package _global_\n# TD3 on env=pendulum: RL Zoo's row td3.yml Pendulum-v1, and over it:\n"
        "agent: {opt_epsilon: 1.0e-07}\n")
    shipped_td3 = Path(__import__("rlexp.conf", fromlist=["x"]).__file__).parent / "agent/td3.yaml"
    (tmp_path / "my/agent/td3.yaml").write_text(shipped_td3.read_text().replace("lr: 1.0e-3", "lr: 5.0e-4")
                                                + "opt_epsilon: 1.0e-6\n")
    result = rlexp(tmp_path, "--config-dir", "my", "agent=td3", "env=pendulum", "run.max_steps=300",
                   "buffer.initial_size=100", "run.eval_episodes=1", "run.progress=none", "run_dir=outputs/t")
    assert result.returncode == 0, result.stderr[-2000:]
    mine = tmp_path / "my/agent/td3.yaml"
    said = [line for line in result.stdout.splitlines() if "your own presets" in line]
    assert said == [f"your own presets win over RL Zoo's row td3.yml Pendulum-v1: agent.lr 0.0005 (its 0.001) from "
                    f"{mine}",
                    f"tuned/td3_pendulum.yaml sets agent.opt_epsilon ({mine}) over your own presets: set them on "
                    "the command line to keep yours"]
    config = yaml.safe_load((tmp_path / "outputs/t/.hydra/config.yaml").read_text())
    assert config["agent"]["lr"] == 5e-4 and config["agent"]["opt_epsilon"] == 1e-7


def resolved(*overrides):
    """The config a run trains: composed, then the pair's row / tuned preset / fallback (as apply_fallback does)."""
    from hydra import compose, initialize_config_module
    from hydra.core.hydra_config import HydraConfig

    from rlexp.presets.fallbacks import apply_fallback

    with initialize_config_module(config_module="rlexp.conf", version_base="1.3"):
        cfg = compose(config_name="config", overrides=list(overrides), return_hydra_config=True)
        HydraConfig.instance().set_config(cfg)
        return apply_fallback(cfg, dict(cfg.hydra.runtime.choices), list(overrides))


def test_a_shipped_preset_keeps_its_row_and_a_recurrent_model_stays():
    cfg, line = resolved("agent=ppo", "env=cartpole", "zoo.rows=false")  # rows off: not under a preset over its row
    assert line.startswith("RL Zoo's row for ppo+cartpole: ppo.yml CartPole-v1") and cfg.run.max_steps == 100000
    assert cfg.run.target_reward == 475  # what tuned/ppo_cartpole.yaml sets over the row
    cfg, line = resolved("agent=ppo", "env=pendulum", "model=lstm")  # ppo_lstm.yml has no Pendulum-v1: ppo.yml's
    assert line.startswith("RL Zoo's row for ppo+pendulum: ppo.yml Pendulum-v1")
    assert cfg.model.layers[0].type == "lstm" and cfg.agent.use_sde is True  # the model stays; the row's gSDE


def test_a_tuned_preset_over_a_model_the_command_line_chose_is_said(tmp_path, caplog):
    """A tuned preset over a pair's row (yours here: tuned/sac_bipedal.yaml, 256-256 layers and Glorot init) sets
    model.layers over model=mlp_400_300 from the command line: the run says so (the initializer both set alike is
    not named); without a model choice, or with ~tuned, nothing is said."""
    (tmp_path / "tuned").mkdir()
    (tmp_path / "tuned/sac_bipedal.yaml").write_text(
        "# @package _global_\nmodel:\n  initializer: glorot_uniform\n  layers:\n"
        "    - {activation: relu, type: dense, units: 256}\n    - {activation: relu, type: dense, units: 256}\n"
        "    - {output: true, type: dense}\n")
    mine = f"hydra.searchpath=[file://{tmp_path}]"
    with caplog.at_level("INFO", logger="rlexp"):
        cfg, _ = resolved("agent=sac", "env=bipedal", "model=mlp_400_300", mine)
    assert caplog.messages == ["tuned/sac_bipedal.yaml sets model.layers over model=mlp_400_300 (the command "
                               "line's choice): to train the chosen preset's values, set them on the command line "
                               "or leave the tuned preset out (~tuned)"]
    assert [layer.get("units") for layer in cfg.model.layers] == [256, 256, None]
    caplog.clear()
    with caplog.at_level("INFO", logger="rlexp"):  # buffer=dqfd_uniform takes its sizes from the replay preset
        resolved("agent=dqfd", "env=cartpole", "buffer=dqfd_uniform")
    assert caplog.messages == ["tuned/dqfd_cartpole.yaml sets buffer.max_size, buffer.initial_size, buffer.batch_size "
                               "over buffer=dqfd_uniform (the command line's choice): to train the chosen preset's "
                               "values, set them on the command line or leave the tuned preset out (~tuned)"]
    caplog.clear()
    with caplog.at_level("INFO", logger="rlexp"):
        resolved("agent=sac", "env=bipedal", "model.layers.0.units=128", mine)
        cfg, _ = resolved("agent=sac", "env=bipedal", "model=mlp_400_300", "~tuned", mine)
    assert caplog.messages == [] and [layer.get("units") for layer in cfg.model.layers] == [400, 300, None]


def test_your_tuned_preset_over_a_model_the_command_line_chose_is_said(tmp_path, caplog):
    """env=generic finds your own tuned/ppo_CartPole-v1.yaml (autotune's): its model keys over model=mlp_large are
    said the same way."""
    (tmp_path / "tuned").mkdir()
    (tmp_path / "tuned/ppo_CartPole-v1.yaml").write_text(
        "# @package _global_\nmodel: {layers: [{type: dense, units: 32, activation: tanh}, {type: dense, output: true}],"
        " initializer: glorot_uniform}\n")
    with caplog.at_level("INFO", logger="rlexp"):
        cfg, line = resolved("env=generic", "env.id=CartPole-v1", "model=mlp_large", "zoo.rows=false",
                             f"hydra.searchpath=[file://{tmp_path}]")
    assert line.startswith("tuned preset for ppo+CartPole-v1: tuned/ppo_CartPole-v1.yaml (your own: ")
    assert caplog.messages == ["tuned/ppo_CartPole-v1.yaml sets model.layers over model=mlp_large (the command "
                               "line's choice): to train the chosen preset's values, set them on the command line"]
    assert [layer.get("units") for layer in cfg.model.layers] == [32, None]


def test_dqns_exploration_follows_the_runs_length_and_off_policy_rows_normalise():
    cfg, _ = resolved("agent=dqn", "env=generic", "env.id=MountainCar-v0", "run.max_steps=60000")
    assert cfg.agent.epsilon_decay_steps == 12000  # exploration_fraction 0.2 of this run's 60,000 steps (SB3)
    cfg, _ = resolved("agent=dqn", "env=generic", "env.id=MountainCar-v0", "agent.epsilon_decay_steps=5000")
    assert cfg.agent.epsilon_decay_steps == 5000
    row = ZooRow("sac", "X-v0", {"normalize": "{'norm_obs': True, 'norm_reward': False}"}, "mine.yml", "test")
    assert translate(row)["agent"]["normalize_obs"] is True and translate(row)["agent"]["normalize_reward"] is False


def test_a_users_file_without_a_row_for_the_env_is_one_line(tmp_path):
    mine = tmp_path / "ppo.yml"
    mine.write_text("Acrobot-v1:\n  n_timesteps: 300\nCartPole-v1:\n  n_timesteps: 300\n")
    with pytest.raises(ZooRowError, match=rf"zoo.file={mine}: {mine} has no row for MountainCar-v0; it has "
                                          r"Acrobot-v1, CartPole-v1 \(zoo.row=<name> trains one of them"):
        resolved("env=generic", "env.id=MountainCar-v0", f"zoo.file={mine}")


def test_an_env_rl_zoo_trains_on_its_default_row_says_so_and_zoo_row_default_trains_it():
    """ppo.yml has no Pusher row: RL Zoo trains its `default` row (SB3's PPO defaults), rlexp its fallback, and the
    first line says both; zoo.row=default trains the row as RL Zoo does."""
    _, line = resolved("env=generic", "env.id=Pusher-v5")
    assert line.startswith("no tuned preset for ppo+Pusher-v5: using fallbacks/ppo_continuous_vector.yaml")
    assert "(RL Zoo trains ppo.yml default here, SB3's defaults; zoo.row=default trains it)" in line
    cfg, line = resolved("env=generic", "env.id=Pusher-v5", "zoo.row=default")
    assert line == "RL Zoo's row for ppo+Pusher-v5: ppo.yml default (rl-baselines3-zoo 2.9.0a2)"
    a = cfg.agent  # SB3's PPO: n_steps 2048, batch 64 (32 minibatches of one env's rollout), lr 3e-4, Adam eps 1e-5
    assert (a.n_steps, a.mini_batches, a.lr, a.opt_epsilon, cfg.env.n_envs, cfg.run.max_steps) == (
        2048, 32, 3e-4, 1e-5, 1, 1_000_000)


def test_a_users_one_row_file_trains_only_its_env_or_the_row_named(tmp_path):
    """RL Zoo refuses a file without a row for the env (its `default` row, where the file has one, trains it)."""
    mine = tmp_path / "ppo.yml"
    mine.write_text("CartPole-v1:\n  n_timesteps: 300\n  n_envs: 2\n")
    with pytest.raises(ZooRowError, match=rf"zoo.file={mine}: {mine} has no row for Pendulum-v1; it has CartPole-v1 "):
        resolved("env=pendulum", f"zoo.file={mine}")
    cfg, line = resolved("env=pendulum", f"zoo.file={mine}", "zoo.row=CartPole-v1")
    assert line.startswith(f"RL Zoo's row for ppo+pendulum: {mine} CartPole-v1 (your own file)")
    assert cfg.env.n_envs == 2
    mine.write_text("CartPole-v1:\n  n_timesteps: 300\ndefault:\n  n_timesteps: 400\n  n_envs: 3\n")
    cfg, line = resolved("env=pendulum", f"zoo.file={mine}")
    assert line.startswith(f"RL Zoo's row for ppo+pendulum: {mine} default (your own file)") and cfg.env.n_envs == 3


# rl_zoo3 2.9.2's sac.yml MountainCarContinuous-v0 row (its gSDE rows add use_expln=True)
SAC_292 = {"n_timesteps": 50000, "policy": "MlpPolicy", "learning_rate": 3e-4, "buffer_size": 50000,
           "batch_size": 512, "ent_coef": 0.1, "train_freq": 32, "gradient_steps": 32, "gamma": 0.9999, "tau": 0.01,
           "learning_starts": 0, "use_sde": True,
           "policy_kwargs": "dict(log_std_init=-3.67, net_arch=[64, 64], use_expln=True)"}


def test_rl_zoo_2_9_2s_sac_rows_with_use_expln_train():
    a = translate(ZooRow("sac", "MountainCarContinuous-v0", SAC_292, "sac.yml", "rl-baselines3-zoo 2.9.2"))["agent"]
    assert (a["use_sde"], a["use_expln"], a["log_std_init"], a["clip_mean"]) == (True, True, -3.67, 2.0)


def test_sb3s_policy_options_translate():
    """Options of SB3 2.9's SAC and ActorCriticPolicy that rlexp has, in their several spellings."""
    sac = translate(ZooRow("sac", "X-v0", {"use_sde": True, "policy_kwargs": (
        "dict(net_arch=dict(pi=[32, 32], qf=[32, 32]), activation_fn=th.nn.ELU, clip_mean=1.5, use_expln=False, "
        "features_extractor_class=FlattenExtractor, share_features_extractor=True, normalize_images=True, "
        "n_critics=2, optimizer_class=th.optim.Adam, optimizer_kwargs=dict(eps=1e-7, betas=(0.8, 0.99)))")},
        "mine.yml", "test"))
    a = sac["agent"]
    assert (a["clip_mean"], a["use_expln"], a["optimizer"], a["opt_epsilon"], a["beta1"], a["beta2"]) == (
        1.5, False, "adam", 1e-7, 0.8, 0.99)
    assert [(layer.get("units"), layer.get("activation")) for layer in sac["model"]["layers"]] == [
        (32, "elu"), (32, "elu"), (None, None)]
    ppo = translate(ZooRow("ppo", "X-v0", {"policy_kwargs": (
        "dict(net_arch=[dict(pi=[16], vf=[16])], full_std=True, squash_output=False, ortho_init=False, "
        "optimizer_kwargs=dict(betas=(0.9, 0.99)))")}, "mine.yml", "test"))
    a = ppo["agent"]  # optimizer_kwargs given: PyTorch's eps 1e-8, not SB3's on-policy 1e-5
    assert (a["optimizer"], a["opt_epsilon"], a["beta2"], ppo["model"]["initializer"]) == ("adam", 1e-8, 0.99, "torch")
    a2c = translate(ZooRow("a2c", "X-v0", {"policy_kwargs": "dict(optimizer_class=RMSpropTFLike, optimizer_kwargs="
                                                            "dict(alpha=0.9, eps=1e-6, momentum=0.5, centered=True))"},
                           "mine.yml", "test"))["agent"]
    assert (a2c["optimizer"], a2c["opt_rho"], a2c["opt_epsilon"], a2c["opt_momentum"], a2c["opt_centered"]) == (
        "rmsprop_tf", 0.9, 1e-6, 0.5, True)


def test_every_problem_of_a_users_row_is_named_in_one_line():
    """Options rlexp lacks and values RL Zoo cannot read (a word for a number, a schedule it does not know, a
    fractional step count, a word for a boolean): all of them, one ZooRowError line, no traceback."""
    row = ZooRow("ppo", "X-v0", {"learning_rate": "fast", "clip_range": "exp_0.1", "n_steps": 2048.5, "gamma": "high",
                                 "use_sde": "yes", "ent_coef": "some", "her_kwargs": 1, "policy_kwargs": (
                                     "dict(full_std=False, squash_output=True, optimizer_class=th.optim.AdamW, "
                                     "features_extractor_class=MyExtractor, log_std_init='low')")}, "mine.yml", "test")
    with pytest.raises(ZooRowError) as error:
        translate(row)
    message = str(error.value)
    assert "\n" not in message and message.startswith("RL Zoo row mine.yml X-v0: 12 problems: (1) her_kwargs is not ")
    for said in ["learning_rate = 'fast' is neither a number nor an RL Zoo schedule (lin_<number>)",
                 "clip_range = 'exp_0.1' is neither", "n_steps = 2048.5 is not a whole number",
                 "gamma = 'high' is not a number", "use_sde = 'yes' is not a boolean (true or false)",
                 "policy_kwargs.log_std_init = 'low' is not a number", "policy_kwargs.full_std = False",
                 "policy_kwargs.squash_output = True", "policy_kwargs.features_extractor_class = MyExtractor",
                 "policy_kwargs.optimizer_class = AdamW: rlexp has Adam, RMSprop and RMSpropTFLike",
                 "ent_coef = 'some' is not a number", "(12) "]:
        assert said in message, said


@pytest.mark.parametrize("agent_name", ["sac", "ppo"])
def test_use_expln_gives_gsde_sb3s_expln_stds(agent_name):
    """SB3's expln: exp(x) for x <= 0, log1p(x + 1e-6) + 1 above (by hand: e^-1 = 0.36787944, 1 + ln 1.500001 =
    1.40546577, 1 + ln 3.000001 = 2.09861262); with use_expln, SAC's and PPO's gSDE variance is the features squared
    times those stds squared."""
    import tensorflow as tf

    from rlexp.agents import PPO, SAC
    from rlexp.agents import distributions as D
    from rlexp.envs import make_envs

    np.testing.assert_allclose(D.sde_std(tf.constant([-1.0, 0.0, 0.5, 2.0]), expln=True).numpy(),
                               [0.36787944, 1.0, 1.40546577, 2.09861262], rtol=1e-6)
    envs = make_envs("Pendulum-v1", n_envs=1, seed=0, vectorization="sync")
    options = dict(model={"layers": [{"type": "dense", "units": 8, "activation": "tanh"}, {"type": "dense",
                                                                                          "output": True}]},
                   seed=0, use_sde=True, use_expln=True, log_std_init=0.5)
    agent = SAC(envs, **options) if agent_name == "sac" else PPO(envs, n_steps=8, mini_batches=1, **options)
    obs = tf.constant(np.random.default_rng(0).normal(size=(3, 3)).astype(np.float32))
    if agent_name == "sac":
        _, features, log_std = agent.sde_params(obs)
    else:
        out, _ = agent.forward(obs)
        features, log_std = out[:, 1:], agent.gaussian(out)[1]
    expected = 0.5 * np.log(np.square(features.numpy()).sum(axis=1, keepdims=True) * 1.40546577 ** 2 + 1e-6)
    np.testing.assert_allclose(log_std.numpy(), expected, rtol=1e-5)


# ----- MiniGrid (the `minigrid` extra, in the test extras) ----------------------------------------------------------
def test_minigrid_row_builds_the_flattened_env_rl_zoo_builds():
    from rlexp.envs.make import make_envs

    t = find_row("ppo", "MiniGrid-DoorKey-5x5-v0", atari=False)
    assert t is not None and t.key == "MiniGrid-DoorKey-5x5-v0"
    sections = translate(t)
    env, agent = sections["env"], sections["agent"]
    assert env == {"n_envs": 8, "wrappers": [{"_target_": "minigrid.wrappers.FlatObsWrapper"}], "imports": ["minigrid"]}
    assert (agent["n_steps"], agent["mini_batches"], agent["lr"], agent["ppo_epochs"]) == (128, 16, 2.5e-4, 10)
    assert agent["normalize_obs"] is True and agent["normalize_reward"] is True  # normalize: true
    assert sections["run"]["max_steps"] == 100_000
    envs = make_envs("MiniGrid-DoorKey-5x5-v0", n_envs=2, seed=0, wrappers=env["wrappers"], imports=env["imports"])
    try:  # FlatObsWrapper: the agent's 7x7x3 view (147) and its mission as 96 one-hot characters of 28 (2,688)
        assert envs.single_observation_space.shape == (7 * 7 * 3 + 96 * 28,)
        assert envs.single_observation_space.dtype == np.uint8 and envs.single_action_space.n == 7
        obs, _ = envs.reset(seed=0)
        assert obs.shape == (2, 2835) and obs.dtype == np.uint8
    finally:
        envs.close()


def test_a_minigrid_id_without_minigrid_says_what_to_install(monkeypatch):
    import sys

    from rlexp.envs.make import register_package_ids

    monkeypatch.setitem(sys.modules, "minigrid", None)  # import minigrid -> ImportError
    with pytest.raises(UserError, match=r"^env.id=MiniGrid-Empty-5x5-v0 is minigrid's: pip install 'rlexp\[minigrid\]'"):
        register_package_ids("MiniGrid-Empty-5x5-v0")
    with pytest.raises(ZooRowError, match=r"env_wrapper names minigrid.wrappers.FlatObsWrapper: pip install "
                                          r"'rlexp\[minigrid\]'"):
        translate(find_row("ppo", "MiniGrid-Empty-Random-5x5-v0", atari=False))
